//! One direction of a path: its drop-tail queue, the frame on the air, loss (Bernoulli or
//! Gilbert–Elliott), jitter, duplication and the packets propagating to the far end.
//!
//! Owns: a direction's state and counters, and what happens to a frame from the queue to its
//! arrival. Must not touch: which direction may use a shared medium when (the path in
//! `mod.rs` and `medium.rs` decide and call `start`/`complete`).

use super::blackouts::Blackouts;
use super::{LinkStats, DUPLICATE_GAP};
use crate::scenario::{BurstSpec, LinkSpec, RateSpec};
use crate::time::Nanos;
use braid_core::Rng;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

/// A packet propagating towards the far end.
pub(super) struct Flight<P> {
    pub(super) at: Nanos,
    pub(super) seq: u64,
    pub(super) wire: u32,
    pub(super) payload: P,
}

impl<P> PartialEq for Flight<P> {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl<P> Eq for Flight<P> {}
impl<P> PartialOrd for Flight<P> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<P> Ord for Flight<P> {
    /// Reversed, so `BinaryHeap` pops the earliest `(at, seq)` first.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// In-flight packets ordered by arrival.
pub(super) enum Flights<P> {
    /// Without jitter arrivals are (almost) FIFO; duplicates are inserted from the back.
    Fifo(VecDeque<Flight<P>>),
    Heap(BinaryHeap<Flight<P>>),
}

impl<P> Flights<P> {
    #[inline]
    pub(super) fn push(&mut self, f: Flight<P>) {
        match self {
            Flights::Fifo(q) => {
                let mut i = q.len();
                while i > 0 && q[i - 1].at > f.at {
                    i -= 1;
                }
                q.insert(i, f);
            }
            Flights::Heap(h) => h.push(f),
        }
    }

    #[inline]
    pub(super) fn next_at(&self) -> Option<Nanos> {
        match self {
            Flights::Fifo(q) => q.front().map(|f| f.at),
            Flights::Heap(h) => h.peek().map(|f| f.at),
        }
    }

    #[inline]
    pub(super) fn pop(&mut self) -> Option<Flight<P>> {
        match self {
            Flights::Fifo(q) => q.pop_front(),
            Flights::Heap(h) => h.pop(),
        }
    }
}

/// The frame being serialised.
pub(super) struct OnAir<P> {
    pub(super) start: Nanos,
    /// `Nanos::MAX` when the rate never allows it to finish.
    pub(super) end: Nanos,
    pub(super) wire: u32,
    pub(super) payload: P,
}

pub(super) struct DirState<P> {
    /// The rate frames are serialised at (the medium's on a half-duplex path).
    pub(super) rate: RateSpec,
    pub(super) overhead: Nanos,
    pub(super) delay: Nanos,
    pub(super) jitter: Nanos,
    pub(super) loss: f64,
    pub(super) burst: Option<BurstSpec>,
    pub(super) bad: bool,
    pub(super) duplicate: f64,
    pub(super) queue_limit: u64,
    pub(super) blackouts: Blackouts,
    pub(super) queue: VecDeque<(u32, P)>,
    pub(super) queued_bytes: u64,
    pub(super) on_air: Option<OnAir<P>>,
    pub(super) flights: Flights<P>,
    pub(super) seq: u64,
    pub(super) rng: Rng,
    pub(super) stats: LinkStats,
}

impl<P: Clone> DirState<P> {
    pub(super) fn new(spec: &LinkSpec, rate: &RateSpec, overhead: Nanos, seed: u64) -> Self {
        DirState {
            rate: rate.clone(),
            overhead,
            delay: spec.delay,
            jitter: spec.jitter,
            loss: spec.loss,
            burst: spec.burst,
            bad: false,
            duplicate: spec.duplicate,
            queue_limit: spec.queue_bytes,
            blackouts: Blackouts::new(spec),
            queue: VecDeque::new(),
            queued_bytes: 0,
            on_air: None,
            flights: if spec.jitter > 0 {
                Flights::Heap(BinaryHeap::new())
            } else {
                Flights::Fifo(VecDeque::new())
            },
            seq: 0,
            rng: Rng::new(seed),
            stats: LinkStats::default(),
        }
    }

    /// Pops queued packets (dropping those caught by a blackout) and puts the first that
    /// can go on the air at `t`. Returns the airtime interval it started.
    /// `airtime`: the frame's medium time from its size (802.11), else the rate's.
    pub(super) fn start(
        &mut self,
        t: Nanos,
        airtime: Option<&dyn Fn(u64) -> Nanos>,
    ) -> Option<(Nanos, Nanos)> {
        while let Some((wire, payload)) = self.queue.pop_front() {
            self.queued_bytes -= wire as u64;
            if self.blackouts.contains(t) {
                self.stats.blackout_drops += 1;
                self.stats.blackout_drop_bytes += wire as u64;
                continue;
            }
            let end = match airtime {
                Some(f) => t.saturating_add(f(wire as u64)),
                None => t
                    .checked_add(self.overhead)
                    .and_then(|s| self.rate.end_of(s, wire as u64 * 8))
                    .unwrap_or(Nanos::MAX),
            };
            self.on_air = Some(OnAir {
                start: t,
                end,
                wire,
                payload,
            });
            return Some((t, end));
        }
        None
    }

    /// The frame on the air finished serialisation at `t`.
    pub(super) fn complete(&mut self) {
        let Some(f) = self.on_air.take() else { return };
        let t = f.end;
        self.stats.sent_packets += 1;
        self.stats.sent_bytes += f.wire as u64;
        self.stats.airtime_ns += t - f.start;
        let p_loss = match self.burst {
            None => self.loss,
            Some(b) => {
                let p = if self.bad { b.loss_bad } else { self.loss };
                if self.bad {
                    if self.rng.chance(b.r) {
                        self.bad = false;
                    }
                } else if self.rng.chance(b.p) {
                    self.bad = true;
                }
                p
            }
        };
        if self.rng.chance(p_loss) {
            self.stats.lost_packets += 1;
            self.stats.lost_bytes += f.wire as u64;
            return;
        }
        let mut at = t.saturating_add(self.delay);
        if self.jitter > 0 {
            at = at.saturating_add(self.rng.below(self.jitter.saturating_add(1)));
        }
        if self.rng.chance(self.duplicate) {
            self.stats.duplicated += 1;
            self.seq += 1;
            self.flights.push(Flight {
                at: at.saturating_add(DUPLICATE_GAP),
                seq: self.seq,
                wire: f.wire,
                payload: f.payload.clone(),
            });
        }
        self.seq += 1;
        self.flights.push(Flight {
            at,
            seq: self.seq,
            wire: f.wire,
            payload: f.payload,
        });
    }

    pub(super) fn air_end(&self) -> Option<Nanos> {
        self.on_air
            .as_ref()
            .map(|f| f.end)
            .filter(|&e| e != Nanos::MAX)
    }
}
