//! The loopback rig: a server, link emulators and an agent on this machine, a small HTTP
//! server, and helpers to hash and fetch.

use crate::http;
use braid_crypto::{PublicKey, StaticKeypair};
use braid_emu::Emulator;
use braid_net::agent::{Agent, AgentConfig, AgentPath};
use braid_net::server::{Server, ServerBoard, ServerConfig};
use braid_net::udp::PathBind;
use sha2::{Digest, Sha256};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A server's settings on `127.0.0.1:0` with a fresh key, authorizing one fresh agent key:
/// the settings (to change before `Server::bind`), the server's public key and the agent's
/// key pair. Its agents may reach loopback ([`allow_targets`]).
pub fn loopback_server() -> (ServerConfig, PublicKey, Arc<StaticKeypair>) {
    let server_key = StaticKeypair::generate().unwrap();
    let server_pub = server_key.public();
    let agent_key = Arc::new(StaticKeypair::generate().unwrap());
    let mut cfg = ServerConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        server_key,
        vec![agent_key.public()],
    );
    allow_targets(&mut cfg, &[]);
    (cfg, server_pub, agent_key)
}

/// The rigs' destinations listen on loopback or on addresses of the server's own machine
/// (namespace), which a server's egress policy refuses by default: allow its agents
/// 127.0.0.0/8 and ::1, and the rules `more` (addresses of the server's machine, like
/// `10.0.0.1`), as `braid server --egress-allow` would.
pub fn allow_targets(cfg: &mut ServerConfig, more: &[&str]) {
    for r in ["127.0.0.0/8", "::1"].iter().chain(more) {
        cfg.egress
            .allow(r.parse().unwrap_or_else(|e| panic!("{e}")));
    }
}

const LINKS: &str = r#"
name = "e2e"
[[path]]
name = "a"
rate = "200Mbit"
delay = "2ms"
loss = 0.001
queue = "200KB"
[[path]]
name = "b"
rate = "100Mbit"
delay = "6ms"
loss = 0.003
queue = "200KB"
[[path]]
name = "c"
rate = "50Mbit"
delay = "12ms"
loss = 0.005
queue = "200KB"
[workload]
size = "1MB"
[[variant]]
name = "v"
"#;

pub fn body(len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    let mut x = 0x1234_5678_9abc_def0u64;
    while v.len() < len {
        x = braid_core::rng::splitmix64(x);
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

pub fn sha(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A minimal HTTP/1.1 server: GET returns `body`; PUT/POST returns the SHA-256 of the body.
pub async fn http_server(body: Arc<Vec<u8>>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(http::serve(l, move |mut s, head| {
        let body = body.clone();
        async move {
            if head.starts_with("GET") {
                return http::respond(&mut s, &body).await;
            }
            let len: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap_or(0))
                })
                .unwrap_or(0);
            if head.to_ascii_lowercase().contains("expect: 100-continue") {
                let _ = s.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await;
            }
            let mut got = vec![0u8; len];
            if s.read_exact(&mut got).await.is_err() {
                return;
            }
            http::respond(&mut s, sha(&got).as_bytes()).await;
        }
    }));
    addr
}

/// A server, one link emulator per path of the links' scenario and an agent whose paths go
/// through them, all on loopback; the session is up when [`RigBuilder::start`] returns.
pub struct Rig {
    pub agent: Agent,
    pub emus: Vec<Emulator>,
    pub server: SocketAddr,
    pub server_pub: braid_crypto::PublicKey,
    pub server_board: Arc<ServerBoard>,
    pub agent_key: Arc<StaticKeypair>,
    pub _server: tokio::task::JoinHandle<()>,
}

/// The loopback rig with the default links (three paths, 200/100/50 Mbit/s with a little
/// loss) and an agent with SOCKS5 and HTTP ports.
pub async fn rig() -> Rig {
    RigBuilder::new().start().await
}

/// What a [`Rig`] is made of: the links (a scenario's `[[path]]` tables, emulated one
/// emulator each, seeded 1, 2, ...) and a change to the agent's configuration.
pub struct RigBuilder {
    links: String,
    agent: Option<AgentChange>,
}

/// A change to an agent's configuration.
type AgentChange = Box<dyn FnOnce(&mut AgentConfig)>;

impl Default for RigBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl RigBuilder {
    pub fn new() -> Self {
        RigBuilder {
            links: LINKS.to_string(),
            agent: None,
        }
    }

    /// The links: a scenario in TOML whose paths the emulators reproduce.
    pub fn links(mut self, toml: &str) -> Self {
        self.links = toml.to_string();
        self
    }

    /// A change to the agent's configuration before it starts.
    pub fn agent(mut self, f: impl FnOnce(&mut AgentConfig) + 'static) -> Self {
        self.agent = Some(Box::new(f));
        self
    }

    pub async fn start(self) -> Rig {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_env("BRAID_TEST_LOG"))
            .with_test_writer()
            .try_init();
        let (scfg, server_pub, agent_key) = loopback_server();
        let server = Server::bind(scfg).await.unwrap();
        let server_addr = server.local_addr().unwrap();
        let server_board = server.status();
        let server_task = tokio::spawn(async move {
            let _ = server.run().await;
        });
        let scn = braid_sim::Scenario::from_toml_str(&self.links, Path::new("<rig>")).unwrap();
        let mut emus = Vec::new();
        let mut paths = Vec::new();
        for (i, spec) in scn.paths.iter().enumerate() {
            let emu = Emulator::start(
                spec,
                i as u64 + 1,
                "127.0.0.1:0".parse().unwrap(),
                "127.0.0.1:0".parse().unwrap(),
                server_addr,
            )
            .unwrap();
            let mut p = AgentPath::new(
                spec.name.clone(),
                PathBind::Address(format!("127.0.0.{}", i + 2).parse().unwrap()),
            );
            p.via = Some(emu.agent_side);
            paths.push(p);
            emus.push(emu);
        }
        let mut acfg = AgentConfig::new(server_addr, server_pub, agent_key.clone(), paths);
        acfg.socks = Some("127.0.0.1:0".parse().unwrap());
        acfg.http = Some("127.0.0.1:0".parse().unwrap());
        // Measurements for docs/results.md choose the controller; tests use the default.
        if let Some(cc) = std::env::var("BRAID_TEST_CC")
            .ok()
            .and_then(|c| c.parse().ok())
        {
            acfg.transport.cc = cc;
        }
        if let Some(f) = self.agent {
            f(&mut acfg);
        }
        let mut agent = Agent::start(acfg).await.unwrap();
        assert!(
            agent.wait_established(Duration::from_secs(10)).await,
            "no session"
        );
        Rig {
            agent,
            emus,
            server: server_addr,
            server_pub,
            server_board,
            agent_key,
            _server: server_task,
        }
    }
}

pub async fn curl(args: Vec<String>) -> Vec<u8> {
    let out = tokio::task::spawn_blocking(move || Command::new("curl").args(&args).output())
        .await
        .unwrap()
        .expect("curl runs");
    assert!(
        out.status.success(),
        "curl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// curl arguments for a request through the agent's SOCKS5 port (names resolved by the
/// server), then `tail` (more options and the URL).
pub fn socks_args(socks: impl ToString, max_time_s: u32, tail: Vec<String>) -> Vec<String> {
    let mut a = vec![
        "-sS".to_string(),
        "--max-time".to_string(),
        max_time_s.to_string(),
        "--socks5-hostname".to_string(),
        socks.to_string(),
    ];
    a.extend(tail);
    a
}
