//! TUN mode end to end (issue 10): `braid agent --tun` in the testbed's client namespace,
//! `braid server` in its server namespace, two emulated links of different rates between
//! them, and destinations only the server namespace has. Applications use no proxy setting:
//! `curl` downloads over IPv4 and IPv6, UDP queries and a UDP stream measured for loss and
//! jitter, a LAN host behind the agent (router mode); and after SIGTERM, and after SIGKILL
//! and a restart, nothing of TUN mode is left behind.
//!
//! Root and namespaces are needed; elsewhere each test prints why it skips. The tests take
//! the testbed's run lock and a process-wide mutex, so they run one at a time.
//!
//! Sizes: `BRAID_TUN_MB` (default 100) per download, `BRAID_TUN_UDP_SECS` (default 10) for
//! the UDP stream (the figure is 30 s; docs/results.md has that run).

use crate::tunrig;

use braid_testbed::lock::{RunLock, LOCK_FILE};
use braid_testbed::unavailable_reason;
use std::net::SocketAddr;
use std::path::Path;
use tunrig::*;

use crate::SERIAL;

fn skip(test: &str) -> bool {
    if let Some(why) = unavailable_reason() {
        println!("skipping {test}: {why}");
        return true;
    }
    if braid_testbed::cmd::which("curl").is_none() {
        println!("skipping {test}: curl is not installed (scripts/test installs it)");
        return true;
    }
    false
}

fn env_num(key: &str, default: f64) -> f64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn two_links() -> Vec<Link> {
    vec![
        Link {
            mbit: 60.0,
            delay_ms: 10,
            loss: 0.0,
        },
        Link {
            mbit: 40.0,
            delay_ms: 20,
            loss: 0.0,
        },
    ]
}

/// Downloads `mb` MB from `url` in `ns` and checks the bytes and the rate.
fn download(rig: &Rig, ns: &str, url_host: &str, what: &str) -> f64 {
    let n = (env_num("BRAID_TUN_MB", 100.0) * 1e6) as u64;
    let url = format!("http://{url_host}:{HTTP_PORT}/{n}");
    let d = curl(ns, &url, 120).unwrap_or_else(|e| panic!("{what}: {e}\n{}", rig.agent_log()));
    assert_eq!(d.bytes, n, "{what}: every byte arrives");
    assert_eq!(d.sha, body_sha(n), "{what}: SHA-256 of the body");
    let eff = d.bps() / rig.sum_bps();
    println!(
        "{what}: {} MB in {:.2} s = {:.1} Mbit/s, {eff:.3} of the links' sum",
        n / 1_000_000,
        d.secs,
        d.bps() / 1e6
    );
    eff
}

