//! Super-aggregation targets (issue 5, paper 000), checked on every test run on the
//! scenarios users run (`scenarios/super-*.toml`). The simulator is deterministic: these
//! are exact regressions, and each compares the mechanism with the same stack without it
//! in the same run, so a mechanism that stops working fails its test.

use crate::common;

use braid_sim::{Report, RunResult};

/// Runs only `variants` of a shipped scenario.
fn run(name: &str, variants: &[&str]) -> Report {
    common::run_shipped(name, variants)
}

fn get<'a>(r: &'a Report, variant: &str) -> &'a RunResult {
    r.results.iter().find(|x| x.variant == variant).unwrap()
}

fn mbit(r: &RunResult) -> f64 {
    r.goodput_bps / 1e6
}

#[test]
fn ack_offload_gives_25_percent_more_on_half_duplex_wifi_with_3g() {
    let r = run("super-ack-offload.toml", &["aggregated", "ack-offload"]);
    let (base, off) = (get(&r, "aggregated"), get(&r, "ack-offload"));
    assert!(
        off.goodput_bps >= 1.25 * base.goodput_bps,
        "ack offload {:.2} Mbit/s vs every ACK on Wi-Fi {:.2}",
        mbit(off),
        mbit(base)
    );
    let acks = |x: &RunResult| x.paths.iter().map(|p| p.acks_offloaded).sum::<u64>();
    assert_eq!(acks(base), 0, "the mechanism is off in the baseline");
    assert!(acks(off) > 10_000, "{:?}", off.paths);
}

#[test]
fn blackout_freeze_reaches_90_percent_of_ideal_under_2s_blackouts_every_20s() {
    let r = run(
        "super-blackout.toml",
        &["no-blackouts", "aggregated", "freeze"],
    );
    // Ideal: goodput without blackouts times the fraction of time Wi-Fi is up (18 s of 20).
    let ideal = 0.9 * get(&r, "no-blackouts").goodput_bps;
    let (base, freeze) = (get(&r, "aggregated"), get(&r, "freeze"));
    assert!(
        freeze.goodput_bps >= 0.9 * ideal,
        "freeze {:.2} Mbit/s, ideal {:.2}",
        mbit(freeze),
        ideal / 1e6
    );
    // The same stack without the freeze loses time after every blackout.
    assert!(
        freeze.goodput_bps >= 1.05 * base.goodput_bps,
        "freeze {:.2} vs without {:.2}",
        mbit(freeze),
        mbit(base)
    );
    let blackouts: u64 = freeze.paths.iter().map(|p| p.blackouts).sum();
    assert!(blackouts >= 3, "{:?}", freeze.paths);
    assert_eq!(base.paths.iter().map(|p| p.blackouts).sum::<u64>(), 0);
}

#[test]
fn random_loss_recovery_keeps_80_percent_of_lossless_at_200ms_and_1_percent_loss() {
    let r = run(
        "super-loss.toml",
        &["lossless", "aggregated", "loss-recovery"],
    );
    let lossless = get(&r, "lossless").goodput_bps;
    let (base, lr) = (get(&r, "aggregated"), get(&r, "loss-recovery"));
    assert!(
        lr.goodput_bps >= 0.8 * lossless,
        "loss recovery {:.2} Mbit/s, lossless {:.2}",
        mbit(lr),
        lossless / 1e6
    );
    assert!(
        lr.goodput_bps >= 2.0 * base.goodput_bps,
        "loss recovery {:.2} vs without {:.2}",
        mbit(lr),
        mbit(base)
    );
    assert!(lr.paths.iter().map(|p| p.random_losses).sum::<u64>() > 100);
}

#[test]
fn super_beats_the_papers_integrated_189_percent_with_every_impairment_at_once() {
    let r = run("super-integrated.toml", &["aggregated", "super"]);
    let (base, sup) = (get(&r, "aggregated"), get(&r, "super"));
    // The paper's integrated walk: +189 % (2.89x) over default TCP.
    assert!(
        sup.goodput_bps >= 2.89 * base.goodput_bps,
        "super {:.2} Mbit/s vs aggregated {:.2}",
        mbit(sup),
        mbit(base)
    );
}

/// IP-layer Mbit/s the Wi-Fi path carried down in a run (the paper's UDP and TCP have the
/// same packet size; braid's packets are full 1500-byte ones).
fn wifi_ip_mbit(r: &RunResult) -> f64 {
    let w = r.paths.iter().find(|p| p.name.starts_with("wifi")).unwrap();
    w.bytes as f64 * 8.0 / r.completion_s / 1e6
}

/// The self-contention gap: a one-way UDP flood's rate (the path's capacity on an 802.11
/// path) over what braid's stream, whose ACKs share the medium, carries: UDP / TCP - 1.
fn gap(r: &RunResult) -> f64 {
    r.capacity_bps / 1e6 / wifi_ip_mbit(r) - 1.0
}

