//! Fault: the server is killed (like `kill -9`: its runtime is torn down, every task dropped,
//! nothing sent, the socket closed) in the middle of a download and started again on the
//! same address with an empty memory. The restarted server answers the old session's
//! packets with an "unknown session" hint; the agent shakes hands again at once, switches
//! to the new session, and ends the old session's proxied connection with a RST.

use crate::common;

use braid_crypto::StaticKeypair;
use braid_net::agent::{Agent, AgentConfig, AgentPath};
use braid_net::server::{HandshakeCounters, Server, ServerConfig};
use braid_net::udp::PathBind;
use common::{body, http_server, sha, socks_args};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A server on its own runtime; [`ServerProc::kill`] tears it down without a word.
struct ServerProc {
    rt: Option<tokio::runtime::Runtime>,
    addr: SocketAddr,
    counters: Arc<HandshakeCounters>,
}

fn start_server(listen: SocketAddr, key: [u8; 32], agent: braid_crypto::PublicKey) -> ServerProc {
    // Built outside the test's runtime (a runtime cannot be started inside another).
    std::thread::spawn(move || start_server_here(listen, key, agent))
        .join()
        .unwrap()
}

fn start_server_here(
    listen: SocketAddr,
    key: [u8; 32],
    agent: braid_crypto::PublicKey,
) -> ServerProc {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mut cfg = ServerConfig::new(
        listen,
        StaticKeypair::from_private(key).unwrap(),
        vec![agent],
    );
    braid_testkit::loopback::allow_targets(&mut cfg, &[]);
    let server = rt.block_on(Server::bind(cfg)).unwrap();
    let counters = server.counters();
    let addr = server.local_addr().unwrap();
    rt.spawn(async move {
        let _ = server.run().await;
    });
    ServerProc {
        rt: Some(rt),
        addr,
        counters,
    }
}

impl ServerProc {
    /// Like `kill -9`: every task (sessions included) dropped at once.
    async fn kill(mut self) {
        let rt = self.rt.take().unwrap();
        tokio::task::spawn_blocking(move || rt.shutdown_timeout(Duration::from_secs(1)))
            .await
            .unwrap();
    }
}

/// An HTTP server that answers any request with an endless body, 16 KB every 20 ms.
async fn trickle_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut b = [0u8; 1024];
                let _ = s.read(&mut b).await;
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\n\r\n")
                    .await;
                let chunk = vec![7u8; 16 << 10];
                while s.write_all(&chunk).await.is_ok() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            });
        }
    });
    addr
}

/// A SOCKS5 CONNECT to `target` through `socks`, then a GET.
async fn socks_get(socks: SocketAddr, target: SocketAddr) -> TcpStream {
    let mut s = braid_testkit::socks5::open(socks, target).await;
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_killed_and_restarted_mid_download() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("BRAID_TEST_LOG"))
        .with_test_writer()
        .try_init();
    let server_key = [0x42u8; 32];
    let server_pub = StaticKeypair::from_private(server_key).unwrap().public();
    let agent_key = Arc::new(StaticKeypair::generate().unwrap());
    let first = start_server(
        "127.0.0.1:0".parse().unwrap(),
        server_key,
        agent_key.public(),
    );
    let server_addr = first.addr;
    let acfg = AgentConfig {
        socks: Some("127.0.0.1:0".parse().unwrap()),
        ..AgentConfig::new(
            server_addr,
            server_pub,
            agent_key.clone(),
            vec![AgentPath::new(
                "lo",
                PathBind::Address("127.0.0.1".parse().unwrap()),
            )],
        )
    };
    let mut agent = Agent::start(acfg).await.unwrap();
    assert!(agent.wait_established(Duration::from_secs(10)).await);
    let socks = agent.socks.unwrap();
    let keys = agent.key_stats();
    let old_session = keys.session_id.load(Ordering::Relaxed);

    // A download in progress.
    let trickle = trickle_server().await;
    let mut conn = socks_get(socks, trickle).await;
    let mut buf = vec![0u8; 64 << 10];
    let mut got = 0;
    while got < 100_000 {
        got += conn.read(&mut buf).await.unwrap();
    }

    first.kill().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = start_server(server_addr, server_key, agent_key.public());
    let restarted = Instant::now();

    // The application reads until its connection ends; meanwhile note when the agent
    // learned that the server does not know its session (the hint).
    let hints_before = keys.hints.load(Ordering::Relaxed);
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        let mut learned = None;
        loop {
            tokio::select! {
                r = conn.read(&mut buf) => match r {
                    Ok(0) => break (Ok(0), learned),
                    Ok(_) => {}
                    Err(e) => break (Err(e), learned),
                },
                _ = tokio::time::sleep(Duration::from_millis(10)), if learned.is_none() => {
                    if keys.hints.load(Ordering::Relaxed) > hints_before {
                        learned = Some(Instant::now());
                    }
                }
            }
        }
    })
    .await
    .expect("the application's connection ended");
    let end = Instant::now();
    let (how, learned) = ended;
    let learned = learned.unwrap_or(end);
    eprintln!(
        "restart -> hint {:.2} s, hint -> connection end {:.2} s ({how:?}); hints sent {}",
        learned.duration_since(restarted).as_secs_f64(),
        end.duration_since(learned).as_secs_f64(),
        second.counters.hints.load(Ordering::Relaxed),
    );
    assert!(
        matches!(&how, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "the broken download ends with a RST, not a clean end: {how:?}"
    );
    assert!(
        keys.hints.load(Ordering::Relaxed) > hints_before,
        "a hint came"
    );
    assert!(
        end.duration_since(learned) <= Duration::from_secs(2),
        "connection ended {:?} after the agent learned of the restart",
        end.duration_since(learned)
    );

    // A new download through the same agent works within 5 s of the restart.
    let data = Arc::new(body(200_000));
    let web = http_server(data.clone()).await;
    loop {
        let args = socks_args(socks, 2, vec![format!("http://{web}/file")]);
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new("curl").args(&args).output()
        })
        .await
        .unwrap()
        .unwrap();
        if out.status.success() && sha(&out.stdout) == sha(&data) {
            break;
        }
        assert!(
            restarted.elapsed() < Duration::from_secs(5),
            "no working download within 5 s of the restart"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let worked = restarted.elapsed();
    eprintln!(
        "a new download worked {:.2} s after the restart",
        worked.as_secs_f64()
    );
    assert_ne!(keys.session_id.load(Ordering::Relaxed), old_session);
    second.kill().await;
}

