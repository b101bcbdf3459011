//! OPERETTA (paper 003) end to end in the simulator: `scenarios/operetta-alpha.toml` (the
//! paper's three interfaces and powers, Table III) at alpha 0, 0.25, 0.5, 0.75 and 1.
//!
//! For each alpha the test checks, against the paper's linear program solved here
//! independently (by enumerating its vertices, not with the scheduler's greedy fill):
//! * energy per bit within 2 % of the LP's optimum, and
//! * throughput at least the target `T = r_min + alpha * (sum of the other rates)`.
//!
//! Units, so that the LP and the measurement count the same things:
//! * `r_j` is what path `j` can deliver to the application (goodput): the link's rate (IP
//!   layer, as the scenario gives it) times the framing efficiency of a full data packet,
//!   [`FRAMING`] (IP/UDP, braid header, STREAM frame header and AEAD tag take 65 of every
//!   1500 bytes). The target and the LP use these achievable goodputs.
//! * Energy is what `braid sim` reports: every interface's active power times its airtime
//!   (both directions; idle power 0, no ramp, no tail, as the paper's `a_j * t_j`), over the
//!   whole transfer. Energy per bit is that divided by the bits the application received.
//!   Lost and resent packets therefore count against the scheduler.
//! * Throughput is measured in steady state: the application bytes received between a
//!   quarter and three quarters of the transfer, over that time. The first quarter holds
//!   the request's round trip and slow start on every path (with a 200 ms queue, several
//!   seconds at these rates); the last quarter the drain of the slowest path's queue. Both
//!   are start-up and tail effects of the transport, not of the schedule the paper's LP
//!   describes, which is a rate. A steady-state window is where `T` can be checked.
//!   Throughput may fall short of `T` by at most [`SHORTFALL`]: a link that drops a packet
//!   from a full queue spends the airtime on its resend, so goodput sits just under
//!   `rate × FRAMING` even on a saturated path.
//!
//! The test can fail: minrtt and rr are run through the same checks and must fail them
//! at some alpha (they use every path whatever the user asked for).

use braid_core::PathId;
use braid_sim::runner::{build_world, plan, repetition_seed, Handshake, Transfer};
use braid_sim::world::{App, Endpoints, Outcome};
use braid_sim::{Nanos, Scenario};
use std::path::PathBuf;

/// Application bytes per wire byte of a full data packet: 1500 bytes on the wire (1472 of
/// UDP payload + 28 of IPv4/UDP), of which 1435 are stream data (minus the 13-byte packet
/// header, the 8-byte STREAM frame header and the 16-byte tag).
const FRAMING: f64 = 1435.0 / 1500.0;
/// Energy per bit must be within this fraction of the LP optimum.
const ENERGY_TOLERANCE: f64 = 0.02;
/// Steady-state throughput may be this fraction below the target (see the module doc).
const SHORTFALL: f64 = 0.01;

/// A path as the LP sees it.
#[derive(Debug, Clone, Copy)]
struct Iface {
    /// Achievable goodput, bits per second.
    rate: f64,
    /// Active power, watts.
    power: f64,
}

/// Joules per bit of the paper's LP at target `t` (bits per second): minimise
/// `sum_j a_j w_j / r_j` subject to `sum_j w_j = 1`, `0 <= w_j <= r_j / t`. The optimum of a
/// bounded LP is at a vertex; here a vertex has every `w_j` but at most one at a bound.
/// Enumerate them all: each choice of the free index and of the bounds of the others.
fn lp_optimum(ifs: &[Iface], t: f64) -> f64 {
    let n = ifs.len();
    let mut best = f64::INFINITY;
    for free in 0..n {
        for mask in 0u32..(1 << n) {
            let mut w = vec![0.0; n];
            let mut sum = 0.0;
            for j in (0..n).filter(|&j| j != free) {
                if mask & (1 << j) != 0 {
                    w[j] = ifs[j].rate / t;
                    sum += w[j];
                }
            }
            w[free] = 1.0 - sum;
            let cap = ifs[free].rate / t;
            if w[free] < -1e-12 || w[free] > cap + 1e-12 {
                continue;
            }
            let e: f64 = (0..n).map(|j| ifs[j].power * w[j] / ifs[j].rate).sum();
            best = best.min(e);
        }
    }
    best
}

/// The target of the paper's utility: the least-energy-per-bit interface's rate plus alpha
/// times the others'.
fn target(ifs: &[Iface], alpha: f64) -> f64 {
    let cheapest = ifs
        .iter()
        .min_by(|a, b| (a.power / a.rate).total_cmp(&(b.power / b.rate)))
        .expect("paths");
    let all: f64 = ifs.iter().map(|i| i.rate).sum();
    cheapest.rate + alpha * (all - cheapest.rate)
}

