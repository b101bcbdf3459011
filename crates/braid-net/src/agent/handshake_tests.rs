//! The handshake over TCP against a server under load (issue 24, item 7): a cookie reply
//! that came down the TCP connection is followed there, with mac2, as one over UDP is.

use super::*;
use crate::agent::AgentPath;
use braid_crypto::{CookieChecker, ReplayGuard, ServerHandshake, StaticKeypair};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicUsize, Ordering};

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A server under load, over TCP only (its UDP port is bound and never answers: a network
/// that blocks UDP): message 1 without a valid mac2 gets a cookie reply down the
/// connection, one with it gets message 2. Counts the valid mac2 it saw.
async fn loaded_tcp_server(
    key: StaticKeypair,
    agent: braid_crypto::PublicKey,
    mac2_seen: Arc<AtomicUsize>,
) -> (SocketAddr, UdpSocket, tokio::task::JoinHandle<()>) {
    let l = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let addr = l.local_addr().unwrap();
    let udp = UdpSocket::bind(addr).await.unwrap();
    let task = tokio::spawn(async move {
        let mut cookies = CookieChecker::new(&key.public(), now_ms()).unwrap();
        let mut guard = ReplayGuard::new();
        loop {
            let (mut s, from) = l.accept().await.unwrap();
            let mut buf = bytes::BytesMut::new();
            while let Ok(Some(pkt)) = crate::tcp::read_frame(&mut s, &mut buf).await {
                assert!(cookies.check_mac1(&pkt));
                let answer = if cookies.check_mac2(&pkt, from, now_ms()) {
                    mac2_seen.fetch_add(1, Ordering::SeqCst);
                    let skew = 60_000;
                    ServerHandshake::respond(&key, &[agent], &mut guard, &pkt, now_ms(), skew)
                        .unwrap()
                        .2
                } else {
                    cookies.cookie_reply(&pkt, from, now_ms()).unwrap()
                };
                s.write_all(&crate::tcp::frame(&answer)).await.unwrap();
            }
        }
    });
    (addr, udp, task)
}

/// Regression (issue 24, item 7): a cookie reply that arrived over TCP was answered with
/// message 1 over UDP (blocked), so a server under load never let a UDP-blocked agent in.
#[tokio::test]
async fn a_cookie_reply_over_tcp_is_followed_on_the_connection() {
    let server_key = StaticKeypair::generate().unwrap();
    let server_pub = server_key.public();
    let agent_key = Arc::new(StaticKeypair::generate().unwrap());
    let seen = Arc::new(AtomicUsize::new(0));
    let (server, _udp, task) =
        loaded_tcp_server(server_key, agent_key.public(), seen.clone()).await;
    let lo = std::net::IpAddr::V4(Ipv4Addr::LOCALHOST);
    let path = AgentPath::new("lte", PathBind::Address(lo));
    let cfg = AgentConfig::new(server, server_pub, agent_key, vec![path]);
    let attach = Attach { index: 1, addr: lo };
    let t = std::time::Instant::now();
    let est = handshake(&cfg, &[(0, attach, PathBind::Address(lo))], 3)
        .await
        .unwrap_or_else(|e| panic!("no session with a loaded server over TCP: {e}"));
    eprintln!("session over TCP after a cookie reply in {:?}", t.elapsed());
    assert!(est.first_tcp.is_some(), "answered over TCP");
    assert_eq!(seen.load(Ordering::SeqCst), 1, "message 1 with mac2");
    task.abort();
}
