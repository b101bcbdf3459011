//! Issue 37, item 2: fair shares between agents and per-agent rate limits, through real
//! agents (root, network namespaces; the test says why it skips otherwise). Two agents in
//! the client namespace share the rig's two shaped links to one server; each opens
//! streams through its SOCKS5 port to a source in the server's namespace that writes
//! without end, and the bytes each agent reads are counted over a measured window.

use crate::nsrig::{self, agent_cfg, skip, spawn_in, Net};
use braid_crypto::{PublicKey, StaticKeypair};
use braid_net::agent::Agent;
use braid_net::server::shares::{AgentLimits, SharesPolicy};
use braid_net::server::{fingerprint, Server, ServerBoard, ServerConfig};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The source's address (on the server namespace's lo, as the server's own address).
const SOURCE: &str = "10.0.0.1:9009";

/// A source on [`SOURCE`] that writes to every connection until it closes.
async fn source() {
    let l = tokio::net::TcpListener::bind(SOURCE).await.unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let buf = vec![0x5au8; 64 * 1024];
                while s.write_all(&buf).await.is_ok() {}
            });
        }
    });
}

/// The braid server (its settings changed by `tune`) and the source, in the server
/// namespace, accepting `agents`.
fn server(
    net: &Net,
    agents: Vec<PublicKey>,
    tune: impl FnOnce(&mut ServerConfig) + Send + 'static,
) -> (PublicKey, Arc<ServerBoard>, nsrig::Stop) {
    let key = StaticKeypair::generate().unwrap();
    let public = key.public();
    let (board, stop) = spawn_in(&net.s, move |ready| async move {
        source().await;
        let mut cfg = ServerConfig::new(nsrig::SERVER.parse().unwrap(), key, agents);
        braid_testkit::loopback::allow_targets(&mut cfg, &["10.0.0.1"]);
        tune(&mut cfg);
        let server = Server::bind(cfg).await.unwrap();
        ready.send(server.status()).unwrap();
        let _ = server.run().await;
    });
    (public, board, stop)
}

/// An agent on both links, its session up.
async fn agent(key: Arc<StaticKeypair>, server_pub: PublicKey) -> Agent {
    let mut a = Agent::start(agent_cfg(&["a=p0", "b=p1"], key, server_pub))
        .await
        .unwrap();
    assert!(
        a.wait_established(Duration::from_secs(5)).await,
        "no session"
    );
    a
}

/// `n` streams from [`SOURCE`] through `socks`, each adding what it reads to `count`.
fn pull(socks: SocketAddr, n: usize, count: Arc<AtomicU64>) {
    for _ in 0..n {
        let count = count.clone();
        tokio::spawn(async move {
            let to: SocketAddr = SOURCE.parse().unwrap();
            let mut s = braid_testkit::socks5::open(socks, to).await;
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n) = s.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                count.fetch_add(n as u64, Ordering::Relaxed);
            }
        });
    }
}

/// Bytes each counter gained over `window`, after `warmup`.
async fn measure(counts: &[Arc<AtomicU64>], warmup: Duration, window: Duration) -> Vec<u64> {
    tokio::time::sleep(warmup).await;
    let before: Vec<u64> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    tokio::time::sleep(window).await;
    let after = counts.iter().map(|c| c.load(Ordering::Relaxed));
    after.zip(before).map(|(a, b)| a - b).collect()
}

fn mbit(bytes: u64, window: Duration) -> f64 {
    bytes as f64 * 8.0 / window.as_secs_f64() / 1e6
}

