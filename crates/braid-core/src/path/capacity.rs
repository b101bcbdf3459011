//! One path's capacity: the estimate of what the path carries when the sender fills it,
//! kept from the path's delivery-rate samples and read by everyone who needs a rate
//! (OPERETTA without rate hints, `braid status`, the agent's placement of direct
//! connections) through [`PathInfo::capacity`](crate::sched::PathInfo::capacity).
//!
//! Owns: the estimate, which samples are capacity samples, and whether the path has been
//! seen at its full bandwidth. Must not touch: the congestion controller's own state (it
//! only asks whether the controller holds its window back on purpose), the scheduler's
//! limits (it only reads the limit applied now).
//!
//! A delivery-rate sample measures what the sender put through the path, which is the
//! path's capacity only when the sender filled the pipe. It is only a lower bound
//! ([`Sample::AtLeast`]: it may raise the estimate, never lower or age it) when taken
//! * while application-limited (draft-cheng-iccrg-delivery-rate-estimation's
//!   `is_app_limited`);
//! * while the path ran at 90 % or more of the scheduler's limit on it, or the limit gave
//!   it no share (a limited path whose samples stay clearly below its limit is
//!   network-limited: those are capacity samples);
//! * while the controller holds its window or rate below the pipe on purpose, and for two
//!   round trips after (BBR's ProbeRTT, drain and the 0.75 phase of ProbeBW: a sample covers
//!   the acknowledgements of one round trip, for what was sent the round trip before; `bbrq`'s
//!   ProbeRTT halves the window for 200 ms,
//!   and its samples once replaced a 30 Mbit/s estimate by half the scheduler's limit,
//!   `a_probe_rtt_sample_does_not_lower_the_capacity`).
//!
//! A sample taken while the congestion window was still growing towards the pipe's size
//! (slow start, or a window cut small) carries no mark: it is cwnd-limited like a sample of
//! a full pipe, and lower. BBR's answer is used here: a path is at its full bandwidth once
//! its delivery rate, with the sender free to send, has stopped growing: [`FULL_ROUNDS`]
//! round trips in a row without a sample [`GROWTH`] times the largest one before them, or
//! one such sample while the RTT shows a standing queue ([`QUEUE`], [`QUEUE_MIN`]: with a
//! deep buffer those round trips are long, and a growing queue already says the bottleneck
//! is full). Until then the estimate is only a lower bound: it rises with every sample and
//! never falls. From then on it is the largest capacity sample, replaced by a larger one or,
//! once older than [`ESTIMATE_WINDOW`], by the next capacity sample (so a path whose
//! capacity fell is believed within that window).

use crate::sched::{Capacity, LIMIT_BOUND};
use crate::time::Instant;
use std::time::Duration;

/// A capacity estimate older than this is replaced by the next capacity sample.
pub const ESTIMATE_WINDOW: Duration = Duration::from_secs(10);

/// A delivery rate at least this many times the largest before it is still growing
/// (BBR's full-bandwidth threshold).
pub const GROWTH: f64 = 1.25;

/// Round trips in a row without [`GROWTH`] after which the path is at full bandwidth.
pub const FULL_ROUNDS: u32 = 3;

/// A smoothed RTT this many times the minimum shows a standing queue (with [`QUEUE_MIN`]):
/// then one round trip without growth is enough.
pub const QUEUE: f64 = 1.5;

/// ... and at least this much above the minimum.
pub const QUEUE_MIN: Duration = Duration::from_millis(10);

/// The path's round trip when a sample is folded in.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rtt {
    /// Smoothed: how long a round trip is.
    pub smoothed: Duration,
    /// Minimum: the round trip without queues.
    pub min: Duration,
}

impl Rtt {
    /// The path's round trip shows a standing queue: the sender puts more into the path
    /// than its bottleneck carries, so a delivery rate that stopped growing is the
    /// bottleneck's.
    fn queue(&self) -> bool {
        self.smoothed >= self.min.mul_f64(QUEUE) && self.smoothed >= self.min + QUEUE_MIN
    }
}

/// What a sample says about the path's capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sample {
    /// The sender was free to fill the pipe (neither application-limited nor held back by
    /// a limit): a capacity sample once the path is at full bandwidth.
    Free,
    /// Application-limited or held back by a limit: the capacity is at least this much.
    AtLeast,
}

