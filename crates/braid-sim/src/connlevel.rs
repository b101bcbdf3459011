//! Connection-level runs (`[workload] kind = "connections"`): paper 003's comparison as the
//! paper ran it. Connections of several applications arrive as Poisson processes. Most go
//! whole on one interface (legacy servers: no braid server), chosen by round robin,
//! weighted round robin, or braid's connection-level scheduler (`braid_core::connsched`:
//! OPERETTA at the variant's alpha, or its throughput policy for `minrtt`, direct mode's
//! default); a fraction `gamma` go to an OPERETTA-enabled server and are split over the
//! interfaces (packet-based). A flow-level model, like `connmix`.
//!
//! Owns: the arrivals, the flow model and its results (the `[workload.connections]` table is
//! read by `scenario/connections.rs`).
//! Must not touch: the packet-level world, or connsched's choice (it only calls it).
//!
//! # Model
//!
//! Each class `c` opens connections at `per_s` a second (exponential gaps) for `arrivals_for`;
//! a connection's size is exponential with the class's mean `size`. Arrivals depend only on
//! the repetition's seed, so every variant sees the same connections. Time advances in
//! `step`s; on each interface its open connections share its rate equally (each one a TCP
//! flow); an interface with none idles. A variant runs until its last connection ends:
//! `completion_s` is that time, `goodput` all bytes over it (the paper's "the low bandwidth
//! interface becomes a performance bottleneck"), `capacity` the sum of the variant's
//! interface rates. Energy is the paper's `sum a_j t_j`: each interface's `energy.active_w`
//! while it carries a connection. An interface's rate is its down direction's rate.
//!
//! Placement: `rr` hands new connections to the interfaces in turn; `wrr` in turn weighted
//! by rate (smooth weighted round robin, weights the paths' `rate_hint`, else their rates);
//! `operetta` and `minrtt` ask connsched, which knows each interface's power and rate hint
//! (if any), measures the rest, and learns each class's bytes per connection (eq. 1); it is
//! told each open connection's bytes every 10 steps and when it ends.
//!
//! Packet-based connections (the paper's `S_i = 0`, a fraction `gamma` drawn per
//! connection): split when they arrive into one flow per interface, `rr` in equal shares
//! (packets in turn), `wrr` in shares by rate, `operetta` and `minrtt` by the paper's
//! equation 9 at the variant's alpha (1 for `minrtt`), from the interfaces' rates as
//! connsched knows them, the bytes their open flows still carry, and the new connection's
//! expected size (connsched's eq. 1 estimate). The split is fixed at arrival (the paper
//! re-weights packet-based streams at every scheduling decision), and connsched is not told
//! about those flows when it places whole connections.

use crate::report::{PathResult, Report, RunResult};
use crate::scenario::{repetition_seed, Scenario, ScenarioError, VariantKind, VariantSpec};
pub use crate::scenario::{ConnClass, ConnWorkload};
use crate::time::Nanos;
use braid_core::connsched::{ConnId, ConnPolicy, ConnSched, PathInput};
use braid_core::rng::splitmix64;
use braid_core::{Instant, Rng};
use std::time::Duration;

/// Steps between two reports of a connection's bytes to connsched.
const REPORT_EVERY: u64 = 10;

/// One interface as the model sees it.
#[derive(Debug, Clone, Copy)]
struct Iface {
    /// Bytes per second.
    rate: f64,
    power_w: f64,
    hint: Option<f64>,
}

/// How new connections are placed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Placement {
    RoundRobin,
    Weighted,
    Sched(ConnPolicy),
}

fn placement(scn: &Scenario, i: usize, v: &VariantSpec) -> Result<Placement, ScenarioError> {
    match v.scheduler.as_str() {
        "rr" => Ok(Placement::RoundRobin),
        "wrr" => Ok(Placement::Weighted),
        "operetta" => Ok(Placement::Sched(ConnPolicy::Operetta { alpha: v.alpha })),
        "minrtt" => Ok(Placement::Sched(ConnPolicy::Throughput)),
        other => Err(ScenarioError::new(
            &scn.file,
            format!("variant[{i}].scheduler"),
            format!(
                "connection-level runs place connections with \"rr\", \"wrr\", \"operetta\" or \"minrtt\" (braid's direct mode), got {other:?}"
            ),
        )),
    }
}

