//! Direct mode that knows its links (issue 25 item 5; root, network namespaces, the
//! direct-mode rig of `direct`): links of 16 and 8 Mbit/s, no braid server. A fresh agent
//! measures both links with its first connections and places the rest by those rates; 8
//! download loops fill the links; the rates go to the state file, and after a restart the
//! first 8 downloads already split by them. `braid status` shows both paths up with their
//! rates. Without root or namespaces each test prints why it skips.

use crate::direct::{
    batch, http, log, mbit, net_with_rates, paths, pool, rx_bytes_in, skip, thread_in, Bodies,
    PAYLOAD,
};
use braid_net::agent::{Agent, AgentConfig, StatusBoard};
use braid_net::status::ShownState;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

const RATES: [f64; 2] = [16.0, 8.0];
/// Each download of the batches started at once.
const SIZE: usize = 3 << 20;

fn cfg(specs: &[&str], state: &Path) -> AgentConfig {
    let mut cfg = AgentConfig::direct_only(paths(specs)).unwrap();
    cfg.socks = Some("127.0.0.1:0".parse().unwrap());
    cfg.state_file = Some(state.to_path_buf());
    cfg
}

/// What one batch of 8 downloads at once gave: its aggregate as a share of the links'
/// sum, and the share of the bytes that came over p0.
#[derive(Debug, Clone)]
struct Batch {
    share: f64,
    p0: f64,
    /// From the first connection shown in status to all 8 on a path, and how many went
    /// on each path then.
    placed: Option<(Duration, Vec<String>)>,
}