/// Two agents on one server (two worker threads) over the same two links (20 Mbit/s
/// each): A pulls 8 streams at once, B one. B's share of what both got must be at least
/// 0.4 (equal share 0.5), over 4 s after 2 s of warm-up, with the links still full.
/// Without the server's fair shares the two sessions' congestion controllers settled
/// anywhere from 0.35 to 0.79 for B here (and 0.37-0.70 with one stream against one), so
/// the outcome alone cannot tell a fair server from luck: the test also checks that the
/// server capped one of them, and that neither got less than 0.4.
#[test]
fn eight_bulk_downloads_leave_the_single_one_its_fair_share() {
    if skip() {
        return;
    }
    let net = Net::with_rates("bfs", &["20mbit", "20mbit"]);
    let (a_key, b_key) = (
        Arc::new(StaticKeypair::generate().unwrap()),
        Arc::new(StaticKeypair::generate().unwrap()),
    );
    let keys = vec![a_key.public(), b_key.public()];
    let (server_pub, board, _stop) = server(&net, keys, |c| c.threads = 2);
    let (window, warmup) = (Duration::from_secs(4), Duration::from_secs(2));
    let got = nsrig::on(&net.c, move || async move {
        let a = agent(a_key, server_pub).await;
        let b = agent(b_key, server_pub).await;
        let counts = [Arc::<AtomicU64>::default(), Arc::default()];
        pull(a.socks.unwrap(), 8, counts[0].clone());
        pull(b.socks.unwrap(), 1, counts[1].clone());
        let got = measure(&counts, warmup, window).await;
        (got, serde_json::to_value(board.snapshot().await).unwrap())
    });
    let (got, status) = got;
    let (a, b) = (got[0], got[1]);
    // The server capped one of them (the one above an equal share) while both wanted
    // more: the mechanism acted, whichever way the two sessions would have drifted.
    let caps: Vec<_> = status["shares"]["agents"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|x| x["fair_cap_bytes_per_sec"].as_u64())
        .collect();
    assert!(!caps.is_empty(), "no fair-share cap: {status}");
    let share = b as f64 / (a + b) as f64;
    eprintln!(
        "8 streams: {:.1} Mbit/s, 1 stream: {:.1} Mbit/s, the single one's share {share:.2}",
        mbit(a, window),
        mbit(b, window)
    );
    assert!(share >= 0.4, "the single download's share {share:.2}");
    assert!(share <= 0.6, "the 8 downloads' share {:.2}", 1.0 - share);
    // Fair, and not by leaving the links idle: together at least 0.8 of their 40 Mbit/s.
    let total = mbit(a + b, window);
    assert!(total >= 32.0, "both together {total:.1} Mbit/s");
}

/// UDP payload bytes the client namespace received on `p0` and `p1` (each frame less its
/// Ethernet, IPv4 and UDP headers).
fn udp_payload_in(ns: &str) -> u64 {
    let stat = |i: usize, what: &str| -> u64 {
        let f = format!("/sys/class/net/p{i}/statistics/{what}");
        braid_testbed::cmd::exec_ns(ns, "cat", &[&f])
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    };
    (0..2)
        .map(|i| stat(i, "rx_bytes") - stat(i, "rx_packets") * (14 + 20 + 8))
        .sum()
}

/// An agent limited to 10 Mbit/s (`[limits.agent."KEY"] rate_mbit = 10`) pulls 4 streams
/// over links of 40 Mbit/s together: what the server sends it (UDP payload, counted on
/// the client's interfaces) stays within 5 % of 10 Mbit/s over 4 s, and `braid status
/// --json` shows the limit and the agent's bytes.
#[test]
fn a_10_mbit_rate_limit_holds_within_5_percent() {
    if skip() {
        return;
    }
    let net = Net::with_rates("brl", &["20mbit", "20mbit"]);
    let a_key = Arc::new(StaticKeypair::generate().unwrap());
    let a = a_key.public();
    let limit = AgentLimits {
        rate: Some(10_000_000 / 8),
        ..Default::default()
    };
    let (server_pub, board, _stop) = server(&net, vec![a], move |c| {
        c.shares = SharesPolicy::default();
        c.shares.agents.insert(a, limit);
    });
    let (window, warmup) = (Duration::from_secs(4), Duration::from_millis(1500));
    let ns = net.c.clone();
    let (udp, goodput) = nsrig::on(&net.c, move || async move {
        let agent = agent(a_key, server_pub).await;
        let count = Arc::<AtomicU64>::default();
        pull(agent.socks.unwrap(), 4, count.clone());
        tokio::time::sleep(warmup).await;
        let (u0, g0) = (udp_payload_in(&ns), count.load(Ordering::Relaxed));
        tokio::time::sleep(window).await;
        let (u1, g1) = (udp_payload_in(&ns), count.load(Ordering::Relaxed));
        (u1 - u0, g1 - g0)
    });
    let (rate, good) = (mbit(udp, window), mbit(goodput, window));
    eprintln!("limit 10 Mbit/s: sent {rate:.2} Mbit/s (UDP payload), goodput {good:.2} Mbit/s");
    assert!((rate - 10.0).abs() <= 0.5, "sent {rate:.2} Mbit/s");
    let v = nsrig::on(&net.c, move || async move {
        serde_json::to_value(board.snapshot().await).unwrap()
    });
    let agents = v["shares"]["agents"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let me = agents
        .iter()
        .find(|x| x["agent_key_fingerprint"] == fingerprint(&a).as_str())
        .unwrap_or_else(|| panic!("no share for the agent: {v}"));
    assert_eq!(me["rate_limit_bytes_per_sec"], 1_250_000, "{me}");
    assert!(me["sent_bytes"].as_u64().unwrap() >= goodput, "{me}");
}
