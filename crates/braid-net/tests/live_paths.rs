//! Links that come, go and change under a running agent (root; network namespaces).
//!
//! Two namespaces joined by two veth pairs (`p0`/`s0`, `p1`/`s1`), each rate-limited by
//! tbf towards the agent; the braid server and an HTTP server run in the server
//! namespace, the agent in the client namespace with one path per interface. Each test
//! downloads through the agent's SOCKS5 port while it changes the links with `ip`, checks
//! the bytes by SHA-256 and measures the longest stall (gap between received bytes).
//! Without root or namespaces each test prints why it skips.

mod common;

use braid_crypto::StaticKeypair;
use braid_net::agent::{Agent, AgentConfig, AgentPath, PathStatus};
use braid_net::policy::parse_path_spec;
use braid_net::server::{Server, ServerConfig};
use braid_testbed::cmd::{exec_ns, ip_ns, run};
use common::{body, http_server, sha};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Download rate of each link (tbf on the server side of each veth).
const RATE: &str = "40mbit";
const SERVER: &str = "10.0.0.1:4433";

fn skip() -> bool {
    if let Some(why) = braid_testbed::unavailable_reason() {
        eprintln!("skipped: {why}");
        return true;
    }
    false
}

/// The two namespaces; removed on drop.
struct Net {
    c: String,
    s: String,
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in [&self.c, &self.s] {
            let _ = run("ip", &["netns", "del", ns]);
        }
    }
}

fn sh(r: braid_testbed::Result<String>) {
    if let Err(e) = r {
        panic!("{e}");
    }
}

impl Net {
    fn new() -> Net {
        static N: AtomicU32 = AtomicU32::new(0);
        let id = format!(
            "{}{}",
            std::process::id() % 100_000,
            N.fetch_add(1, Ordering::Relaxed)
        );
        let net = Net {
            c: format!("blp{id}-c"),
            s: format!("blp{id}-s"),
        };
        for ns in [&net.c, &net.s] {
            sh(run("ip", &["netns", "add", ns]));
            sh(ip_ns(ns, &["link", "set", "lo", "up"]));
        }
        sh(ip_ns(&net.s, &["addr", "add", "10.0.0.1/32", "dev", "lo"]));
        for i in 0..2 {
            net.make_link(i);
        }
        net
    }

    /// Create veth pair `i` with its addresses, route and rate limit.
    fn make_link(&self, i: usize) {
        let (p, s) = (format!("p{i}"), format!("s{i}"));
        sh(run(
            "ip",
            &[
                "link", "add", &p, "netns", &self.c, "type", "veth", "peer", "name", &s, "netns",
                &self.s,
            ],
        ));
        sh(ip_ns(
            &self.c,
            &["addr", "add", &format!("10.{}.0.1/24", i + 1), "dev", &p],
        ));
        sh(ip_ns(
            &self.s,
            &["addr", "add", &format!("10.{}.0.2/24", i + 1), "dev", &s],
        ));
        sh(ip_ns(&self.c, &["link", "set", &p, "up"]));
        sh(ip_ns(&self.s, &["link", "set", &s, "up"]));
        self.route(i);
        sh(exec_ns(
            &self.s,
            "tc",
            &[
                "qdisc", "add", "dev", &s, "root", "tbf", "rate", RATE, "burst", "20kb", "latency",
                "30ms",
            ],
        ));
    }

    fn route(&self, i: usize) {
        let metric = (i + 1).to_string();
        sh(ip_ns(
            &self.c,
            &[
                "route",
                "replace",
                "10.0.0.1/32",
                "dev",
                &format!("p{i}"),
                "metric",
                &metric,
            ],
        ));
    }

    /// Bytes received by the client on interface `p<i>` (0 if it does not exist).
    fn rx_bytes(&self, i: usize) -> u64 {
        exec_ns(
            &self.c,
            "cat",
            &[&format!("/sys/class/net/p{i}/statistics/rx_bytes")],
        )
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
    }

    fn ip_c(&self, args: &[&str]) {
        sh(ip_ns(&self.c, args));
    }

    fn ip_s(&self, args: &[&str]) {
        sh(ip_ns(&self.s, args));
    }