/// A connection's arrival.
#[derive(Debug, Clone, Copy)]
struct Arrival {
    at: f64,
    class: usize,
    bytes: f64,
    /// To an OPERETTA-enabled server (a fraction `gamma` of all): split over interfaces.
    packet: bool,
}

fn arrivals(cw: &ConnWorkload, seed: u64) -> Vec<Arrival> {
    let mut rng = Rng::new(splitmix64(seed ^ 0xC044));
    let end = cw.arrivals_for as f64 / 1e9;
    let mut out = Vec::new();
    for (class, c) in cw.classes.iter().enumerate() {
        let mut t = 0.0;
        loop {
            t += -(1.0 - rng.next_f64()).ln() / c.per_s;
            if t >= end {
                break;
            }
            let bytes = (-(1.0 - rng.next_f64()).ln() * c.size).max(1.0);
            out.push(Arrival {
                at: t,
                class,
                bytes,
                packet: false,
            });
        }
    }
    out.sort_by(|a, b| a.at.total_cmp(&b.at));
    // Which connections are packet-based: a stream of its own, so that gamma = 0 leaves the
    // arrivals as they were.
    let mut g = Rng::new(splitmix64(seed ^ 0x6A77A));
    for a in &mut out {
        a.packet = cw.gamma > 0.0 && g.next_f64() < cw.gamma;
    }
    out
}

/// Runs every braid variant of `scn` (whose workload is `cw`) at every repetition.
pub fn run(scn: &Scenario, cw: &ConnWorkload) -> Result<Report, ScenarioError> {
    let wall = std::time::Instant::now();
    let mut results = Vec::new();
    let mut virtual_s = 0.0;
    for rep in 0..scn.workload.repetitions {
        let seed = repetition_seed(scn, rep);
        let arr = arrivals(cw, seed);
        for (i, v) in scn.variants.iter().enumerate() {
            if v.kind != VariantKind::Braid {
                continue;
            }
            let how = placement(scn, i, v)?;
            let ifaces: Vec<Iface> = v
                .paths
                .iter()
                .map(|&p| {
                    let p = &scn.paths[p];
                    Iface {
                        rate: p.down.rate.rate_at(0) as f64 / 8.0,
                        power_w: p.energy.active_w,
                        hint: p.rate_hint.map(|h| h as f64 / 8.0),
                    }
                })
                .collect();
            let names: Vec<String> = cw.classes.iter().map(|c| c.name.clone()).collect();
            let mut r = simulate(&ifaces, how, (&arr, &names), cw.step, scn.time_limit);
            r.variant = v.name.clone();
            r.repetition = rep;
            r.seed = seed;
            for (pr, &p) in r.paths.iter_mut().zip(&v.paths) {
                pr.name = scn.paths[p].name.clone();
            }
            virtual_s += r.completion_s;
            results.push(r);
        }
    }
    Ok(Report {
        scenario: scn.name.clone(),
        mode: "sim".into(),
        handshake_s: None,
        results,
        virtual_s,
        wall_s: wall.elapsed().as_secs_f64(),
    })
}

/// An open connection.
struct Open {
    left: f64,
    iface: usize,
    id: Option<ConnId>,
    done: f64,
}

/// Chooses interfaces for new connections.
struct Placer {
    how: Placement,
    next: usize,
    /// Smooth weighted round robin's current weights.
    current: Vec<f64>,
    sched: Option<ConnSched>,
}

impl Placer {
    fn new(ifaces: &[Iface], how: Placement) -> Placer {
        let sched = match how {
            Placement::Sched(policy) => {
                let mut s = ConnSched::new(ifaces.len(), policy);
                for (j, f) in ifaces.iter().enumerate() {
                    let input = PathInput {
                        usable: true,
                        power_w: Some(f.power_w),
                        rate_hint: f.hint,
                    };
                    s.set_path(j, input);
                }
                Some(s)
            }
            _ => None,
        };
        Placer {
            how,
            next: 0,
            current: vec![0.0; ifaces.len()],
            sched,
        }
    }

