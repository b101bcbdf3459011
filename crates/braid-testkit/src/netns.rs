//! The namespace rig of the live-path tests: two namespaces joined by two veth pairs, the
//! braid server and an HTTP server in one, the agent and a SOCKS5 download client in the
//! other; link changes with `ip`; downloads timed read by read.

use crate::loopback::{body, http_server, sha};
use braid_crypto::StaticKeypair;
use braid_net::agent::{Agent, AgentConfig, AgentPath, PathStatus};
use braid_net::policy::parse_path_spec;
use braid_net::server::{Server, ServerBoard, ServerConfig};
use braid_testbed::cmd::{exec_ns, ip_ns, run};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Download rate of each link (tbf on the server side of each veth).
pub const RATE: &str = "40mbit";
pub const SERVER: &str = "10.0.0.1:4433";

pub fn skip() -> bool {
    if let Some(why) = braid_testbed::unavailable_reason() {
        eprintln!("skipped: {why}");
        return true;
    }
    false
}

/// The two namespaces; removed on drop.
pub struct Net {
    pub c: String,
    pub s: String,
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in [&self.c, &self.s] {
            let _ = run("ip", &["netns", "del", ns]);
        }
    }
}

/// `ip -n NS args`, ignoring failure (e.g. an address that is already there).
pub fn try_ip(ns: &str, args: &[&str]) -> bool {
    ip_ns(ns, args).is_ok()
}

pub fn sh(r: braid_testbed::Result<String>) {
    if let Err(e) = r {
        panic!("{e}");
    }
}

impl Default for Net {
    fn default() -> Self {
        Self::new()
    }
}

impl Net {
    pub fn new() -> Net {
        Net::with_prefix("blp")
    }

    /// [`Net::new`] with namespaces named `PREFIX<id>-c` and `PREFIX<id>-s`.
    pub fn with_prefix(prefix: &str) -> Net {
        Net::with_rates(prefix, &[RATE, RATE])
    }

    /// [`Net::with_prefix`] with one link per rate (in tc's units, e.g. `40mbit`): link `i`
    /// shaped to `rates[i]`.
    pub fn with_rates(prefix: &str, rates: &[&str]) -> Net {
        static N: AtomicU32 = AtomicU32::new(0);
        let id = format!(
            "{}{}",
            std::process::id() % 100_000,
            N.fetch_add(1, Ordering::Relaxed)
        );
        let net = Net {
            c: format!("{prefix}{id}-c"),
            s: format!("{prefix}{id}-s"),
        };
        for ns in [&net.c, &net.s] {
            sh(run("ip", &["netns", "add", ns]));
            sh(ip_ns(ns, &["link", "set", "lo", "up"]));
        }
        sh(ip_ns(&net.s, &["addr", "add", "10.0.0.1/32", "dev", "lo"]));
        for (i, rate) in rates.iter().enumerate() {
            net.make_link_at(i, rate);
        }
        net
    }

    /// Create veth pair `i` with its addresses, route and rate limit ([`RATE`]).
    pub fn make_link(&self, i: usize) {
        self.make_link_at(i, RATE);
    }

