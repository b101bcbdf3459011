//! The rig of the TUN-mode tests: the testbed's three namespaces and emulated links, a
//! `braid server` in the server namespace, `braid agent --tun` in the client namespace, and
//! destinations (HTTP, a UDP responder and a UDP streamer) on addresses that only the server
//! namespace has: 10.99.0.1 and fd00:99::1 sit on the server's loopback, and the client
//! namespace has no route to them except the tunnel. An optional LAN namespace behind the
//! client namespace plays a host of a LAN carried in router mode.
#![allow(dead_code)]

mod faults;
mod load;
mod nat64;
mod v6;
pub use load::*;
pub use nat64::*;
pub use v6::*;

use braid_testbed::cmd::{exec_ns, ip_ns, run, sysctl_ns};
use braid_testbed::l2emu::{EmuConfig, LinkEmu};
use braid_testbed::netns::{enter, Topology};
use braid_testbed::procs::Helper;
use braid_testbed::runner::find_braid;
use sha2::{Digest, Sha256};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{
    IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream, UdpSocket,
};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const DEST4: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
pub const DEST6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x99, 0, 0, 0, 0, 0, 1);
pub const HTTP_PORT: u16 = 8080;
pub const UDP_PORT: u16 = 5353;
/// The upload sink on [`DEST4`]: reads and counts every byte ([`Rig::uploaded`]).
pub const SINK_PORT: u16 = 9000;
pub const BRAID_PORT: u16 = 4433;
/// The agent's SOCKS5 port in the client namespace ([`Rig::start_socks_agent`]).
pub const SOCKS_PORT: u16 = 1080;
pub const TUN: &str = "brt0";
/// The LAN namespace's address and the client namespace's address on the LAN.
pub const LAN_HOST: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 2);
pub const LAN_GW: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 1);

/// One kernel-shaped link ([`Rig::new_shaped`]): each direction's rate in Mbit/s and the
/// most its queue holds, in ms at that rate.
#[derive(Debug, Clone, Copy)]
pub struct Shaped {
    pub down_mbit: f64,
    pub up_mbit: f64,
    pub queue_ms: u64,
}

/// Issue 23's home links: a WiFi-like link of 16/8 Mbit/s down/up and an LTE-like link of
/// 8/4 Mbit/s, each with a home router's 80 ms queue.
pub const HOME_WIFI: Shaped = Shaped {
    down_mbit: 16.0,
    up_mbit: 8.0,
    queue_ms: 80,
};
pub const HOME_LTE: Shaped = Shaped {
    down_mbit: 8.0,
    up_mbit: 4.0,
    queue_ms: 80,
};

/// `tc qdisc add dev DEV root tbf rate Rmbit burst 20kb latency Qms` in namespace `ns`: a
/// home router's queue of `queue_ms` at that rate.
fn tbf(ns: &str, dev: &str, mbit: f64, queue_ms: u64) {
    let (rate, lat) = (format!("{mbit}mbit"), format!("{queue_ms}ms"));
    let args = [
        "qdisc", "add", "dev", dev, "root", "tbf", "rate", &rate, "burst", "20kb", "latency", &lat,
    ];
    must(exec_ns(ns, "tc", &args), "tbf");
}

/// One emulated link: rate in Mbit/s and one-way delay in ms.
pub struct Link {
    pub mbit: f64,
    pub delay_ms: u64,
    pub loss: f64,
}

pub struct Rig {
    pub topo: Topology,
    emus: Vec<LinkEmu>,
    pub dir: tempfile::TempDir,
    pub bin: PathBuf,
    server: Helper,
    pub agent: Option<Helper>,
    pub lan: Option<String>,
    /// Start agents without a server (direct mode).
    pub serverless: bool,
    stop: Arc<AtomicBool>,
    pub links: Vec<Link>,
    /// Bytes the upload sink has received so far, all connections together.
    pub uploaded: Arc<AtomicU64>,
    /// The congestion controller of the destinations' TCP sockets and of the bulk flows'
    /// (`None`: the namespaces' default).
    pub host_cc: Option<&'static str>,
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(mut a) = self.agent.take() {
            a.stop();
        }
        self.server.stop();
        if let Some(l) = self.lan.take() {
            let _ = run("ip", &["netns", "del", &l]);
        }
    }
}

