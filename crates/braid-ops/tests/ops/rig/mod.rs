//! The rig of the braid-ops tests: a braid server, two link emulators on loopback and an
//! agent with one path through each, both with their control sockets in a temporary
//! directory; a TCP source that sends until the client goes; a SOCKS5 download client.
#![allow(dead_code)]

use braid_emu::Emulator;
use braid_net::agent::Agent;
use braid_net::server::ServerBoard;
use braid_ops::control::ControlServer;
use braid_ops::Source;
use braid_testkit::loopback;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One-way delays of the two emulated paths, milliseconds (RTTs are twice these).
pub const DELAY_MS: [f64; 2] = [15.0, 30.0];

const LINKS: &str = r#"
name = "ops"
[[path]]
name = "a"
rate = "40Mbit"
delay = "15ms"
queue = "40KB"
[[path]]
name = "b"
rate = "20Mbit"
delay = "30ms"
queue = "40KB"
[workload]
size = "1MB"
[[variant]]
name = "v"
"#;

pub struct Rig {
    pub agent: Agent,
    pub emus: Vec<Emulator>,
    pub server_board: Arc<ServerBoard>,
    pub agent_key: braid_crypto::PublicKey,
    pub dir: tempfile::TempDir,
    pub agent_sock: PathBuf,
    pub server_sock: PathBuf,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.tasks.iter().for_each(|t| t.abort());
    }
}

/// The kit's loopback rig on this file's two links, SOCKS5 only, with a control socket for
/// the server and one for the agent.
pub async fn rig() -> Rig {
    let loopback::Rig {
        agent,
        emus,
        server_board,
        agent_key,
        _server,
        ..
    } = loopback::RigBuilder::new()
        .links(LINKS)
        .agent(|c| c.http = None)
        .start()
        .await;
    let dir = tempfile::tempdir().unwrap();
    let server_sock = dir.path().join("server.sock");
    let agent_sock = dir.path().join("agent.sock");
    let mut tasks = vec![_server];
    let ctl = ControlServer::bind(&server_sock).unwrap();
    tasks.push(tokio::spawn(
        ctl.serve(Source::Server(server_board.clone())),
    ));
    let ctl = ControlServer::bind(&agent_sock).unwrap();
    tasks.push(tokio::spawn(ctl.serve(Source::Agent(agent.status()))));
    Rig {
        agent,
        emus,
        server_board,
        agent_key: agent_key.public(),
        dir,
        agent_sock,
        server_sock,
        tasks,
    }
}

/// A TCP source on loopback that sends zeros to every connection until it closes.
pub async fn source() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let buf = vec![0u8; 64 << 10];
                while s.write_all(&buf).await.is_ok() {}
            });
        }
    });
    addr
}

/// Download from `to` through the SOCKS5 port `socks` until the task is dropped, adding
/// the bytes received to `got`.
pub async fn download(socks: SocketAddr, to: SocketAddr, got: Arc<AtomicU64>) {
    let mut s = TcpStream::connect(socks).await.unwrap();
    s.write_all(&[5, 1, 0]).await.unwrap();
    let mut r = [0u8; 2];
    s.read_exact(&mut r).await.unwrap();
    let SocketAddr::V4(v4) = to else {
        panic!("IPv4 only")
    };
    let mut req = vec![5, 1, 0, 1];
    req.extend_from_slice(&v4.ip().octets());
    req.extend_from_slice(&v4.port().to_be_bytes());
    s.write_all(&req).await.unwrap();
    let mut r = [0u8; 10];
    s.read_exact(&mut r).await.unwrap();
    assert_eq!(r[1], 0, "SOCKS5 CONNECT refused");
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                got.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
    }
}

/// `braid status --json` through the control socket at `path`, parsed.
pub async fn status(path: &Path) -> serde_json::Value {
    let p = path.to_path_buf();
    let text =
        tokio::task::spawn_blocking(move || braid_ops::control::query(&p, Duration::from_secs(2)))
            .await
            .unwrap()
            .unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Path `name` of an agent snapshot.
pub fn path<'a>(v: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    v["paths"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no path {name} in {v}"))
}
