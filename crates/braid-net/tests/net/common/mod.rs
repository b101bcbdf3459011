//! Shared rig for the network tests: a server, link emulators and an agent on this
//! machine, a small HTTP server, and helpers to hash and fetch.
#![allow(dead_code)]

use braid_crypto::StaticKeypair;
use braid_emu::Emulator;
use braid_net::agent::{Agent, AgentConfig, AgentPath};
use braid_net::server::{Server, ServerConfig};
use braid_net::udp::PathBind;
use braid_proxy::{AuthPolicy, HttpLimits};
use sha2::{Digest, Sha256};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

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
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let body = body.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if s.read_exact(&mut b).await.is_err() {
                        return;
                    }
                    head.push(b[0]);
                }
                let head = String::from_utf8_lossy(&head).to_string();
                if head.starts_with("GET") {
                    let h = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = s.write_all(h.as_bytes()).await;
                    let _ = s.write_all(&body).await;
                } else {
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
                    let digest = sha(&got);
                    let h = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{digest}", digest.len());
                    let _ = s.write_all(h.as_bytes()).await;
                }
                let _ = s.shutdown().await;
            });
        }
    });
    addr
}

pub struct Rig {
    pub agent: Agent,
    pub emus: Vec<Emulator>,
    pub server: SocketAddr,
    pub server_pub: braid_crypto::PublicKey,
    pub agent_key: Arc<StaticKeypair>,
    pub _server: tokio::task::JoinHandle<()>,
}

pub async fn rig() -> Rig {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("BRAID_TEST_LOG"))
        .with_test_writer()
        .try_init();
    let server_key = StaticKeypair::generate().unwrap();
    let agent_key = StaticKeypair::generate().unwrap();
    let server_pub = server_key.public();
    let scfg = ServerConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        server_key,
        vec![agent_key.public()],
    );
    let server = Server::bind(scfg).await.unwrap();
    let server_addr = server.local_addr().unwrap();
    let server_task = tokio::spawn(async move {
        let _ = server.run().await;
    });
    let scn = braid_sim::Scenario::from_toml_str(LINKS, Path::new("<e2e>")).unwrap();
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
        paths.push(AgentPath {
            name: spec.name.clone(),
            bind: PathBind::Address(format!("127.0.0.{}", i + 2).parse().unwrap()),
            via: Some(emu.agent_side),
            policy: Default::default(),
        });
        emus.push(emu);
    }
    let agent_key = Arc::new(agent_key);
    let acfg = AgentConfig {
        servers: vec![server_addr],
        server_pub,
        key: agent_key.clone(),
        paths,
        socks: Some("127.0.0.1:0".parse().unwrap()),
        http: Some("127.0.0.1:0".parse().unwrap()),
        socks_auth: AuthPolicy::NoAuth,
        http_limits: HttpLimits::default(),
        proxy_limits: Default::default(),
        open_timeout: Duration::from_secs(15),
        session_wait: Duration::from_secs(10),
        state_file: None,
        transport: braid_core::Config {
            // Measurements for docs/results.md choose the controller; tests use the default.
            cc: std::env::var("BRAID_TEST_CC")
                .ok()
                .and_then(|c| c.parse().ok())
                .unwrap_or_default_cc(),
            ..braid_core::Config::default()
        },
        tun: None,
        redirect: None,
        dns: None,
        rekey: Default::default(),
        direct: Default::default(),
        rules: Default::default(),
        ciphers: Default::default(),
        forwards: Vec::new(),
        server_other_family: Vec::new(),
    };
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
        agent_key,
        _server: server_task,
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

trait DefaultCc {
    fn unwrap_or_default_cc(self) -> braid_core::CcAlgorithm;
}

impl DefaultCc for Option<braid_core::CcAlgorithm> {
    fn unwrap_or_default_cc(self) -> braid_core::CcAlgorithm {
        self.unwrap_or(braid_core::Config::default().cc)
    }
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
