//! The foundation issue's simulated targets, checked on every test run. The simulator is
//! deterministic, so these are exact regressions, not timing measurements.

use crate::common;

use braid_sim::Report;

fn run(name: &str) -> Report {
    common::run_shipped(name, &[])
}

fn result<'a>(r: &'a Report, variant: &str) -> &'a braid_sim::RunResult {
    r.results
        .iter()
        .find(|x| x.variant == variant)
        .expect("variant present")
}

#[test]
fn two_unequal_paths_reach_93_percent_of_capacity() {
    let r = run("two-paths.toml");
    let m = result(&r, "minrtt");
    assert!(m.efficiency >= 0.93, "efficiency {}", m.efficiency);
    // Both paths carry data.
    assert!(m.paths.iter().all(|p| p.bytes > 5_000_000), "{:?}", m.paths);
}

#[test]
fn four_paths_reach_90_percent_of_capacity() {
    let r = run("four-paths.toml");
    let m = result(&r, "minrtt");
    assert!(m.efficiency >= 0.90, "efficiency {}", m.efficiency);
    assert_eq!(m.paths.len(), 4);
}

#[test]
fn bbr_keeps_85_percent_of_lossless_goodput_at_one_percent_loss() {
    let lossless = result(&run("two-paths.toml"), "bbr").goodput_bps;
    let lossy = run("two-paths-loss.toml");
    let reps: Vec<_> = lossy
        .results
        .iter()
        .filter(|r| r.variant == "bbr")
        .collect();
    assert_eq!(reps.len(), 3);
    for r in reps {
        assert!(
            r.goodput_bps >= 0.85 * lossless,
            "rep {}: bbr {} vs lossless {lossless}",
            r.repetition,
            r.goodput_bps
        );
    }
    // The loss-based controller is the contrast: it backs off on random loss.
    let cubic = result(&lossy, "cubic").goodput_bps;
    assert!(cubic < 0.5 * lossless, "cubic {cubic} lossless {lossless}");
}

#[test]
fn short_transfer_adds_no_round_trip() {
    let r = run("short-transfer.toml");
    // Fast path: 20 ms RTT, 50 Mbit/s; 8 KB (8000 bytes) at its rate.
    let bound = 1.1 * (0.020 + 8000.0 * 8.0 / 50e6);
    for x in &r.results {
        assert!(x.completion_s <= bound, "{} s > {bound} s", x.completion_s);
    }
}

#[test]
fn same_scenario_and_seed_give_the_same_run_bit_for_bit() {
    let a = run("two-paths-loss.toml");
    let b = run("two-paths-loss.toml");
    assert_eq!(
        serde_json::to_string(&a.results).unwrap(),
        serde_json::to_string(&b.results).unwrap()
    );
}

fn median_completion(r: &Report, variant: &str) -> f64 {
    let mut v: Vec<f64> = r
        .results
        .iter()
        .filter(|x| x.variant == variant)
        .map(|x| x.completion_s)
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
fn ecf_completes_one_megabyte_transfers_15_percent_sooner_than_minrtt() {
    let r = run("ecf-blest.toml");
    let minrtt = median_completion(&r, "minrtt");
    let ecf = median_completion(&r, "ecf");
    assert!(ecf <= 0.85 * minrtt, "ecf {ecf} s vs minrtt {minrtt} s");
    // ECF is as good as using the fast path alone.
    let fast = median_completion(&r, "fast-only");
    assert!(ecf <= 1.02 * fast, "ecf {ecf} s vs fast-only {fast} s");
}

#[test]
fn four_cellular_paths_give_three_times_the_median_single_path_for_4mb() {
    let r = run("cellular-4g.toml");
    let goodput = |variant: &str| {
        r.results
            .iter()
            .find(|x| x.variant == variant && x.size_bytes == 4_000_000)
            .map(|x| x.goodput_bps)
            .expect("4 MB result")
    };
    let mut single: Vec<f64> = ["csl", "3hk", "cmhk", "smartone"]
        .iter()
        .map(|v| goodput(v))
        .collect();
    single.sort_by(f64::total_cmp);
    let median = (single[1] + single[2]) / 2.0;
    for v in ["4-cubic", "4-lia", "4-balia"] {
        let g = goodput(v);
        assert!(
            g >= 3.0 * median,
            "{v}: {g} vs median single path {median} ({:.2}x)",
            g / median
        );
    }
}