    fn place(&mut self, ifaces: &[Iface], now: Instant, dest: &str) -> (usize, Option<ConnId>) {
        match self.how {
            Placement::RoundRobin => {
                let j = self.next % ifaces.len();
                self.next += 1;
                (j, None)
            }
            Placement::Weighted => {
                let w: Vec<f64> = ifaces.iter().map(|f| f.hint.unwrap_or(f.rate)).collect();
                let total: f64 = w.iter().sum();
                for (c, x) in self.current.iter_mut().zip(&w) {
                    *c += x;
                }
                let j = (0..w.len())
                    .max_by(|&a, &b| self.current[a].total_cmp(&self.current[b]).then(b.cmp(&a)))
                    .unwrap_or(0);
                self.current[j] -= total;
                (j, None)
            }
            Placement::Sched(_) => match self.sched.as_mut().map(|s| s.choose(now, dest)) {
                Some(Ok((id, j))) => (j, Some(id)),
                _ => (0, None),
            },
        }
    }
}

impl Placer {
    /// The shares of a packet-based connection of `expected` bytes over the interfaces,
    /// whose open flows still have `loads` bytes to carry.
    fn split(&self, ifaces: &[Iface], loads: &[f64], expected: f64) -> Vec<f64> {
        let n = ifaces.len() as f64;
        let rate = |j: usize| {
            let f = &ifaces[j];
            let known = self.sched.as_ref().and_then(|s| s.rate(j));
            known.or(f.hint).unwrap_or(f.rate)
        };
        match self.how {
            Placement::RoundRobin => vec![1.0 / n; ifaces.len()],
            Placement::Weighted => {
                let w: Vec<f64> = (0..ifaces.len()).map(rate).collect();
                let total: f64 = w.iter().sum();
                w.iter().map(|x| x / total).collect()
            }
            Placement::Sched(policy) => {
                let alpha = match policy {
                    ConnPolicy::Operetta { alpha } => alpha,
                    _ => 1.0,
                };
                let rates: Vec<f64> = (0..ifaces.len()).map(rate).collect();
                let powers: Vec<f64> = ifaces.iter().map(|f| f.power_w).collect();
                eq9(&rates, &powers, loads, expected, alpha)
            }
        }
    }
}

/// Paper 003's equation 9: the shares `w_j` of new packet-based load `p` bytes, over
/// interfaces of `rates` (bytes/s) and `powers` whose connections still have `loads`
/// bytes: in ascending energy per bit, each interface takes what keeps it within the
/// target's finishing time, `w_j = min(1 - sum_{k<j} w_k, (L r_j - T C_j) / (T p))`, with
/// `L` all load, `C_j` the interface's, and `T` the target `r_min + alpha * (the other
/// rates)` capped by what the fixed loads allow (Algorithm 1's `T_max`).
fn eq9(rates: &[f64], powers: &[f64], loads: &[f64], p: f64, alpha: f64) -> Vec<f64> {
    let n = rates.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| (powers[a] / rates[a]).total_cmp(&(powers[b] / rates[b])));
    let all_rates: f64 = rates.iter().sum();
    let target = rates[order[0]] + alpha.clamp(0.0, 1.0) * (all_rates - rates[order[0]]);
    let l = loads.iter().sum::<f64>() + p;
    let span = (0..n).map(|j| loads[j] / rates[j]).fold(0.0, f64::max);
    let t_max = if span > 0.0 { l / span } else { f64::INFINITY };
    let t = target.min(t_max).min(all_rates);
    let mut w = vec![0.0; n];
    let mut left = 1.0;
    for &j in &order {
        let cap = ((l * rates[j] - t * loads[j]) / (t * p)).max(0.0);
        w[j] = cap.min(left);
        left -= w[j];
    }
    // Rounding only (sum_j cap_j >= 1 when T <= sum r_j and T <= T_max).
    w[order[0]] += left.max(0.0);
    w
}

