//! Agent and server on this machine, three paths through link emulators with different
//! rates, delays and losses, and real clients: curl through SOCKS5 and HTTP CONNECT, and a
//! SOCKS5 UDP ASSOCIATE client. Every transfer is checked with SHA-256.

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
use tokio::net::{TcpListener, UdpSocket};

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

fn body(len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    let mut x = 0x1234_5678_9abc_def0u64;
    while v.len() < len {
        x = braid_core::rng::splitmix64(x);
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

fn sha(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A minimal HTTP/1.1 server: GET returns `body`; PUT/POST returns the SHA-256 of the body.
async fn http_server(body: Arc<Vec<u8>>) -> SocketAddr {
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

struct Rig {
    agent: Agent,
    emus: Vec<Emulator>,
    _server: tokio::task::JoinHandle<()>,
}

async fn rig() -> Rig {
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
        });
        emus.push(emu);
    }
    let acfg = AgentConfig {
        server: server_addr,
        server_pub,
        key: Arc::new(agent_key),
        paths,
        socks: Some("127.0.0.1:0".parse().unwrap()),
        http: Some("127.0.0.1:0".parse().unwrap()),
        socks_auth: AuthPolicy::NoAuth,
        http_limits: HttpLimits::default(),
        open_timeout: Duration::from_secs(15),
        transport: braid_core::Config::default(),
    };
    let mut agent = Agent::start(acfg).await.unwrap();
    assert!(
        agent.wait_established(Duration::from_secs(10)).await,
        "no session"
    );
    Rig {
        agent,
        emus,
        _server: server_task,
    }
}

async fn curl(args: Vec<String>) -> Vec<u8> {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn download_through_socks5_over_three_impaired_paths() {
    let rig = rig().await;
    let data = Arc::new(body(20 << 20));
    let web = http_server(data.clone()).await;
    let socks = rig.agent.socks.unwrap();
    let got = curl(vec![
        "-sS".into(),
        "--max-time".into(),
        "120".into(),
        "--socks5-hostname".into(),
        socks.to_string(),
        format!("http://{web}/file"),
    ])
    .await;
    assert_eq!(got.len(), data.len());
    assert_eq!(sha(&got), sha(&data));
    // Every path carried traffic.
    for e in &rig.emus {
        assert!(
            e.stats()
                .down_out
                .load(std::sync::atomic::Ordering::Relaxed)
                > 100,
            "{:?}",
            e.stats()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn download_survives_a_path_cut_mid_transfer() {
    let rig = rig().await;
    let data = Arc::new(body(20 << 20));
    let web = http_server(data.clone()).await;
    let socks = rig.agent.socks.unwrap();
    let args = vec![
        "-sS".into(),
        "--max-time".into(),
        "120".into(),
        "--socks5-hostname".into(),
        socks.to_string(),
        format!("http://{web}/file"),
    ];
    let dl = tokio::spawn(curl(args));
    tokio::time::sleep(Duration::from_millis(300)).await;
    rig.emus[0].set_cut(true);
    let got = dl.await.unwrap();
    assert_eq!(sha(&got), sha(&data));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_through_http_connect() {
    let rig = rig().await;
    let web = http_server(Arc::new(Vec::new())).await;
    let http = rig.agent.http.unwrap();
    let data = body(10 << 20);
    let file = std::env::temp_dir().join(format!("braid-upload-{}", std::process::id()));
    std::fs::write(&file, &data).unwrap();
    let got = curl(vec![
        "-sS".into(),
        "--max-time".into(),
        "120".into(),
        "-p".into(),
        "-x".into(),
        format!("http://{http}"),
        "-T".into(),
        file.display().to_string(),
        format!("http://{web}/upload"),
    ])
    .await;
    let _ = std::fs::remove_file(&file);
    assert_eq!(String::from_utf8_lossy(&got), sha(&data));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_associate_echoes_every_datagram_intact() {
    let rig = rig().await;
    let echo = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let echo_addr = echo.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok((n, from)) = echo.recv_from(&mut buf).await {
            let _ = echo.send_to(&buf[..n], from).await;
        }
    });
    // SOCKS5 UDP ASSOCIATE by hand.
    let mut ctl = tokio::net::TcpStream::connect(rig.agent.socks.unwrap())
        .await
        .unwrap();
    ctl.write_all(&[5, 1, 0]).await.unwrap();
    let mut r = [0u8; 2];
    ctl.read_exact(&mut r).await.unwrap();
    assert_eq!(r, [5, 0]);
    ctl.write_all(&[5, 3, 0, 1, 0, 0, 0, 0, 0, 0])
        .await
        .unwrap();
    let mut rep = [0u8; 10];
    ctl.read_exact(&mut rep).await.unwrap();
    assert_eq!(rep[1], 0, "UDP ASSOCIATE refused");
    let relay = SocketAddr::from((
        [rep[4], rep[5], rep[6], rep[7]],
        u16::from_be_bytes([rep[8], rep[9]]),
    ));
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let ip = match echo_addr {
        SocketAddr::V4(a) => a.ip().octets(),
        _ => unreachable!(),
    };
    let mut received = 0;
    let mut buf = vec![0u8; 4096];
    for i in 0..200u32 {
        let payload: Vec<u8> = (0..(50 + i as usize * 5))
            .map(|k| (k as u32 ^ i) as u8)
            .collect();
        let mut pkt = vec![0, 0, 0, 1];
        pkt.extend_from_slice(&ip);
        pkt.extend_from_slice(&echo_addr.port().to_be_bytes());
        pkt.extend_from_slice(&payload);
        client.send_to(&pkt, relay).await.unwrap();
        if let Ok(Ok((n, _))) =
            tokio::time::timeout(Duration::from_millis(500), client.recv_from(&mut buf)).await
        {
            // RSV RSV FRAG ATYP(1) IP(4) PORT(2) then the echo.
            assert_eq!(&buf[..4], &[0, 0, 0, 1]);
            assert_eq!(&buf[10..n], &payload[..], "datagram {i} corrupted");
            received += 1;
        }
    }
    // The paths lose up to 0.5 % each way; nearly all come back, none corrupted.
    assert!(received >= 190, "only {received} of 200 echoes");
}
