//! Hardening of the server's handshake, over real UDP sockets on loopback: the replay guard
//! survives a restart, cookies are demanded under load before any Diffie-Hellman, one
//! address cannot buy more handshake work than its budget, and a session that never
//! completes its first exchange is closed within seconds. Initiations are built with the
//! real client code and an authorized agent key, as an attacker who captured one would
//! replay it.

use braid_crypto::{ClientHandshake, PacketType, PublicKey, StaticKeypair};
use braid_net::server::{HandshakeCounters, Server, ServerConfig};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UdpSocket;

struct TestServer {
    addr: SocketAddr,
    server_pub: PublicKey,
    counters: Arc<HandshakeCounters>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A server key as private bytes, so that a "restarted" server can have the same key.
fn server_key() -> [u8; 32] {
    let mut k = [0u8; 32];
    braid_crypto::random::fill(&mut k).unwrap();
    k
}

async fn start(
    server_key: &[u8; 32],
    agent: &StaticKeypair,
    edit: impl FnOnce(&mut ServerConfig),
) -> TestServer {
    let key = StaticKeypair::from_private(*server_key).unwrap();
    let server_pub = key.public();
    let mut cfg = ServerConfig::new("127.0.0.1:0".parse().unwrap(), key, vec![agent.public()]);
    braid_testkit::loopback::allow_targets(&mut cfg, &[]);
    edit(&mut cfg);
    let server = Server::bind(cfg).await.unwrap();
    let addr = server.local_addr().unwrap();
    let counters = server.counters();
    let task = tokio::spawn(async move {
        let _ = server.run().await;
    });
    TestServer {
        addr,
        server_pub,
        counters,
        task,
    }
}

/// A server under load from 20 handshakes a second, with a budget large enough that the
/// per-address limit does not get in the way.
async fn start_easily_loaded(server_key: &[u8; 32], agent: &StaticKeypair) -> TestServer {
    start(server_key, agent, |c| {
        c.load_threshold = 20;
        c.handshake_rate = 1000;
        c.handshake_burst = 1000;
    })
    .await
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A fresh initiation of `agent` (random session id, timestamp `ts`).
fn initiation(agent: &StaticKeypair, server: &PublicKey, ts: u64) -> (ClientHandshake, Vec<u8>) {
    let sid = braid_crypto::random::session_id().unwrap();
    ClientHandshake::new(agent, server, sid, 0, ts).unwrap()
}

/// The type of the first datagram `sock` receives within `wait`.
async fn reply(sock: &UdpSocket, wait: Duration) -> Option<(PacketType, Vec<u8>)> {
    let mut buf = vec![0u8; 2048];
    let (n, _) = tokio::time::timeout(wait, sock.recv_from(&mut buf))
        .await
        .ok()?
        .ok()?;
    let h = braid_crypto::parse_header(&buf[..n]).ok()?;
    Some((h.ptype, buf[..n].to_vec()))
}

async fn socket() -> UdpSocket {
    UdpSocket::bind("127.0.0.1:0").await.unwrap()
}

fn get(c: &AtomicU64) -> u64 {
    HandshakeCounters::get(c)
}

fn state_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "braid-hardening-{tag}-{}-{}.state",
        std::process::id(),
        unix_ms()
    ))
}