/// The flow model for one variant (see the module documentation).
fn simulate(
    ifaces: &[Iface],
    how: Placement,
    (arr, names): (&[Arrival], &[String]),
    step: Nanos,
    limit: Nanos,
) -> RunResult {
    let n = ifaces.len();
    let mut placer = Placer::new(ifaces, how);
    let dt = step as f64 / 1e9;
    let mut open: Vec<Open> = Vec::new();
    let (mut k, mut next) = (0u64, 0usize);
    let mut bytes = vec![0.0; n];
    let mut energy = vec![0.0; n];
    loop {
        let t = k as f64 * dt;
        let now = Instant::from_duration(Duration::from_nanos(k * step));
        while next < arr.len() && arr[next].at <= t {
            let a = arr[next];
            let dest = names.get(a.class).map_or("class", |s| s.as_str());
            next += 1;
            if a.packet {
                let mut loads = vec![0.0; n];
                for c in &open {
                    loads[c.iface] += c.left;
                }
                let expected = placer.sched.as_ref().map_or(a.bytes, |s| s.expected(dest));
                let w = placer.split(ifaces, &loads, expected);
                for (iface, w) in w.into_iter().enumerate() {
                    if w * a.bytes > 0.5 {
                        open.push(Open {
                            left: w * a.bytes,
                            iface,
                            id: None,
                            done: 0.0,
                        });
                    }
                }
                continue;
            }
            let (iface, id) = placer.place(ifaces, now, dest);
            open.push(Open {
                left: a.bytes,
                iface,
                id,
                done: 0.0,
            });
        }
        if (open.is_empty() && next == arr.len()) || k * step >= limit {
            break;
        }
        let mut on = vec![0usize; n];
        for c in &open {
            on[c.iface] += 1;
        }
        for j in 0..n {
            if on[j] > 0 {
                energy[j] += ifaces[j].power_w * dt;
            }
        }
        let later = Instant::from_duration(Duration::from_nanos((k + 1) * step));
        open.retain_mut(|c| {
            let moved = (ifaces[c.iface].rate / on[c.iface] as f64 * dt).min(c.left);
            c.left -= moved;
            c.done += moved;
            bytes[c.iface] += moved;
            let finished = c.left <= 0.5;
            if let (Some(s), Some(id)) = (placer.sched.as_mut(), c.id) {
                // What the agent would tell it: each connection's bytes every 100 ms or so.
                if finished || k % REPORT_EVERY == REPORT_EVERY - 1 {
                    s.progress(later, id, c.done as u64);
                }
                if finished {
                    s.close(later, id);
                }
            }
            !finished
        });
        if let Some(s) = placer.sched.as_mut() {
            s.tick(later);
        }
        k += 1;
    }
    let left = open.len() + arr.len() - next;
    let total: f64 = arr.iter().map(|a| a.bytes).sum();
    result(ifaces, k as f64 * dt, total, (&bytes, &energy), left)
}