    /// Run the braid server and an HTTP server serving `data` in the server namespace until
    /// the returned guard is dropped. Returns the HTTP address and the server's public key.
    fn serve(
        &self,
        data: Arc<Vec<u8>>,
        agent: braid_crypto::PublicKey,
    ) -> (SocketAddr, braid_crypto::PublicKey, Stop) {
        let key = StaticKeypair::generate().unwrap();
        let public = key.public();
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let ns = self.s.clone();
        let t = std::thread::spawn(move || {
            braid_testbed::netns::enter(&ns).unwrap();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let web = http_server(data).await;
                let cfg = ServerConfig::new(SERVER.parse().unwrap(), key, vec![agent]);
                let server = Server::bind(cfg).await.unwrap();
                tx.send(web).unwrap();
                tokio::select! {
                    _ = server.run() => {}
                    _ = stop_rx => {}
                }
            });
        });
        let web = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        (web, public, Stop(Some(stop_tx), Some(t)))
    }

    /// Run `body` in the client namespace on a fresh runtime.
    fn client<T, F, Fut>(&self, f: F) -> T
    where
        T: Send + 'static,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = T>,
    {
        let ns = self.c.clone();
        std::thread::spawn(move || {
            braid_testbed::netns::enter(&ns).unwrap();
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(f())
        })
        .join()
        .expect("the client side panicked")
    }
}

struct Stop(
    Option<tokio::sync::oneshot::Sender<()>>,
    Option<std::thread::JoinHandle<()>>,
);

impl Drop for Stop {
    fn drop(&mut self) {
        if let Some(s) = self.0.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.1.take() {
            let _ = t.join();
        }
    }
}

fn agent_cfg(
    paths: &[&str],
    key: Arc<StaticKeypair>,
    server_pub: braid_crypto::PublicKey,
) -> AgentConfig {
    let paths = paths
        .iter()
        .map(|p| {
            let s = parse_path_spec(p).unwrap();
            AgentPath {
                policy: s.policy,
                ..AgentPath::new(s.name, s.bind)
            }
        })
        .collect();
    let mut cfg = AgentConfig::new(SERVER.parse().unwrap(), server_pub, key, paths);
    cfg.socks = Some("127.0.0.1:0".parse().unwrap());
    cfg
}

/// What a download saw.
#[derive(Debug)]
struct Outcome {
    bytes: Vec<u8>,
    /// Longest gap between two reads, and when it ended (since the start).
    stall: Duration,
    stall_end: Duration,
    took: Duration,
}

/// GET /file from `web` through the SOCKS5 port `socks` (the server resolves and connects).
async fn download(socks: SocketAddr, web: SocketAddr) -> Outcome {
    let t0 = Instant::now();
    let mut s = TcpStream::connect(socks).await.unwrap();
    s.write_all(&[5, 1, 0]).await.unwrap();
    let mut r = [0u8; 2];
    s.read_exact(&mut r).await.unwrap();
    let SocketAddr::V4(w) = web else {
        panic!("IPv4 only")
    };
    let mut req = vec![5, 1, 0, 1];
    req.extend_from_slice(&w.ip().octets());
    req.extend_from_slice(&w.port().to_be_bytes());
    s.write_all(&req).await.unwrap();
    let mut rep = [0u8; 10];
    s.read_exact(&mut rep).await.unwrap();
    assert_eq!(rep[1], 0, "SOCKS5 CONNECT refused with code {}", rep[1]);
    s.write_all(b"GET /file HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut all = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let (mut last, mut stall, mut stall_end) = (Instant::now(), Duration::ZERO, Duration::ZERO);
    loop {
        let n = tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf))
            .await
            .expect("the download stalled for 30 s")
            .unwrap();
        if n == 0 {
            break;
        }
        let now = Instant::now();
        if now - last > stall {
            stall = now - last;
            stall_end = now - t0;
        }
        last = now;
        all.extend_from_slice(&buf[..n]);
    }
    let head = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP answer")
        + 4;
    Outcome {
        bytes: all.split_off(head),
        stall,
        stall_end,
        took: t0.elapsed(),
    }
}

/// Start an agent (in the client namespace), wait for its session and start a download.
async fn start(cfg: AgentConfig, web: SocketAddr) -> (Agent, tokio::task::JoinHandle<Outcome>) {
    let agent = Agent::start(cfg).await.unwrap();
    let mut agent = agent;
    assert!(
        agent.wait_established(Duration::from_secs(5)).await,
        "no session"
    );
    let dl = tokio::spawn(download(agent.socks.unwrap(), web));
    (agent, dl)
}

