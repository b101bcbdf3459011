//! The link model: one path with two directions, queues, serialisation, propagation, loss,
//! duplication, blackouts and an optional shared half-duplex medium.
//!
//! Owns: packet timing on a modelled path and its statistics and airtime (reported to the
//! path's `EnergyMeter`). Must not touch: the event loop (`world`/`runner` call
//! `send`, `next_event` and `advance`), packet contents (payloads are opaque `P`) or any
//! randomness other than the `braid_core::Rng` streams seeded here.
//!
//! Semantics, per direction (Up = client -> server, Down = server -> client):
//! - A drop-tail FIFO holds at most `queue_bytes` waiting bytes (the frame on the air does
//!   not count); a packet that does not fit is dropped.
//! - The transmitter serialises the head packet for `wire_bytes * 8 / rate` (integrated
//!   through a trace when the rate follows one), then the packet propagates for `delay` plus
//!   a uniform draw in `[0, jitter]` and arrives. Jitter may reorder; without it arrivals are
//!   FIFO.
//! - Loss (Bernoulli, or Gilbert–Elliott stepped once per packet) is decided when
//!   serialisation ends: a lost packet still used its airtime. A duplicated packet arrives a
//!   second time 1 us after the first, without extra airtime.
//! - Blackouts: a packet offered during one is dropped, and so is a queued packet whose
//!   transmission would start during one; a frame already on the air or propagating still
//!   arrives.
//! - Half-duplex: both directions share one medium at the down direction's rate and every
//!   frame costs `frame_overhead` of extra airtime. Each direction keeps its own queue, one
//!   frame is on the air at a time, and when both queues wait the medium alternates between
//!   them frame by frame (802.11 DCF gives contenders equal transmission opportunities, not
//!   equal airtime), so a small ACK frame costs nearly as much as a data frame.
//! - 802.11 (`wifi`): both directions share one medium as two DCF stations (`wifi.rs` says
//!   when each may send, for how long, and when they collide); each direction keeps its own
//!   queue and PHY rate. A frame waiting for its backoff counts as queued. A frame dropped
//!   after the retry limit counts in `retry_drops`; `airtime_ns` counts successful
//!   exchanges (data, SIFS, ACK) only.
//!
//! Determinism: everything depends only on the spec, the seed and the calls; each
//! direction draws from its own `Rng` derived with `splitmix64`.
//!
//! Layout: this module owns the path (`PathModel`: which direction goes on the air when, and
//! the path's statistics and energy); `direction` one direction's queue, serialisation, loss
//! and propagation; `blackouts` the blackout schedule; `medium` the 802.11 medium.

use crate::energy::EnergyMeter;
use crate::scenario::{LinkSpec, PathSpec};
use crate::wifi::{Dcf, FULL_FRAME};
use braid_core::rng::splitmix64;
use direction::DirState;
use serde::Serialize;

mod blackouts;
mod direction;
mod medium;

pub use crate::time::Nanos;

/// How long after the original a duplicate arrives.
pub const DUPLICATE_GAP: Nanos = 1_000;

/// A direction of a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Dir {
    /// Client -> server.
    Up,
    /// Server -> client.
    Down,
}

impl Dir {
    fn idx(self) -> usize {
        match self {
            Dir::Up => 0,
            Dir::Down => 1,
        }
    }

    /// The opposite direction.
    pub fn other(self) -> Dir {
        match self {
            Dir::Up => Dir::Down,
            Dir::Down => Dir::Up,
        }
    }
}

const DIRS: [Dir; 2] = [Dir::Up, Dir::Down];

/// Counters for one direction. Bytes are wire bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LinkStats {
    pub offered_packets: u64,
    pub offered_bytes: u64,
    /// Packets that finished serialisation (lost ones included).
    pub sent_packets: u64,
    pub sent_bytes: u64,
    pub queue_drops: u64,
    pub queue_drop_bytes: u64,
    /// Lost to random (Bernoulli or burst) loss.
    pub lost_packets: u64,
    pub lost_bytes: u64,
    pub blackout_drops: u64,
    pub blackout_drop_bytes: u64,
    /// Extra copies created.
    pub duplicated: u64,
    /// Arrivals at the far end (duplicates included).
    pub delivered_packets: u64,
    pub delivered_bytes: u64,
    /// Total airtime of this direction's frames.
    pub airtime_ns: u64,
    /// 802.11 paths: transmissions of this direction's frames that collided.
    pub collisions: u64,
    /// 802.11 paths: frames dropped after the retry limit.
    pub retry_drops: u64,
    /// 802.11 paths: transmissions of this direction's frames the channel corrupted.
    pub frame_errors: u64,
    /// 802.11 paths with rate control: times this direction's station dropped its rate.
    pub rate_drops: u64,
}