#[test]
fn tun_carries_tcp_udp_and_ipv6_without_a_proxy_setting_and_leaves_nothing() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip("tun_carries_tcp_udp_and_ipv6_without_a_proxy_setting_and_leaves_nothing") {
        return;
    }
    let _lock = RunLock::acquire(Path::new(LOCK_FILE)).expect("run lock");
    let mut rig = Rig::new("tn", two_links(), true);
    rig.start_agent(&[]);
    let c = rig.topo.client.clone();

    let e4 = download(
        &rig,
        &c,
        &DEST4.to_string(),
        "IPv4 download through the tunnel",
    );
    let e6 = download(
        &rig,
        &c,
        &format!("[{DEST6}]"),
        "IPv6 download through the tunnel",
    );
    // Router mode: a host on the LAN behind the agent's machine, with no setting of its own
    // (its default route is the agent's machine, as any home router's LAN), is carried once
    // the agent's machine forwards (docs/deployment.md).
    braid_testbed::cmd::sysctl_ns(&c, "net.ipv4.ip_forward", "1").expect("forwarding");
    let lan = rig.lan.clone().expect("LAN namespace");
    let el = download(
        &rig,
        &lan,
        &DEST4.to_string(),
        "router mode: a LAN host's download",
    );

    let dest4 = SocketAddr::new(DEST4.into(), UDP_PORT);
    let dest6 = SocketAddr::new(DEST6.into(), UDP_PORT);
    let (ok4, bad4) = udp_queries(&c, dest4, 1000, 20);
    let (ok6, bad6) = udp_queries(&c, dest6, 200, 10);
    // DNS: a query to a resolver on a local link (the main table reaches 10.1.1.0/24 over
    // path 0 directly) still enters the tunnel and is answered by the server's resolver,
    // as from the resolver asked.
    let local_resolver = SocketAddr::new([10, 1, 1, 53].into(), 53);
    let (okd, badd) = udp_queries(&c, local_resolver, 100, 10);
    println!(
        "DNS to a local-link resolver: {okd} of 100 answered by the server's resolver ({badd} wrong)"
    );
    println!(
        "UDP queries: IPv4 {ok4} of 1000 answered ({bad4} wrong), IPv6 {ok6} of 200 ({bad6} wrong)"
    );

    let secs = env_num("BRAID_TUN_UDP_SECS", 10.0);
    let size = 1200;
    let st = udp_stream(&c, dest4, 1.2 * rig.sum_bps(), secs, size);
    let got = st.wire_bps(size) / rig.sum_bps();
    println!(
        "UDP stream at 1.2x the sum for {secs} s: {:.1} Mbit/s received = {got:.3} of the sum; \
         sent {}, received {}, loss {:.2} %, corrupted {}, duplicates {}, reordered {}, \
         reordering p99 {:.2} ms max {:.2} ms, jitter {:.2} ms, one-way delay p50 {:.1} ms \
         p99 {:.1} ms",
        st.wire_bps(size) / 1e6,
        st.sent,
        st.received,
        st.loss() * 100.0,
        st.corrupted,
        st.duplicates,
        st.reordered,
        st.reorder_p99_ms,
        st.reorder_max_ms,
        st.jitter_ms,
        st.delay_p50_ms,
        st.delay_p99_ms
    );

    // SIGTERM: the agent removes what it installed.
    rig.signal_agent(libc::SIGTERM);
    let left = rig.leftovers();
    assert!(left.is_empty(), "left after SIGTERM: {left:?}");
    // SIGKILL: the device goes with the process; the rules stay until the next start, which
    // removes them before it installs its own (once, not twice).
    rig.start_agent(&[]);
    rig.signal_agent(libc::SIGKILL);
    rig.start_agent(&[]);
    let rules = braid_testbed::cmd::ip_ns(&c, &["-4", "rule", "show"]).unwrap_or_default();
    let ours = rules
        .lines()
        .filter(|l| l.starts_with("3100") || l.starts_with("30999:"))
        .count();
    assert_eq!(
        ours, 4,
        "a restart after SIGKILL installs braid's four rules (DNS over UDP and TCP, main, \
         tunnel) once:\n{rules}"
    );
    rig.signal_agent(libc::SIGTERM);
    let left = rig.leftovers();
    assert!(
        left.is_empty(),
        "left after SIGKILL, a restart and SIGTERM: {left:?}"
    );

    assert!(
        e4 >= 0.9,
        "IPv4 download: {e4:.3} of the links' sum (want >= 0.9)"
    );
    assert!(
        e6 >= 0.9,
        "IPv6 download: {e6:.3} of the links' sum (want >= 0.9)"
    );
    assert!(
        el >= 0.9,
        "router mode: {el:.3} of the links' sum (want >= 0.9)"
    );
    assert_eq!(
        (ok4, bad4),
        (1000, 0),
        "every IPv4 query answered, and right"
    );
    assert_eq!(
        (ok6, bad6),
        (200, 0),
        "every IPv6 query answered, and right"
    );
    assert_eq!(
        (okd, badd),
        (100, 0),
        "DNS resolved at the server side, no leak"
    );
    assert_eq!(st.corrupted, 0, "no corrupted datagram");
    assert!(
        got >= 0.85,
        "UDP stream: {got:.3} of the links' sum (want >= 0.85)"
    );
}