/// Wait for path `name` to reach `st`; returns how long it took.
async fn wait(agent: &mut Agent, name: &str, st: PathStatus, limit_ms: u64) -> Duration {
    let t = Instant::now();
    assert!(
        agent
            .wait_path(name, st, Duration::from_millis(limit_ms))
            .await,
        "path {name} not {st:?} within {limit_ms} ms: {:?}",
        agent.paths()
    );
    t.elapsed()
}

fn sleep(ms: u64) -> tokio::time::Sleep {
    tokio::time::sleep(Duration::from_millis(ms))
}

fn check(name: &str, o: &Outcome, data: &[u8], max_stall: Duration) {
    eprintln!(
        "{name}: {} bytes in {:.2} s, longest stall {} ms (ending at {:.2} s)",
        o.bytes.len(),
        o.took.as_secs_f64(),
        o.stall.as_millis(),
        o.stall_end.as_secs_f64()
    );
    assert_eq!(o.bytes.len(), data.len(), "{name}: length");
    assert_eq!(sha(&o.bytes), sha(data), "{name}: SHA-256");
    assert!(
        o.stall <= max_stall,
        "{name}: stalled {:?} (limit {max_stall:?})",
        o.stall
    );
}

struct Setup {
    net: Arc<Net>,
    data: Arc<Vec<u8>>,
    web: SocketAddr,
    server_pub: braid_crypto::PublicKey,
    key: Arc<StaticKeypair>,
    _stop: Stop,
}

fn setup(size: usize) -> Setup {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("BRAID_TEST_LOG"))
        .with_test_writer()
        .try_init();
    let net = Arc::new(Net::new());
    let data = Arc::new(body(size));
    let key = Arc::new(StaticKeypair::generate().unwrap());
    let (web, server_pub, stop) = net.serve(data.clone(), key.public());
    Setup {
        net,
        data,
        web,
        server_pub,
        key,
        _stop: stop,
    }
}

/// Link p1 is down when the agent starts and a listed path (`wifi=192.0.2.55`) never
/// exists: the session starts at once on p0, and p1 carries a fair share within 2 s of
/// coming up.
#[test]
fn a_late_link_joins_the_running_download_within_2_s() {
    if skip() {
        return;
    }
    let s = setup(24 << 20);
    let net = s.net.clone();
    net.ip_s(&["link", "set", "s1", "down"]);
    // The kernel reports carrier changes with a delay (linkwatch): start once p1 shows it.
    let t = Instant::now();
    while !ip_ns(&net.c, &["link", "show", "p1"])
        .unwrap()
        .contains("NO-CARRIER")
    {
        assert!(t.elapsed() < Duration::from_secs(3), "p1 keeps its carrier");
        std::thread::sleep(Duration::from_millis(20));
    }
    let cfg = agent_cfg(
        &["a=p0", "wifi=192.0.2.55", "b=p1"],
        s.key.clone(),
        s.server_pub,
    );
    let web = s.web;
    let n2 = net.clone();
    let (o, joined) = net.client(move || async move {
        let t = Instant::now();
        let mut agent = Agent::start(cfg).await.unwrap();
        assert!(
            agent.wait_established(Duration::from_secs(3)).await,
            "no session on the link that is up"
        );
        eprintln!(
            "session up after {} ms with one link down",
            t.elapsed().as_millis()
        );
        let st: Vec<PathStatus> = agent.paths().into_iter().map(|p| p.1).collect();
        assert_eq!(st[1], PathStatus::Down, "the absent path");
        assert_eq!(st[2], PathStatus::Down, "the link without carrier");
        let dl = tokio::spawn(download(agent.socks.unwrap(), web));
        sleep(1000).await;
        n2.ip_s(&["link", "set", "s1", "up"]);
        let up = Instant::now();
        // Sample p1's share of what arrives, every 100 ms.
        let mut joined = None;
        let (mut a0, mut b0) = (n2.rx_bytes(0), n2.rx_bytes(1));
        while up.elapsed() < Duration::from_secs(3) {
            sleep(100).await;
            let (a, b) = (n2.rx_bytes(0), n2.rx_bytes(1));
            let (da, db) = (a - a0, b - b0);
            (a0, b0) = (a, b);
            if db > 100_000 && db * 4 >= (da + db) {
                joined = Some(up.elapsed());
                break;
            }
        }
        (dl.await.unwrap(), joined)
    });
    check("late link", &o, &s.data, Duration::from_millis(500));
    let joined = joined.expect("the late link never carried a fair share within 3 s");
    eprintln!(
        "late link carried >= 25 % of the bytes {} ms after it came up",
        joined.as_millis()
    );
    assert!(joined <= Duration::from_secs(2));
}

