//! Links that come, go and change under a running agent (root; network namespaces).
//!
//! Two namespaces joined by two veth pairs (`p0`/`s0`, `p1`/`s1`), each rate-limited by
//! tbf towards the agent; the braid server and an HTTP server run in the server
//! namespace, the agent in the client namespace with one path per interface. Each test
//! downloads through the agent's SOCKS5 port while it changes the links with `ip`, checks
//! the bytes by SHA-256 and measures the longest stall (gap between received bytes).
//! Without root or namespaces each test prints why it skips.

use braid_testkit::{loopback as common, netns as nsrig};

use braid_net::agent::{Agent, PathStatus};
use braid_testbed::cmd::ip_ns;
use common::sha;
use nsrig::{agent_cfg, check, download, setup, skip, sleep, start, wait};
use std::time::{Duration, Instant};

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

/// Open file descriptors of this process.
fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// Resident memory of this process, bytes.
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}

/// Links flapping every few hundred milliseconds (carrier on p0, address on p1) while
/// downloads run back to back: every download completes exactly, and file descriptors and
/// memory do not grow. `BRAID_FLAP_SECS` sets the duration (default 12 s; the soak
/// is 600).
#[test]
fn flapping_links_leak_no_descriptors_or_memory() {
    if skip() {
        return;
    }
    let secs: u64 = std::env::var("BRAID_FLAP_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let s = setup(4 << 20);
    let cfg = agent_cfg(&["a=p0", "b=p1"], s.key.clone(), s.server_pub);
    let (net, web, data) = (s.net.clone(), s.web, s.data.clone());
    let (first, mid, last, n) = s.net.client(move || async move {
        let (mut agent, dl) = start(cfg, web).await;
        check(
            "soak warm-up",
            &dl.await.unwrap(),
            &data,
            Duration::from_secs(5),
        );
        wait(&mut agent, "b", PathStatus::Up, 2000).await;
        let socks = agent.socks.unwrap();
        let first = (fds(), rss());
        let t = Instant::now();
        let mut n = 0u32;
        let flap = {
            let net = net.clone();
            tokio::spawn(async move {
                let mut round = 0u32;
                loop {
                    round += 1;
                    let (sv, addr) = if round % 2 == 1 {
                        ("down", "del")
                    } else {
                        ("up", "add")
                    };
                    net.ip_s(&["link", "set", "s0", sv]);
                    net.ip_c(&["addr", addr, "10.2.0.1/24", "dev", "p1"]);
                    if sv == "up" {
                        net.route(1);
                    }
                    sleep(300 + (round as u64 % 5) * 100).await;
                }
            })
        };
        let mut mid = None;
        while t.elapsed() < Duration::from_secs(secs) {
            if mid.is_none() && t.elapsed() >= Duration::from_secs(secs / 3) {
                mid = Some(rss());
            }
            let o = download(socks, web).await;
            assert_eq!(sha(&o.bytes), sha(&data), "download {n}");
            n += 1;
        }
        flap.abort();
        let _ = flap.await;
        // Both links back, everything settled.
        let _ = nsrig::try_ip(&net.s, &["link", "set", "s0", "up"]);
        let _ = nsrig::try_ip(&net.c, &["addr", "add", "10.2.0.1/24", "dev", "p1"]);
        net.route(1);
        wait(&mut agent, "a", PathStatus::Up, 3000).await;
        wait(&mut agent, "b", PathStatus::Up, 3000).await;
        sleep(500).await;
        (first, mid.unwrap_or(first.1), (fds(), rss()), n)
    });
    eprintln!(
        "{n} downloads over {secs} s of flapping links: fds {} -> {}, RSS {:.1} -> {:.1} (after a third) -> {:.1} MB",
        first.0,
        last.0,
        first.1 as f64 / 1e6,
        mid as f64 / 1e6,
        last.1 as f64 / 1e6
    );
    assert!(n >= 3, "only {n} downloads completed");
    assert!(
        last.0 <= first.0 + 2,
        "file descriptors grew: {} -> {}",
        first.0,
        last.0
    );
    // The allocator keeps what the first downloads used; after that, no growth.
    assert!(
        last.1 <= mid + (16 << 20),
        "memory grew: {mid} -> {}",
        last.1
    );
}

/// `--path auto`: both veth links get a default route, and so does a device named like one
/// of braid's own (`braid0`, a veth pair inside the agent's namespace); a third link without a default route (`p2`) is not taken.
/// The agent uses p0 and p1, and the download uses both.
#[test]
fn path_auto_uses_every_interface_with_a_default_route_except_braids_own() {
    if skip() {
        return;
    }
    let s = setup(16 << 20);
    let net = s.net.clone();
    for (dev, metric) in [("p0", "10"), ("p1", "20")] {
        net.ip_c(&["route", "add", "default", "dev", dev, "metric", metric]);
    }
    net.ip_c(&[
        "link", "add", "braid0", "type", "veth", "peer", "name", "braid0p",
    ]);
    net.ip_c(&["addr", "add", "10.9.0.1/24", "dev", "braid0"]);
    net.ip_c(&["link", "set", "braid0p", "up"]);
    net.ip_c(&["link", "set", "braid0", "up"]);
    net.ip_c(&["route", "add", "default", "dev", "braid0", "metric", "5"]);
    net.make_link(2);
    net.ip_c(&["route", "del", "10.0.0.1/32", "dev", "p2"]);
    let cfg = agent_cfg(&["auto"], s.key.clone(), s.server_pub);
    let (n2, web) = (net.clone(), s.web);
    let (o, names, a, b) = net.client(move || async move {
        let (mut agent, dl) = start(cfg, web).await;
        wait(&mut agent, "auto1", PathStatus::Up, 2000).await;
        wait(&mut agent, "auto2", PathStatus::Up, 2000).await;
        let (a0, b0) = (n2.rx_bytes(0), n2.rx_bytes(1));
        let o = dl.await.unwrap();
        let names: Vec<(String, PathStatus)> = agent.paths();
        (o, names, n2.rx_bytes(0) - a0, n2.rx_bytes(1) - b0)
    });
    eprintln!("auto paths: {names:?}; p0 received {a} bytes, p1 {b}");
    check("path auto", &o, &s.data, Duration::from_millis(500));
    assert_eq!(names.len(), 8, "auto fills the 8 slots");
    assert!(
        names[2..].iter().all(|p| p.1 == PathStatus::Down),
        "braid0 or p2 was taken: {names:?}"
    );
    assert!(a > 2_000_000 && b > 2_000_000, "p0 {a}, p1 {b}");
}