/// `braid server` in namespace `ns`, listening on `listen`, with the rig's keys and its log
/// in `dir`; its resolver is the UDP responder (DNS queries end there).
fn spawn_server(ns: &str, bin: &Path, dir: &Path, listen: &str) -> Helper {
    let p = |f: &str| dir.join(f).display().to_string();
    let args: Vec<String> = [
        "server",
        "--listen",
        listen,
        "--key",
        &p("server.key"),
        "--authorized",
        &p("agent.pub"),
        "--control",
        &p("server.sock"),
        "--resolver",
        &format!("{DEST4}:{UDP_PORT}"),
        "--log-level",
        "info",
        // The destinations are on the server's own loopback, which its egress policy
        // refuses by default.
        "--egress-allow",
        &DEST4.to_string(),
        "--egress-allow",
        &DEST6.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let log = dir.join("server.log");
    must(
        Helper::spawn("braid server", ns, bin, &args, &log),
        &format!("braid server on {listen}"),
    )
}

fn must<T, E: std::fmt::Display>(r: Result<T, E>, what: &str) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e}"))
}

impl Rig {
    /// Topology, emulators, destinations and the braid server; the agent is started with
    /// [`Rig::start_agent`].
    pub fn new(tag: &str, links: Vec<Link>, with_lan: bool) -> Rig {
        let id = format!("{tag}{:x}", std::process::id() % 0xfffff);
        let topo = must(Topology::create(&id, links.len()), "topology");
        let emus = links
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let text = format!(
                    "name = \"t\"\n[[path]]\nname = \"l{i}\"\nrate = \"{}Mbit\"\ndelay = \"{}ms\"\n\
                     loss = {}\n[workload]\nsize = \"1MB\"\n[[variant]]\nname = \"v\"\n",
                    l.mbit, l.delay_ms, l.loss
                );
                let scn = braid_sim::Scenario::from_toml_str(&text, Path::new("tun.toml"))
                    .expect("link scenario");
                let p = &topo.paths[i];
                must(
                    LinkEmu::start(EmuConfig {
                        name: format!("l{i}"),
                        ns: topo.emu.clone(),
                        client_dev: p.emu_client_if.clone(),
                        server_dev: p.emu_server_if.clone(),
                        paths: vec![scn.paths[0].clone()],
                        seed: 11 + i as u64,
                    }),
                    "emulator",
                )
            })
            .collect();
        Rig::assemble(topo, emus, links, with_lan, None)
    }

    /// The same rig with kernel links instead of the userspace emulator, as a home router
    /// has them: each path's two veths in the emulator namespace joined by a bridge, and a
    /// token bucket (tbf) on the egress of each direction with the path's rate and queue.
    /// `links` (for [`Rig::sum_bps`]) are the down rates. The destinations' TCP and the
    /// bulk flows' ([`Rig::measure_load`]) is CUBIC, a typical host's, whatever this machine's
    /// default is ([`Rig::host_cc`]).
    pub fn new_shaped(tag: &str, shaped: &[Shaped]) -> Rig {
        let id = format!("{tag}{:x}", std::process::id() % 0xfffff);
        let topo = must(Topology::create(&id, shaped.len()), "topology");
        for (i, (p, s)) in topo.paths.iter().zip(shaped).enumerate() {
            let br = format!("br{i}");
            let e = &topo.emu;
            must(ip_ns(e, &["link", "add", &br, "type", "bridge"]), "bridge");
            for dev in [&p.emu_client_if, &p.emu_server_if] {
                must(
                    ip_ns(e, &["link", "set", dev, "master", &br]),
                    "bridge port",
                );
            }
            must(ip_ns(e, &["link", "set", &br, "up"]), "bridge up");
            // Towards the client: the down rate; towards the server: the up rate.
            for (dev, mbit) in [
                (&p.emu_client_if, s.down_mbit),
                (&p.emu_server_if, s.up_mbit),
            ] {
                tbf(e, dev, mbit, s.queue_ms);
            }
        }
        let links = shaped
            .iter()
            .map(|s| Link {
                mbit: s.down_mbit,
                delay_ms: 0,
                loss: 0.0,
            })
            .collect();
        Rig::assemble(topo, Vec::new(), links, false, Some("cubic"))
    }

    fn assemble(
        topo: Topology,
        emus: Vec<LinkEmu>,
        links: Vec<Link>,
        with_lan: bool,
        host_cc: Option<&'static str>,
    ) -> Rig {
        let bin = find_braid().expect("the braid binary (cargo build -p braid)");
        // The destinations: on the server's loopback, IPv6 on for it alone.
        must(
            sysctl_ns(&topo.server, "net.ipv6.conf.lo.disable_ipv6", "0"),
            "sysctl",
        );
        must(
            ip_ns(&topo.server, &["addr", "add", "10.99.0.1/32", "dev", "lo"]),
            "dest addr",
        );
        must(
            ip_ns(
                &topo.server,
                &["-6", "addr", "add", "fd00:99::1/128", "dev", "lo", "nodad"],
            ),
            "dest addr v6",
        );
        // New interfaces of the client namespace (the TUN device) get IPv6.
        must(
            sysctl_ns(&topo.client, "net.ipv6.conf.default.disable_ipv6", "0"),
            "sysctl",
        );
        let stop = Arc::new(AtomicBool::new(false));
        for a in [IpAddr::V4(DEST4), IpAddr::V6(DEST6)] {
            spawn_in(&topo.server, {
                let stop = stop.clone();
                move || http_server(SocketAddr::new(a, HTTP_PORT), host_cc, stop)
            });
            spawn_in(&topo.server, {
                let stop = stop.clone();
                move || udp_responder(SocketAddr::new(a, UDP_PORT), stop)
            });
        }
        let uploaded = Arc::new(AtomicU64::new(0));
        spawn_in(&topo.server, {
            let (stop, n) = (stop.clone(), uploaded.clone());
            move || {
                sink(
                    SocketAddr::new(IpAddr::V4(DEST4), SINK_PORT),
                    host_cc,
                    n,
                    stop,
                )
            }
        });
        let dir = tempfile::tempdir().expect("temp dir");
        let binstr = bin.display().to_string();
        for who in ["server", "agent"] {
            let prefix = dir.path().join(who).display().to_string();
            must(run(&binstr, &["keygen", "--out", &prefix]), "keygen");
        }
        let listen = format!("0.0.0.0:{BRAID_PORT}");
        let server = spawn_server(&topo.server, &bin, dir.path(), &listen);
        let lan = with_lan.then(|| make_lan(&topo));
        Rig {
            topo,
            emus,
            dir,
            bin,
            server,
            agent: None,
            lan,
            serverless: false,
            stop,
            links,
            uploaded,
            host_cc,
        }
    }

    pub fn path(&self, f: &str) -> String {
        self.dir.path().join(f).display().to_string()
    }

    /// Sum of the links' rates, bit/s.
    pub fn sum_bps(&self) -> f64 {
        self.links.iter().map(|l| l.mbit * 1e6).sum()
    }

    /// Starts `braid agent --tun` with `extra` arguments and waits until a small download
    /// through the tunnel works.
    /// One more UDP responder in the server namespace (the destinations' side), at `at`;
    /// it stops with the rig.
    pub fn udp_responder_at(&self, at: SocketAddr) {
        let stop = self.stop.clone();
        spawn_in(&self.topo.server, move || udp_responder(at, stop));
    }

    pub fn start_agent(&mut self, extra: &[&str]) {
        let mut args = vec!["--tun", TUN];
        args.extend_from_slice(extra);
        self.launch_agent(&args);
        let c = self.topo.client.clone();
        self.wait_download(&c);
    }

    /// Starts `braid agent` with its paths, keys and control socket, and `extra`.
    pub fn launch_agent(&mut self, extra: &[&str]) {
        self.launch_agent_paths(extra, true)
    }

    /// [`Rig::launch_agent`], with a `--path` per link's IPv4 address if `link_paths`
    /// (else `extra` gives the paths).
    pub fn launch_agent_paths(&mut self, extra: &[&str], link_paths: bool) {
        let mut args: Vec<String> = [
            "agent",
            "--control",
            &self.path("agent.sock"),
            "--log-level",
            "info",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if !self.serverless {
            args.extend([
                "--server".to_string(),
                format!("10.0.0.1:{BRAID_PORT}"),
                "--server-pub".to_string(),
                self.path("server.pub"),
                "--key".to_string(),
                self.path("agent.key"),
            ]);
        }
        for (i, p) in self.topo.paths.iter().enumerate().filter(|_| link_paths) {
            args.push("--path".into());
            args.push(format!("l{i}={}", p.client_ip));
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let log = self.dir.path().join("agent.log");
        let a = must(
            Helper::spawn("braid agent", &self.topo.client, &self.bin, &args, &log),
            "braid agent",
        );
        self.agent = Some(a);
    }

    /// Starts `braid agent --socks 127.0.0.1:1080` with `extra` arguments and waits until a
    /// small download through the SOCKS5 port works; returns the port's address.
    pub fn start_socks_agent(&mut self, extra: &[&str]) -> SocketAddrV4 {
        let at = SocketAddrV4::new(Ipv4Addr::LOCALHOST, SOCKS_PORT);
        let a = at.to_string();
        let mut args = vec!["--socks", &a];
        args.extend_from_slice(extra);
        self.launch_agent(&args);
        let c = self.topo.client.clone();
        self.wait_ready(&c, Some(&a));
        at
    }

    /// Without braid: routes [`DEST4`] in the client namespace straight over path `i`'s
    /// link (the server namespace answers for it on every link), as one plain link.
    pub fn route_dest_over(&self, i: usize) {
        let p = &self.topo.paths[i];
        let src = p.client_ip.to_string();
        let args = [
            "route",
            "add",
            "10.99.0.1/32",
            "dev",
            &p.client_if,
            "src",
            &src,
        ];
        must(ip_ns(&self.topo.client, &args), "route to the destination");
    }

    /// Waits until a small download from namespace `ns` works (20 s at most).
    pub fn wait_download(&mut self, ns: &str) {
        self.wait_ready(ns, None)
    }

    /// Waits until a small download from namespace `ns`, through the SOCKS5 proxy `socks`
    /// if given, works (20 s at most).
    pub fn wait_ready(&mut self, ns: &str, socks: Option<&str>) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let url = format!("http://{DEST4}:{HTTP_PORT}/1000");
        loop {
            let got = match socks {
                Some(p) => curl_socks(ns, p, &url, 3),
                None => curl(ns, &url, 3),
            };
            if let Ok(d) = got {
                if d.bytes == 1000 {
                    break;
                }
            }
            if let Some(a) = self.agent.as_mut() {
                if let Some(why) = a.exited() {
                    panic!("the agent exited ({why}):\n{}", a.log_tail());
                }
            }
            assert!(
                Instant::now() < deadline,
                "no download through the agent within 20 s; agent log:\n{}\nserver log:\n{}",
                self.agent_log(),
                std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        // Let the session validate its second path.
        std::thread::sleep(Duration::from_millis(600));
    }

    /// CPU seconds (user + system) the agent and the server have used so far.
    pub fn cpu_secs(&self) -> (f64, f64) {
        let of = |h: Option<&Helper>| {
            h.and_then(|h| h.pid())
                .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
                .and_then(|s| {
                    // Fields after the command name (which may hold spaces): utime is the
                    // 14th field of the line, stime the 15th.
                    let rest = s.rsplit_once(')')?.1.to_string();
                    let f: Vec<&str> = rest.split_whitespace().collect();
                    let ticks = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
                    // SAFETY: sysconf has no preconditions.
                    Some(ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64)
                })
                .unwrap_or(0.0)
        };
        (of(self.agent.as_ref()), of(Some(&self.server)))
    }

    /// `braid status --json` of the agent (`"agent"`) or the server (`"server"`), parsed.
    pub fn status(&self, who: &str) -> serde_json::Value {
        let sock = self.path(&format!("{who}.sock"));
        let bin = self.bin.display().to_string();
        let out = must(
            run(&bin, &["status", "--json", "--control", &sock]),
            "braid status",
        );
        must(serde_json::from_str(&out), "braid status --json")
    }

    pub fn agent_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("agent.log")).unwrap_or_default()
    }

    /// Sends `sig` to the agent and waits up to 5 s for it to exit.
    pub fn signal_agent(&mut self, sig: libc::c_int) {
        let mut a = self.agent.take().expect("an agent runs");
        let pid = a.pid().expect("agent pid") as libc::pid_t;
        // SAFETY: signalling our own child, not yet reaped.
        unsafe {
            libc::kill(pid, sig);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while a.exited().is_none() {
            assert!(
                Instant::now() < deadline,
                "the agent did not exit within 5 s of signal {sig}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What TUN mode installs that is still in the client namespace.
    pub fn leftovers(&self) -> Vec<String> {
        let ns = &self.topo.client;
        let mut left = Vec::new();
        for fam in ["-4", "-6"] {
            let rules = ip_ns(ns, &[fam, "rule", "show"]).unwrap_or_default();
            for l in rules.lines() {
                if l.starts_with("30999:") || l.starts_with("31000:") || l.starts_with("31001:") {
                    left.push(format!("rule {fam} {l}"));
                }
            }
            let routes = ip_ns(ns, &[fam, "route", "show", "table", "2845"]).unwrap_or_default();
            left.extend(routes.lines().map(|l| format!("route {fam} {l}")));
        }
        if ip_ns(ns, &["link", "show", TUN]).is_ok() {
            left.push(format!("device {TUN}"));
        }
        left
    }
}

/// The LAN namespace: one veth to the client namespace, which forwards.
fn make_lan(topo: &Topology) -> String {
    let lan = format!("{}-lan", topo.client);
    must(run("ip", &["netns", "add", &lan]), "lan ns");
    must(ip_ns(&lan, &["link", "set", "lo", "up"]), "lan lo");
    must(
        ip_ns(
            &topo.client,
            &[
                "link", "add", "lan0", "type", "veth", "peer", "name", "eth0", "netns", &lan,
            ],
        ),
        "lan veth",
    );
    must(
        ip_ns(
            &topo.client,
            &["addr", "add", "192.168.77.1/24", "dev", "lan0"],
        ),
        "lan addr",
    );
    must(
        ip_ns(&topo.client, &["link", "set", "lan0", "up"]),
        "lan up",
    );
    must(
        ip_ns(&lan, &["addr", "add", "192.168.77.2/24", "dev", "eth0"]),
        "host addr",
    );
    must(ip_ns(&lan, &["link", "set", "eth0", "up"]), "host up");
    must(
        ip_ns(&lan, &["route", "add", "default", "via", "192.168.77.1"]),
        "host route",
    );
    // Frames stay MTU-sized, as on the testbed's own links.
    let _ = exec_ns(
        &topo.client,
        "ethtool",
        &["-K", "lan0", "tso", "off", "gso", "off", "gro", "off"],
    );
    lan
}

fn spawn_in(ns: &str, f: impl FnOnce() + Send + 'static) {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        enter(&ns).expect("enter namespace");
        f()
    });
}

/// Byte `i` of every download: a pattern no two offsets of a megabyte share.
pub fn body_chunk(offset: u64, out: &mut [u8]) {
    for (k, b) in out.iter_mut().enumerate() {
        let i = offset + k as u64;
        let x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i >> 20);
        *b = (x >> 56) as u8;
    }
}

/// SHA-256 (hex) of the first `n` bytes of the pattern.
pub fn body_sha(n: u64) -> String {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut off = 0;
    while off < n {
        let k = (n - off).min(buf.len() as u64) as usize;
        body_chunk(off, &mut buf[..k]);
        h.update(&buf[..k]);
        off += k as u64;
    }
    hex(&h.finalize())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// `GET /N` answers N bytes of the pattern.
fn http_server(at: SocketAddr, cc: Option<&str>, stop: Arc<AtomicBool>) {
    let l = TcpListener::bind(at).unwrap_or_else(|e| panic!("http server on {at}: {e}"));
    set_cc(&l, cc);
    l.set_nonblocking(true).expect("nonblocking");
    while !stop.load(Ordering::Relaxed) {
        match l.accept() {
            Ok((s, _)) => {
                std::thread::spawn(move || {
                    let _ = serve(s);
                });
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Sets the congestion controller of a socket (a listener's connections inherit it).
pub fn set_cc(s: &impl std::os::fd::AsRawFd, cc: Option<&str>) {
    if let Some(cc) = cc {
        must(
            braid_testbed::traffic::set_congestion(s, cc),
            "TCP_CONGESTION",
        );
    }
}

/// The upload sink: reads every connection to its end and counts the bytes in `n`.
fn sink(at: SocketAddr, cc: Option<&str>, n: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    let l = TcpListener::bind(at).unwrap_or_else(|e| panic!("upload sink on {at}: {e}"));
    set_cc(&l, cc);
    l.set_nonblocking(true).expect("nonblocking");
    while !stop.load(Ordering::Relaxed) {
        match l.accept() {
            Ok((mut s, _)) => {
                let n = n.clone();
                std::thread::spawn(move || {
                    let _ = s.set_nonblocking(false);
                    let mut buf = vec![0u8; 1 << 16];
                    while let Ok(k) = s.read(&mut buf) {
                        if k == 0 {
                            break;
                        }
                        n.fetch_add(k as u64, Ordering::Relaxed);
                    }
                });
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn serve(s: TcpStream) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    let mut r = BufReader::new(s.try_clone()?);
    let mut line = String::new();
    r.read_line(&mut line)?;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
            break;
        }
    }
    let n: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.trim_start_matches('/').parse().ok())
        .unwrap_or(0);
    let mut w = s;
    write!(
        w,
        "HTTP/1.1 200 OK\r\nContent-Length: {n}\r\nContent-Type: application/octet-stream\r\n\
         Connection: close\r\n\r\n"
    )?;
    let mut buf = vec![0u8; 1 << 16];
    let mut off = 0;
    while off < n {
        let k = (n - off).min(buf.len() as u64) as usize;
        body_chunk(off, &mut buf[..k]);
        w.write_all(&buf[..k])?;
        off += k as u64;
    }
    w.flush()
}

/// The UDP destination. A datagram starting with `Q` is a query: the answer is `A` and the
/// rest reversed. `S <rate bit/s> <secs> <size>` starts a stream of `size`-byte datagrams
/// to the sender at that rate: each holds its sequence number and its send time
/// (CLOCK_REALTIME, ns; every namespace shares the clock), and the last is `E` + the count.
fn udp_responder(at: SocketAddr, stop: Arc<AtomicBool>) {
    let s = UdpSocket::bind(at).unwrap_or_else(|e| panic!("udp responder on {at}: {e}"));
    s.set_read_timeout(Some(Duration::from_millis(100))).ok();
    let mut buf = [0u8; 2048];
    let mut started = std::collections::HashSet::new();
    while !stop.load(Ordering::Relaxed) {
        let Ok((n, from)) = s.recv_from(&mut buf) else {
            continue;
        };
        let d = &buf[..n];
        match d.first() {
            Some(b'Q') => {
                let mut a = vec![b'A'];
                a.extend(d[1..].iter().rev());
                let _ = s.send_to(&a, from);
            }
            Some(b'S') => {
                let txt = String::from_utf8_lossy(&d[1..]).to_string();
                let v: Vec<f64> = txt
                    .split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect();
                // The client repeats its request until the stream starts: one stream per
                // client address and request.
                if v.len() == 3 && started.insert((from, txt.clone())) {
                    let s2 = s.try_clone().expect("clone");
                    let stop = stop.clone();
                    std::thread::spawn(move || stream(&s2, from, v[0], v[1], v[2] as usize, &stop));
                }
            }
            _ => {}
        }
    }
}

pub fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn stream(s: &UdpSocket, to: SocketAddr, bps: f64, secs: f64, size: usize, stop: &AtomicBool) {
    let gap = size as f64 * 8.0 / bps;
    let start = Instant::now();
    let mut buf = vec![0u8; size.max(17)];
    let mut seq: u64 = 0;
    while start.elapsed().as_secs_f64() < secs && !stop.load(Ordering::Relaxed) {
        let due = start + Duration::from_secs_f64(seq as f64 * gap);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        buf[0] = b'D';
        buf[1..9].copy_from_slice(&seq.to_le_bytes());
        buf[9..17].copy_from_slice(&realtime_ns().to_le_bytes());
        // The rest of the datagram: a pattern of the sequence number, to catch corruption.
        for (k, b) in buf[17..].iter_mut().enumerate() {
            *b = (seq as u8).wrapping_add(k as u8);
        }
        let _ = s.send_to(&buf, to);
        seq += 1;
    }
    let mut end = vec![b'E'];
    end.extend(seq.to_le_bytes());
    for _ in 0..5 {
        let _ = s.send_to(&end, to);
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One download with curl (no proxy setting) in namespace `ns`.
pub struct Download {
    pub bytes: u64,
    pub sha: String,
    pub secs: f64,
}

impl Download {
    pub fn bps(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.secs
    }
}

pub fn curl(ns: &str, url: &str, max_secs: u64) -> Result<Download, String> {
    curl_with(ns, &["--noproxy", "*"], url, max_secs)
}

/// The same download through a SOCKS5 proxy.
pub fn curl_socks(ns: &str, proxy: &str, url: &str, max_secs: u64) -> Result<Download, String> {
    curl_with(ns, &["--socks5", proxy], url, max_secs)
}

fn curl_with(ns: &str, opts: &[&str], url: &str, max_secs: u64) -> Result<Download, String> {
    let mut c = Command::new("ip")
        .args(["netns", "exec", ns, "curl", "-sS", "-g"])
        .args(opts)
        .args(["--max-time", &max_secs.to_string(), url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("curl: {e}"))?;
    let start = Instant::now();
    let mut out = c.stdout.take().expect("stdout");
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut bytes = 0u64;
    loop {
        match out.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                h.update(&buf[..n]);
                bytes += n as u64;
            }
            Err(e) => return Err(format!("reading curl's output: {e}")),
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let o = c.wait_with_output().map_err(|e| format!("curl: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "curl {url} failed ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    Ok(Download {
        bytes,
        sha: hex(&h.finalize()),
        secs,
    })
}

/// Runs `f` on a thread inside namespace `ns`.
pub fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    braid_testbed::netns::in_netns(ns, f).expect("namespace thread")
}

/// `count` query/answer exchanges with the UDP responder at `dest` from namespace `ns`,
/// `parallel` sockets at once, each asking one query at a time (a lost query is asked
/// again after 500 ms, up to 3 times, as a resolver does): how many answers arrived and
/// matched, and how many arrived wrong.
pub fn udp_queries(ns: &str, dest: SocketAddr, count: u32, parallel: u32) -> (u32, u32) {
    in_ns(ns, move || {
        let workers: Vec<_> = (0..parallel)
            .map(|w| {
                std::thread::spawn(move || {
                    let bind: SocketAddr = if dest.is_ipv4() {
                        "0.0.0.0:0".parse().unwrap()
                    } else {
                        "[::]:0".parse().unwrap()
                    };
                    let s = UdpSocket::bind(bind).expect("udp socket");
                    s.set_read_timeout(Some(Duration::from_millis(500))).ok();
                    let (mut ok, mut bad) = (0, 0);
                    let mut buf = [0u8; 2048];
                    for i in (w..count).step_by(parallel as usize) {
                        let q = format!("Q{i:06}-{}", "x".repeat((i % 200) as usize));
                        let mut want = vec![b'A'];
                        want.extend(q.as_bytes()[1..].iter().rev());
                        'ask: for _ in 0..3 {
                            if s.send_to(q.as_bytes(), dest).is_err() {
                                continue;
                            }
                            // Late answers to an earlier try of this query are skipped.
                            while let Ok((n, _)) = s.recv_from(&mut buf) {
                                if buf[..n] == want[..] {
                                    ok += 1;
                                    break 'ask;
                                }
                                if !buf[..n].starts_with(b"A") {
                                    bad += 1;
                                }
                            }
                        }
                    }
                    (ok, bad)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("query worker"))
            .fold((0, 0), |(a, b), (c, d)| (a + c, b + d))
    })
}

/// What a receiver saw of one UDP stream.
#[derive(Debug, Default)]
pub struct StreamStats {
    pub sent: u64,
    pub received: u64,
    pub corrupted: u64,
    pub duplicates: u64,
    pub bytes: u64,
    pub secs: f64,
    /// RFC 3550 interarrival jitter, ms.
    pub jitter_ms: f64,
    /// One-way delay percentiles, ms.
    pub delay_p50_ms: f64,
    pub delay_p99_ms: f64,
    /// Datagrams that arrived after a later one.
    pub reordered: u64,
    /// How much later than the first later-sent datagram a datagram arrived, 99th
    /// percentile and maximum, ms (0: in order).
    pub reorder_p99_ms: f64,
    pub reorder_max_ms: f64,
}

impl StreamStats {
    pub fn loss(&self) -> f64 {
        if self.sent == 0 {
            return 1.0;
        }
        1.0 - self.received as f64 / self.sent as f64
    }
    /// Received payload rate, bit/s (IP packets: payload + 28 bytes of headers).
    pub fn wire_bps(&self, size: usize) -> f64 {
        self.received as f64 * (size + 28) as f64 * 8.0 / self.secs
    }
}

/// Asks the streamer at `dest` for `secs` of `size`-byte datagrams at `bps` and measures them.
pub fn udp_stream(ns: &str, dest: SocketAddr, bps: f64, secs: f64, size: usize) -> StreamStats {
    in_ns(ns, move || {
        let bind: SocketAddr = if dest.is_ipv4() {
            "0.0.0.0:0".parse().unwrap()
        } else {
            "[::]:0".parse().unwrap()
        };
        let s = UdpSocket::bind(bind).expect("udp socket");
        // A deep receive buffer: the test measures the tunnel, not this socket.
        set_rcvbuf(&s, 8 << 20);
        s.set_read_timeout(Some(Duration::from_millis(200))).ok();
        let req = format!("S{bps} {secs} {size}");
        s.send_to(req.as_bytes(), dest).expect("stream request");
        let mut st = StreamStats::default();
        let mut seen = std::collections::HashSet::new();
        let mut buf = vec![0u8; 65536];
        let (mut first, mut last) = (None::<Instant>, Instant::now());
        let mut prev_transit: Option<f64> = None;
        let mut delays = Vec::new();
        let mut max_seq = None::<u64>;
        let mut arrivals: Vec<(u64, Instant)> = Vec::new();
        let deadline = Instant::now() + Duration::from_secs_f64(secs + 10.0);
        while Instant::now() < deadline {
            let Ok((n, _)) = s.recv_from(&mut buf) else {
                if st.sent > 0 {
                    break;
                }
                // UDP: the request itself may be lost (a test link drops 5 %); ask again
                // until the stream starts (the responder starts it once).
                if first.is_none() {
                    let _ = s.send_to(req.as_bytes(), dest);
                }
                continue;
            };
            let d = &buf[..n];
            match d.first() {
                Some(b'E') if n >= 9 => {
                    st.sent = u64::from_le_bytes(d[1..9].try_into().unwrap());
                }
                Some(b'D') if n == size => {
                    let now_ns = realtime_ns();
                    let seq = u64::from_le_bytes(d[1..9].try_into().unwrap());
                    let sent_ns = u64::from_le_bytes(d[9..17].try_into().unwrap());
                    let intact = d[17..]
                        .iter()
                        .enumerate()
                        .all(|(k, &b)| b == (seq as u8).wrapping_add(k as u8));
                    if !intact {
                        st.corrupted += 1;
                        continue;
                    }
                    if !seen.insert(seq) {
                        st.duplicates += 1;
                        continue;
                    }
                    let t = Instant::now();
                    arrivals.push((seq, t));
                    first.get_or_insert(t);
                    last = t;
                    st.received += 1;
                    st.bytes += n as u64;
                    if max_seq.is_some_and(|m| seq < m) {
                        st.reordered += 1;
                    }
                    max_seq = Some(max_seq.map_or(seq, |m| m.max(seq)));
                    let transit = now_ns.saturating_sub(sent_ns) as f64 / 1e6;
                    delays.push(transit);
                    if let Some(p) = prev_transit {
                        st.jitter_ms += ((transit - p).abs() - st.jitter_ms) / 16.0;
                    }
                    prev_transit = Some(transit);
                }
                _ => st.corrupted += 1,
            }
        }
        st.secs = first.map_or(0.0, |f| (last - f).as_secs_f64()).max(1e-3);
        // Reordering extent: walking from the highest sequence number down, how much later
        // each datagram arrived than the earliest of those sent after it.
        arrivals.sort_by_key(|a| std::cmp::Reverse(a.0));
        let mut earliest_later: Option<Instant> = None;
        let mut extent: Vec<f64> = Vec::with_capacity(arrivals.len());
        for &(_, t) in &arrivals {
            extent.push(
                earliest_later.map_or(0.0, |e| t.saturating_duration_since(e).as_secs_f64() * 1e3),
            );
            earliest_later = Some(earliest_later.map_or(t, |e| e.min(t)));
        }
        extent.sort_by(f64::total_cmp);
        if let Some(&m) = extent.last() {
            st.reorder_max_ms = m;
            st.reorder_p99_ms = extent[extent.len() * 99 / 100];
        }
        delays.sort_by(f64::total_cmp);
        if !delays.is_empty() {
            st.delay_p50_ms = delays[delays.len() / 2];
            st.delay_p99_ms = delays[delays.len() * 99 / 100];
        }
        st
    })
}

fn set_rcvbuf(s: &UdpSocket, bytes: libc::c_int) {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain setsockopt on a socket we own. SO_RCVBUFFORCE needs root, which the
    // namespace tests have; the plain option is the fallback.
    unsafe {
        let p = &bytes as *const libc::c_int as *const libc::c_void;
        let l = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        if libc::setsockopt(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, p, l) != 0 {
            libc::setsockopt(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, p, l);
        }
    }
}