/// A variant's result: `left` connections never ended.
fn result(
    ifaces: &[Iface],
    elapsed: f64,
    total: f64,
    (bytes, energy): (&[f64], &[f64]),
    left: usize,
) -> RunResult {
    let delivered: f64 = bytes.iter().sum();
    let mut r = RunResult::new("", 0, 0, total.round() as u64);
    r.completion_s = elapsed;
    r.verified = left == 0;
    if left > 0 {
        r.error = Some(format!("{left} connections still open at the time limit"));
    }
    r.goodput_bps = if elapsed > 0.0 {
        delivered * 8.0 / elapsed
    } else {
        0.0
    };
    r.capacity_bps = ifaces.iter().map(|f| f.rate * 8.0).sum();
    r.efficiency = r.goodput_bps / r.capacity_bps.max(1.0);
    r.energy_j = energy.iter().sum();
    r.paths = (0..ifaces.len())
        .map(|j| PathResult {
            name: String::new(),
            bytes: bytes[j].round() as u64,
            energy_j: energy[j],
            random_losses: 0,
            blackouts: 0,
            acks_offloaded: 0,
            losses: 0,
            spurious_losses: 0,
        })
        .collect();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cw(per_s: f64) -> ConnWorkload {
        ConnWorkload {
            arrivals_for: 100_000_000_000,
            step: 10_000_000,
            gamma: 0.0,
            classes: vec![ConnClass {
                name: "c".into(),
                size: 10e3,
                per_s,
            }],
        }
    }

    #[test]
    fn arrivals_are_poisson_at_the_rate_and_mean_size() {
        let a = arrivals(&cw(20.0), 1);
        assert!((1800..2200).contains(&a.len()), "{}", a.len());
        let mean = a.iter().map(|x| x.bytes).sum::<f64>() / a.len() as f64;
        assert!((9e3..11e3).contains(&mean), "{mean}");
        assert!(a.windows(2).all(|w| w[0].at <= w[1].at));
        assert_eq!(a.len(), arrivals(&cw(20.0), 1).len());
    }

    #[test]
    fn round_robin_rotates_and_weighted_follows_rates() {
        let f = |mbit: f64| Iface {
            rate: mbit * 1e6 / 8.0,
            power_w: 1.0,
            hint: None,
        };
        let ifaces = [f(1.0), f(3.0)];
        let now = Instant::from_duration(Duration::ZERO);
        // Round robin: half each; weighted by rate: a quarter on the 1 Mbit/s interface.
        for (how, want) in [(Placement::RoundRobin, 200), (Placement::Weighted, 100)] {
            let mut p = Placer::new(&ifaces, how);
            let on0 = (0..400)
                .filter(|_| p.place(&ifaces, now, "c").0 == 0)
                .count();
            assert_eq!(on0, want, "{how:?}");
        }
    }

    #[test]
    fn packet_based_connections_are_split_in_turn_by_rate_or_by_equation_9() {
        let f = |mbit: f64, w: f64| Iface {
            rate: mbit * 1e6 / 8.0,
            power_w: w,
            hint: None,
        };
        // Table III: IF1 1 Mbit/s 0.634 W, IF2 0.7 Mbit/s 0.095 W, IF3 2 Mbit/s 0.9 W.
        let ifaces = [f(1.0, 0.634), f(0.7, 0.095), f(2.0, 0.9)];
        let idle = [0.0; 3];
        let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9);
        let rr = Placer::new(&ifaces, Placement::RoundRobin).split(&ifaces, &idle, 1e5);
        assert!(close(&rr, &[1.0 / 3.0; 3]), "{rr:?}");
        let wrr = Placer::new(&ifaces, Placement::Weighted).split(&ifaces, &idle, 1e5);
        assert!(close(&wrr, &[1.0 / 3.7, 0.7 / 3.7, 2.0 / 3.7]), "{wrr:?}");
        // Equation 9 with nothing else open: alpha 1 fills every interface at its rate
        // (IF2, IF3, IF1 in energy per bit), alpha 0.5 (T = 2.2 Mbit/s) IF2 then IF3.
        let r: Vec<f64> = ifaces.iter().map(|f| f.rate).collect();
        let a: Vec<f64> = ifaces.iter().map(|f| f.power_w).collect();
        assert!(close(&eq9(&r, &a, &idle, 1e5, 1.0), &wrr));
        let mid = eq9(&r, &a, &idle, 1e5, 0.5);
        assert!(close(&mid, &[0.0, 0.7 / 2.2, 1.5 / 2.2]), "{mid:?}");
        // With IF3 busy for 1 s already (250 KB), 100 KB more at alpha 1: T is capped by
        // T_max = L / 1 s = 350 KB/s; IF2 first takes what it carries in that second
        // (87.5 KB), IF3 nothing (it is full), IF1 the rest.
        let busy = [0.0, 0.0, 250e3];
        let w = eq9(&r, &a, &busy, 100e3, 1.0);
        assert!(close(&w, &[0.125, 0.875, 0.0]), "{w:?}");
    }

    #[test]
    fn every_connection_ends_and_bytes_add_up() {
        let ifaces = [Iface {
            rate: 1e6,
            power_w: 2.0,
            hint: None,
        }];
        let arr = arrivals(&cw(5.0), 3);
        let names = ["c".to_string()];
        let r = simulate(
            &ifaces,
            Placement::RoundRobin,
            (&arr, &names),
            10_000_000,
            u64::MAX,
        );
        assert!(r.verified);
        let total: f64 = arr.iter().map(|a| a.bytes).sum();
        assert!((r.paths[0].bytes as f64 - total).abs() < 1.0 + 0.5 * arr.len() as f64);
        // Energy: 2 W while the interface carries anything, at most the whole run.
        assert!(r.energy_j <= 2.0 * r.completion_s + 1e-9 && r.energy_j > 0.0);
    }
}
