//! OPERETTA (paper 003, Habak et al.): the least energy for a throughput the user asks for.
//!
//! Owns: the packet-based OPERETTA allocation (the paper's section IV and equation 9), the
//! per-path capacity estimates it needs, and the per-path rate limits that enforce it. Must
//! not touch: path state (it only reads [`PathInfo`]; the session applies the limits it
//! returns to the paths' pacers), packets or streams.
//!
//! # Allocation
//!
//! Every usable path `j` has a rate `r_j` and an active power `a_j` (above idle, from the
//! PATH_COST frame the agent sends: only the device knows its radios). The target
//! throughput is `T = r_min + alpha * (sum of the other rates)`, where `r_min` is the rate of
//! the path with the least energy per bit `a/r`; alpha = 0 asks for the least energy per
//! bit, alpha = 1 for every path's full rate. The energy of moving the load is
//! `sum_j a_j * w_j / r_j` per bit for load shares `w_j`, and the throughput constraint
//! (paper eq. 4) is `w_j <= r_j / T`. That linear program is a continuous knapsack: sort the
//! paths by `a_j / r_j` and fill them in that order, each up to its full rate, until `T` is
//! reached (paper eq. 9: `w_j = min(1 - sum_{k<j} w_k, r_j / T)`). In rates: the paths before
//! the marginal one run at their full rate (no limit: the congestion controller decides),
//! the marginal one is limited to what is still missing of `T`, and the paths after it carry
//! no data (limit 0). `select` offers each packet to the ready paths in `a/r` order, so when
//! the application supplies less than `T` the cheapest paths carry it.
//!
//! Paths with unknown power (no PATH_COST from either end) are ranked after every path with a known power, fastest first: using them is never cheaper
//! as far as the scheduler knows. With no power known at all the scheduler is a pure
//! throughput-target filler (fastest path first).
//!
//! # Rates
//!
//! `r_j` is the rate hint of PATH_COST when it gives one (0 means "estimate it"). Otherwise
//! it is a capacity estimate kept per path, in UDP payload bytes per second:
//! * a delivery-rate sample taken while the path was neither application-limited nor held
//!   back by this scheduler's own limit is a capacity sample: the estimate is the largest
//!   such sample, and a sample replaces it when it is larger or the estimate is older than
//!   [`ESTIMATE_WINDOW`] (so a path whose capacity fell is believed within that window);
//! * a sample taken while application-limited, or while the path ran at 90 % or more of the
//!   limit set on it, only shows the capacity is at least that much: it may raise the
//!   estimate but never ages or lowers it. A limited path whose samples stay clearly below
//!   its limit is network-limited, so those samples count as capacity samples again;
//! * a path that carries no data (limit 0) keeps its last estimate: its samples (probes,
//!   keepalives, acknowledgements) may raise it but never age or lower it, and as soon as
//!   it is given a share it is measured again like any other path (see also Probing);
//! * before any capacity sample the estimate is the congestion window over the smoothed
//!   RTT (application-limited or held-back samples do not start an estimate: a trickle
//!   during the handshake once pinned a 2 Mbit/s path at 58 kbit/s).
//!
//! # Probing
//!
//! A limit hides the capacity above it, and a path given no share is not measured at all,
//! so without rate hints the estimates would stay where the first samples put them. The
//! scheduler therefore lifts limits briefly (for the larger of two smoothed RTTs and
//! [`PROBE_MIN`]):
//! * the marginal path, when its latest sample was held back by its limit and its estimate
//!   is not clearly above that limit (so the limit hides its capacity), every
//!   [`PROBE_EVERY`];
//! * a path given no share, every [`PROBE_UNUSED_EVERY`], but only when a capacity twice
//!   its estimate would give it a share (a probe that could not change the allocation would
//!   only cost energy: at alpha 0 the expensive paths are never probed).

use super::{candidate_state, PathId, PathInfo, RateLimit, SchedContext, Scheduler};
use crate::config::Config;
use crate::time::Instant;
use std::collections::BTreeMap;
use std::time::Duration;

/// A capacity estimate older than this is replaced by the next capacity sample.
pub const ESTIMATE_WINDOW: Duration = Duration::from_secs(10);

/// A sample at or above this fraction of the path's limit was held back by the limit.
const LIMIT_BOUND: f64 = 0.9;