/// The transfer, noting when the receiving application had a quarter and three quarters.
struct Timed {
    inner: Transfer,
    quarter: Option<Nanos>,
    three_quarters: Option<Nanos>,
}

impl App for Timed {
    fn on_wake(&mut self, now: Nanos, w: &mut Endpoints<'_>) -> bool {
        let done = self.inner.on_wake(now, w);
        let got = self.inner.checker.received();
        if self.quarter.is_none() && got >= self.inner.size / 4 {
            self.quarter = Some(now);
        }
        if self.three_quarters.is_none() && got >= self.inner.size * 3 / 4 {
            self.three_quarters = Some(now);
        }
        done
    }
}

/// Energy per bit (J) and steady-state throughput (bit/s) of one variant.
fn measure(scn: &Scenario, variant: &str) -> (f64, f64) {
    let plans = plan(scn).expect("plan");
    let plan = plans
        .iter()
        .find(|p| p.variant.name == variant)
        .unwrap_or_else(|| panic!("no variant {variant}"));
    let seed = repetition_seed(scn, 0);
    let mut world = build_world(scn, plan, seed);
    let ids: Vec<PathId> = plan.variant.paths.iter().map(|&i| i as PathId).collect();
    let hs = world.run(scn.time_limit, &mut Handshake { paths: ids.clone() });
    assert_eq!(hs, Outcome::Done, "{variant}: handshake");
    // The agent's costs reached the sender (the server schedules a download).
    for &id in &ids {
        assert_eq!(
            world.server.session_mut().path_cost(id),
            world.client.session_mut().path_cost(id),
            "{variant}: path {id} cost at the server"
        );
        assert!(world.server.session_mut().path_cost(id).is_some());
    }
    let size = scn.workload.sizes[0];
    let start = world.now();
    let e0: f64 = ids
        .iter()
        .map(|&id| world.link_mut(id).expect("link").energy_j_until(start))
        .sum();
    let mut app = Timed {
        inner: Transfer::new(scn.workload.direction, size, 0x0be7),
        quarter: None,
        three_quarters: None,
    };
    let out = world.run(start + scn.time_limit, &mut app);
    assert_eq!(out, Outcome::Done, "{variant}: transfer");
    assert_eq!(app.inner.checker.received(), size);
    let end = app.inner.completed.expect("completed");
    let e1: f64 = ids
        .iter()
        .map(|&id| world.link_mut(id).expect("link").energy_j_until(end))
        .sum();
    let (q1, q3) = (
        app.quarter.expect("quarter"),
        app.three_quarters.expect("3/4"),
    );
    let steady_bits = (size * 3 / 4 - size / 4) as f64 * 8.0;
    let throughput = steady_bits / ((q3 - q1) as f64 / 1e9);
    ((e1 - e0) / (size as f64 * 8.0), throughput)
}

fn scenario() -> Scenario {
    let file =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/operetta-alpha.toml");
    Scenario::load(&file).unwrap_or_else(|e| panic!("{e}"))
}

fn interfaces(scn: &Scenario) -> Vec<Iface> {
    scn.paths
        .iter()
        .map(|p| Iface {
            rate: p.down.rate.mean_rate() as f64 * FRAMING,
            power: p.energy.active_w - p.energy.idle_w,
        })
        .collect()
}

/// Whether `variant` meets both checks at `alpha`; the numbers for the message.
fn check(scn: &Scenario, ifs: &[Iface], variant: &str, alpha: f64) -> (bool, String) {
    check_within(scn, ifs, variant, alpha, ENERGY_TOLERANCE, SHORTFALL)
}

/// [`check`] with its own tolerances.
fn check_within(
    scn: &Scenario,
    ifs: &[Iface],
    variant: &str,
    alpha: f64,
    energy_tolerance: f64,
    shortfall: f64,
) -> (bool, String) {
    let t = target(ifs, alpha);
    let opt = lp_optimum(ifs, t);
    let (e, thr) = measure(scn, variant);
    let energy_ok = (e - opt).abs() <= energy_tolerance * opt;
    let thr_ok = thr >= t * (1.0 - shortfall);
    let msg = format!(
        "{variant} at alpha {alpha}: energy {:.1} nJ/bit (LP optimum {:.1}, {:+.2} %), \
         throughput {:.0} kbit/s (target {:.0})",
        e * 1e9,
        opt * 1e9,
        (e / opt - 1.0) * 100.0,
        thr / 1e3,
        t / 1e3
    );
    (energy_ok && thr_ok, msg)
}