/// Carrier loss on p0 (its peer goes down, p0 keeps its address), then carrier back.
#[test]
fn a_carrier_flap_mid_download_stalls_at_most_half_a_second() {
    if skip() {
        return;
    }
    let s = setup(24 << 20);
    let cfg = agent_cfg(&["a=p0", "b=p1"], s.key.clone(), s.server_pub);
    let (net, web) = (s.net.clone(), s.web);
    let o = s.net.client(move || async move {
        let (mut agent, dl) = start(cfg, web).await;
        wait(&mut agent, "a", PathStatus::Up, 2000).await;
        sleep(700).await;
        net.ip_s(&["link", "set", "s0", "down"]);
        let d = wait(&mut agent, "a", PathStatus::Down, 1500).await;
        eprintln!("carrier loss: path down after {} ms", d.as_millis());
        sleep(800).await;
        net.ip_s(&["link", "set", "s0", "up"]);
        let u = wait(&mut agent, "a", PathStatus::Up, 3000).await;
        eprintln!("carrier back: path validated after {} ms", u.as_millis());
        dl.await.unwrap()
    });
    check("carrier flap", &o, &s.data, Duration::from_millis(500));
}

/// p0 deleted mid-download and created again under the same name (a modem replugged).
#[test]
fn an_interface_deleted_and_recreated_mid_download_stalls_at_most_half_a_second() {
    if skip() {
        return;
    }
    let s = setup(24 << 20);
    let cfg = agent_cfg(&["a=p0", "b=p1"], s.key.clone(), s.server_pub);
    let (net, web) = (s.net.clone(), s.web);
    let o = s.net.client(move || async move {
        let (mut agent, dl) = start(cfg, web).await;
        wait(&mut agent, "a", PathStatus::Up, 2000).await;
        sleep(700).await;
        net.ip_c(&["link", "del", "p0"]);
        let d = wait(&mut agent, "a", PathStatus::Down, 500).await;
        eprintln!("interface deleted: path down after {} ms", d.as_millis());
        sleep(500).await;
        net.make_link(0);
        let u = wait(&mut agent, "a", PathStatus::Up, 3000).await;
        eprintln!(
            "interface re-created: path validated after {} ms",
            u.as_millis()
        );
        let before = net.rx_bytes(0);
        let o = dl.await.unwrap();
        assert!(
            net.rx_bytes(0) > before + 1_000_000,
            "the re-created interface carried nothing"
        );
        o
    });
    check(
        "interface re-created",
        &o,
        &s.data,
        Duration::from_millis(500),
    );
}

/// p0's address removed and a new one added mid-download (a new DHCP lease).
#[test]
fn an_address_replaced_mid_download_stalls_at_most_half_a_second() {
    if skip() {
        return;
    }
    let s = setup(24 << 20);
    let cfg = agent_cfg(&["a=p0", "b=p1"], s.key.clone(), s.server_pub);
    let (net, web) = (s.net.clone(), s.web);
    let o = s.net.client(move || async move {
        let (mut agent, dl) = start(cfg, web).await;
        wait(&mut agent, "a", PathStatus::Up, 2000).await;
        sleep(700).await;
        net.ip_c(&["addr", "del", "10.1.0.1/24", "dev", "p0"]);
        let d = wait(&mut agent, "a", PathStatus::Down, 500).await;
        eprintln!("address removed: path down after {} ms", d.as_millis());
        sleep(300).await;
        net.ip_c(&["addr", "add", "10.1.0.7/24", "dev", "p0"]);
        net.route(0);
        let u = wait(&mut agent, "a", PathStatus::Up, 3000).await;
        eprintln!("new address: path validated after {} ms", u.as_millis());
        let before = net.rx_bytes(0);
        let o = dl.await.unwrap();
        assert!(
            net.rx_bytes(0) > before + 1_000_000,
            "the new address carried nothing"
        );
        o
    });
    check("address replaced", &o, &s.data, Duration::from_millis(500));
}