/// A path filled to at least this fraction of its rate is left unlimited.
const FULL: f64 = 0.999;

/// How often the marginal path's limit is lifted while its samples are held back by it.
pub const PROBE_EVERY: Duration = Duration::from_secs(2);
/// How often a path without a share is probed (when a faster rate would give it one).
pub const PROBE_UNUSED_EVERY: Duration = Duration::from_secs(10);
/// Shortest probe.
pub const PROBE_MIN: Duration = Duration::from_millis(100);

/// One path as the allocation sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostedPath {
    /// The path.
    pub id: PathId,
    /// Its rate, bytes per second.
    pub rate: f64,
    /// Its active power above idle, milliwatts, if known.
    pub power_mw: Option<u64>,
}

impl CostedPath {
    /// Energy per byte (mW per byte/s): the knapsack's order. Unknown power sorts last.
    fn cost(&self) -> f64 {
        match self.power_mw {
            Some(p) => p as f64 / self.rate,
            None => f64::INFINITY,
        }
    }
}

/// The allocation: `T` and each path's limit, in the order paths are filled.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Allocation {
    /// Target throughput, bytes per second.
    pub target: f64,
    /// Paths in ascending energy per bit, each with its limit.
    pub order: Vec<(PathId, RateLimit)>,
}

/// The continuous-knapsack solution for `paths` (rates > 0) at utility `alpha`.
pub fn allocate(alpha: f64, paths: &[CostedPath]) -> Allocation {
    let mut sorted: Vec<CostedPath> = paths
        .iter()
        .copied()
        .filter(|p| p.rate.is_finite() && p.rate > 0.0)
        .collect();
    sorted.sort_by(|a, b| {
        a.cost()
            .total_cmp(&b.cost())
            .then(b.rate.total_cmp(&a.rate))
            .then(a.id.cmp(&b.id))
    });
    let Some(first) = sorted.first() else {
        return Allocation::default();
    };
    let alpha = if alpha.is_nan() {
        1.0
    } else {
        alpha.clamp(0.0, 1.0)
    };
    let others: f64 = sorted[1..].iter().map(|p| p.rate).sum();
    let target = first.rate + alpha * others;
    let mut missing = target;
    let order = sorted
        .iter()
        .map(|p| {
            let take = p.rate.min(missing).max(0.0);
            missing -= take;
            let limit = if take >= p.rate * FULL {
                None
            } else if take < 1.0 {
                Some(0)
            } else {
                Some(take as u64)
            };
            (p.id, limit)
        })
        .collect();
    Allocation { target, order }
}

/// A path's capacity estimate.
#[derive(Debug, Clone, Copy)]
struct Estimate {
    /// Bytes per second.
    rate: f64,
    /// When the estimate was last set by a capacity sample.
    at: Instant,
    /// The newest sample already looked at.
    seen: Instant,
    /// The latest sample was held back by the path's limit (capacity may be higher).
    bound: bool,
}

/// When a path's limit was or will be lifted to measure it.
#[derive(Debug, Clone, Copy)]
struct Probe {
    /// The next probe may start then.
    next: Instant,
    /// A probe runs until then.
    until: Option<Instant>,
}

/// The OPERETTA scheduler.
#[derive(Debug)]
pub struct Operetta {
    alpha: f64,
    estimates: BTreeMap<PathId, Estimate>,
    alloc: Allocation,
    probes: BTreeMap<PathId, Probe>,
    /// The allocation's limits with the probes applied: what the paths get.
    effective: Vec<(PathId, RateLimit)>,
}

impl Default for Operetta {
    fn default() -> Self {
        Operetta {
            alpha: 1.0,
            estimates: BTreeMap::new(),
            alloc: Allocation::default(),
            probes: BTreeMap::new(),
            effective: Vec::new(),
        }
    }
}

impl Operetta {
    /// A scheduler for utility `alpha` (0 least energy per bit .. 1 most throughput).
    pub fn new(alpha: f64) -> Self {
        Operetta {
            alpha,
            ..Operetta::default()
        }
    }

    /// The current allocation (after the latest `select` or `rate_limits`).
    pub fn allocation(&self) -> &Allocation {
        &self.alloc
    }

