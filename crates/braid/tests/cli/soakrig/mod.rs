//! The soak rig: `braid server` as a child process on loopback (so its memory and
//! descriptors are its own, read from /proc), and many agents in this process through
//! braid-net's library API, each with its own key and its own loopback source address.
#![allow(dead_code)]

use braid_crypto::{PublicKey, StaticKeypair};
use braid_net::agent::{Agent, AgentConfig, AgentPath};
use braid_net::udp::PathBind;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub const BRAID: &str = env!("CARGO_BIN_EXE_braid");

/// A `braid server` child process, killed on drop.
pub struct ServerProc {
    child: Child,
    pub addr: SocketAddr,
    pub public: PublicKey,
    _dir: tempfile::TempDir,
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ServerProc {
    /// Start a server authorizing `agents`, with room for `max_sessions` sessions.
    pub fn start(agents: &[PublicKey], max_sessions: usize) -> ServerProc {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let out = Command::new(BRAID)
            .args(["keygen", "--out"])
            .arg(d.join("s"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let public = braid_crypto::read_public_key(d.join("s.pub")).unwrap();
        let auth: String = agents.iter().map(|k| format!("{k}\n")).collect();
        std::fs::write(d.join("authorized"), auth).unwrap();
        // A port free for UDP and TCP alike: the server listens on both. A port free for
        // UDP may be another connection's TCP port (a CI run failed so: "cannot listen on
        // TCP ... Address already in use"), so both are tried before the port is taken.
        let port = (0..100)
            .find_map(|_| {
                let u = std::net::UdpSocket::bind("127.0.0.1:0").ok()?;
                let port = u.local_addr().ok()?.port();
                std::net::TcpListener::bind(("127.0.0.1", port)).ok()?;
                Some(port)
            })
            .expect("a port free for UDP and TCP");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let p = |f: &str| d.join(f).to_str().unwrap().to_string();
        let child = Command::new(BRAID)
            .args([
                "server",
                "--listen",
                &addr.to_string(),
                "--key",
                &p("s.key"),
                "--authorized",
                &p("authorized"),
                "--control",
                &p("server.sock"),
                "--max-sessions",
                &max_sessions.to_string(),
                "--log-level",
                "error",
                // The targets listen on loopback (refused by default).
                "--egress-allow",
                "127.0.0.0/8",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let t = Instant::now();
        while !d.join("server.sock").exists() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "the server never came up"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        ServerProc {
            child,
            addr,
            public,
            _dir: dir,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server's public key file (for `braid agent --server-pub`).
    pub fn pub_file(&self) -> std::path::PathBuf {
        self._dir.path().join("s.pub")
    }

    pub fn rss_kb(&self) -> u64 {
        rss_kb(self.pid())
    }

    pub fn fds(&self) -> usize {
        fds(self.pid())
    }

    /// CPU time (user + system) the process has used so far.
    pub fn cpu(&self) -> Duration {
        cpu_time(self.pid())
    }
}

/// Resident set size of process `pid` in KB (VmRSS).
pub fn rss_kb(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Open descriptors of process `pid`.
pub fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// CPU time (utime + stime) of process `pid`.
pub fn cpu_time(pid: u32) -> Duration {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = s.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_millis(ticks * 1000 / hz)
}

/// The `i`-th loopback source address (127.0.x.y, never 127.0.0.1): one per agent, so the
/// server's per-address limits see many clients, as on the internet.
pub fn source(i: usize) -> std::net::IpAddr {
    format!("127.{}.{}.{}", 1 + i / 62_500, (i / 250) % 250, 2 + i % 250)
        .parse()
        .unwrap()
}

/// An agent config for `server` with one path from `source(i)` (through `via` if given).
pub fn agent_cfg(
    server: &ServerProc,
    key: Arc<StaticKeypair>,
    paths: Vec<(std::net::IpAddr, Option<SocketAddr>)>,
    socks: bool,
) -> AgentConfig {
    let paths = paths
        .into_iter()
        .enumerate()
        .map(|(j, (ip, via))| AgentPath {
            via,
            ..AgentPath::new(format!("p{j}"), PathBind::Address(ip))
        })
        .collect();
    AgentConfig {
        socks: socks.then(|| "127.0.0.1:0".parse().unwrap()),
        ..AgentConfig::new(server.addr, server.public, key, paths)
    }
}

/// Start agents for `cfgs` a few at a time; wait for every session (panics naming how many
/// came up if some did not within `limit`).
pub async fn start_agents(cfgs: Vec<AgentConfig>, limit: Duration) -> Vec<Agent> {
    let mut agents = Vec::new();
    for cfg in cfgs {
        agents.push(Agent::start(cfg).await.unwrap());
    }
    let t = Instant::now();
    let mut up = 0;
    for a in agents.iter_mut() {
        let left = limit
            .saturating_sub(t.elapsed())
            .max(Duration::from_millis(1));
        if a.wait_established(left).await {
            up += 1;
        }
    }
    assert_eq!(
        up,
        agents.len(),
        "only {up} of {} sessions within {limit:?}",
        agents.len()
    );
    agents
}

/// A TCP server that echoes what it gets (the far end of idle streams).
pub async fn echo_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            tokio::spawn(async move {
                let mut b = vec![0u8; 4096];
                while let Ok(n) = s.read(&mut b).await {
                    if n == 0 || s.write_all(&b[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// A SOCKS5 CONNECT to `to` through `socks`; the connection once the proxy said yes.
pub use braid_testkit::socks5::try_connect as socks_connect;

/// Write `n` bytes and read them back (through an echo server).
pub async fn echo_round(s: &mut TcpStream, n: usize) -> std::io::Result<()> {
    let out: Vec<u8> = (0..n).map(|i| (i * 31 + 7) as u8).collect();
    s.write_all(&out).await?;
    let mut back = vec![0u8; n];
    s.read_exact(&mut back).await?;
    if back != out {
        return Err(std::io::Error::other("echo differs"));
    }
    Ok(())
}

/// Raise this process's descriptor limit to its hard limit (agents and streams need many).
pub fn raise_nofile() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r.rlim_cur = r.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &r);
    }
    r.rlim_cur
}

pub fn keys(n: usize) -> Vec<Arc<StaticKeypair>> {
    (0..n)
        .map(|_| Arc::new(StaticKeypair::generate().unwrap()))
        .collect()
}

pub fn mb(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

pub fn log_init() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("BRAID_TEST_LOG"))
        .with_test_writer()
        .try_init();
}

pub fn write_line(path: &Path, line: &str) {
    use std::io::Write;
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(f, "{line}");
    }
}