/// p1 is a backup: it carries (almost) nothing while p0 works, and the transfer within 1 s
/// of p0's carrier loss.
#[test]
fn a_backup_link_idles_while_the_primary_works_and_takes_over_within_1_s() {
    if skip() {
        return;
    }
    let s = setup(16 << 20);
    let cfg = agent_cfg(&["a=p0", "b=p1,backup"], s.key.clone(), s.server_pub);
    let (net, web) = (s.net.clone(), s.web);
    let (o, share) = s.net.client(move || async move {
        let (a0, b0) = (net.rx_bytes(0), net.rx_bytes(1));
        let (mut agent, dl) = start(cfg, web).await;
        wait(&mut agent, "b", PathStatus::Up, 2000).await;
        sleep(1500).await;
        let (a1, b1) = (net.rx_bytes(0), net.rx_bytes(1));
        net.ip_s(&["link", "set", "s0", "down"]);
        let o = dl.await.unwrap();
        let share = (b1 - b0) as f64 / ((a1 - a0) + (b1 - b0)) as f64;
        (o, share)
    });
    eprintln!(
        "backup carried {:.3} % of the bytes while the primary worked",
        share * 100.0
    );
    assert!(share < 0.01, "backup carried {:.2} %", share * 100.0);
    check("backup takeover", &o, &s.data, Duration::from_millis(1000));
}

/// p1 has a cap: it stops at the cap (within what it carries in one counting interval),
/// and after an agent restart with the same state file it stays stopped.
#[test]
fn a_cap_stops_a_path_and_survives_an_agent_restart() {
    if skip() {
        return;
    }
    let s = setup(16 << 20);
    let dir = std::env::temp_dir().join(format!("braid-cap-{}-{}", std::process::id(), s.net.c));
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("caps.state");
    let mk = |state: &std::path::Path| {
        let mut c = agent_cfg(&["a=p0", "b=p1,cap=4MB/day"], s.key.clone(), s.server_pub);
        c.state_file = Some(state.to_path_buf());
        c
    };
    let (cfg1, cfg2) = (mk(&state), mk(&state));
    let (net, web) = (s.net.clone(), s.web);
    let (o1, o2, first, second) = s.net.client(move || async move {
        let b0 = net.rx_bytes(1);
        let (agent, dl) = start(cfg1, web).await;
        let o1 = dl.await.unwrap();
        drop(agent);
        let b1 = net.rx_bytes(1);
        let (_agent, dl) = start(cfg2, web).await;
        let o2 = dl.await.unwrap();
        (o1, o2, b1 - b0, net.rx_bytes(1) - b1)
    });
    eprintln!("capped path (4 MB/day): {first} bytes received before the restart, {second} after");
    check("cap, first run", &o1, &s.data, Duration::from_millis(1000));
    check(
        "cap, after restart",
        &o2,
        &s.data,
        Duration::from_millis(1000),
    );
    assert!(
        first >= 3_000_000,
        "the capped path was barely used before its cap: {first}"
    );
    assert!(
        first <= 6_000_000,
        "the capped path went far over its cap: {first}"
    );
    assert!(
        second < 200_000,
        "the capped path carried {second} bytes after the restart"
    );
    let text = std::fs::read_to_string(&state).unwrap();
    assert!(text.starts_with("b "), "state file: {text:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Regression: the first packet on a path added to a running session (its challenge) was
/// dropped — tokio had no write readiness yet for the socket bound a moment before — so
/// validation waited a full probe timeout (1 s) every time a link came back.
#[test]
fn regression_a_path_added_mid_session_validates_without_waiting_for_a_probe_timeout() {
    if skip() {
        return;
    }
    let s = setup(1 << 20);
    let cfg = agent_cfg(&["a=p0", "b=p1"], s.key.clone(), s.server_pub);
    let (net, web) = (s.net.clone(), s.web);
    let took = s.net.client(move || async move {
        let (mut agent, dl) = start(cfg, web).await;
        wait(&mut agent, "b", PathStatus::Up, 2000).await;
        net.ip_c(&["addr", "del", "10.2.0.1/24", "dev", "p1"]);
        wait(&mut agent, "b", PathStatus::Down, 1000).await;
        net.ip_c(&["addr", "add", "10.2.0.1/24", "dev", "p1"]);
        net.route(1);
        let took = wait(&mut agent, "b", PathStatus::Up, 3000).await;
        dl.await.unwrap();
        took
    });
    eprintln!("re-added path validated after {} ms", took.as_millis());
    assert!(
        took < Duration::from_millis(300),
        "validation took {took:?}"
    );
}