    /// [`Net::make_link`] shaped to `rate` (tc's units).
    pub fn make_link_at(&self, i: usize, rate: &str) {
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
                "qdisc", "add", "dev", &s, "root", "tbf", "rate", rate, "burst", "20kb", "latency",
                "30ms",
            ],
        ));
    }

    pub fn route(&self, i: usize) {
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
    pub fn rx_bytes(&self, i: usize) -> u64 {
        rx_bytes_in(&self.c, i)
    }

    pub fn ip_c(&self, args: &[&str]) {
        sh(ip_ns(&self.c, args));
    }

    pub fn ip_s(&self, args: &[&str]) {
        sh(ip_ns(&self.s, args));
    }

    /// Run the braid server and an HTTP server serving `data` in the server namespace until
    /// the returned guard is dropped. Returns the HTTP address and the server's public key.
    pub fn serve(
        &self,
        data: Arc<Vec<u8>>,
        agent: braid_crypto::PublicKey,
    ) -> (SocketAddr, braid_crypto::PublicKey, Stop) {
        self.serve_on(SERVER.parse().unwrap(), data, agent)
    }

    /// [`Net::serve`] with the braid server listening on `listen`.
    pub fn serve_on(
        &self,
        listen: SocketAddr,
        data: Arc<Vec<u8>>,
        agent: braid_crypto::PublicKey,
    ) -> (SocketAddr, braid_crypto::PublicKey, Stop) {
        let (web, public, stop, _) = self.serve_with_status(listen, data, agent);
        (web, public, stop)
    }

    /// [`Net::serve_on`], also returning the server's status board.
    pub fn serve_with_status(
        &self,
        listen: SocketAddr,
        data: Arc<Vec<u8>>,
        agent: braid_crypto::PublicKey,
    ) -> (SocketAddr, braid_crypto::PublicKey, Stop, Arc<ServerBoard>) {
        let key = StaticKeypair::generate().unwrap();
        let public = key.public();
        let ((web, board), stop) = spawn_in(&self.s, move |ready| async move {
            let web = http_server(data).await;
            let mut cfg = ServerConfig::new(listen, key, vec![agent]);
            crate::loopback::allow_targets(&mut cfg, &[]);
            let server = Server::bind(cfg).await.unwrap();
            ready.send((web, server.status())).unwrap();
            let _ = server.run().await;
        });
        (web, public, stop, board)
    }

    /// Run `body` in the client namespace on a fresh runtime.
    pub fn client<T, F, Fut>(&self, f: F) -> T
    where
        T: Send + 'static,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = T>,
    {
        on(&self.c, f)
    }
}

/// Bytes received on interface `p<i>` in namespace `ns` (0 if it does not exist).
pub fn rx_bytes_in(ns: &str, i: usize) -> u64 {
    exec_ns(
        ns,
        "cat",
        &[&format!("/sys/class/net/p{i}/statistics/rx_bytes")],
    )
    .ok()
    .and_then(|s| s.trim().parse().ok())
    .unwrap_or(0)
}

/// Run `body` in namespace `ns` on a fresh runtime.
pub fn on<T, F, Fut>(ns: &str, f: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T>,
{
    thread_in(ns, f)
        .join()
        .unwrap_or_else(|_| panic!("the side in {ns} panicked"))
}

/// [`on`] without waiting: `f` runs on a thread of its own, in namespace `ns`, on a fresh
/// runtime; join the handle for its result.
pub fn thread_in<T, F, Fut>(ns: &str, f: F) -> std::thread::JoinHandle<T>
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T>,
{
    let ns = ns.to_string();
    std::thread::spawn(move || {
        braid_testbed::netns::enter(&ns).unwrap();
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f())
    })
}

/// A LAN host behind the client namespace (as behind a router): namespace `<client>-l`
/// with `eth0` 192.168.77.2/24 and a default route to `lan0` 192.168.77.1/24 in the client
/// namespace, which does not forward unless told. Removed on drop.
pub struct Lan {
    pub ns: String,
}

/// The LAN host's address and its gateway's (the client namespace's `lan0`).
pub const LAN_HOST: &str = "192.168.77.2";
pub const LAN_GW: &str = "192.168.77.1";

impl Drop for Lan {
    fn drop(&mut self) {
        let _ = run("ip", &["netns", "del", &self.ns]);
    }
}

impl Net {
    /// Make the LAN behind the client namespace.
    pub fn lan(&self) -> Lan {
        lan_behind(&self.c, format!("{}-l", self.c))
    }

    /// The same LAN (namespace `<server>-l`, [`LAN_HOST`]) behind the server namespace
    /// instead: a host on a private network the server reaches and the client does not.
    pub fn lan_behind_server(&self) -> Lan {
        lan_behind(&self.s, format!("{}-l", self.s))
    }
}

/// A LAN host in a new namespace `ns`, behind `gw_ns` (its `lan0` the gateway).
fn lan_behind(gw_ns: &str, ns: String) -> Lan {
    let lan = Lan { ns };
    let ns = lan.ns.as_str();
    sh(run("ip", &["netns", "add", ns]));
    sh(ip_ns(ns, &["link", "set", "lo", "up"]));
    let veth = [
        "link", "add", "lan0", "type", "veth", "peer", "name", "eth0", "netns", ns,
    ];
    sh(ip_ns(gw_ns, &veth));
    sh(ip_ns(
        gw_ns,
        &["addr", "add", &format!("{LAN_GW}/24"), "dev", "lan0"],
    ));
    sh(ip_ns(gw_ns, &["link", "set", "lan0", "up"]));
    sh(ip_ns(
        ns,
        &["addr", "add", &format!("{LAN_HOST}/24"), "dev", "eth0"],
    ));
    sh(ip_ns(ns, &["link", "set", "eth0", "up"]));
    sh(ip_ns(ns, &["route", "add", "default", "via", LAN_GW]));
    lan
}