    /// Fold the path's latest delivery-rate sample into its estimate (see the module doc).
    fn observe(&mut self, p: &PathInfo) {
        let Some((t, s, app_limited)) = p.delivery_rate else {
            return;
        };
        let s = s as f64;
        // A path given no share sends only probes, keepalives and acknowledgements: its
        // samples say nothing about its capacity (they may only raise the estimate).
        let held_back = match p.rate_cap {
            Some(0) => true,
            Some(c) => s >= LIMIT_BOUND * c as f64,
            None => false,
        };
        let Some(e) = self.estimates.get_mut(&p.id) else {
            if app_limited || held_back {
                // Not a capacity sample: keep the window-based guess until one comes.
                return;
            }
            self.estimates.insert(
                p.id,
                Estimate {
                    rate: s,
                    at: t,
                    seen: t,
                    bound: false,
                },
            );
            return;
        };
        if t <= e.seen {
            return;
        }
        e.seen = t;
        e.bound = held_back;
        if app_limited || held_back {
            if s > e.rate {
                e.rate = s;
                e.at = t;
            }
        } else if s >= e.rate || t.saturating_since(e.at) > ESTIMATE_WINDOW {
            e.rate = s;
            e.at = t;
        }
    }

    /// The rate the allocation uses for a path, bytes per second.
    fn rate_of(&self, p: &PathInfo) -> f64 {
        if let Some(h) = p.rate_hint {
            return h as f64;
        }
        if let Some(e) = self.estimates.get(&p.id) {
            return e.rate;
        }
        p.cwnd as f64 / p.srtt.as_secs_f64().max(1e-6)
    }

    fn recompute(&mut self, paths: &[PathInfo]) {
        for p in paths {
            if p.rate_hint.is_none() {
                self.observe(p);
            }
        }
        self.estimates
            .retain(|id, _| paths.iter().any(|p| p.id == *id));
        let Some(state) = candidate_state(paths) else {
            self.alloc = Allocation::default();
            return;
        };
        let costed: Vec<CostedPath> = paths
            .iter()
            .filter(|p| p.eligible(state))
            .map(|p| CostedPath {
                id: p.id,
                rate: self.rate_of(p),
                power_mw: p.power_mw,
            })
            .collect();
        self.alloc = allocate(self.alpha, &costed);
    }
}

impl Operetta {
    /// Would a capacity twice `id`'s estimate give it a share of the allocation?
    fn faster_would_be_used(&self, id: PathId, paths: &[PathInfo]) -> bool {
        let Some(state) = candidate_state(paths) else {
            return false;
        };
        let costed: Vec<CostedPath> = paths
            .iter()
            .filter(|p| p.eligible(state))
            .map(|p| CostedPath {
                id: p.id,
                rate: self.rate_of(p) * if p.id == id { 2.0 } else { 1.0 },
                power_mw: p.power_mw,
            })
            .collect();
        allocate(self.alpha, &costed)
            .order
            .iter()
            .any(|&(p, limit)| p == id && limit != Some(0))
    }

    /// The allocation's limits with probes started, running or ended (see the module doc).
    fn apply_probes(&mut self, now: Instant, paths: &[PathInfo]) {
        self.probes
            .retain(|id, _| paths.iter().any(|p| p.id == *id));
        let mut effective = Vec::with_capacity(self.alloc.order.len());
        for &(id, limit) in &self.alloc.order {
            let Some(p) = paths.iter().find(|p| p.id == id) else {
                continue;
            };
            // Rates the agent gave are known: nothing to measure.
            if limit.is_none() || p.rate_hint.is_some() {
                effective.push((id, limit));
                continue;
            }
            let unused = limit == Some(0);
            let every = if unused {
                PROBE_UNUSED_EVERY
            } else {
                PROBE_EVERY
            };
            let probe = self.probes.entry(id).or_insert(Probe {
                next: now + every,
                until: None,
            });
            if let Some(until) = probe.until {
                if now < until {
                    effective.push((id, None));
                    continue;
                }
                probe.until = None;
                probe.next = now + every;
            }
            let due = now >= probe.next;
            let wanted = due
                && if unused {
                    self.faster_would_be_used(id, paths)
                } else {
                    // Only while the limit hides the capacity: an estimate clearly above
                    // the limit already says the path could carry more.
                    let cap = limit.unwrap_or(0) as f64;
                    self.estimates
                        .get(&id)
                        .is_some_and(|e| e.bound && e.rate * LIMIT_BOUND <= cap)
                };
            let probe = self.probes.get_mut(&id).expect("inserted above");
            if wanted {
                probe.until = Some(now + (p.srtt * 2).max(PROBE_MIN));
                effective.push((id, None));
            } else {
                if due {
                    probe.next = now + every;
                }
                effective.push((id, limit));
            }
        }
        self.effective = effective;
    }
}