/// One modelled path (see the module documentation).
pub struct PathModel<P> {
    dirs: [DirState<P>; 2],
    half_duplex: bool,
    /// The direction that last had the medium (half-duplex only).
    last: Dir,
    /// 802.11 contention, on a `wifi` path.
    dcf: Option<Dcf>,
    energy: EnergyMeter,
    meter_on: bool,
}

impl<P: Clone> PathModel<P> {
    /// A path built from `spec`; `seed` determines all of its randomness.
    pub fn new(spec: &PathSpec, seed: u64) -> Self {
        let (up_rate, overhead) = if spec.half_duplex {
            (&spec.down.rate, spec.frame_overhead)
        } else {
            (&spec.up.rate, 0)
        };
        let base = splitmix64(seed);
        let energy = EnergyMeter::new(&spec.energy);
        let dcf = spec.wifi.map(|w| {
            let r = |l: &LinkSpec| l.rate.rate_at(0);
            Dcf::new(w, [r(&spec.up), r(&spec.down)], splitmix64(base ^ 0xDCF))
        });
        PathModel {
            dirs: [
                DirState::new(&spec.up, up_rate, overhead, splitmix64(base ^ 0x5550)),
                DirState::new(
                    &spec.down,
                    &spec.down.rate,
                    overhead,
                    splitmix64(base ^ 0x444F_574E),
                ),
            ],
            half_duplex: spec.half_duplex,
            last: Dir::Down,
            dcf,
            meter_on: !energy.is_zero(),
            energy,
        }
    }

    /// Starts whatever can start at `t`.
    fn kick(&mut self, t: Nanos) {
        if !self.half_duplex {
            for d in 0..2 {
                if self.dirs[d].on_air.is_none() && !self.dirs[d].queue.is_empty() {
                    self.start(d, t);
                }
            }
        } else if self.dirs[0].on_air.is_none() && self.dirs[1].on_air.is_none() {
            let first = self.last.other();
            for d in [first, self.last] {
                if self.start(d.idx(), t) {
                    self.last = d;
                    break;
                }
            }
        }
    }

    fn start(&mut self, d: usize, t: Nanos) -> bool {
        match self.dirs[d].start(t, None) {
            Some((s, e)) => {
                if self.meter_on && e != Nanos::MAX {
                    self.energy.record(s, e);
                }
                true
            }
            None => false,
        }
    }

    /// Completes every transmission that ends at or before `now`, in time order.
    fn run_tx(&mut self, now: Nanos) {
        if self.dcf.is_some() {
            return self.run_dcf(now);
        }
        loop {
            let d = match (self.dirs[0].air_end(), self.dirs[1].air_end()) {
                (Some(a), Some(b)) if a <= now || b <= now => usize::from(b < a),
                (Some(a), _) if a <= now => 0,
                (_, Some(b)) if b <= now => 1,
                _ => return,
            };
            let end = self.dirs[d].air_end().unwrap_or(now);
            self.dirs[d].complete();
            self.kick(end);
        }
    }

    /// Offers a packet whose full on-the-wire size is `wire_bytes`.
    pub fn send(&mut self, now: Nanos, dir: Dir, wire_bytes: u32, payload: P) {
        self.run_tx(now);
        let d = dir.idx();
        let bytes = wire_bytes as u64;
        if self.dcf.is_some() {
            return self.send_dcf(now, d, wire_bytes, payload);
        }
        let idle = if self.half_duplex {
            self.dirs[0].on_air.is_none() && self.dirs[1].on_air.is_none()
        } else {
            self.dirs[d].on_air.is_none()
        };
        let s = &mut self.dirs[d];
        s.stats.offered_packets += 1;
        s.stats.offered_bytes += bytes;
        if s.blackouts.contains(now) {
            s.stats.blackout_drops += 1;
            s.stats.blackout_drop_bytes += bytes;
            return;
        }
        let straight_to_air = idle && s.queue.is_empty();
        if !straight_to_air && s.queued_bytes + bytes > s.queue_limit {
            s.stats.queue_drops += 1;
            s.stats.queue_drop_bytes += bytes;
            return;
        }
        s.queue.push_back((wire_bytes, payload));
        s.queued_bytes += bytes;
        if idle {
            self.kick(now);
        }
    }

