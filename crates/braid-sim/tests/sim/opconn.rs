//! Paper 003's comparison at the connection level (`scenarios/operetta-connections.toml`,
//! `kind = "connections"`): many connections placed by round robin, weighted round robin or
//! OPERETTA (braid's connsched); as in the paper's evaluation (section VI.B.1, "we fix gamma
//! at 25 %") a quarter of them go to an OPERETTA-enabled server and are split over the
//! interfaces (equally, by rate, or by equation 9), the rest whole on one interface. Two of
//! the scenario's five repetitions, to stay fast; docs/results.md has all five.

use braid_sim::{run_scenario, Report, RunResult, Scenario};
use std::path::PathBuf;

fn run(only: &[&str]) -> Report {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/operetta-connections.toml");
    let mut scn = Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
    scn.workload.repetitions = 2;
    scn.variants.retain(|v| only.contains(&v.name.as_str()));
    assert_eq!(scn.variants.len(), only.len());
    let r = run_scenario(&scn, |_, _| {}).unwrap_or_else(|e| panic!("{e}"));
    assert!(r.all_verified(), "{}", r.table());
    r
}

/// Mean goodput (Mbit/s) and energy per bit (nJ) of a variant over the repetitions.
fn mean(r: &Report, v: &str) -> (f64, f64) {
    let rs: Vec<&RunResult> = r.results.iter().filter(|x| x.variant == v).collect();
    let g = rs.iter().map(|x| x.goodput_bps).sum::<f64>() / rs.len() as f64 / 1e6;
    let bits: f64 = rs.iter().map(|x| x.size_bytes as f64 * 8.0).sum();
    let e = rs.iter().map(|x| x.energy_j).sum::<f64>() / bits * 1e9;
    (g, e)
}

#[test]
fn operetta_beats_connection_level_round_robin_in_throughput_and_energy() {
    let r = run(&["rr", "wrr", "operetta-a0.5", "operetta-a1", "os-gsm"]);
    let (rr, wrr, mid, xput, os) = (
        mean(&r, "rr"),
        mean(&r, "wrr"),
        mean(&r, "operetta-a0.5"),
        mean(&r, "operetta-a1"),
        mean(&r, "os-gsm"),
    );
    println!("rr {rr:.3?} wrr {wrr:.3?} a0.5 {mid:.3?} a1 {xput:.3?} os-gsm {os:.3?}");
    // Round robin gives Bluetooth (0.7 Mbit/s) a third of the connections: it finishes last.
    // OPRTA-XPUT: at least +50 % throughput (measured +77 % over five repetitions).
    assert!(xput.0 >= 1.5 * rr.0, "alpha 1 {xput:?} vs rr {rr:?}");
    // OPRTA-MID: ahead of round robin in both throughput and energy per bit, and at its
    // target, 0.7 + 0.5 * (1 + 2) = 2.2 Mbit/s.
    assert!(
        mid.0 >= 1.1 * rr.0 && mid.0 >= 2.2,
        "alpha 0.5 {mid:?} vs rr {rr:?}"
    );
    assert!(mid.1 <= 0.95 * rr.1, "alpha 0.5 {mid:?} vs rr {rr:?}");
    // "OPRTA-XPUT consumes almost the same energy as the weighted round robin" with more
    // throughput.
    assert!(
        xput.0 > wrr.0 && (xput.1 / wrr.1 - 1.0).abs() < 0.03,
        "{xput:?} {wrr:?}"
    );
    // "+150 % ... compared to the current OSs, with the same energy consumption": against
    // everything on GSM (the fastest interface), +75 % at the same energy per bit.
    assert!(
        xput.0 >= 1.6 * os.0 && xput.1 <= 1.02 * os.1,
        "{xput:?} {os:?}"
    );
}
