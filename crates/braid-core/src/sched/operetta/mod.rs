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
//! Paths with unknown power (no PATH_COST from either end) are ranked after every path with
//! a known power, fastest first: using them is never cheaper as far as the scheduler knows.
//! With no power known at all the scheduler is a pure throughput-target filler (fastest
//! path first).
//!
//! # Rates
//!
//! `r_j` is the rate hint of PATH_COST when it gives one (0 means "estimate it"). Otherwise
//! it is the path's capacity estimate, [`PathInfo::capacity`], which the path keeps from its
//! delivery-rate samples (`path/capacity.rs` says which samples count: not those taken while
//! application-limited, held back by this scheduler's limit or by the controller's own
//! ProbeRTT; in slow start only a lower bound until the rate stops growing). A path that
//! carries no data (limit 0) keeps its last estimate: its samples (keepalives,
//! acknowledgements) may raise it but never age or lower it, and as soon as it is given a
//! share it is measured again like any other path. Before the first capacity sample the
//! rate is the congestion window over the smoothed RTT.
//!
//! # Probing
//!
//! A limit hides the capacity above it, and a path given no share is not measured at all,
//! so without rate hints the estimates would stay where the first samples put them
//! ([`probe`]):
//! * startup: a path not yet seen at its full bandwidth is never limited, whatever the
//!   allocation says. Its estimate is only a lower bound (a 30 Mbit/s path with a 160 ms
//!   RTT delivers 0.7 Mbit/s in its first round trips), and an allocation built on it would
//!   give the path no share and never learn better. Each path is measured so once per
//!   session, at every alpha: at alpha > 0 every rate is part of the target, and at alpha 0
//!   a path that looks slow in slow start may be the cheapest per bit. The price at alpha 0
//!   is one slow start on each expensive path (docs/results.md: 0.5-3.5 % of the energy
//!   per bit of a 40 s transfer);
//! * the marginal path, when its latest sample was held back by its limit and its estimate
//!   is not clearly above that limit (so the limit hides its capacity): the limit is lifted
//!   for the larger of two smoothed RTTs and [`PROBE_MIN`](probe::PROBE_MIN), every
//!   [`PROBE_EVERY`](probe::PROBE_EVERY);
//! * a path given no share after its full bandwidth was seen is not probed again: a probe
//!   would spend a congestion window of data on it (about one second of a 30 Mbit/s path
//!   with 160 ms of RTT). A capacity that rises while the path has no share is therefore not
//!   noticed (a limitation).

mod probe;

use super::{candidate_state, PathId, PathInfo, RateLimit, SchedContext, Scheduler};
use crate::config::Config;
use crate::time::Instant;
use probe::Probe;
use std::collections::BTreeMap;

/// A path filled to at least this fraction of its rate is left unlimited.
const FULL: f64 = 0.999;

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

/// The OPERETTA scheduler.
#[derive(Debug)]
pub struct Operetta {
    alpha: f64,
    alloc: Allocation,
    probes: BTreeMap<PathId, Probe>,
    /// The allocation's limits with the probes applied: what the paths get.
    effective: Vec<(PathId, RateLimit)>,
}

impl Default for Operetta {
    fn default() -> Self {
        Operetta {
            alpha: 1.0,
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

    /// The rate the allocation uses for a path, bytes per second.
    fn rate_of(&self, p: &PathInfo) -> f64 {
        if let Some(h) = p.rate_hint {
            return h as f64;
        }
        if let Some(c) = p.capacity {
            return c.rate as f64;
        }
        p.cwnd as f64 / p.srtt.as_secs_f64().max(1e-6)
    }

    fn recompute(&mut self, paths: &[PathInfo]) {
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
mod tests;
