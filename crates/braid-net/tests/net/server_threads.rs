//! A server on two workers (`ServerConfig::threads`): eight agents, every transfer exact,
//! sessions on both workers, no packet handed from one worker to the other when the
//! kernel steers by session id, and a shutdown that closes the sessions of every worker.
//! Loopback only (no root needed).

use crate::common;

use braid_crypto::StaticKeypair;
use braid_net::agent::{Agent, AgentConfig, AgentPath};
use braid_net::server::{HandshakeCounters, Server, ServerConfig};
use braid_net::udp::PathBind;
use common::{body, curl, http_server, sha, socks_args};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

fn log() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("BRAID_TEST_LOG"))
        .with_test_writer()
        .try_init();
}

async fn agent(
    server: std::net::SocketAddr,
    server_pub: braid_crypto::PublicKey,
    key: Arc<StaticKeypair>,
) -> Agent {
    let mut cfg = AgentConfig::new(
        server,
        server_pub,
        key,
        vec![AgentPath::new(
            "lo",
            PathBind::Address("127.0.0.1".parse().unwrap()),
        )],
    );
    cfg.socks = Some("127.0.0.1:0".parse().unwrap());
    let mut a = Agent::start(cfg).await.unwrap();
    assert!(
        a.wait_established(Duration::from_secs(10)).await,
        "no session"
    );
    a
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_agents_on_two_workers_move_exact_bytes_without_hand_over() {
    log();
    let keys: Vec<Arc<StaticKeypair>> = (0..8)
        .map(|_| Arc::new(StaticKeypair::generate().unwrap()))
        .collect();
    let mut scfg = ServerConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        StaticKeypair::generate().unwrap(),
        keys.iter().map(|k| k.public()).collect(),
    );
    scfg.threads = 2;
    braid_testkit::loopback::allow_targets(&mut scfg, &[]);
    let server_pub = scfg.key.public();
    let server = Server::bind(scfg).await.unwrap();
    let addr = server.local_addr().unwrap();
    let (workers, board, control, counters) = (
        server.workers(),
        server.status(),
        server.control(),
        server.counters(),
    );
    let steered = server.kernel_steering();
    eprintln!("reuseport BPF program attached: {steered}");
    assert_eq!(workers.len(), 2);
    let _server = tokio::spawn(server.run());
    let mut agents = Vec::new();
    for k in &keys {
        agents.push(agent(addr, server_pub, k.clone()).await);
    }
    // The agents choose their session ids at random: all eight on one worker happens once
    // in 128 runs; then the last agent starts again (a new id) until both have one.
    let on = |w: usize| workers[w].sessions.load(Ordering::Relaxed);
    for _ in 0..20 {
        if on(0) > 0 && on(1) > 0 {
            break;
        }
        let last = agents.pop().unwrap();
        assert!(last.shutdown(Duration::from_secs(2)).await);
        agents.push(agent(addr, server_pub, keys[7].clone()).await);
    }
    eprintln!("sessions started per worker: {} and {}", on(0), on(1));
    assert!(on(0) > 0 && on(1) > 0, "{} and {}", on(0), on(1));

    let data = Arc::new(body(3 << 20));
    let web = http_server(data.clone()).await;
    let want = sha(&data);
    let mut jobs = Vec::new();
    for (i, a) in agents.iter().enumerate() {
        let socks = a.socks.unwrap();
        let url = format!("http://{web}/file");
        let up = std::env::temp_dir().join(format!("braid-threads-{}-{i}", std::process::id()));
        std::fs::write(&up, &data[i * 1000..]).unwrap();
        let want_up = sha(&data[i * 1000..]);
        jobs.push(tokio::spawn(async move {
            let down = curl(socks_args(socks, 60, vec![url.clone()])).await;
            let args = vec!["-T".into(), up.display().to_string(), url];
            let up_sha = curl(socks_args(socks, 60, args)).await;
            let _ = std::fs::remove_file(&up);
            (
                sha(&down),
                String::from_utf8_lossy(&up_sha).to_string(),
                want_up,
            )
        }));
    }
    for (i, j) in jobs.into_iter().enumerate() {
        let (down, up, want_up) = j.await.unwrap();
        assert_eq!(down, want, "agent {i}: download");
        assert_eq!(up, want_up, "agent {i}: upload");
    }
    let got: Vec<u64> = (0..2)
        .map(|w| workers[w].received.load(Ordering::Relaxed))
        .collect();
    let handed: Vec<u64> = (0..2)
        .map(|w| workers[w].handed_over.load(Ordering::Relaxed))
        .collect();
    eprintln!("datagrams received per worker: {got:?}, handed over: {handed:?}");
    assert!(got.iter().all(|&n| n > 100), "{got:?}");
    if steered {
        assert_eq!(
            handed,
            [0, 0],
            "the kernel steers every packet to its worker"
        );
    } else {
        assert!(handed.iter().sum::<u64>() > 0);
    }
    // `braid status` sees the sessions of both workers; a shutdown closes them all.
    let status = board.snapshot().await;
    assert_eq!(
        status.sessions.len(),
        agents.len(),
        "{:?}",
        board.sessions()
    );
    assert!(status.sessions.iter().all(|s| !s.paths.is_empty()));
    // Regression (issue 38 item 11): RATE IN/OUT were `-` in a server's first snapshot
    // (a one-shot `braid status`).
    let rates: Vec<_> = (status.sessions.iter().flat_map(|s| &s.paths))
        .map(|p| (p.receive_rate_bps, p.send_rate_bps))
        .collect();
    assert!(
        rates.iter().all(|r| r.0.is_some() && r.1.is_some()),
        "{rates:?}"
    );
    assert_eq!(HandshakeCounters::get(&counters.refused), 0);
    assert_eq!(control.shutdown(Duration::from_secs(3)).await, 0);
    assert!(board.sessions().is_empty());
}