/// Runs `f` in namespace `ns`, on a thread with a current-thread runtime of its own, until
/// `f` ends or the returned [`Stop`] drops. `f` hands back a value through its sender once it
/// is ready (an address it bound, a status board): this waits up to 10 s for it.
pub fn spawn_in<T, F, Fut>(ns: &str, f: F) -> (T, Stop)
where
    T: Send + 'static,
    F: FnOnce(std::sync::mpsc::Sender<T>) -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let ns = ns.to_string();
    let t = std::thread::spawn(move || {
        braid_testbed::netns::enter(&ns).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            tokio::select! {
                _ = f(tx) => {}
                _ = stop_rx => {}
            }
        });
    });
    let v = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the task in the namespace did not get ready within 10 s");
    (v, Stop(Some(stop_tx), Some(t)))
}

/// Stops a task started by [`spawn_in`] (and waits for its thread) when dropped.
pub struct Stop(
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

pub fn agent_cfg(
    paths: &[&str],
    key: Arc<StaticKeypair>,
    server_pub: braid_crypto::PublicKey,
) -> AgentConfig {
    agent_cfg_to(SERVER.parse().unwrap(), paths, key, server_pub)
}

/// The agent's paths from `--path` specs (`NAME=IFACE_OR_IP[,options]`), with their policies.
pub fn agent_paths(specs: &[&str]) -> Vec<AgentPath> {
    specs
        .iter()
        .map(|p| {
            let s = parse_path_spec(p).unwrap();
            AgentPath {
                policy: s.policy,
                ..AgentPath::new(s.name, s.bind)
            }
        })
        .collect()
}

/// [`agent_cfg`] for the braid server at `server`.
pub fn agent_cfg_to(
    server: SocketAddr,
    paths: &[&str],
    key: Arc<StaticKeypair>,
    server_pub: braid_crypto::PublicKey,
) -> AgentConfig {
    let mut cfg = AgentConfig::new(server, server_pub, key, agent_paths(paths));
    cfg.socks = Some("127.0.0.1:0".parse().unwrap());
    cfg
}

/// What a download saw.
#[derive(Debug)]
pub struct Outcome {
    pub bytes: Vec<u8>,
    /// Longest gap between two reads, and when it ended (since the start).
    pub stall: Duration,
    pub stall_end: Duration,
    pub took: Duration,
    /// Every gap between two reads longer than 10 ms: (when it ended, since the start; its
    /// length).
    pub gaps: Vec<(Duration, Duration)>,
}

impl Outcome {
    /// The longest gap between two reads that ended within `window` (since the start).
    pub fn stall_within(&self, window: std::ops::Range<Duration>) -> Duration {
        self.gaps
            .iter()
            .filter(|(end, _)| window.contains(end))
            .map(|g| g.1)
            .max()
            .unwrap_or_default()
    }
}

/// GET /file from `web` through the SOCKS5 port `socks` (the server resolves and connects).
pub async fn download(socks: SocketAddr, web: SocketAddr) -> Outcome {
    let t0 = Instant::now();
    let mut s = crate::socks5::open(socks, web).await;
    s.write_all(b"GET /file HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut all = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let (mut last, mut stall, mut stall_end) = (Instant::now(), Duration::ZERO, Duration::ZERO);
    let mut gaps = Vec::new();
    loop {
        let n = tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf))
            .await
            .expect("the download stalled for 30 s")
            .unwrap();
        if n == 0 {
            break;
        }
        let now = Instant::now();
        if now - last > Duration::from_millis(10) {
            gaps.push((now - t0, now - last));
        }
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
        gaps,
    }
}

/// Start an agent (in the client namespace), wait for its session and start a download.
pub async fn start(cfg: AgentConfig, web: SocketAddr) -> (Agent, tokio::task::JoinHandle<Outcome>) {
    let agent = Agent::start(cfg).await.unwrap();
    let mut agent = agent;
    assert!(
        agent.wait_established(Duration::from_secs(5)).await,
        "no session"
    );
    let dl = tokio::spawn(download(agent.socks.unwrap(), web));
    (agent, dl)
}

