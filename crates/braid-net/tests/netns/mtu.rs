//! Paths whose network drops large packets without a word (issue 35, item 1): the LTE link
//! (p1) carries IP packets of at most 1400 bytes both ways and drops bigger ones (nftables,
//! no ICMP), as many cellular and PPPoE paths do, while the route's MTU says 1500. Links
//! of 16/8 and 8/4 Mbit/s (down/up), namespaces `mtu*`; root and nftables, each test says
//! why it skips otherwise.
//!
//! Short for the suite (8 to 12 MB); `BRAID_MTU_BYTES=31457280` runs the 30 MB
//! figure by hand (docs/results.md, "Issue 35").

use crate::direct::mbit;
use crate::nsrig;

use braid_net::agent::{Agent, PathStatus};
use braid_net::status::PathReport;
use braid_testbed::cmd::exec_ns;
use nsrig::{agent_cfg, check, download, nft_drop, nft_dropped, setup_in, sh, skip, wait, Outcome};
use std::time::{Duration, Instant};

/// Down 16 + 8 Mbit/s.
const SUM_MBIT: f64 = 24.0;
/// The largest IP packet p1 carries.
const CAP: u64 = 1400;

fn no_nft() -> bool {
    if braid_testbed::cmd::run("nft", &["--version"]).is_err() {
        eprintln!("skipped: nft (nftables) is not installed");
        return true;
    }
    false
}

