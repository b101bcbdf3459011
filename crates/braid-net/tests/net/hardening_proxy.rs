//! The agent's proxy front ends against clients that hold connections without using them
//! (slowloris): a connection limit, a handshake deadline and an idle timeout.

use braid_net::agent::{Agent, AgentConfig, AgentPath};
use braid_net::server::Server;
use braid_net::udp::PathBind;
use braid_proxy::ProxyLimits;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

/// Reads until the peer closes (0 or an error), or `wait` passes (false).
async fn closed_within(s: &mut TcpStream, wait: Duration) -> bool {
    let mut b = [0u8; 256];
    let until = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(until, s.read(&mut b)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
            Err(_) => return false,
        }
    }
}

/// With a limit of 4 connections, 1 s for the handshake and 1 s idle: a fifth connection
/// is closed at once; the 4 silent ones are cut at the handshake deadline, after which a
/// client gets through; a tunnel that carries nothing is closed after the idle timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_clients_are_cut_by_the_connection_limit_and_the_deadlines() {
    let (cfg, server_pub, agent_key) = braid_testkit::loopback::loopback_server();
    let server = Server::bind(cfg).await.unwrap();
    let addr = server.local_addr().unwrap();
    let _t = tokio::spawn(server.run());
    let acfg = AgentConfig {
        socks: Some("127.0.0.1:0".parse().unwrap()),
        proxy_limits: ProxyLimits {
            max_connections: 4,
            handshake_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(1),
        },
        ..AgentConfig::new(
            addr,
            server_pub,
            agent_key,
            vec![AgentPath::new(
                "lo",
                PathBind::Address("127.0.0.1".parse().unwrap()),
            )],
        )
    };
    let mut agent = Agent::start(acfg).await.unwrap();
    assert!(agent.wait_established(Duration::from_secs(5)).await);
    let socks = agent.socks.unwrap();
    let t0 = Instant::now();
    let mut silent = Vec::new();
    for _ in 0..4 {
        silent.push(TcpStream::connect(socks).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Over the limit: closed at once (the RST may even beat connect's return).
    if let Ok(mut fifth) = TcpStream::connect(socks).await {
        assert!(
            closed_within(&mut fifth, Duration::from_millis(300)).await,
            "over the limit: closed at once"
        );
    }
    for s in &mut silent {
        assert!(
            closed_within(s, Duration::from_secs(2)).await,
            "cut at the handshake deadline"
        );
    }
    assert!(
        t0.elapsed() >= Duration::from_millis(900),
        "not before the deadline"
    );
    // A real client gets through now; its tunnel to a silent target is closed when idle.
    let target = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let taddr = target.local_addr().unwrap();
    let _hold = tokio::spawn(async move {
        let mut keep = Vec::new();
        while let Ok((s, _)) = target.accept().await {
            keep.push(s);
        }
    });
    let mut c = braid_testkit::socks5::open(socks, taddr).await;
    let t1 = Instant::now();
    assert!(
        closed_within(&mut c, Duration::from_secs(3)).await,
        "idle tunnel closed"
    );
    let idle = t1.elapsed();
    assert!(
        idle >= Duration::from_millis(900) && idle < Duration::from_millis(2500),
        "{idle:?}"
    );
}