/// The 802.11 runs of a scenario: Wi-Fi alone, aggregated, ACK offload.
fn wifi_runs(name: &str) -> (RunResult, RunResult, RunResult) {
    let r = run(name, &["wifi-only", "aggregated", "ack-offload"]);
    let g = |v: &str| get(&r, v).clone();
    (g("wifi-only"), g("aggregated"), g("ack-offload"))
}

#[test]
fn the_80211g_contention_model_gives_the_papers_30_percent_gap_and_offload_25_percent() {
    let (alone, base, off) = wifi_runs("super-ack-offload-80211g.toml");
    // Paper: UDP 30 % above TCP on 802.11g; within 20 % of it. ARF and the uplink's
    // calibrated frame errors (6 %) make it 29.5 %; without them it is 26 %.
    let g = gap(&alone);
    assert!((0.24..=0.36).contains(&g), "gap {:.1} %", g * 100.0);
    // Issue 25's bar: ACK offload at least +25 % over every ACK on Wi-Fi (paper +37 %).
    assert!(
        off.goodput_bps >= 1.25 * base.goodput_bps,
        "ack offload {:.2} Mbit/s vs every ACK on Wi-Fi {:.2}",
        mbit(&off),
        mbit(&base)
    );
    assert!(off.efficiency >= 0.85, "{}", off.efficiency);
}

#[test]
fn the_80211b_model_gives_the_papers_70_percent_gap_and_offload_takes_it_back() {
    let (alone, base, off) = wifi_runs("super-ack-offload-80211b.toml");
    // Paper: UDP 70 % above TCP on 802.11b; within 20 % of it. ARF on a laptop whose frames
    // the access point loses 26 % of the time (calibrated); 18 % without either, 29 %
    // with the losses but fixed rates.
    let g = gap(&alone);
    assert!((0.56..=0.84).contains(&g), "gap {:.1} %", g * 100.0);
    // Measured +52 % over every ACK on Wi-Fi (issue 25's +100 % is a miss there: offload
    // at most takes back the gap, docs/results.md) and +100.2 % over Wi-Fi alone, the
    // paper's baseline (default TCP). That is the model's ceiling, (UDP + 3G) / TCP, so
    // the bar here keeps a margin below it.
    assert!(
        off.goodput_bps >= 1.45 * base.goodput_bps,
        "ack offload {:.2} Mbit/s vs every ACK on Wi-Fi {:.2}",
        mbit(&off),
        mbit(&base)
    );
    assert!(
        off.goodput_bps >= 1.95 * alone.goodput_bps,
        "ack offload {:.2} Mbit/s vs Wi-Fi alone {:.2}",
        mbit(&off),
        mbit(&alone)
    );
    // Offload can at most remove the gap: Wi-Fi at its UDP rate.
    assert!(wifi_ip_mbit(&off) <= alone.capacity_bps / 1e6);
}

/// Two 10 Mbit/s paths, 20 and 30 ms one way, and a 16 MB download with the agent's
/// stack; with `stall`, the second path's uplink (the way back of its acknowledgements)
/// is dark from 2 s to 5 s while its downlink keeps working, as a cellular uplink that
/// stalls for seconds does (the AT&T trace of field-mahimahi has one of 2.2 s).
fn uplink_stall(stall: bool) -> RunResult {
    let up = if stall {
        "[path.up]\nblackouts = [{ at = \"2s\", duration = \"3s\" }]\n"
    } else {
        ""
    };
    let text = format!(
        "name = \"uplink-stall\"\n\
         [[path]]\nname = \"a\"\nrate = \"10Mbit\"\ndelay = \"20ms\"\nqueue = \"50ms\"\n\
         [[path]]\nname = \"b\"\nrate = \"10Mbit\"\ndelay = \"30ms\"\nqueue = \"50ms\"\n{up}\
         [workload]\nsize = \"16MB\"\nprobe = false\n[[variant]]\nname = \"default\"\n"
    );
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/x.toml");
    let scn = braid_sim::Scenario::from_toml_str(&text, &dir).unwrap_or_else(|e| panic!("{e}"));
    let r = braid_sim::run_scenario(&scn, |_, _| {}).unwrap();
    assert!(r.all_verified(), "{}", r.table());
    r.results[0].clone()
}

/// The bug: the server froze the path whose acknowledgements stopped and told the agent,
/// and the agent froze its side too; but the next packet that arrived on the path (its
/// downlink worked) unfroze the agent's side, which sent its acknowledgements back into
/// the dark uplink, and the server's side stayed frozen: the downlink idled for the whole
/// stall. A freeze the peer reported now ends only on an acknowledgement of ours, and the
/// acknowledgements of the path travel on the other one meanwhile.
#[test]
fn an_uplink_stall_does_not_idle_the_downlink() {
    let (clear, stalled) = (uplink_stall(false), uplink_stall(true));
    // Idle for the 3 s of the stall, the path would cost about 3 s x 10 Mbit/s of the 16 MB
    // (about a fifth of the goodput); detecting the stall costs a few hundred ms.
    assert!(
        stalled.goodput_bps >= 0.9 * clear.goodput_bps,
        "with the uplink stalled {:.2} Mbit/s, without {:.2}",
        mbit(&stalled),
        mbit(&clear)
    );
}