/// The download's size: `default`, or `BRAID_MTU_BYTES`.
fn size(default: usize) -> usize {
    std::env::var("BRAID_MTU_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The rig with wifi (p0) at 16/8 and lte (p1) at 8/4 Mbit/s.
fn rig(prefix: &str, bytes: usize) -> nsrig::Setup {
    let s = setup_in(nsrig::Net::with_rates(prefix, &["16mbit", "8mbit"]), bytes);
    wire_packets(&s.net);
    for (i, rate) in ["8mbit", "4mbit"].iter().enumerate() {
        let dev = format!("p{i}");
        sh(exec_ns(
            &s.net.c,
            "tc",
            &[
                "qdisc", "add", "dev", &dev, "root", "tbf", "rate", rate, "burst", "20kb",
                "latency", "30ms",
            ],
        ));
    }
    s
}

/// Make p1's ends carry packets as a wire does: a UDP GSO batch (one buffer of up to 64
/// datagrams, which a veth hands to its peer whole) is cut into its datagrams before it
/// leaves, and nothing coalesces them on arrival, so that a rule on the receiving side sees
/// each IP packet as it would cross a real link.
fn wire_packets(net: &nsrig::Net) {
    for (ns, dev) in [(&net.c, "p1"), (&net.s, "s1")] {
        sh(exec_ns(
            ns,
            "ethtool",
            &["-K", dev, "tx-udp-segmentation", "off", "gro", "off"],
        ));
    }
}

/// Drop IP packets over [`CAP`] bytes on the LTE link, both ways, where they arrive (the
/// server's s1, the agent's p1). Returns the rules with their namespaces.
fn black_hole(net: &nsrig::Net) -> [(String, String); 2] {
    let rule = |dev: &str| format!("iifname \"{dev}\" ip length > {CAP}");
    [
        (net.s.clone(), nft_drop(&net.s, "input", &rule("s1"))),
        (net.c.clone(), nft_drop(&net.c, "input", &rule("p1"))),
    ]
}

fn lte(agent: &Agent) -> PathReport {
    let st = agent.status().snapshot();
    st.paths.into_iter().find(|p| p.name == "lte").unwrap()
}

/// What a run saw: the download, the LTE link's share of the bytes received, the agent's
/// and the server's LTE path at the end (JSON, as `braid status --json` shows them), and
/// the packets the rules dropped.
struct Run {
    o: Outcome,
    share: f64,
    agent_lte: serde_json::Value,
    server_lte: serde_json::Value,
    dropped: u64,
}

/// Download through SOCKS5 over both paths; `hole_after` applies the black hole that long
/// into the download (`None`: before the agent starts).
fn run(prefix: &str, bytes: usize, hole_after: Option<Duration>) -> (nsrig::Setup, Run) {
    let s = rig(prefix, bytes);
    let net = s.net.clone();
    let early = hole_after.is_none().then(|| black_hole(&net));
    let cfg = agent_cfg(&["wifi=p0", "lte=p1"], s.key.clone(), s.server_pub);
    let (web, board) = (s.web, s.board.clone());
    let r = net.clone().client(move || async move {
        let mut agent = Agent::start(cfg).await.unwrap();
        assert!(agent.wait_established(Duration::from_secs(3)).await);
        wait(&mut agent, "wifi", PathStatus::Up, 3000).await;
        wait(&mut agent, "lte", PathStatus::Up, 3000).await;
        let (rx0, rx1) = (net.rx_bytes(0), net.rx_bytes(1));
        let dl = tokio::spawn(download(agent.socks.unwrap(), web));
        let rules = match (early, hole_after) {
            (Some(r), _) => r,
            (None, Some(after)) => {
                tokio::time::sleep(after).await;
                let t = Instant::now();
                let r = black_hole(&net);
                eprintln!(
                    "black hole opened ({} ms to apply)",
                    t.elapsed().as_millis()
                );
                r
            }
            (None, None) => unreachable!(),
        };
        let o = dl.await.unwrap();
        let (d0, d1) = (net.rx_bytes(0) - rx0, net.rx_bytes(1) - rx1);
        let agent_lte = serde_json::to_value(lte(&agent)).unwrap();
        let st = serde_json::to_value(board.snapshot().await).unwrap();
        let server_lte = st["sessions"][0]["paths"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "lte")
            .cloned()
            .unwrap_or_default();
        let dropped = rules.iter().map(|(ns, r)| nft_dropped(ns, r)).sum();
        Run {
            o,
            share: d1 as f64 / (d0 + d1).max(1) as f64,
            agent_lte,
            server_lte,
            dropped,
        }
    });
    (s, r)
}

/// Both ends' LTE datagrams, as IP packets, within 100 bytes below the cap.
fn sizes_found(r: &Run) {
    for (who, p) in [("agent", &r.agent_lte), ("server", &r.server_lte)] {
        let packet = p["packet_bytes"].as_u64().unwrap_or(0);
        assert!(
            (CAP - 100..=CAP).contains(&packet),
            "{who}'s LTE packets are {packet} bytes: {p}"
        );
        assert!(p["state"] != "down", "{who}'s LTE path is down: {p}");
    }
}

fn report(name: &str, r: &Run, bytes: usize) -> f64 {
    let of_sum = mbit(bytes, r.o.took) / SUM_MBIT;
    eprintln!(
        "{name}: {:.1} Mbit/s, {of_sum:.3} of the sum, LTE carried {:.3} of the bytes; LTE \
         packets {} (agent) / {} (server) bytes, drops {} / {}; {} packets over {CAP} bytes \
         dropped by the rules",
        mbit(bytes, r.o.took),
        r.share,
        r.agent_lte["packet_bytes"],
        r.server_lte["packet_bytes"],
        r.agent_lte["datagram_drops"],
        r.server_lte["datagram_drops"],
        r.dropped
    );
    of_sum
}

/// The case: before DPLPMTUD the LTE path carried 0.1 MB of 30 MB (the server's
/// 1472-byte datagrams all vanished on it) and the download ran at 0.62 of the sum. Now
/// each end finds LTE's size (between 1300 and 1400 bytes of IP packet), LTE carries at
/// least a fifth of the bytes and the download reaches 0.85 of the sum, exact.
#[test]
fn a_path_dropping_packets_over_1400_bytes_finds_its_size_and_carries_its_share() {
    if skip() || no_nft() {
        return;
    }
    let bytes = size(8 << 20);
    let (s, r) = run("mtu", bytes, None);
    let of_sum = report("black hole from the start", &r, bytes);
    check(
        "black hole from the start",
        &r.o,
        &s.data,
        Duration::from_secs(1),
    );
    sizes_found(&r);
    assert!(r.share >= 0.2, "LTE carried {:.3} of the bytes", r.share);
    assert!(of_sum >= 0.85, "{of_sum:.3} of the sum");
}

/// The same limit applied in the middle of the download: both ends' sizes drop (each says
/// so once), the LTE path stays, no read waits more than a second, and the download is
/// exact.
#[test]
fn a_black_hole_opening_mid_download_drops_the_size_and_keeps_the_path() {
    if skip() || no_nft() {
        return;
    }
    let bytes = size(12 << 20);
    let after = if bytes > 20 << 20 { 5000 } else { 1500 };
    let (s, r) = run("mtuh", bytes, Some(Duration::from_millis(after)));
    report("black hole after the start", &r, bytes);
    check(
        "black hole after the start",
        &r.o,
        &s.data,
        Duration::from_secs(1),
    );
    assert!(
        r.dropped > 0,
        "the rules never dropped anything: nothing was tested"
    );
    sizes_found(&r);
    assert!(
        r.server_lte["datagram_drops"].as_u64() >= Some(1),
        "the server's LTE size never dropped: {}",
        r.server_lte
    );
    assert!(r.share >= 0.15, "LTE carried {:.3} of the bytes", r.share);
}
