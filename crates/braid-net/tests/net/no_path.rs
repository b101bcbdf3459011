//! An agent none of whose paths exists (`wifi=192.0.2.55`, an address this host does not
//! have): it starts, waits for a path, and proxied connections wait the configured bound
//! and then get the proper error (SOCKS5 "network unreachable", HTTP 502) instead of
//! hanging or failing at once.

use braid_crypto::StaticKeypair;
use braid_net::agent::{Agent, AgentConfig, AgentPath, PathStatus};
use braid_net::udp::PathBind;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test]
async fn with_no_path_proxied_connections_wait_then_get_network_unreachable() {
    let key = Arc::new(StaticKeypair::generate().unwrap());
    let server_pub = StaticKeypair::generate().unwrap().public();
    let mut cfg = AgentConfig::new(
        "127.0.0.1:9".parse().unwrap(),
        server_pub,
        key,
        vec![AgentPath::new(
            "wifi",
            PathBind::Address("192.0.2.55".parse().unwrap()),
        )],
    );
    cfg.socks = Some("127.0.0.1:0".parse().unwrap());
    cfg.http = Some("127.0.0.1:0".parse().unwrap());
    cfg.session_wait = Duration::from_millis(800);
    let agent = Agent::start(cfg)
        .await
        .expect("an agent starts without any path");

    let t = Instant::now();
    let refused = braid_testkit::socks5::connect(
        agent.socks.unwrap(),
        std::net::SocketAddr::from(([127, 0, 0, 1], 80)),
    )
    .await;
    let waited = t.elapsed();
    assert_eq!(
        refused.err(),
        Some(3),
        "SOCKS5 reply: expected 3 (network unreachable)"
    );
    assert!(
        waited >= Duration::from_millis(700) && waited < Duration::from_secs(5),
        "answered after {waited:?}; expected after the 800 ms wait"
    );

    let mut h = TcpStream::connect(agent.http.unwrap()).await.unwrap();
    h.write_all(b"CONNECT 127.0.0.1:80 HTTP/1.1\r\nHost: 127.0.0.1:80\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), h.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 502"), "{text}");
    assert_eq!(agent.paths(), vec![("wifi".to_string(), PathStatus::Down)]);
}
