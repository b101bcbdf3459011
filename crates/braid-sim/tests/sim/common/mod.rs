//! Shared by the simulator's target tests: running a shipped scenario file.

use braid_sim::{run_scenario, Report, Scenario};
use std::path::PathBuf;

/// Runs `scenarios/<name>` (only the variants in `only`, or all when it is empty); every
/// transfer must arrive complete and verified, within the links' capacity.
pub fn run_shipped(name: &str, only: &[&str]) -> Report {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios")
        .join(name);
    let mut scn = Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
    if !only.is_empty() {
        scn.variants.retain(|v| only.contains(&v.name.as_str()));
        assert_eq!(scn.variants.len(), only.len(), "{name}: missing variants");
    }
    let report = run_scenario(&scn, |_, _| {}).unwrap_or_else(|e| panic!("{e}"));
    for r in &report.results {
        assert!(
            r.verified,
            "{name}: {} not verified: {:?}",
            r.variant, r.error
        );
        // Goodput can never beat the links' capacity (a trace that ran out once made it).
        assert!(
            r.efficiency <= 1.0,
            "{name}: {} efficiency {} above 1",
            r.variant,
            r.efficiency
        );
    }
    report
}