const ALPHAS: [(f64, &str); 5] = [
    (0.0, "operetta-0"),
    (0.25, "operetta-0.25"),
    (0.5, "operetta-0.5"),
    (0.75, "operetta-0.75"),
    (1.0, "operetta-1"),
];

#[test]
fn operetta_meets_the_lp_optimum_and_the_target_at_every_alpha() {
    let scn = scenario();
    let ifs = interfaces(&scn);
    for (alpha, variant) in ALPHAS {
        let (ok, msg) = check(&scn, &ifs, variant, alpha);
        eprintln!("{msg}");
        assert!(ok, "{msg}");
    }
}

#[test]
fn schedulers_blind_to_energy_fail_the_same_checks() {
    let scn = scenario();
    let ifs = interfaces(&scn);
    for blind in ["minrtt", "rr"] {
        let results: Vec<(bool, String)> = ALPHAS
            .iter()
            .map(|&(alpha, _)| check(&scn, &ifs, blind, alpha))
            .collect();
        for (_, m) in &results {
            eprintln!("{m}");
        }
        assert!(
            results.iter().any(|(ok, _)| !ok),
            "{blind} passed at every alpha: the checks cannot tell schedulers apart"
        );
    }
}

#[test]
fn the_lp_solver_agrees_with_hand_solutions() {
    // Table III as given (rates in Mbit/s, powers in W): alpha 0 uses IF2 only,
    // alpha 1 every interface at its full rate.
    let ifs = [
        Iface {
            rate: 1.0,
            power: 0.634,
        },
        Iface {
            rate: 0.7,
            power: 0.095,
        },
        Iface {
            rate: 2.0,
            power: 0.900,
        },
    ];
    assert!((lp_optimum(&ifs, target(&ifs, 0.0)) - 0.095 / 0.7).abs() < 1e-12);
    assert!((lp_optimum(&ifs, target(&ifs, 1.0)) - 1.629 / 3.7).abs() < 1e-12);
    // alpha 0.5: T = 2.2, IF2 full (w = 0.7/2.2), IF3 the rest (1.5/2.2).
    let e = 0.095 / 2.2 + 0.9 * (1.5 / 2.2) / 2.0;
    assert!((lp_optimum(&ifs, target(&ifs, 0.5)) - e).abs() < 1e-12);
}

#[test]
fn operetta_without_rate_hints_estimates_rates_and_still_meets_the_checks() {
    // The agent knows each interface's power but not its rate: the scheduler must measure
    // rates itself, including those of paths its allocation leaves unused (probing). The
    // issue's bounds: within 5 % of the LP optimum's energy per bit, at least 0.95 of the
    // target throughput (with rate hints the test above holds 2 % and 0.99).
    let mut scn = scenario();
    for p in &mut scn.paths {
        p.rate_hint = None;
    }
    let ifs = interfaces(&scn);
    let mut failures = Vec::new();
    for (alpha, variant) in [
        (0.0, "operetta-0"),
        (0.5, "operetta-0.5"),
        (1.0, "operetta-1"),
    ] {
        let (ok, msg) = check_within(&scn, &ifs, variant, alpha, 0.05, 0.05);
        eprintln!("{msg}");
        if !ok {
            failures.push(msg);
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// `scenarios/operetta-sets.toml`'s points (the paper's interface set and three others,
/// no rate hints), the paper's first.
fn sets() -> Vec<(String, Scenario)> {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/operetta-sets.toml");
    braid_sim::sweep::load(&file)
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(|p| (p.label, p.scenario))
        .collect()
}

#[test]
fn operetta_without_rate_hints_meets_the_bounds_on_three_more_interface_sets() {
    // Issue 25's bounds (5 % of the LP optimum's energy per bit, 0.95 of the target) at
    // alpha 0, 0.5 and 1 on the sets beyond the paper's (which the test above covers). At
    // alpha 0.5 every set has a path whose first samples, taken in slow start, are far below
    // its capacity (cheap-middle's 30 Mbit/s path: 0.7 Mbit/s); before such a path was
    // measured to its full bandwidth, alpha 0.5 reached 0.84, 0.83 and 0.37 of the target.
    let sets = sets();
    assert_eq!(sets.len(), 4);
    let mut failures = Vec::new();
    for (label, scn) in &sets[1..] {
        assert!(scn.paths.iter().all(|p| p.rate_hint.is_none()));
        let ifs = interfaces(scn);
        for (alpha, variant) in [
            (0.0, "operetta-0"),
            (0.5, "operetta-0.5"),
            (1.0, "operetta-1"),
        ] {
            let (ok, msg) = check_within(scn, &ifs, variant, alpha, 0.05, 0.05);
            eprintln!("{label}: {msg}");
            if !ok {
                failures.push(format!("{label}: {msg}"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
