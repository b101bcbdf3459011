//! Paper-catalogue checks (cellular aggregation, mobility, the testbed paper, the redundant
//! scheduler): deterministic simulator runs of the shipped scenarios, so these are exact
//! regressions of the numbers in docs/results.md, with margins, not timing measurements.

use braid_sim::{run_scenario, Report, Scenario};
use std::path::PathBuf;

fn run(name: &str) -> Report {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios")
        .join(name);
    let scn = Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let report = run_scenario(&scn, |_, _| {}).unwrap_or_else(|e| panic!("{e}"));
    for r in &report.results {
        assert!(
            r.verified,
            "{name}: {} not verified: {:?}",
            r.variant, r.error
        );
    }
    report
}

/// Sorted completion times of `variant` for transfers of `size` bytes.
fn completions(r: &Report, variant: &str, size: u64) -> Vec<f64> {
    let mut t: Vec<f64> = r
        .results
        .iter()
        .filter(|x| x.variant == variant && x.size_bytes == size)
        .map(|x| x.completion_s)
        .collect();
    assert!(!t.is_empty(), "no {variant} result for {size} bytes");
    t.sort_by(f64::total_cmp);
    t
}

/// The 90th percentile (nearest rank) of sorted values.
fn p90(t: &[f64]) -> f64 {
    t[(t.len() * 9).div_ceil(10) - 1]
}

#[test]
fn redundant_cuts_the_loss_tail_of_small_transfers_over_two_lossy_paths() {
    let r = run("redundant-lossy.toml");
    for size in [4_000, 8_000] {
        let m = completions(&r, "minrtt", size);
        let d = completions(&r, "redundant", size);
        assert!(
            p90(&d) <= 0.6 * p90(&m),
            "{size} B: redundant p90 {} s vs minrtt {} s",
            p90(&d),
            p90(&m)
        );
        let (dm, mm) = (d[d.len() / 2], m[m.len() / 2]);
        assert!(
            dm <= mm,
            "{size} B: redundant median {dm} s vs minrtt {mm} s"
        );
    }
}
