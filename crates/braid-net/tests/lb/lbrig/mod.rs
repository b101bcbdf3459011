//! The rig of the load-balancer tests (issue 24, item 3): three `braid server` processes in
//! three namespaces behind an nftables UDP/TCP load balancer in a fourth, and in-process
//! agents in a fifth, each agent with two paths (two links to the balancer).
//!
//! ```text
//!  lbN-a (agents)            lbN-b (balancer, router, web)          lbN-s0..s2
//!  lba0 10.71.1.1 ------- lbb0 10.71.1.2       lbs0 10.72.0.1 ------ 10.72.0.2 braid server
//!  lba1 10.71.2.1 ------- lbb1 10.71.2.2       lbs1 10.72.1.1 ------ 10.72.1.2 braid server
//!                          web 10.73.0.1 (lo)  lbs2 10.72.2.1 ------ 10.72.2.2 braid server
//! ```
//!
//! The service address 10.70.0.1:4433 is no machine's: the balancer DNATs what comes to it
//! to a server chosen by a hash of the source address and port (`jhash ip saddr . udp
//! sport mod 3`), and the answers go back through it (conntrack undoes the DNAT). A health
//! checker (a TCP connect to each server's port every 100 ms, what a cloud balancer does)
//! maps a dead server's hash bucket to a live one. Everything is named `lb...` so that it
//! cannot meet other tests' namespaces and links.
#![allow(dead_code)]

use braid_crypto::{PublicKey, StaticKeypair};
use braid_net::agent::{AgentConfig, AgentPath};
use braid_net::policy::parse_path_spec;
use braid_testbed::cmd::{exec_ns, ip_ns, run, sysctl_ns};
use braid_testbed::procs::Helper;
use braid_testkit::http;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The service address every agent is given.
pub const VIP: &str = "10.70.0.1:4433";
/// The web server the downloads come from (on the balancer's loopback device).
pub const WEB: &str = "10.73.0.1:8080";
pub const SERVERS: usize = 3;

/// Server `k`'s own address.
pub fn server_addr(k: usize) -> SocketAddr {
    format!("10.72.{k}.2:4433").parse().unwrap()
}

