//! Weighted round-robin: each path gets packets in proportion to its estimated bandwidth
//! (congestion window over smoothed RTT), interleaved smoothly (the "smooth weighted
//! round-robin" of nginx: every pick adds each path's weight to its credit and takes the
//! path with the most credit, which then pays the total).

use super::{candidate_state, PathId, PathInfo, SchedContext, Scheduler};
use crate::time::Instant;
use std::collections::BTreeMap;

/// Credits per path.
#[derive(Debug, Default)]
pub struct WeightedRoundRobin {
    credit: BTreeMap<PathId, f64>,
}

impl Scheduler for WeightedRoundRobin {
    fn name(&self) -> &'static str {
        "wrr"
    }

    fn select(&mut self, _now: Instant, paths: &[PathInfo], _ctx: &SchedContext) -> Option<PathId> {
        let state = candidate_state(paths)?;
        let ready: Vec<&PathInfo> = paths
            .iter()
            .filter(|p| p.eligible(state) && p.send_ready)
            .collect();
        if ready.is_empty() {
            return None;
        }
        let weight = |p: &PathInfo| p.cwnd as f64 / p.srtt.as_secs_f64().max(1e-6);
        let total: f64 = ready.iter().map(|p| weight(p)).sum();
        let mut best: Option<(f64, PathId)> = None;
        for p in &ready {
            let c = self.credit.entry(p.id).or_insert(0.0);
            *c += weight(p);
            if best.is_none_or(|(b, _)| *c > b) {
                best = Some((*c, p.id));
            }
        }
        let (_, id) = best?;
        if let Some(c) = self.credit.get_mut(&id) {
            *c -= total;
        }
        // Forget paths that are gone.
        self.credit.retain(|k, _| paths.iter().any(|p| p.id == *k));
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::tests::info;

    #[test]
    fn shares_follow_bandwidth() {
        let mut s = WeightedRoundRobin::default();
        let (mut a, mut b) = (info(0, 10, true), info(1, 10, true));
        a.cwnd = 30_000;
        b.cwnd = 10_000;
        let ctx = SchedContext::default();
        let picks: Vec<_> = (0..400)
            .map(|_| s.select(Instant(0), &[a, b], &ctx).unwrap())
            .collect();
        let on_a = picks.iter().filter(|&&p| p == 0).count();
        assert_eq!(on_a, 300);
        // Smooth: never more than three of a's in a row.
        assert!(!picks.windows(4).any(|w| w.iter().all(|&p| p == 0)));
    }
}