impl Scheduler for Operetta {
    fn name(&self) -> &'static str {
        "operetta"
    }

    fn configure(&mut self, cfg: &Config) {
        self.alpha = cfg.alpha;
    }

    fn rate_limits(
        &mut self,
        now: Instant,
        paths: &[PathInfo],
        out: &mut Vec<(PathId, RateLimit)>,
    ) {
        self.recompute(paths);
        self.apply_probes(now, paths);
        out.extend(self.effective.iter().copied());
    }

    fn select(&mut self, now: Instant, paths: &[PathInfo], _ctx: &SchedContext) -> Option<PathId> {
        self.recompute(paths);
        self.apply_probes(now, paths);
        let state = candidate_state(paths)?;
        self.effective
            .iter()
            .filter(|(_, limit)| *limit != Some(0))
            .filter_map(|(id, _)| paths.iter().find(|p| p.id == *id))
            .find(|p| p.eligible(state) && p.send_ready)
            .map(|p| p.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::tests::info;

    const MBIT: f64 = 125_000.0; // bytes per second

    /// The paper's Table III at IF1 = `if1` Mbit/s: IF1 634 mW, IF2 0.7 Mbit/s 95 mW,
    /// IF3 2 Mbit/s 900 mW.
    fn table3(if1: f64) -> Vec<CostedPath> {
        vec![
            CostedPath {
                id: 1,
                rate: if1 * MBIT,
                power_mw: Some(634),
            },
            CostedPath {
                id: 2,
                rate: 0.7 * MBIT,
                power_mw: Some(95),
            },
            CostedPath {
                id: 3,
                rate: 2.0 * MBIT,
                power_mw: Some(900),
            },
        ]
    }

    fn mbit(limit: RateLimit) -> Option<f64> {
        limit.map(|b| (b as f64 / MBIT * 1000.0).round() / 1000.0)
    }

    #[test]
    fn table_iii_at_each_alpha() {
        // Order IF2 (136 mW per Mbit/s) < IF3 (450) < IF1 (634).
        let cases = [
            (0.0, 0.7, [None, Some(0.0), Some(0.0)]),
            (0.25, 1.45, [None, Some(0.75), Some(0.0)]),
            (0.5, 2.2, [None, Some(1.5), Some(0.0)]),
            (0.75, 2.95, [None, None, Some(0.25)]),
            (1.0, 3.7, [None, None, None]),
        ];
        for (alpha, target, limits) in cases {
            let a = allocate(alpha, &table3(1.0));
            assert!((a.target / MBIT - target).abs() < 1e-9, "{alpha}: {a:?}");
            let ids: Vec<PathId> = a.order.iter().map(|o| o.0).collect();
            assert_eq!(ids, vec![2, 3, 1]);
            let got: Vec<Option<f64>> = a.order.iter().map(|o| mbit(o.1)).collect();
            assert_eq!(got, limits.to_vec(), "alpha {alpha}");
        }
    }

    #[test]
    fn order_follows_energy_per_bit_as_rates_change() {
        // IF1 at 1.5 Mbit/s: 423 mW per Mbit/s, now cheaper than IF3 (450): it comes
        // before IF3, as the paper's Fig. 4 discussion says.
        let a = allocate(0.5, &table3(1.5));
        let ids: Vec<PathId> = a.order.iter().map(|o| o.0).collect();
        assert_eq!(ids, vec![2, 1, 3]);
        // T = 0.7 + 0.5 * 3.5 = 2.45: IF2 full, IF1 full, IF3 limited to 0.25.
        assert_eq!(mbit(a.order[2].1), Some(0.25));
        assert_eq!(a.order[1].1, None);
        // IF1 at 0.25 Mbit/s: 2536 mW per Mbit/s, last.
        let a = allocate(0.5, &table3(0.25));
        let ids: Vec<PathId> = a.order.iter().map(|o| o.0).collect();
        assert_eq!(ids, vec![2, 3, 1]);
    }

    #[test]
    fn unknown_power_goes_last_and_bad_input_is_harmless() {
        let mut ps = table3(1.0);
        ps[1].power_mw = None; // IF2's power unknown
        let a = allocate(0.0, &ps);
        assert_eq!(a.order[0].0, 3); // IF3 is now the cheapest known path
        assert_eq!(a.order.last().map(|o| o.0), Some(2));
        assert!((a.target / MBIT - 2.0).abs() < 1e-9);
        // Zero, NaN and infinite rates are left out; NaN alpha means 1.
        ps[0].rate = f64::NAN;
        ps[2].rate = 0.0;
        let a = allocate(f64::NAN, &ps);
        assert_eq!(a.order, vec![(2, None)]);
        assert_eq!(allocate(0.5, &[]), Allocation::default());
    }

    fn costed_info(id: PathId, power: u64, hint_mbit: Option<f64>) -> PathInfo {
        let mut p = info(id, 20, true);
        p.power_mw = Some(power);
        p.rate_hint = hint_mbit.map(|m| (m * MBIT) as u64);
        p
    }

    #[test]
    fn limits_enforce_the_share_and_select_skips_unused_paths() {
        let mut s = Operetta::new(0.5);
        let ps = [
            costed_info(1, 634, Some(1.0)),
            costed_info(2, 95, Some(0.7)),
            costed_info(3, 900, Some(2.0)),
        ];
        let mut out = Vec::new();
        s.rate_limits(Instant(0), &ps, &mut out);
        assert_eq!(out[0], (2, None));
        assert_eq!(mbit(out[1].1), Some(1.5));
        assert_eq!(out[2], (1, Some(0)));
        let ctx = SchedContext::default();
        // IF2 first while ready, then IF3; IF1 never.
        assert_eq!(s.select(Instant(0), &ps, &ctx), Some(2));
        let mut busy = ps;
        busy[1].send_ready = false;
        assert_eq!(s.select(Instant(0), &busy, &ctx), Some(3));
        busy[2].send_ready = false;
        assert_eq!(s.select(Instant(0), &busy, &ctx), None);
    }

    #[test]
    fn estimates_ignore_samples_held_back_by_the_limit() {
        let mut s = Operetta::new(0.0);
        let sec = |n: u64| Instant(n * 1_000_000_000);
        let mut a = costed_info(1, 100, None);
        let mut b = costed_info(2, 300, None);
        a.delivery_rate = Some((sec(1), (1.0 * MBIT) as u64, false));
        b.delivery_rate = Some((sec(1), (2.0 * MBIT) as u64, false));
        s.select(sec(1), &[a, b], &SchedContext::default());
        // a: 100 per Mbit/s, b: 150: b unused at alpha 0.
        assert_eq!(s.allocation().order, vec![(1, None), (2, Some(0))]);
        // a's capacity falls to 0.5 Mbit/s: believed once the old maximum has aged.
        a.delivery_rate = Some((sec(3), (0.5 * MBIT) as u64, false));
        s.select(sec(3), &[a, b], &SchedContext::default());
        assert_eq!(s.allocation().order[0].0, 1);
        a.delivery_rate = Some((sec(12), (0.5 * MBIT) as u64, false));
        s.select(sec(12), &[a, b], &SchedContext::default());
        // a: 200 per Mbit/s now, b (estimate kept while unused): 150. b first.
        assert_eq!(s.allocation().order[0].0, 2);
        // A sample held back by the limit does not lower the estimate.
        let mut s = Operetta::new(0.5);
        b.delivery_rate = Some((sec(20), (0.95 * MBIT) as u64, false));
        b.rate_cap = Some(MBIT as u64);
        s.estimates.insert(
            2,
            Estimate {
                rate: 2.0 * MBIT,
                at: sec(1),
                seen: sec(1),
                bound: false,
            },
        );
        s.observe(&b);
        assert_eq!(s.estimates[&2].rate, 2.0 * MBIT);
        // Clearly below the limit: the network holds it back, a capacity sample.
        b.delivery_rate = Some((sec(21), (0.5 * MBIT) as u64, false));
        s.observe(&b);
        assert_eq!(s.estimates[&2].rate, 0.5 * MBIT);
    }
}