/// The TCP fallback (networks that block UDP) has one listener: its packets go to the
/// worker that owns their session, and the replies come back down the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_fallback_packets_reach_the_worker_of_their_session() {
    use braid_crypto::{parse_header, write_header, ClientHandshake, PacketType};
    use tokio::io::AsyncWriteExt;
    log();
    // One agent key per session: the replay guard refuses an agent's handshake older than
    // its newest accepted one, and the two workers may take the two in either order
    // (regression: with one key the reply to the older one never came, now and then).
    let keys = [
        StaticKeypair::generate().unwrap(),
        StaticKeypair::generate().unwrap(),
    ];
    let mut scfg = ServerConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        StaticKeypair::generate().unwrap(),
        keys.iter().map(|k| k.public()).collect(),
    );
    scfg.threads = 2;
    braid_testkit::loopback::allow_targets(&mut scfg, &[]);
    let server_pub = scfg.key.public();
    let server = Server::bind(scfg).await.unwrap();
    let (addr, workers, steering) = (
        server.local_addr().unwrap(),
        server.workers(),
        server.steering(),
    );
    let _server = tokio::spawn(server.run());
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let mut sids = Vec::new();
    let mut handshakes = std::collections::HashMap::new();
    for (w, agent_key) in [(1usize, &keys[0]), (0, &keys[1])] {
        let sid = (1u64..)
            .find(|&s| steering.worker_of(s << 20) == w)
            .unwrap()
            << 20;
        let (hs, m1) = ClientHandshake::new(agent_key, &server_pub, sid, 0, now).unwrap();
        tcp.write_all(&braid_net::tcp::frame(&m1)).await.unwrap();
        sids.push(sid);
        handshakes.insert(sid, hs);
    }
    let mut buf = bytes::BytesMut::new();
    let mut got = Vec::new();
    for _ in &sids {
        let read = braid_net::tcp::read_frame(&mut tcp, &mut buf);
        let reply = tokio::time::timeout(Duration::from_secs(15), read)
            .await
            .expect("a reply down the TCP connection")
            .unwrap()
            .unwrap();
        let h = parse_header(&reply).unwrap();
        assert_eq!(h.ptype, PacketType::Handshake);
        got.push(h.session_id);
        // The session's first packet, down the same connection: the server makes the
        // session on the worker that owns it.
        let keys = handshakes
            .get_mut(&h.session_id)
            .unwrap()
            .finish(&reply)
            .unwrap();
        let mut p = Vec::new();
        let n = write_header(&mut p, PacketType::Transport, h.session_id, 0, 0).unwrap();
        p.resize(n + 32 + braid_crypto::TAG_LEN, 0);
        keys.send.seal_in_place(&mut p, n).unwrap();
        tcp.write_all(&braid_net::tcp::frame(&p)).await.unwrap();
    }
    // The two workers answer independently: in either order.
    got.sort_unstable();
    sids.sort_unstable();
    assert_eq!(got, sids);
    let on = |w: usize| workers[w].sessions.load(Ordering::Relaxed);
    let t0 = std::time::Instant::now();
    while (on(0), on(1)) != (1, 1) && t0.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!((on(0), on(1)), (1, 1), "one session on each worker");
    assert!(workers
        .iter()
        .all(|w| w.handed_over.load(Ordering::Relaxed) == 0));
}

#[tokio::test]
async fn too_many_threads_are_refused_with_the_limit() {
    let mut scfg = ServerConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        StaticKeypair::generate().unwrap(),
        vec![],
    );
    scfg.threads = braid_net::server::MAX_THREADS + 1;
    let e = Server::bind(scfg).await.err().expect("refused");
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("--threads"), "{e}");
}
