//! The link model's effects as the transport sees them, end to end: half-duplex airtime,
//! capacity traces, blackouts in the capacity figure, and interface energy; and packet
//! protection (`protection = true`), which must cost no goodput.

use braid_conn::Received;
use braid_core::Instant;
use braid_sim::{run_scenario, Report, Scenario};
use bytes::BytesMut;
use std::path::{Path, PathBuf};

fn run(text: &str) -> Report {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/x.toml");
    let scn = Scenario::from_toml_str(text, &dir).unwrap_or_else(|e| panic!("{e}"));
    let r = run_scenario(&scn, |_, _| {}).unwrap();
    assert!(r.all_verified(), "{}", r.table());
    r
}

fn one_path(extra: &str, size: &str) -> String {
    format!(
        "name = \"t\"\n[[path]]\nname = \"p\"\nrate = \"20Mbit\"\ndelay = \"10ms\"\nqueue = \"60KB\"\n{extra}\n\
         [workload]\nsize = \"{size}\"\n[[variant]]\nname = \"v\"\n"
    )
}

#[test]
fn half_duplex_acks_cost_airtime() {
    let full = run(&one_path("", "8MB"));
    // 802.11-like: every frame pays 150 us of airtime on top of its bytes, and the ACKs
    // flowing up share the medium with the data flowing down.
    let half = run(&one_path(
        "half_duplex = true\nframe_overhead = \"150us\"",
        "8MB",
    ));
    let (f, h) = (full.results[0].goodput_bps, half.results[0].goodput_bps);
    // Data frame: 1500 B = 600 us at 20 Mbit/s, +150 us. One ACK frame every two data
    // frames: ~30 us + 150 us. Expect about 1200 / (1500 + 180) of the full-duplex goodput.
    let expect = 1200.0 / 1680.0;
    assert!(
        (h / f - expect).abs() < 0.06,
        "half {h} full {f} ratio {} expected ~{expect}",
        h / f
    );
}

#[test]
fn a_capacity_trace_sets_the_rate_and_the_capacity_figure() {
    // 64 MB lasts past the trace's first two steps (50 Mbit/s for 5 s, then 35 Mbit/s).
    let text = one_path("trace = \"traces/example.csv\"", "64MB");
    let r = run(&text);
    let x = &r.results[0];
    // The example trace starts at 50 Mbit/s and falls: capacity is between its extremes
    // and the transport tracks it.
    assert!(
        x.capacity_bps < 50e6 && x.capacity_bps > 10e6,
        "capacity {}",
        x.capacity_bps
    );
    assert!(x.efficiency > 0.80, "efficiency {}", x.efficiency);
}

#[test]
fn blackouts_count_as_zero_capacity() {
    let r = run(&one_path(
        "blackouts = [{ at = \"1s\", duration = \"2s\" }]",
        "16MB",
    ));
    let x = &r.results[0];
    let t = x.completion_s;
    // 20 Mbit/s except for 2 s of the transfer.
    let expect = 20e6 * (t - 2.0) / t;
    assert!(
        (x.capacity_bps - expect).abs() / expect < 0.02,
        "capacity {} expected {expect}",
        x.capacity_bps
    );
    assert!(t > 2.0 + 16e6 * 8.0 / 20e6);
}

#[test]
fn energy_is_reported_per_path_and_in_total() {
    let text = "name = \"e\"\n\
        [[path]]\nname = \"wifi\"\nrate = \"20Mbit\"\ndelay = \"10ms\"\nqueue = \"60KB\"\n\
        [path.energy]\nactive_w = 1.25\nidle_w = 0.075\n\
        [[path]]\nname = \"cell\"\nrate = \"2Mbit\"\ndelay = \"50ms\"\nqueue = \"30KB\"\n\
        [path.energy]\nactive_w = 1.0\nidle_w = 0.0\nramp_j = 2.5\ntail_s = 6.0\n\
        [workload]\nsize = \"4MB\"\n\
        [[variant]]\nname = \"wifi-only\"\npaths = [\"wifi\"]\n\
        [[variant]]\nname = \"both\"\n";
    let r = run(text);
    let wifi = &r.results[0];
    let both = &r.results[1];
    // WiFi alone: busy almost all the time at 1.25 W.
    let t = wifi.completion_s;
    assert!(
        wifi.energy_j > 1.0 * t && wifi.energy_j <= 1.25 * t + 1e-9,
        "{} J over {t} s",
        wifi.energy_j
    );
    // Both: the cellular interface stays in its high-power tail for the whole transfer.
    let cell = both.paths.iter().find(|p| p.name == "cell").unwrap();
    assert!(
        cell.energy_j >= 0.99 * both.completion_s,
        "cell {} J",
        cell.energy_j
    );
    let sum: f64 = both.paths.iter().map(|p| p.energy_j).sum();
    assert!((sum - both.energy_j).abs() < 1e-9);
}

#[test]
fn protection_on_gives_the_goodput_of_protection_off_and_seals_every_packet() {
    let text = one_path("loss = 0.002", "8MB");
    let plain = run(&text);
    let sealed = run(&format!("{text}protection = true\n"));
    let (p, s) = (plain.results[0].goodput_bps, sealed.results[0].goodput_bps);
    assert!((s / p - 1.0).abs() < 0.02, "protected {s} plain {p}");
    // The protected world's packets carry a real tag (the plain world's tag space is
    // zeros), and a flipped byte makes the other end drop the packet.
    let scn =
        Scenario::from_toml_str(&format!("{text}protection = true\n"), Path::new("t")).unwrap();
    let plans = braid_sim::runner::plan(&scn).unwrap();
    let mut w = braid_sim::runner::build_world(&scn, &plans[0], 1);
    let mut buf = vec![0u8; 2048];
    let t = w.client.poll_transmit(Instant(0), &mut buf, 1).unwrap();
    let tag = &buf[t.len - 16..t.len];
    assert!(tag.iter().any(|&b| b != 0), "a tag, not zeros: {tag:?}");
    buf[t.len - 20] ^= 1;
    let r = Received {
        from: t.destination,
        local: None,
        transport: t.transport,
        data: BytesMut::from(&buf[..t.len]),
        header: None,
    };
    assert!(
        !w.server.handle_datagram(Instant(1), r),
        "a flipped byte is refused"
    );
    assert_eq!(w.server.drops().unopened, 1);
}