/// Watch `board` until 8 connections show a path: the time from the first connection
/// shown, and their paths.
async fn placement(board: Arc<StatusBoard>) -> Option<(Duration, Vec<String>)> {
    let mut first = None;
    for _ in 0..1000 {
        let streams = board.snapshot().streams;
        if !streams.is_empty() && first.is_none() {
            first = Some(Instant::now());
        }
        let on: Vec<String> = streams.into_iter().filter_map(|s| s.path).collect();
        if on.len() >= 8 {
            let mut on = on;
            on.sort();
            return Some((first?.elapsed(), on));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    None
}

/// 8 downloads of [`SIZE`] at once through `socks` (each checked by SHA-256).
async fn at_once(ns: &str, agent: &Agent, bodies: &Bodies, label: &str) -> Batch {
    let socks = agent.socks.unwrap();
    let rx0 = [rx_bytes_in(ns, 0), rx_bytes_in(ns, 1)];
    let watch = tokio::spawn(placement(agent.status()));
    let t = batch(socks, bodies, 8, SIZE).await;
    let placed = watch.await.unwrap();
    let rx = [rx_bytes_in(ns, 0) - rx0[0], rx_bytes_in(ns, 1) - rx0[1]];
    let sum: f64 = RATES.iter().sum();
    let share = mbit(8 * SIZE, t) / sum;
    let p0 = rx[0] as f64 / (rx[0] + rx[1]) as f64;
    eprintln!(
        "{label}: 8 x {} MB at once in {:.2} s: {:.1} Mbit/s = {share:.3} of the links' sum ({sum} Mbit/s), {:.3} of their TCP payload ceiling; p0 carried {p0:.3} of the bytes (5:3 is 0.625, 6:2 0.75, 4:4 0.5); all 8 placed after {:?}",
        SIZE >> 20,
        t.as_secs_f64(),
        share * sum,
        share / PAYLOAD,
        placed,
    );
    Batch { share, p0, placed }
}

/// A path in status: name, state, receive rate and delivery estimate (bits/s).
type Shown = (String, Option<ShownState>, Option<u64>, Option<u64>);

/// What the first agent saw.
struct First {
    fresh: Batch,
    loops: f64,
    status: Vec<Shown>,
}

/// No server, 16 + 8 Mbit/s: 8 download loops reach 0.93 of the sum, `braid status`
/// shows both paths up with their rates, 8 downloads at once over measured links reach
/// 0.85 of the sum; the rates survive a restart in the state file, and the restarted
/// agent's first 8 downloads already split by them (p0 carries 0.58 to 0.8 of the
/// bytes; 4:4 would be half).
#[test]
fn direct_mode_places_connections_by_measured_and_remembered_rates() {
    if skip() {
        return;
    }
    log();
    let t0 = Instant::now();
    let net = net_with_rates("direct", &RATES);
    let bodies: Bodies = Arc::default();
    let _web = http(&net, bodies.clone());
    let dir: PathBuf = std::env::temp_dir().join(format!("direct-rates-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("state");
    let _ = std::fs::remove_file(&state);
    let specs = ["a=p0", "b=p1"];
    let sum: f64 = RATES.iter().sum();

    let (c, b, ns) = (cfg(&specs, &state), bodies.clone(), net.c.clone());
    let first = thread_in(&net.c, move || async move {
        let agent = Agent::start(c).await.unwrap();
        let socks = agent.socks.unwrap();
        // A fresh agent: the first connection on each link measures it.
        let fresh = at_once(&ns, &agent, &b, "fresh agent").await;
        // 8 download loops of 512 KB for 12 s; status read after 4 s.
        let board = agent.status();
        let watch = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(4)).await;
            board
                .snapshot()
                .paths
                .into_iter()
                .map(|p| (p.name, p.state, p.receive_rate_bps, p.delivery_rate_bps))
                .collect::<Vec<_>>()
        });
        let (bytes, t) = pool(socks, &b, 8, 512 << 10, Duration::from_secs(12)).await;
        let loops = mbit(bytes, t) / sum;
        eprintln!(
            "8 download loops of 512 KB: {} MB in {:.2} s: {:.3} of the links' sum",
            bytes >> 20,
            t.as_secs_f64(),
            loops
        );
        let status = watch.await.unwrap();
        drop(agent);
        First {
            fresh,
            loops,
            status,
        }
    })
    .join()
    .unwrap();
    let saved = std::fs::read_to_string(&state).unwrap_or_default();
    eprintln!("status during the loops: {:?}", first.status);
    eprintln!("state file:\n{saved}");

    // A restarted agent: the state file's rates place its first connections.
    let (c, b, ns) = (cfg(&specs, &state), bodies.clone(), net.c.clone());
    let restarted = thread_in(&net.c, move || async move {
        let agent = Agent::start(c).await.unwrap();
        at_once(&ns, &agent, &b, "restarted agent").await
    })
    .join()
    .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("the test took {:.1} s", t0.elapsed().as_secs_f64());

    for (name, st, rate, delivery) in &first.status {
        assert_eq!(*st, Some(ShownState::Active), "{name}: {:?}", first.status);
        assert!(
            rate.is_some_and(|r| r > 1_000_000) && delivery.is_some_and(|r| r > 1_000_000),
            "{name} shows no rate: {:?}",
            first.status
        );
    }
    assert!(
        saved.contains("rate:a ") && saved.contains("rate:b "),
        "{saved}"
    );
    assert!(first.loops >= 0.93, "loops {:.3} of the sum", first.loops);
    // Whole connections of one size cannot beat 8/9 of the sum here (times the wire's
    // overhead, 0.850); 4:4 gives at most 2/3.
    assert!(
        first.fresh.share >= 0.75,
        "fresh agent at once {:.3} of the sum",
        first.fresh.share
    );
    assert!(
        restarted.share >= 0.8,
        "restarted agent at once {:.3} of the sum",
        restarted.share
    );
    assert!(
        (0.58..=0.8).contains(&restarted.p0),
        "the restarted agent split {:.3} : {:.3}",
        restarted.p0,
        1.0 - restarted.p0
    );
    // Placed at once by the remembered rates: no probe to wait for (a fresh agent waits
    // at least the 300 ms of a first sample).
    let (fresh_t, _) = first.fresh.placed.clone().expect("fresh placement seen");
    let (t, on) = restarted.placed.clone().expect("restarted placement seen");
    let a = on.iter().filter(|p| *p == "a").count();
    assert!(
        t < Duration::from_millis(250) && (a == 5 || a == 6),
        "restarted agent: all 8 placed after {t:?} (fresh agent: {fresh_t:?}), {a} on a"
    );
}

/// Direct mode with `--path auto` (each slot takes an interface with a default route) and
/// a cap: both links carry through auto slots and status names their interfaces; a path
/// over its cap takes no new connection while the other can.
#[test]
fn direct_mode_takes_auto_paths_and_honours_caps() {
    if skip() {
        return;
    }
    log();
    let t0 = Instant::now();
    let net = net_with_rates("directa", &RATES);
    for (i, metric) in [(1, "10"), (2, "20")] {
        let via = format!("10.{i}.0.2");
        let dev = format!("p{}", i - 1);
        braid_testbed::cmd::ip_ns(
            &net.c,
            &[
                "route", "add", "default", "via", &via, "dev", &dev, "metric", metric,
            ],
        )
        .unwrap();
    }
    let bodies: Bodies = Arc::default();
    let _web = http(&net, bodies.clone());
    let dir: PathBuf = std::env::temp_dir().join(format!("direct-caps-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("state");
    let _ = std::fs::remove_file(&state);

    // Auto slots.
    let (c, b, ns) = (cfg(&["auto"], &state), bodies.clone(), net.c.clone());
    let (rx, shown) = thread_in(&net.c, move || async move {
        let agent = Agent::start(c).await.unwrap();
        let rx0 = [rx_bytes_in(&ns, 0), rx_bytes_in(&ns, 1)];
        batch(agent.socks.unwrap(), &b, 8, 1 << 20).await;
        let rx = [rx_bytes_in(&ns, 0) - rx0[0], rx_bytes_in(&ns, 1) - rx0[1]];
        let shown: Vec<(String, Option<String>, Option<ShownState>)> = agent
            .status()
            .snapshot()
            .paths
            .into_iter()
            .map(|p| (p.name, p.interface, p.state))
            .collect();
        (rx, shown)
    })
    .join()
    .unwrap();
    eprintln!(
        "auto: p0 {} KB, p1 {} KB; status {shown:?}",
        rx[0] >> 10,
        rx[1] >> 10
    );
    assert!(rx[0] > 1 << 20 && rx[1] > 1 << 20, "{rx:?}");
    for (name, iface) in [("auto1", "p0"), ("auto2", "p1")] {
        assert!(
            shown.iter().any(|(n, i, s)| n == name
                && i.as_deref() == Some(iface)
                && *s == Some(ShownState::Active)),
            "{name} on {iface}: {shown:?}"
        );
    }

    // A cap of 1 MB a day on b: after the first batch it is over; the second avoids it.
    let specs = ["a=p0", "b=p1,cap=1MB/day"];
    let (c, b, ns) = (cfg(&specs, &state), bodies.clone(), net.c.clone());
    let (first, second, capped) = thread_in(&net.c, move || async move {
        let agent = Agent::start(c).await.unwrap();
        let socks = agent.socks.unwrap();
        let rx0 = rx_bytes_in(&ns, 1);
        batch(socks, &b, 8, 1 << 20).await;
        let first = rx_bytes_in(&ns, 1) - rx0;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let capped = agent.status().snapshot().paths[1].state;
        let rx0 = rx_bytes_in(&ns, 1);
        batch(socks, &b, 8, 1 << 20).await;
        (first, rx_bytes_in(&ns, 1) - rx0, capped)
    })
    .join()
    .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "cap 1 MB/day on b: first batch {} KB on b, then {capped:?}, second batch {} KB on b; the test took {:.1} s",
        first >> 10,
        second >> 10,
        t0.elapsed().as_secs_f64()
    );
    assert!(first > 1 << 20, "b carried {first} bytes before its cap");
    assert_eq!(capped, Some(ShownState::Capped));
    assert!(second < 100 << 10, "b carried {second} bytes over its cap");
}