/// [`start`], with the download started once every path of `paths` is up (within 3 s).
pub async fn start_when_up(
    cfg: AgentConfig,
    web: SocketAddr,
    paths: &[&str],
) -> (Agent, tokio::task::JoinHandle<Outcome>) {
    let mut agent = Agent::start(cfg).await.unwrap();
    assert!(
        agent.wait_established(Duration::from_secs(3)).await,
        "no session"
    );
    for name in paths {
        wait(&mut agent, name, PathStatus::Up, 3000).await;
    }
    let dl = tokio::spawn(download(agent.socks.unwrap(), web));
    (agent, dl)
}

/// Wait for path `name` to reach `st`; returns how long it took.
pub async fn wait(agent: &mut Agent, name: &str, st: PathStatus, limit_ms: u64) -> Duration {
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

pub fn sleep(ms: u64) -> tokio::time::Sleep {
    tokio::time::sleep(Duration::from_millis(ms))
}

pub fn check(name: &str, o: &Outcome, data: &[u8], max_stall: Duration) {
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

pub struct Setup {
    pub net: Arc<Net>,
    pub data: Arc<Vec<u8>>,
    pub web: SocketAddr,
    pub server_pub: braid_crypto::PublicKey,
    pub key: Arc<StaticKeypair>,
    /// The braid server's status.
    pub board: Arc<ServerBoard>,
    _stop: Stop,
}

pub fn setup(size: usize) -> Setup {
    setup_in(Net::new(), size)
}

/// [`setup`] on `net` (e.g. [`Net::with_prefix`]).
pub fn setup_in(net: Net, size: usize) -> Setup {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("BRAID_TEST_LOG"))
        .with_test_writer()
        .try_init();
    let net = Arc::new(net);
    let data = Arc::new(body(size));
    let key = Arc::new(StaticKeypair::generate().unwrap());
    let (web, server_pub, stop, board) =
        net.serve_with_status(SERVER.parse().unwrap(), data.clone(), key.public());
    Setup {
        net,
        data,
        web,
        server_pub,
        key,
        board,
        _stop: stop,
    }
}

/// nftables in namespace `ns`: drop what `rule` matches (e.g. `oifname "p1" meta l4proto
/// udp`) in chain `hook` (`input` or `output`); each call adds one rule to table
/// `braidtest`. Returns the rule's handle, for [`Net::nft_del`].
pub fn nft_drop(ns: &str, hook: &str, rule: &str) -> String {
    let _ = exec_ns(ns, "nft", &["add", "table", "inet", "braidtest"]);
    let chain = format!("{{ type filter hook {hook} priority 0 ; }}");
    sh(exec_ns(
        ns,
        "nft",
        &["add", "chain", "inet", "braidtest", hook, &chain],
    ));
    let mut args = vec!["-e", "-a", "add", "rule", "inet", "braidtest", hook];
    args.extend(rule.split_whitespace());
    args.push("counter");
    args.push("drop");
    let out = exec_ns(ns, "nft", &args).unwrap_or_else(|e| panic!("{e}"));
    let handle = out
        .split("# handle ")
        .nth(1)
        .and_then(|h| h.split_whitespace().next())
        .unwrap_or_else(|| panic!("no rule handle in {out:?}"))
        .to_string();
    format!("{hook} {handle}")
}

/// Remove a rule that [`nft_drop`] added.
pub fn nft_del(ns: &str, rule: &str) {
    let mut it = rule.split(' ');
    let (hook, handle) = (it.next().unwrap(), it.next().unwrap());
    sh(exec_ns(
        ns,
        "nft",
        &[
            "delete",
            "rule",
            "inet",
            "braidtest",
            hook,
            "handle",
            handle,
        ],
    ));
}

/// Packets the rule dropped so far (from its counter).
pub fn nft_dropped(ns: &str, rule: &str) -> u64 {
    let hook = rule.split(' ').next().unwrap();
    let handle = rule.split(' ').nth(1).unwrap();
    let out = exec_ns(
        ns,
        "nft",
        &["-a", "list", "chain", "inet", "braidtest", hook],
    )
    .unwrap();
    out.lines()
        .find(|l| l.ends_with(&format!("# handle {handle}")))
        .and_then(|l| l.split("counter packets ").nth(1))
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
