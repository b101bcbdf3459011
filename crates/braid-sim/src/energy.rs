//! Interface energy model: active, tail and idle power plus a ramp cost per wake-up.
//!
//! Owns: turning the airtime intervals of one path into joules. Must not touch: the link's
//! queues or timing (`link` reports intervals to it) or scenario parsing. The model:
//! the interface is Active while any frame of the path is being serialised in either
//! direction (the union of the reported intervals); after activity ends it stays in Tail at
//! active power for `tail_s` seconds; otherwise it is Idle at `idle_w`. Each transition from
//! Idle to Active (activity that starts after the previous tail has ended, and the very
//! first activity) costs `ramp_j` joules.
//!
//! Memory is O(1): only the current burst of activity is kept. `energy_until(t)` is exact for
//! any `t` at or after the start of the latest burst (the usual case: the end of a run);
//! earlier `t` are clamped to that start.

use crate::time::Nanos;
use serde::{Deserialize, Serialize};

/// Interface power model (see `energy.rs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnergySpec {
    #[serde(default)]
    pub active_w: f64,
    #[serde(default)]
    pub idle_w: f64,
    #[serde(default)]
    pub ramp_j: f64,
    #[serde(default)]
    pub tail_s: f64,
}

/// Accumulates the energy of one interface from its airtime intervals.
#[derive(Debug, Clone)]
pub struct EnergyMeter {
    active_w: f64,
    idle_w: f64,
    ramp_j: f64,
    tail: Nanos,
    /// Joules from 0 to `burst_start` (before the burst's ramp).
    settled_j: f64,
    /// The current burst: active from `.0` to `.1` (union of intervals), then the tail.
    burst: Option<(Nanos, Nanos)>,
}

fn secs(ns: Nanos) -> f64 {
    ns as f64 / 1e9
}

impl EnergyMeter {
    /// A meter with no activity yet.
    pub fn new(spec: &EnergySpec) -> EnergyMeter {
        let tail_ns = spec.tail_s * 1e9;
        let tail = if tail_ns.is_finite() && tail_ns > 0.0 {
            if tail_ns >= 1.8e19 {
                Nanos::MAX
            } else {
                tail_ns.round() as Nanos
            }
        } else {
            0
        };
        EnergyMeter {
            active_w: spec.active_w,
            idle_w: spec.idle_w,
            ramp_j: spec.ramp_j,
            tail,
            settled_j: 0.0,
            burst: None,
        }
    }

    /// True when every parameter is zero, so recording can be skipped.
    pub fn is_zero(&self) -> bool {
        self.active_w == 0.0 && self.idle_w == 0.0 && self.ramp_j == 0.0
    }

    /// Reports airtime `[start, end)`. Starts must be non-decreasing across calls (a start
    /// earlier than the current burst's start is treated as that start); intervals may
    /// overlap.
    pub fn record(&mut self, start: Nanos, end: Nanos) {
        let end = end.max(start);
        match self.burst {
            Some((bs, be)) if start <= be.saturating_add(self.tail) => {
                // Starts while active or in the tail (tail power = active power): extend.
                self.burst = Some((bs, be.max(end)));
            }
            Some((bs, be)) => {
                let tail_end = be.saturating_add(self.tail);
                self.settled_j += self.ramp_j
                    + self.active_w * secs(tail_end - bs)
                    + self.idle_w * secs(start - tail_end);
                self.burst = Some((start, end));
            }
            None => {
                self.settled_j = self.idle_w * secs(start);
                self.burst = Some((start, end));
            }
        }
    }

    /// Joules spent from 0 to `t`.
    pub fn energy_until(&self, t: Nanos) -> f64 {
        match self.burst {
            None => self.idle_w * secs(t),
            Some((bs, be)) => {
                let t = t.max(bs);
                let tail_end = be.saturating_add(self.tail);
                let active = t.min(tail_end) - bs;
                let idle = t.saturating_sub(tail_end);
                self.settled_j
                    + self.ramp_j
                    + self.active_w * secs(active)
                    + self.idle_w * secs(idle)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Nanos = 1_000_000_000;

    fn three_g() -> EnergyMeter {
        EnergyMeter::new(&EnergySpec {
            active_w: 1.0,
            idle_w: 0.0,
            ramp_j: 2.5,
            tail_s: 6.0,
        })
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn idle_only() {
        let m = EnergyMeter::new(&EnergySpec {
            active_w: 1.25,
            idle_w: 0.075,
            ramp_j: 0.0,
            tail_s: 0.0,
        });
        assert!(close(m.energy_until(10 * S), 0.75));
        assert!(!m.is_zero());
        assert!(EnergyMeter::new(&EnergySpec::default()).is_zero());
    }

    #[test]
    fn three_g_single_burst() {
        let mut m = three_g();
        m.record(S, 3 * S); // active 1-3 s, tail until 9 s
        assert!(close(m.energy_until(0), 2.5)); // clamped to the burst start
        assert!(close(m.energy_until(2 * S), 2.5 + 1.0));
        assert!(close(m.energy_until(3 * S), 2.5 + 2.0));
        assert!(close(m.energy_until(5 * S), 2.5 + 4.0));
        assert!(close(m.energy_until(100 * S), 2.5 + 8.0));
    }

    #[test]
    fn three_g_activity_in_tail_has_no_ramp() {
        let mut m = three_g();
        m.record(0, S); // tail until 7 s
        m.record(5 * S, 6 * S); // in the tail: no ramp, tail until 12 s
        assert!(close(m.energy_until(20 * S), 2.5 + 12.0));
        m.record(30 * S, 31 * S); // after the tail: new ramp
        assert!(close(m.energy_until(40 * S), 2.5 + 12.0 + 2.5 + 7.0));
        assert!(close(
            m.energy_until(30 * S + S / 2),
            2.5 + 12.0 + 2.5 + 0.5
        ));
    }

    #[test]
    fn overlapping_intervals_take_the_union() {
        let mut m = EnergyMeter::new(&EnergySpec {
            active_w: 2.0,
            idle_w: 0.5,
            ramp_j: 1.0,
            tail_s: 0.0,
        });
        m.record(S, 3 * S);
        m.record(2 * S, 4 * S); // overlaps: union 1-4 s
        m.record(2 * S, 3 * S); // inside
                                // idle 0-1 (0.5) + ramp 1 + active 3 s (6) + idle 4-6 (1.0)
        assert!(close(m.energy_until(6 * S), 0.5 + 1.0 + 6.0 + 1.0));
        m.record(6 * S, 7 * S); // a new wake-up
        assert!(close(
            m.energy_until(8 * S),
            0.5 + 1.0 + 6.0 + 1.0 + 1.0 + 2.0 + 0.5
        ));
        // Back-to-back intervals with zero tail stay one burst.
        m.record(7 * S, 8 * S);
        assert!(close(
            m.energy_until(8 * S),
            0.5 + 1.0 + 6.0 + 1.0 + 1.0 + 4.0
        ));
    }

    #[test]
    fn huge_tail_saturates() {
        let mut m = EnergyMeter::new(&EnergySpec {
            active_w: 1.0,
            idle_w: 0.0,
            ramp_j: 0.0,
            tail_s: 1e30,
        });
        m.record(0, S);
        m.record(u64::MAX - 5, u64::MAX);
        assert!(m.energy_until(2 * S).is_finite());
    }
}