/// One path's capacity estimate.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Estimate {
    /// Bytes per second.
    rate: f64,
    /// When the estimate was last set by a capacity sample.
    at: Instant,
    /// The newest sample already looked at.
    seen: Instant,
    /// The latest sample was held back by the path's limit (capacity may be higher).
    pub(crate) bound: bool,
    /// The path has been seen at its full bandwidth: `rate` is its capacity, not a lower
    /// bound.
    full: bool,
    /// Full-bandwidth detection: the largest free sample that grew by [`GROWTH`] ...
    plateau: f64,
    /// ... when the current round trip without such growth began ...
    round_start: Instant,
    /// ... and how many round trips have passed without it.
    flat_rounds: u32,
}

impl Estimate {
    /// An estimate started by a free sample `s` (bytes per second) taken at `t`.
    pub fn new(t: Instant, s: f64) -> Self {
        Estimate {
            rate: s,
            at: t,
            seen: t,
            bound: false,
            full: false,
            plateau: s,
            round_start: t,
            flat_rounds: 0,
        }
    }

    /// Bytes per second: the capacity once [`full`](Self::full), a lower bound before.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// The path has been seen at its full bandwidth.
    pub fn full(&self) -> bool {
        self.full
    }

    /// Fold in a sample of `s` bytes per second taken at `t` (a sample already looked at is
    /// ignored); `round` is the path's round trip now, `bound` whether the path's limit held
    /// the sample back.
    pub fn fold(&mut self, t: Instant, s: f64, kind: Sample, bound: bool, rtt: Rtt) {
        if t <= self.seen {
            return;
        }
        self.seen = t;
        self.bound = bound;
        if kind == Sample::Free && !self.full {
            self.detect_full(t, s, rtt);
        }
        if kind == Sample::AtLeast || !self.full {
            // A lower bound: it may raise the estimate but never ages or lowers it.
            if s > self.rate {
                self.rate = s;
                self.at = t;
            }
        } else if s >= self.rate || t.saturating_since(self.at) > ESTIMATE_WINDOW {
            self.rate = s;
            self.at = t;
        }
    }

    /// BBR's full-bandwidth detection on free samples, round trips measured in time.
    fn detect_full(&mut self, t: Instant, s: f64, rtt: Rtt) {
        if s >= self.plateau * GROWTH {
            self.plateau = s;
            self.round_start = t;
            self.flat_rounds = 0;
        } else if rtt.queue() {
            self.full = true;
        } else if t.saturating_since(self.round_start) >= rtt.smoothed {
            self.round_start = t;
            self.flat_rounds += 1;
            self.full = self.flat_rounds >= FULL_ROUNDS;
        }
    }
}

/// A path's capacity estimate and what classifies its samples (see the module doc).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PathCapacity {
    /// Started by the first capacity sample.
    estimate: Option<Estimate>,
    /// Samples before then were sent while the controller held its window back.
    held_until: Option<Instant>,
}

impl PathCapacity {
    /// Fold in the delivery-rate sample `rate` (bytes per second) taken at `now`.
    /// `cap` is the scheduler's limit on the path, `holding_back` whether the controller
    /// holds its window below the pipe on purpose now.
    pub(crate) fn observe(
        &mut self,
        now: Instant,
        rate: f64,
        app_limited: bool,
        cap: Option<u64>,
        holding_back: bool,
        rtt: Rtt,
    ) {
        if holding_back {
            // A sample covers the acknowledgements of the last round trip, which
            // acknowledge what was sent the round trip before.
            self.held_until = Some(now + rtt.smoothed * 2);
        }
        let held = self.held_until.is_some_and(|t| now <= t);
        let capped = match cap {
            Some(0) => true,
            Some(c) => rate >= LIMIT_BOUND * c as f64,
            None => false,
        };
        let kind = if app_limited || capped || held {
            Sample::AtLeast
        } else {
            Sample::Free
        };
        match &mut self.estimate {
            Some(e) => e.fold(now, rate, kind, capped, rtt),
            // Only a capacity sample starts an estimate: until one comes, readers keep
            // their own guess (a trickle during the handshake once pinned a 2 Mbit/s path
            // at 58 kbit/s).
            None if kind == Sample::Free => self.estimate = Some(Estimate::new(now, rate)),
            None => {}
        }
    }

    /// What readers see.
    pub(crate) fn view(&self) -> Option<Capacity> {
        self.estimate.map(|e| Capacity {
            rate: e.rate() as u64,
            full: e.full(),
            bound: e.bound,
        })
    }
}

#[cfg(test)]
mod tests;