    /// Earliest time at which something changes inside; `None` if nothing will.
    pub fn next_event(&self) -> Option<Nanos> {
        self.dirs
            .iter()
            .flat_map(|s| [s.air_end(), s.flights.next_at()])
            .flatten()
            .chain(self.next_access())
            .min()
    }

    /// Advances to `now`, pushing every packet that has arrived by `now` into `out` as
    /// `(arrival_time, dir, payload)`, in arrival order.
    pub fn advance(&mut self, now: Nanos, out: &mut Vec<(Nanos, Dir, P)>) {
        self.run_tx(now);
        loop {
            let a = self.dirs[0].flights.next_at().filter(|&t| t <= now);
            let b = self.dirs[1].flights.next_at().filter(|&t| t <= now);
            let d = match (a, b) {
                (Some(x), Some(y)) => usize::from(y < x),
                (Some(_), None) => 0,
                (None, Some(_)) => 1,
                (None, None) => return,
            };
            let s = &mut self.dirs[d];
            if let Some(f) = s.flights.pop() {
                s.stats.delivered_packets += 1;
                s.stats.delivered_bytes += f.wire as u64;
                out.push((f.at, DIRS[d], f.payload));
            }
        }
    }

    /// Bits `dir` could carry in `[t0, t1]`: the integral of its rate (the medium's rate on a
    /// half-duplex path), counting 0 during blackouts.
    ///
    /// On an 802.11 path the rate is the IP-layer rate of full-size frames sent back to back
    /// by that direction alone (a UDP flood's), not the PHY rate.
    pub fn capacity_bits(&self, dir: Dir, t0: Nanos, t1: Nanos) -> f64 {
        let s = &self.dirs[dir.idx()];
        if let Some(dcf) = &self.dcf {
            let phy = s.rate.rate_at(0);
            let sat = dcf.standard().saturation_bps(FULL_FRAME, phy);
            let mut up = 0;
            let mut cur = t0;
            while cur < t1 {
                if let Some(e) = s.blackouts.end_if_in(cur) {
                    cur = e;
                    continue;
                }
                let stop = s.blackouts.next_start_after(cur).map_or(t1, |n| n.min(t1));
                up += stop - cur;
                cur = stop;
            }
            return sat * up as f64 / 1e9;
        }
        let mut cur = t0;
        let mut total: u128 = 0;
        while cur < t1 {
            if let Some(e) = s.blackouts.end_if_in(cur) {
                cur = e;
                continue;
            }
            let stop = s.blackouts.next_start_after(cur).map_or(t1, |n| n.min(t1));
            total = total.saturating_add(s.rate.bitns(cur, stop));
            cur = stop;
        }
        total as f64 / 1e9
    }

    /// True when either direction is in a blackout at `t` (blackouts from a scenario apply
    /// to both).
    pub fn is_blacked_out(&self, t: Nanos) -> bool {
        self.dirs.iter().any(|s| s.blackouts.contains(t))
    }

    /// The serialisation rate of `dir` at `t` in bits per second (ignoring blackouts).
    pub fn rate_at(&self, dir: Dir, t: Nanos) -> u64 {
        self.dirs[dir.idx()].rate.rate_at(t)
    }

    /// Bytes waiting in `dir`'s queue (the frame on the air excluded).
    pub fn queued_bytes(&self, dir: Dir) -> u64 {
        self.dirs[dir.idx()].queued_bytes
    }

    /// Counters for `dir`.
    pub fn stats(&self, dir: Dir) -> &LinkStats {
        &self.dirs[dir.idx()].stats
    }

    /// The path's interface energy in joules from 0 to `t`, from the airtime reported so far
    /// (call after `advance(t)`).
    pub fn energy_j_until(&mut self, t: Nanos) -> f64 {
        self.energy.energy_until(t)
    }
}

#[cfg(test)]
mod tests;