/// Regression for "the handshake replay guard lives only in memory": an initiation
/// captured before a restart is refused after it, with no reply, while a fresh one works.
#[tokio::test]
async fn replayed_initiation_after_a_server_restart_is_refused() {
    let server_key = server_key();
    let agent = StaticKeypair::generate().unwrap();
    let state = state_path("restart");
    let first = start(&server_key, &agent, |c| c.state_file = Some(state.clone())).await;
    let (_, captured) = initiation(&agent, &first.server_pub, unix_ms());
    let s = socket().await;
    s.send_to(&captured, first.addr).await.unwrap();
    let r = reply(&s, Duration::from_secs(2)).await;
    assert_eq!(r.map(|r| r.0), Some(PacketType::Handshake), "first answer");
    // The state file reaches the disk shortly after the handshake.
    let key = agent.public().to_base64();
    for _ in 0..100 {
        if std::fs::read_to_string(&state).is_ok_and(|t| t.contains(&key)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(first);

    // The restarted server (same key, same state file) refuses the captured initiation.
    let second = start(&server_key, &agent, |c| c.state_file = Some(state.clone())).await;
    let attacker = socket().await;
    attacker.send_to(&captured, second.addr).await.unwrap();
    assert_eq!(
        reply(&attacker, Duration::from_millis(700))
            .await
            .map(|r| r.0),
        None,
        "a replayed initiation got an answer after the restart"
    );
    assert_eq!(get(&second.counters.refused), 1);
    assert_eq!(get(&second.counters.accepted), 0);
    // A fresh initiation of the same agent still works.
    let (_, fresh) = initiation(&agent, &second.server_pub, unix_ms() + 1);
    s.send_to(&fresh, second.addr).await.unwrap();
    let r = reply(&s, Duration::from_secs(2)).await;
    assert_eq!(r.map(|r| r.0), Some(PacketType::Handshake));
    let _ = std::fs::remove_file(&state);
}

/// Under load the server answers an initiation without mac2 with a cookie (56 bytes),
/// never with message 2; the client that uses the cookie gets in.
#[tokio::test]
async fn under_load_a_cookie_is_demanded_before_any_diffie_hellman() {
    let server_key = server_key();
    let agent = StaticKeypair::generate().unwrap();
    let srv = start_easily_loaded(&server_key, &agent).await;
    // Load: an initiation captured 200 s ago (its session long gone) replayed 200 times
    // from 20 ports.
    let (_, captured) = initiation(&agent, &srv.server_pub, unix_ms() - 200_000);
    let mut floods = Vec::new();
    for _ in 0..20 {
        floods.push(socket().await);
    }
    for i in 0..200 {
        floods[i % 20].send_to(&captured, srv.addr).await.unwrap();
    }
    // A legitimate client now: first a cookie, then, with mac2, message 2.
    let s = socket().await;
    let (mut hs, m1) = initiation(&agent, &srv.server_pub, unix_ms() + 5);
    s.send_to(&m1, srv.addr).await.unwrap();
    let (t, cookie) = reply(&s, Duration::from_secs(2)).await.expect("an answer");
    assert_eq!(t, PacketType::Cookie, "under load, no cookie was demanded");
    assert_eq!(cookie.len(), braid_crypto::cookie::COOKIE_REPLY_LEN);
    hs.handle_cookie_reply(&cookie).unwrap();
    s.send_to(&hs.message1(), srv.addr).await.unwrap();
    let (t, m2) = reply(&s, Duration::from_secs(2)).await.expect("message 2");
    assert_eq!(t, PacketType::Handshake);
    hs.finish(&m2).unwrap();
    assert!(get(&srv.counters.cookies) > 100, "cookies to the flood too");
    // The flood's replays reached the Noise step only before the load was noticed.
    assert!(
        get(&srv.counters.refused) <= 21,
        "{} replays cost a Diffie-Hellman",
        get(&srv.counters.refused)
    );
    assert_eq!(get(&srv.counters.accepted), 1);
}

/// Regression for "the agent does not act on a cookie reply": while a flood keeps the server
/// under load, a real agent still gets its session (message 1 again, with mac2).
#[tokio::test]
async fn an_agent_gets_in_while_a_flood_keeps_the_server_under_load() {
    use braid_net::agent::{Agent, AgentConfig, AgentPath};
    use braid_net::udp::PathBind;
    let server_key = server_key();
    let agent = Arc::new(StaticKeypair::generate().unwrap());
    let srv = start_easily_loaded(&server_key, &agent).await;
    let (_, captured) = initiation(&agent, &srv.server_pub, unix_ms() - 200_000);
    let (addr, stop) = (
        srv.addr,
        Arc::new(std::sync::atomic::AtomicBool::new(false)),
    );
    let flag = stop.clone();
    let flood = tokio::spawn(async move {
        let mut socks = Vec::new();
        for _ in 0..10 {
            socks.push(socket().await);
        }
        // About 1000 replays a second, bounded in time, until told to stop.
        for i in 0..20_000usize {
            if flag.load(std::sync::atomic::Ordering::Relaxed) {
                break;
            }
            let _ = socks[i % 10].send_to(&captured, addr).await;
            if i % 10 == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let path = AgentPath::new("a", PathBind::Address("127.0.0.1".parse().unwrap()));
    let cfg = AgentConfig::new(srv.addr, srv.server_pub, agent.clone(), vec![path]);
    let mut a = Agent::start(cfg).await.unwrap();
    let up = a.wait_established(Duration::from_secs(5)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = flood.await;
    assert!(
        get(&srv.counters.cookies) > 0,
        "the server was never under load"
    );
    assert!(up, "no session while the server demanded cookies");
    assert_eq!(get(&srv.counters.accepted), 1);
}

/// One address (many ports) replaying an initiation captured 200 s ago (so each copy
/// reaches the Noise step) gets at most its budget of handshake work: the burst and 80 a
/// second; and no answer.
#[tokio::test]
async fn one_address_gets_at_most_its_handshake_budget() {
    let server_key = server_key();
    let agent = StaticKeypair::generate().unwrap();
    let srv = start(&server_key, &agent, |c| c.load_threshold = u64::MAX).await;
    let (_, captured) = initiation(&agent, &srv.server_pub, unix_ms() - 200_000);
    let mut floods = Vec::new();
    for _ in 0..16 {
        floods.push(socket().await);
    }
    let t0 = std::time::Instant::now();
    let mut sent = 0u64;
    while t0.elapsed() < Duration::from_millis(500) {
        for f in &floods {
            let _ = f.send_to(&captured, srv.addr).await;
            sent += 1;
        }
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let secs = t0.elapsed().as_secs_f64();
    let work = get(&srv.counters.accepted) + get(&srv.counters.refused);
    let budget = 10.0 + 80.0 * secs;
    assert!(
        work as f64 <= budget + 2.0,
        "{work} handshakes worked on in {secs:.2} s, budget {budget:.0} ({sent} sent)"
    );
    assert!(work >= 10, "the budget itself: {work}");
    // The flood reached the limiter (the worker reads at most 256 control datagrams per
    // 5 ms; the kernel drops the rest in the control socket's buffer).
    let limited = get(&srv.counters.rate_limited);
    assert!(
        limited >= (sent / 2).min(5_000),
        "{limited} of {sent} rate-limited"
    );
    assert_eq!(get(&srv.counters.replies), 0);
    assert_eq!(get(&srv.counters.accepted), 0);
}

/// Regression for "a session that never gets past its handshake is still alive after 4
/// minutes": the replayed first copy of a fresh initiation creates a session for the
/// attacker's address; it is closed once the first exchange does not come, and its slot is
/// free again.
#[tokio::test]
async fn session_that_never_completes_its_first_exchange_expires_in_seconds() {
    let server_key = server_key();
    let agent = StaticKeypair::generate().unwrap();
    let srv = start(&server_key, &agent, |c| {
        c.max_sessions = 1;
        c.first_exchange_timeout = Duration::from_millis(800);
    })
    .await;
    let s = socket().await;
    let (_, m1) = initiation(&agent, &srv.server_pub, unix_ms());
    s.send_to(&m1, srv.addr).await.unwrap();
    assert_eq!(
        reply(&s, Duration::from_secs(2)).await.map(|r| r.0),
        Some(PacketType::Handshake)
    );
    // The only slot is taken: another fresh initiation gets a session-limit refusal.
    let (_, m1b) = initiation(&agent, &srv.server_pub, unix_ms() + 1);
    s.send_to(&m1b, srv.addr).await.unwrap();
    assert_eq!(
        reply(&s, Duration::from_millis(300)).await.map(|r| r.0),
        Some(PacketType::SessionLimit)
    );
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(get(&srv.counters.unfinished), 1, "not expired");
    let (_, m1c) = initiation(&agent, &srv.server_pub, unix_ms() + 2);
    s.send_to(&m1c, srv.addr).await.unwrap();
    assert_eq!(
        reply(&s, Duration::from_secs(2)).await.map(|r| r.0),
        Some(PacketType::Handshake),
        "the slot was not freed"
    );
}