/// `--udp redundant`: each datagram on both paths, duplicates dropped, so a flow sees the
/// better link's loss, not the lossy one's. A 4 Mbit/s "call" for 6 s with 5 % loss (each
/// way) on the faster link; the same flow without redundancy, for comparison.
#[test]
fn udp_redundant_hides_a_lossy_link() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip("udp_redundant_hides_a_lossy_link") {
        return;
    }
    let _lock = RunLock::acquire(Path::new(LOCK_FILE)).expect("run lock");
    let mut links = two_links();
    links[0].loss = 0.05;
    let mut rig = Rig::new("tr", links, false);
    let c = rig.topo.client.clone();
    let dest = SocketAddr::new(DEST4.into(), UDP_PORT);
    let secs = env_num("BRAID_TUN_CALL_SECS", 6.0);
    let mut losses = Vec::new();
    for mode in ["spread", "redundant"] {
        rig.start_agent(&["--udp", mode]);
        let st = udp_stream(&c, dest, 4e6, secs, 200);
        println!(
            "UDP call, --udp {mode}, 5 % loss on one link: sent {}, received {}, loss {:.3} %, \
             corrupted {}, duplicates {}, jitter {:.2} ms, one-way delay p50 {:.1} ms p99 {:.1} ms, \
             reordering p99 {:.2} ms",
            st.sent,
            st.received,
            st.loss() * 100.0,
            st.corrupted,
            st.duplicates,
            st.jitter_ms,
            st.delay_p50_ms,
            st.delay_p99_ms,
            st.reorder_p99_ms
        );
        assert!(st.sent > 0, "--udp {mode}: the stream ran");
        assert_eq!(st.corrupted, 0);
        assert_eq!(
            st.duplicates, 0,
            "--udp {mode}: no copy reaches the application"
        );
        losses.push(st.loss());
        rig.signal_agent(libc::SIGTERM);
    }
    assert!(
        losses[1] < 0.005,
        "--udp redundant: the flow lost {:.3} % (want < 0.5 %)",
        losses[1] * 100.0
    );
}

/// `--redirect`: no TUN device; nftables in the agent's namespace redirects a LAN host's TCP
/// to the agent, which carries each connection to its original destination.
#[test]
fn redirect_carries_a_lan_host_without_a_tun_device() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip("redirect_carries_a_lan_host_without_a_tun_device") {
        return;
    }
    if braid_testbed::cmd::which("nft").is_none() {
        println!("skipping redirect_carries_a_lan_host_without_a_tun_device: nft is not installed");
        return;
    }
    let _lock = RunLock::acquire(Path::new(LOCK_FILE)).expect("run lock");
    let mut rig = Rig::new("td", two_links(), true);
    let c = rig.topo.client.clone();
    braid_testbed::cmd::sysctl_ns(&c, "net.ipv4.ip_forward", "1").expect("forwarding");
    // The rule docs/deployment.md gives, for a LAN behind the agent's machine.
    let rules = "table ip braid_redirect {\n\
                 chain prerouting {\n\
                 type nat hook prerouting priority dstnat; policy accept;\n\
                 iifname \"lan0\" meta l4proto tcp redirect to :7070\n\
                 }\n}\n";
    let file = rig.path("redirect.nft");
    std::fs::write(&file, rules).expect("rules file");
    braid_testbed::cmd::exec_ns(&c, "nft", &["-f", &file]).expect("nft rules");
    rig.launch_agent(&["--redirect", "0.0.0.0:7070"]);
    let lan = rig.lan.clone().expect("LAN namespace");
    rig.wait_download(&lan);
    let e = download(
        &rig,
        &lan,
        &DEST4.to_string(),
        "--redirect: a LAN host's download",
    );
    // Without the redirection the LAN host has no way to the destination at all.
    braid_testbed::cmd::exec_ns(&c, "nft", &["delete", "table", "ip", "braid_redirect"])
        .expect("remove rules");
    let direct = curl(&lan, &format!("http://{DEST4}:{HTTP_PORT}/1000"), 3);
    assert!(
        direct.is_err(),
        "the destination is reachable only through the agent"
    );
    assert!(
        e >= 0.9,
        "--redirect: {e:.3} of the links' sum (want >= 0.9)"
    );
}

