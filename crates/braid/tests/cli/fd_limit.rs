//! `braid agent` at its real descriptor limit (issue 14): started with RLIMIT_NOFILE at 128,
//! it gets up to 300 connections on its SOCKS5 port, more than it can accept. It must not spin
//! (its CPU time over 3 s stays low: the accept back-off) and must serve again once they
//! close.

use crate::soakrig;

use soakrig::*;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

const LIMIT: u64 = 128;
const CONNECTIONS: usize = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_at_its_descriptor_limit_does_not_spin_and_recovers() {
    log_init();
    raise_nofile();
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BRAID)
        .args(["keygen", "--out"])
        .arg(dir.path().join("a"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let agent_pub = braid_crypto::read_public_key(dir.path().join("a.pub")).unwrap();
    let server = ServerProc::start(&[agent_pub], 4);
    let socks: std::net::SocketAddr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let mut cmd = Command::new(BRAID);
    cmd.args([
        "agent",
        "--server",
        &server.addr.to_string(),
        "--server-pub",
    ])
    .arg(server.pub_file())
    .arg("--key")
    .arg(dir.path().join("a.key"))
    .args(["--path", "lo=127.0.0.1", "--socks", &socks.to_string()])
    .arg("--control")
    .arg(dir.path().join("agent.sock"))
    .args(["--log-level", "warn"])
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let r = libc::rlimit {
                rlim_cur: LIMIT,
                rlim_max: LIMIT,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let pid = child.id();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stderr = child.stderr.take().unwrap();
    let log = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let _child = Kill(child);
    let echo = echo_server().await;
    // The agent works.
    let t = Instant::now();
    let mut first = loop {
        if let Ok(Ok(s)) =
            tokio::time::timeout(Duration::from_secs(2), socks_connect(socks, echo)).await
        {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the agent never served"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    echo_round(&mut first, 1000).await.unwrap();
    eprintln!(
        "the agent served {} ms after its start",
        t.elapsed().as_millis()
    );
    // More connections than it has descriptors: the agent cannot accept them all; the
    // kernel completes as many as the listen backlog holds (the others' SYNs wait, so
    // they are made at once with a deadline, and those that time out are left out).
    let tries: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            tokio::spawn(tokio::time::timeout(
                Duration::from_millis(1500),
                TcpStream::connect(socks),
            ))
        })
        .collect();
    let mut flood = Vec::new();
    for t in tries {
        if let Ok(Ok(s)) = t.await.unwrap() {
            flood.push(s);
        }
    }
    assert!(
        flood.len() as u64 > LIMIT + 20,
        "only {} connections were made",
        flood.len()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let open = fds(pid);
    let c0 = cpu_time(pid);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cpu = cpu_time(pid) - c0;
    eprintln!(
        "{} connections against RLIMIT_NOFILE {LIMIT}: the agent holds {open} descriptors \
         and used {} ms of CPU in 3 s",
        flood.len(),
        cpu.as_millis()
    );
    assert!(
        open as u64 >= LIMIT - 2,
        "the agent never reached its limit ({open} open)"
    );
    assert!(
        cpu < Duration::from_millis(600),
        "the agent spins at its descriptor limit: {cpu:?} of CPU in 3 s"
    );
    // They close; the agent serves again.
    drop(flood);
    let t = Instant::now();
    loop {
        let r = tokio::time::timeout(Duration::from_secs(2), async {
            let mut s = socks_connect(socks, echo).await?;
            echo_round(&mut s, 1000).await
        })
        .await;
        if matches!(r, Ok(Ok(()))) {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the agent did not serve again within 10 s of the connections closing: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "served again {} ms after the connections closed",
        t.elapsed().as_millis()
    );
    // The existing connection lived through it.
    echo_round(&mut first, 1000).await.unwrap();
    drop(_child);
    let log = log.join().unwrap();
    assert!(
        log.contains("cannot accept a proxy connection"),
        "the agent said nothing about its limit: {log}"
    );
}
