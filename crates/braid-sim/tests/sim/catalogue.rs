//! Paper-catalogue checks (cellular aggregation, mobility, the testbed paper, the redundant
//! scheduler): deterministic simulator runs of the shipped scenarios, so these are exact
//! regressions of the numbers in docs/results.md, with margins, not timing measurements.

use crate::common;

use braid_sim::Report;

fn run(name: &str) -> Report {
    common::run_shipped(name, &[])
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

/// Goodput of `variant` for transfers of `size` bytes (the first repetition).
fn goodput(r: &Report, variant: &str, size: u64) -> f64 {
    r.results
        .iter()
        .find(|x| x.variant == variant && x.size_bytes == size)
        .map(|x| x.goodput_bps)
        .unwrap_or_else(|| panic!("no {variant} result for {size} bytes"))
}

#[test]
fn a_weak_3g_path_adds_almost_nothing_to_mixed_3g_4g_aggregation() {
    let r = run("cellular-3g4g.toml");
    let g = |v| goodput(&r, v, 4_000_000);
    let (one, two, three, four) = (
        g("1-csl3g"),
        g("2-csl3g-3hk4g"),
        g("3-plus-cmhk3g"),
        g("4-plus-smartone4g"),
    );
    assert!(two >= 3.0 * one, "2 paths {two} vs CSL-3G alone {one}");
    // The paper: adding CMHK-3G (about 1 Mbit/s, 100 ms, lossy) brings no benefit.
    assert!(
        three >= 0.97 * two && three <= 1.10 * two,
        "3 paths {three} vs 2 paths {two}"
    );
    assert!(four >= 1.15 * three, "4 paths {four} vs 3 paths {three}");
}

#[test]
fn olia_aggregates_four_lte_paths_like_lia() {
    let r = run("cellular-cc.toml");
    let lia = goodput(&r, "lia", 4_000_000);
    let olia = goodput(&r, "olia", 4_000_000);
    assert!(
        (olia - lia).abs() <= 0.05 * lia,
        "olia {olia} vs lia {lia} (4 MB)"
    );
    let olia_big = goodput(&r, "olia", 32_000_000);
    let capacity = r
        .results
        .iter()
        .find(|x| x.variant == "olia" && x.size_bytes == 32_000_000)
        .map(|x| x.capacity_bps)
        .expect("capacity");
    assert!(
        olia_big >= 0.9 * capacity,
        "olia 32 MB {olia_big} of {capacity}"
    );
}

#[test]
fn driving_with_full_wifi_coverage_aggregation_beats_the_best_single_path_and_standby_holds_3g_back(
) {
    let r = run("mobility-driving.toml");
    let g = |v| goodput(&r, v, 20_000_000);
    let best_single = g("3g-only").max(g("wifi-only-100"));
    let agg = g("aggregated-100");
    assert!(
        agg >= 1.5 * best_single,
        "aggregated {agg} vs best single path {best_single}"
    );
    // WiFi first: 3G on standby carries only what WiFi could not while out of range.
    let wf = r
        .results
        .iter()
        .find(|x| x.variant == "wifi-first-100")
        .expect("wifi-first-100");
    let g3: u64 = wf
        .paths
        .iter()
        .filter(|p| p.name == "3g")
        .map(|p| p.bytes)
        .sum();
    let all: u64 = wf.paths.iter().map(|p| p.bytes).sum();
    assert!(g3 * 5 < all, "3G carried {g3} of {all} bytes on standby");
    let ag = r
        .results
        .iter()
        .find(|x| x.variant == "aggregated-100")
        .expect("aggregated-100");
    let g3_agg: u64 = ag
        .paths
        .iter()
        .filter(|p| p.name == "3g")
        .map(|p| p.bytes)
        .sum();
    assert!(g3_agg > 2 * g3, "3G active {g3_agg} vs standby {g3}");
}