/// One TCP connection through TUN mode next to the same through SOCKS5, on fast links (two
/// emulated 2.5 Gbit/s links, 1 ms): Gbit/s and CPU seconds per GB of agent and server.
/// A benchmark, not a pass/fail test: it runs when `BRAID_TUN_BENCH` is set
/// (`BRAID_TUN_BENCH=1 cargo test --profile ci -p braid-testbed --test testbed tun::tun_against_socks
/// -- --nocapture`); docs/results.md has its figures.
#[test]
fn tun_against_socks_throughput() {
    if std::env::var_os("BRAID_TUN_BENCH").is_none() {
        println!("skipping tun_against_socks_throughput: a benchmark (set BRAID_TUN_BENCH=1)");
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip("tun_against_socks_throughput") {
        return;
    }
    let _lock = RunLock::acquire(Path::new(LOCK_FILE)).expect("run lock");
    let fast = || Link {
        mbit: 2500.0,
        delay_ms: 1,
        loss: 0.0,
    };
    let mut rig = Rig::new("tb", vec![fast(), fast()], false);
    rig.start_agent(&["--socks", "127.0.0.1:1080"]);
    let c = rig.topo.client.clone();
    let n: u64 = (env_num("BRAID_TUN_MB", 1000.0) * 1e6) as u64;
    let url = format!("http://{DEST4}:{HTTP_PORT}/{n}");
    for (what, socks) in [
        ("TUN", false),
        ("SOCKS5", true),
        ("TUN", false),
        ("SOCKS5", true),
    ] {
        let (a0, s0) = rig.cpu_secs();
        let d = if socks {
            curl_socks(&c, "127.0.0.1:1080", &url, 300)
        } else {
            curl(&c, &url, 300)
        }
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        let (a1, s1) = rig.cpu_secs();
        assert_eq!(d.sha, body_sha(n), "{what}: every byte");
        let gb = n as f64 / 1e9;
        println!(
            "{what}: {:.2} Gbit/s; CPU per GB: agent {:.2} s, server {:.2} s",
            d.bps() / 1e9,
            (a1 - a0) / gb,
            (s1 - s0) / gb
        );
    }
}

/// TUN mode with no server (direct mode, issue 15): each connection the stack terminates goes
/// straight to its destination on one path (here the destination is reachable over both),
/// and so does each UDP flow, DNS included (to the resolver asked). Regression for "TUN's
/// UDP flows are dropped in direct mode" (name resolution failed without a server).
#[test]
fn tun_without_a_server_connects_directly() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip("tun_without_a_server_connects_directly") {
        return;
    }
    let _lock = RunLock::acquire(Path::new(LOCK_FILE)).expect("run lock");
    let mut rig = Rig::new("tx", two_links(), false);
    rig.serverless = true;
    rig.start_agent(&[]);
    let c = rig.topo.client.clone();
    let n = 20_000_000u64;
    for i in 0..2 {
        let d = curl(&c, &format!("http://{DEST4}:{HTTP_PORT}/{n}"), 60)
            .unwrap_or_else(|e| panic!("direct download {i}: {e}\n{}", rig.agent_log()));
        assert_eq!(d.sha, body_sha(n), "direct download {i}: every byte");
        println!(
            "TUN, direct mode: 20 MB in {:.2} s = {:.1} Mbit/s",
            d.secs,
            d.bps() / 1e6
        );
    }
    assert!(
        rig.agent_log().contains("mode: direct"),
        "the agent says it is in direct mode:\n{}",
        rig.agent_log()
    );
    let dest4 = SocketAddr::new(DEST4.into(), UDP_PORT);
    let (ok4, bad4) = udp_queries(&c, dest4, 500, 10);
    // A "resolver" on port 53 at the destinations' side: TUN mode's routing sends every
    // DNS query into the device; without a server it goes to the resolver asked.
    let resolver = SocketAddr::new(DEST4.into(), 53);
    rig.udp_responder_at(resolver);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let (okd, badd) = udp_queries(&c, resolver, 100, 5);
    println!(
        "TUN, direct mode: UDP queries {ok4} of 500 answered ({bad4} wrong), DNS {okd} of 100 \
         ({badd} wrong)"
    );
    assert_eq!(
        (ok4, bad4),
        (500, 0),
        "every UDP query answered directly\n{}",
        rig.agent_log()
    );
    assert_eq!(
        (okd, badd),
        (100, 0),
        "every DNS query answered by the resolver asked\n{}",
        rig.agent_log()
    );
    rig.signal_agent(libc::SIGTERM);
    assert!(rig.leftovers().is_empty());
}
