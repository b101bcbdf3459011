//! Faults, each test named after its fault, over real UDP sockets on loopback (through link
//! emulators where the fault is on a path).

use crate::common;

use braid_crypto::{parse_header, ClientHandshake, PacketType, StaticKeypair};
use braid_net::agent::{Agent, AgentConfig, AgentPath};
use braid_net::server::{Server, ServerConfig};
use braid_net::udp::PathBind;
use common::{body, curl, http_server, sha, socks_args};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

fn log() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("BRAID_TEST_LOG"))
        .with_test_writer()
        .try_init();
}

fn loopback_agent(server: SocketAddr, server_pub: braid_crypto::PublicKey) -> AgentConfig {
    AgentConfig {
        socks: Some("127.0.0.1:0".parse().unwrap()),
        ..AgentConfig::new(
            server,
            server_pub,
            Arc::new(StaticKeypair::generate().unwrap()),
            vec![AgentPath::new(
                "lo",
                PathBind::Address("127.0.0.1".parse().unwrap()),
            )],
        )
    }
}

/// The agent's reason for having no session, once it has one (panics after `limit`).
async fn session_error_within(agent: &Agent, limit: Duration) -> String {
    let t = std::time::Instant::now();
    loop {
        if let Some(e) = agent.status().snapshot().session_error {
            return e;
        }
        assert!(
            t.elapsed() < limit,
            "no reason for the missing session within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Regression for "an agent whose --cipher the server does not accept only times out": the
/// server says which ciphers it accepts, the agent stops waiting for that round and
/// `braid status` says what to change; once both accept a common cipher (here the agent
/// restarted with `auto`) the session starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_with_no_cipher_the_server_accepts_is_told_what_to_change() {
    use braid_crypto::{Cipher, Ciphers};
    log();
    let server_key = StaticKeypair::generate().unwrap();
    let server_pub = server_key.public();
    let a = loopback_agent("127.0.0.1:1".parse().unwrap(), server_pub);
    let mut cfg = ServerConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        server_key,
        vec![a.key.public()],
    );
    cfg.ciphers = Ciphers::only(Cipher::Aes256Gcm);
    braid_testkit::loopback::allow_targets(&mut cfg, &[]);
    let server = Server::bind(cfg).await.unwrap();
    let addr = server.local_addr().unwrap();
    let _task = tokio::spawn(server.run());
    let mut agent = Agent::start(AgentConfig {
        servers: vec![addr],
        ciphers: Ciphers::only(Cipher::ChaCha20Poly1305),
        ..a.clone()
    })
    .await
    .unwrap();
    // Without the refusal the first round waits 0.5 + 1 + 2 + 4 + 4 + 4 s for an answer.
    let said = session_error_within(&agent, Duration::from_secs(2)).await;
    assert!(
        said.contains("no common packet cipher")
            && said.contains(&format!("{addr} accepts only [aes-256-gcm]"))
            && said.contains("this agent offers [chacha20-poly1305]")
            && said.contains("--cipher"),
        "{said}"
    );
    assert!(!agent.wait_established(Duration::from_millis(100)).await);
    agent.shutdown(Duration::from_secs(2)).await;
    let mut agent = Agent::start(AgentConfig {
        servers: vec![addr],
        ciphers: Ciphers::auto(),
        ..a
    })
    .await
    .unwrap();
    assert!(agent.wait_established(Duration::from_secs(5)).await);
    assert_eq!(agent.status().snapshot().session_error, None);
}

/// Regression (issue 38 item 4): an agent whose key is not in the server's authorized
/// keys got no answer, fell back to TCP and gave a generic checklist, like one on a network
/// that blocks UDP. The server now refuses the key in 12 bytes, and within a second the
/// agent's status says its key is not accepted, which key, and where to add it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_whose_key_is_not_authorized_is_told_so_not_that_udp_is_blocked() {
    log();
    let server_key = StaticKeypair::generate().unwrap();
    let a = loopback_agent("127.0.0.1:1".parse().unwrap(), server_key.public());
    let someone_else = StaticKeypair::generate().unwrap().public();
    let mut cfg = ServerConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        server_key,
        vec![someone_else],
    );
    braid_testkit::loopback::allow_targets(&mut cfg, &[]);
    let server = Server::bind(cfg).await.unwrap();
    let addr = server.local_addr().unwrap();
    let _task = tokio::spawn(server.run());
    let key = a.key.public().to_base64();
    let agent = Agent::start(AgentConfig {
        servers: vec![addr],
        ..a
    })
    .await
    .unwrap();
    let said = session_error_within(&agent, Duration::from_secs(1)).await;
    assert!(
        said.contains("do not accept this agent's key")
            && said.contains(&format!("add the line `{key}`"))
            && !said.contains("blocks UDP"),
        "{said}"
    );
    agent.shutdown(Duration::from_secs(2)).await;
}

/// A server at its session limit (1 here) tells a new agent so (a 12-byte refusal naming
/// its handshake, instead of silence), and the session it has keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_at_its_session_limit_refuses_new_agents_and_keeps_its_sessions() {
    log();
    let server_key = StaticKeypair::generate().unwrap();
    let server_pub = server_key.public();
    let a = loopback_agent("127.0.0.1:1".parse().unwrap(), server_pub);
    let b = loopback_agent("127.0.0.1:1".parse().unwrap(), server_pub);
    let intruder = StaticKeypair::generate().unwrap();
    let mut cfg = ServerConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        server_key,
        vec![a.key.public(), b.key.public(), intruder.public()],
    );
    cfg.max_sessions = 1;
    braid_testkit::loopback::allow_targets(&mut cfg, &[]);
    let server = Server::bind(cfg).await.unwrap();
    let addr = server.local_addr().unwrap();
    let counters = server.counters();
    let _task = tokio::spawn(server.run());
    let mut agent_a = Agent::start(AgentConfig {
        servers: vec![addr],
        ..a
    })
    .await
    .unwrap();
    assert!(agent_a.wait_established(Duration::from_secs(5)).await);
    let data = Arc::new(body(300_000));
    let web = http_server(data.clone()).await;
    let url = vec![format!("http://{web}/file")];
    let socks_a = agent_a.socks.unwrap().to_string();

    // A second agent gets no session, and the server says why.
    let mut agent_b = Agent::start(AgentConfig {
        servers: vec![addr],
        ..b
    })
    .await
    .unwrap();
    assert!(!agent_b.wait_established(Duration::from_secs(2)).await);
    assert!(counters.full.load(Ordering::Relaxed) >= 1, "refusals sent");
    // What the refusal looks like: a handshake of a third authorized key.
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let (_, msg1) = ClientHandshake::new(&intruder, &server_pub, 77, 3, ms).unwrap();
    sock.send_to(&msg1, addr).await.unwrap();
    let mut buf = [0u8; 256];
    let (n, _) = tokio::time::timeout(Duration::from_secs(2), sock.recv_from(&mut buf))
        .await
        .expect("a refusal, not silence")
        .unwrap();
    let h = parse_header(&buf[..n]).unwrap();
    assert_eq!(
        (h.ptype, h.session_id, h.path_id, n),
        (PacketType::SessionLimit, 77, 3, 12)
    );
    // The existing session works all along.
    let got = curl(socks_args(socks_a, 10, url)).await;
    assert_eq!(sha(&got), sha(&data));
    assert!(!agent_b.wait_established(Duration::from_millis(100)).await);
}
