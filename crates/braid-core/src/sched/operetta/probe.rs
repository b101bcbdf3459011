//! OPERETTA's probes: when a path's limit is lifted so that its capacity can be measured
//! (the rules are in the parent module's "Probing").
//!
//! Owns: the probe timers of each path and the limits with the probes applied. Must not
//! touch: the paths' capacity estimates (it reads them) or the allocation (it reads it).

use super::Operetta;
use crate::sched::{PathInfo, LIMIT_BOUND};
use crate::time::Instant;
use std::time::Duration;

/// How often the marginal path's limit is lifted while its samples are held back by it.
pub const PROBE_EVERY: Duration = Duration::from_secs(2);
/// Shortest probe.
pub const PROBE_MIN: Duration = Duration::from_millis(100);

/// When a path's limit was or will be lifted to measure it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Probe {
    /// The next probe may start then.
    pub(super) next: Instant,
    /// A probe runs until then.
    pub(super) until: Option<Instant>,
}

impl Operetta {
    /// The allocation's limits with probes started, running or ended (see the module doc).
    pub(super) fn apply_probes(&mut self, now: Instant, paths: &[PathInfo]) {
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
            if !p.capacity.is_some_and(|c| c.full) {
                // Startup: the estimate is only a lower bound until the path has been seen
                // at its full bandwidth; the allocation may not hide the path before.
                self.probes.insert(
                    id,
                    Probe {
                        next: now + PROBE_EVERY,
                        until: None,
                    },
                );
                effective.push((id, None));
                continue;
            }
            // A path without a share keeps the estimate of its full bandwidth: probing it
            // again would spend a window of data on it.
            let Some(cap) = limit.filter(|&c| c > 0) else {
                effective.push((id, limit));
                continue;
            };
            let probe = self.probes.entry(id).or_insert(Probe {
                next: now + PROBE_EVERY,
                until: None,
            });
            if let Some(until) = probe.until {
                if now < until {
                    effective.push((id, None));
                    continue;
                }
                probe.until = None;
                probe.next = now + PROBE_EVERY;
            }
            if now < probe.next {
                effective.push((id, limit));
                continue;
            }
            // Only while the limit hides the capacity: an estimate clearly above the limit
            // already says the path could carry more.
            let hidden = p
                .capacity
                .is_some_and(|c| c.bound && c.rate as f64 * LIMIT_BOUND <= cap as f64);
            let probe = self.probes.get_mut(&id).expect("inserted above");
            if hidden {
                probe.until = Some(now + (p.srtt * 2).max(PROBE_MIN));
                effective.push((id, None));
            } else {
                probe.next = now + PROBE_EVERY;
                effective.push((id, limit));
            }
        }
        self.effective = effective;
    }
}