/// Send `payload` in a UDP datagram from `from` (spoofed) to `to`, through a raw socket.
/// Needs root (CAP_NET_RAW); false when it could not be sent.
fn send_spoofed(from: std::net::SocketAddrV4, to: std::net::SocketAddrV4, payload: &[u8]) -> bool {
    let udp_len = 8 + payload.len();
    let total = 20 + udp_len;
    let mut p = Vec::with_capacity(total);
    p.extend_from_slice(&[
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0,
        0,
        0x40,
        0,
        64,
        17,
        0,
        0,
    ]);
    p.extend_from_slice(&from.ip().octets());
    p.extend_from_slice(&to.ip().octets());
    p.extend_from_slice(&from.port().to_be_bytes());
    p.extend_from_slice(&to.port().to_be_bytes());
    p.extend_from_slice(&(udp_len as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0]); // no UDP checksum (allowed over IPv4)
    p.extend_from_slice(payload);
    // SAFETY: plain libc calls on a socket this function owns, with valid buffers.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW);
        if fd < 0 {
            return false;
        }
        let mut sa: libc::sockaddr_in = std::mem::zeroed();
        sa.sin_family = libc::AF_INET as libc::sa_family_t;
        sa.sin_addr.s_addr = u32::from_ne_bytes(to.ip().octets());
        let n = libc::sendto(
            fd,
            p.as_ptr().cast(),
            p.len(),
            0,
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        libc::close(fd);
        n == p.len() as isize
    }
}

/// An off-path attacker who knows a live session's id (it travels in the clear) forges
/// "unknown session" hints from the server's address. The agent takes them as hints only:
/// it shakes hands again, sees its session still answering, and keeps it; the download
/// running through it goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_unknown_session_hint_never_ends_a_live_session() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: forging a source address needs root (a raw socket)");
        return;
    }
    let server_key = [0x43u8; 32];
    let server_pub = StaticKeypair::from_private(server_key).unwrap().public();
    let agent_key = Arc::new(StaticKeypair::generate().unwrap());
    let server = start_server(
        "127.0.0.1:0".parse().unwrap(),
        server_key,
        agent_key.public(),
    );
    let spec = braid_sim::Scenario::from_toml_str(
        "name = \"h\"\n[[path]]\nname = \"a\"\nrate = \"50Mbit\"\ndelay = \"2ms\"\n\
         [workload]\nsize = \"1MB\"\n[[variant]]\nname = \"v\"\n",
        std::path::Path::new("<hint>"),
    )
    .unwrap()
    .paths
    .remove(0);
    let emu = braid_emu::Emulator::start(
        &spec,
        1,
        "127.0.0.1:0".parse().unwrap(),
        "127.0.0.1:0".parse().unwrap(),
        server.addr,
    )
    .unwrap();
    let acfg = AgentConfig {
        socks: Some("127.0.0.1:0".parse().unwrap()),
        ..AgentConfig::new(
            server.addr,
            server_pub,
            agent_key.clone(),
            vec![AgentPath {
                via: Some(emu.agent_side),
                ..AgentPath::new("a", PathBind::Address("127.0.0.1".parse().unwrap()))
            }],
        )
    };
    let mut agent = Agent::start(acfg).await.unwrap();
    assert!(agent.wait_established(Duration::from_secs(10)).await);
    let keys = agent.key_stats();
    let sid = keys.session_id.load(Ordering::Relaxed);
    let trickle = trickle_server().await;
    let mut conn = socks_get(agent.socks.unwrap(), trickle).await;
    let mut buf = vec![0u8; 64 << 10];
    let mut got = 0;
    while got < 50_000 {
        got += conn.read(&mut buf).await.unwrap();
    }
    let mut hint = Vec::new();
    braid_crypto::write_header(
        &mut hint,
        braid_crypto::PacketType::SessionUnknown,
        sid,
        0,
        0,
    )
    .unwrap();
    let (SocketAddr::V4(from), SocketAddr::V4(to)) = (server.addr, emu.server_side) else {
        unreachable!()
    };
    let t0 = Instant::now();
    let mut sent = 0;
    // Forged hints for 3 s while the download goes on; it must keep delivering.
    while t0.elapsed() < Duration::from_secs(3) {
        if sent < 10 {
            assert!(send_spoofed(from, to, &hint), "raw socket send");
            sent += 1;
        }
        let n = tokio::time::timeout(Duration::from_secs(2), conn.read(&mut buf))
            .await
            .expect("the download keeps delivering")
            .expect("the connection stays up");
        assert!(n > 0, "the connection stays up");
        got += n;
    }
    assert!(
        keys.hints.load(Ordering::Relaxed) >= 1,
        "the forged hints arrived"
    );
    assert_eq!(
        keys.session_id.load(Ordering::Relaxed),
        sid,
        "the session was kept"
    );
    eprintln!(
        "{} forged hints taken as hints; the session and its download went on ({got} bytes)",
        keys.hints.load(Ordering::Relaxed)
    );
    server.kill().await;
}