fn must<T, E: std::fmt::Display>(r: Result<T, E>, what: &str) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// The namespaces, the servers and the balancer; all removed on drop.
pub struct Lb {
    pub a: String,
    pub b: String,
    pub s: Vec<String>,
    pub dir: Dir,
    pub bin: PathBuf,
    pub servers: Vec<Option<Helper>>,
    pub server_pub: PublicKey,
    pub agent_keys: Vec<Arc<StaticKeypair>>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Drop for Lb {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for s in self.servers.iter_mut().flatten() {
            s.stop();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        for ns in self.s.iter().chain([&self.a, &self.b]) {
            let _ = run("ip", &["netns", "del", ns]);
        }
    }
}

/// The nftables ruleset of the balancer: what comes to the service address goes to the
/// server of its hash bucket; `buckets[i]` is bucket i's server.
pub fn ruleset(table: &str, buckets: &[usize]) -> String {
    let map = |_: &str| {
        buckets
            .iter()
            .enumerate()
            .map(|(i, k)| format!("{i} : {}", server_addr(*k).ip()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let n = buckets.len();
    let vip: SocketAddr = VIP.parse().unwrap();
    let (ip, port) = (vip.ip(), vip.port());
    format!(
        "table ip {table} {{\n\
         \x20 chain pre {{\n\
         \x20   type nat hook prerouting priority dstnat; policy accept;\n\
         \x20   ip daddr {ip} udp dport {port} dnat to jhash ip saddr . udp sport mod {n} map {{ {} }}\n\
         \x20   ip daddr {ip} tcp dport {port} dnat to jhash ip saddr . tcp sport mod {n} map {{ {} }}\n\
         \x20 }}\n\
         }}\n",
        map("udp"),
        map("tcp")
    )
}

/// A balancer with source-IP affinity (what cloud balancers offer as "client IP
/// affinity"): the agents' link 1 goes to server 0, link 2 to server 1, whatever the port.
/// Not enough for multipath: each path has its own source address.
pub fn ruleset_by_source_ip(table: &str) -> String {
    let vip: SocketAddr = VIP.parse().unwrap();
    let (ip, port) = (vip.ip(), vip.port());
    let (s0, s1) = (server_addr(0).ip(), server_addr(1).ip());
    let map = format!("10.71.1.1 : {s0}, 10.71.2.1 : {s1}");
    format!(
        "table ip {table} {{\n\
         \x20 chain pre {{\n\
         \x20   type nat hook prerouting priority dstnat; policy accept;\n\
         \x20   ip daddr {ip} udp dport {port} dnat to ip saddr map {{ {map} }}\n\
         \x20   ip daddr {ip} tcp dport {port} dnat to ip saddr map {{ {map} }}\n\
         \x20 }}\n\
         }}\n"
    )
}

/// Load `rules` into namespace `ns` in one transaction (the table replaced whole).
fn nft_load(ns: &str, table: &str, rules: &str) {
    let file = std::env::temp_dir().join(format!("{table}-{}.nft", std::process::id()));
    // Delete-if-present, then the new table: atomic for packets.
    let text = format!("table ip {table}\ndelete table ip {table}\n{rules}");
    must(std::fs::write(&file, text), "writing the ruleset");
    let r = exec_ns(ns, "nft", &["-f", &file.display().to_string()]);
    let _ = std::fs::remove_file(&file);
    must(r, "nft -f");
}

/// A directory of the rig's files (keys, sockets, logs), removed on drop.
pub struct Dir(PathBuf);

impl Dir {
    fn new(id: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("braid-{id}"));
        let _ = std::fs::remove_dir_all(&p);
        must(std::fs::create_dir_all(&p), "temp dir");
        Dir(p)
    }

    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        if std::env::var_os("BRAID_KEEP_LOGS").is_none() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// The options of the rig.
pub struct Options {
    /// Servers run with `--unicast` (their own address).
    pub unicast: bool,
    pub agents: usize,
    /// Source-IP affinity ([`ruleset_by_source_ip`]) instead of the hash of address and
    /// port, and no health checker.
    pub by_source_ip: bool,
}

impl Lb {
    pub fn new(o: &Options) -> Lb {
        static N: AtomicU32 = AtomicU32::new(0);
        let id = format!(
            "lb{}{}",
            std::process::id() % 100_000,
            N.fetch_add(1, Ordering::Relaxed)
        );
        let bin = braid_testbed::runner::find_braid()
            .expect("the braid binary (cargo build --profile ci -p braid, or set BRAID_BIN)");
        let dir = Dir::new(&id);
        let mut lb = Lb {
            a: format!("{id}-a"),
            b: format!("{id}-b"),
            s: (0..SERVERS).map(|k| format!("{id}-s{k}")).collect(),
            dir,
            bin,
            servers: Vec::new(),
            server_pub: PublicKey([0; 32]),
            agent_keys: Vec::new(),
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
        };
        for ns in lb.s.iter().chain([&lb.a, &lb.b]) {
            must(run("ip", &["netns", "add", ns]), "ip netns add");
            must(ip_ns(ns, &["link", "set", "lo", "up"]), "lo up");
        }
        lb.links();
        let rules = if o.by_source_ip {
            ruleset_by_source_ip(&lb.table())
        } else {
            ruleset(&lb.table(), &[0, 1, 2])
        };
        nft_load(&lb.b, &lb.table(), &rules);
        lb.keys(o.agents);
        for k in 0..SERVERS {
            let h = lb.spawn_server(k, o.unicast);
            lb.servers.push(Some(h));
        }
        lb.threads.push(web(&lb.b, lb.stop.clone()));
        lb.wait_servers();
        // A control for docs/results.md: the balancer without its health check, as a
        // cloud balancer is until its checks take a dead server out.
        let checked = std::env::var_os("BRAID_LB_NO_HEALTH_CHECK").is_none();
        if !o.by_source_ip && checked {
            lb.threads
                .push(health_checker(lb.b.clone(), lb.table(), lb.stop.clone()));
        }
        lb
    }

    pub fn table(&self) -> String {
        self.b.replace('-', "_")
    }

    fn veth(&self, (x, xns, xaddr): (&str, &str, &str), (y, yns, yaddr): (&str, &str, &str)) {
        must(
            run(
                "ip",
                &[
                    "link", "add", x, "netns", xns, "type", "veth", "peer", "name", y, "netns", yns,
                ],
            ),
            "veth",
        );
        for (dev, ns, addr) in [(x, xns, xaddr), (y, yns, yaddr)] {
            must(ip_ns(ns, &["addr", "add", addr, "dev", dev]), "addr");
            must(ip_ns(ns, &["link", "set", dev, "up"]), "link up");
        }
    }

    fn links(&self) {
        let (a, b) = (self.a.as_str(), self.b.as_str());
        for i in 0..2 {
            let (x, y) = (format!("lba{i}"), format!("lbb{i}"));
            let n = i + 1;
            self.veth(
                (&x, a, &format!("10.71.{n}.1/24")),
                (&y, b, &format!("10.71.{n}.2/24")),
            );
            let gw = format!("10.71.{n}.2");
            let metric = n.to_string();
            must(
                ip_ns(
                    a,
                    &[
                        "route", "add", "default", "via", &gw, "dev", &x, "metric", &metric,
                    ],
                ),
                "agent route",
            );
        }
        for (k, s) in self.s.iter().enumerate() {
            let (x, y) = (format!("lbs{k}"), format!("lbs{k}"));
            self.veth(
                (&x, b, &format!("10.72.{k}.1/24")),
                (&y, s, &format!("10.72.{k}.2/24")),
            );
            let gw = format!("10.72.{k}.1");
            must(
                ip_ns(s, &["route", "add", "default", "via", &gw]),
                "server route",
            );
        }
        must(
            ip_ns(b, &["addr", "add", "10.73.0.1/32", "dev", "lo"]),
            "web address",
        );
        must(
            sysctl_ns(b, "net.ipv4.ip_forward", "1"),
            "forwarding on the balancer",
        );
    }

    fn keys(&mut self, agents: usize) {
        let prefix = self.dir.path().join("server");
        must(braid_crypto::write_keypair(&prefix), "server key");
        self.server_pub = must(
            braid_crypto::read_public_key(self.dir.path().join("server.pub")),
            "server.pub",
        );
        self.agent_keys = (0..agents)
            .map(|_| Arc::new(StaticKeypair::generate().unwrap()))
            .collect();
        let list: String = self
            .agent_keys
            .iter()
            .map(|k| format!("{}\n", k.public().to_base64()))
            .collect();
        must(
            std::fs::write(self.dir.path().join("agents.pub"), list),
            "authorized",
        );
    }

    pub fn path(&self, f: &str) -> String {
        self.dir.path().join(f).display().to_string()
    }

    fn spawn_server(&self, k: usize, unicast: bool) -> Helper {
        let own = server_addr(k).to_string();
        let mut args: Vec<String> = [
            "server",
            "--listen",
            &own,
            "--key",
            &self.path("server.key"),
            "--authorized",
            &self.path("agents.pub"),
            "--state",
            &self.path(&format!("s{k}.state")),
            "--control",
            &self.path(&format!("s{k}.sock")),
            "--threads",
            "1",
            "--log-level",
            "info",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if unicast {
            args.extend(["--unicast".to_string(), own]);
        }
        must(
            Helper::spawn(
                &format!("braid server {k}"),
                &self.s[k],
                &self.bin,
                &args,
                &self.dir.path().join(format!("s{k}.log")),
            ),
            "braid server",
        )
    }

    /// Wait until every server answers `braid status` (it listens then).
    fn wait_servers(&self) {
        let t = Instant::now();
        let bin = self.bin.display().to_string();
        for k in 0..SERVERS {
            let sock = self.path(&format!("s{k}.sock"));
            while run(&bin, &["status", "--json", "--control", &sock]).is_err() {
                assert!(
                    t.elapsed() < Duration::from_secs(10),
                    "server {k} did not start: {}",
                    self.servers[k].as_ref().unwrap().log_tail()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// `braid status --json` of server `k`.
    pub fn status(&self, k: usize) -> serde_json::Value {
        let out = must(
            run(
                &self.bin.display().to_string(),
                &[
                    "status",
                    "--json",
                    "--control",
                    &self.path(&format!("s{k}.sock")),
                ],
            ),
            "braid status",
        );
        must(serde_json::from_str(&out), "braid status --json")
    }

    /// SIGKILL server `k` (a crash: no CLOSE to its agents). Returns when it is gone.
    pub fn kill(&mut self, k: usize) -> Instant {
        let mut h = self.servers[k].take().expect("server runs");
        let pid = h.pid().expect("pid") as libc::pid_t;
        // SAFETY: our own child, not yet reaped.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
        let t = Instant::now();
        while h.exited().is_none() {
            std::thread::sleep(Duration::from_millis(1));
        }
        t
    }

    pub fn server_log(&self, k: usize) -> String {
        std::fs::read_to_string(self.path(&format!("s{k}.log"))).unwrap_or_default()
    }

    /// Agent `i`'s configuration: two paths, one per link, to the service address.
    pub fn agent_cfg(&self, i: usize) -> AgentConfig {
        let paths = ["a=lba0", "b=lba1"]
            .iter()
            .map(|p| {
                let s = parse_path_spec(p).unwrap();
                AgentPath::new(s.name, s.bind)
            })
            .collect();
        let mut cfg = AgentConfig::new(
            VIP.parse().unwrap(),
            self.server_pub,
            self.agent_keys[i].clone(),
            paths,
        );
        cfg.socks = Some("127.0.0.1:0".parse().unwrap());
        cfg
    }
}

/// The health checker: every 100 ms a TCP connect to each server's port (braid's TCP
/// fallback listens there); a server that refuses or times out loses its hash bucket to
/// the next live server, one that answers again gets it back.
fn health_checker(ns: String, table: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        braid_testbed::netns::enter(&ns).unwrap();
        let mut live = vec![true; SERVERS];
        while !stop.load(Ordering::SeqCst) {
            let now: Vec<bool> = (0..SERVERS)
                .map(|k| {
                    std::net::TcpStream::connect_timeout(
                        &server_addr(k),
                        Duration::from_millis(100),
                    )
                    .is_ok()
                })
                .collect();
            if now != live && now.iter().any(|x| *x) {
                let buckets: Vec<usize> = (0..SERVERS)
                    .map(|k| {
                        (0..SERVERS)
                            .map(|d| (k + d) % SERVERS)
                            .find(|j| now[*j])
                            .unwrap()
                    })
                    .collect();
                nft_load(&ns, &table, &ruleset(&table, &buckets));
                eprintln!("health check: live {now:?}, buckets {buckets:?}");
                live = now;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    })
}

/// The web server on [`WEB`]: `GET /<n>` answers n bytes of [`crate::common::body`].
fn web(ns: &str, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    let t = crate::nsrig::thread_in(ns, move || async move {
        let l = tokio::net::TcpListener::bind(WEB).await.unwrap();
        tx.send(()).unwrap();
        let big = Arc::new(crate::common::body(8 << 20));
        let serve = http::serve(l, move |mut s, head| {
            let big = big.clone();
            async move {
                let n = http::requested_len(&head).min(big.len());
                http::respond(&mut s, &big[..n]).await
            }
        });
        let stopped = async {
            while !stop.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        };
        tokio::select! {
            _ = serve => {}
            _ = stopped => {}
        }
    });
    rx.recv_timeout(Duration::from_secs(5)).expect("web server");
    t
}

/// What a GET through an agent's SOCKS5 port saw.
pub struct Got {
    pub body: Vec<u8>,
    /// When the first byte of the answer arrived.
    pub first_byte: Option<Instant>,
}

/// `GET /<n>` from [`WEB`] through SOCKS5 port `socks`; an error says which step failed.
pub async fn get(socks: SocketAddr, n: usize) -> Result<Got, String> {
    let e = |what: &'static str| move |x: std::io::Error| format!("{what}: {x}");
    let mut s = TcpStream::connect(socks).await.map_err(e("connect"))?;
    s.write_all(&[5, 1, 0]).await.map_err(e("greeting"))?;
    let mut r = [0u8; 2];
    s.read_exact(&mut r).await.map_err(e("greeting reply"))?;
    let w: std::net::SocketAddrV4 = WEB.parse().unwrap();
    let mut req = vec![5, 1, 0, 1];
    req.extend_from_slice(&w.ip().octets());
    req.extend_from_slice(&w.port().to_be_bytes());
    s.write_all(&req).await.map_err(e("connect request"))?;
    let mut rep = [0u8; 10];
    s.read_exact(&mut rep).await.map_err(e("connect reply"))?;
    if rep[1] != 0 {
        return Err(format!("SOCKS5 CONNECT refused with code {}", rep[1]));
    }
    s.write_all(format!("GET /{n} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .map_err(e("request"))?;
    let mut all = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut first_byte = None;
    loop {
        let k = s.read(&mut buf).await.map_err(e("read"))?;
        if k == 0 {
            break;
        }
        first_byte.get_or_insert_with(Instant::now);
        all.extend_from_slice(&buf[..k]);
    }
    let head = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no HTTP answer")?
        + 4;
    Ok(Got {
        body: all.split_off(head),
        first_byte,
    })
}
