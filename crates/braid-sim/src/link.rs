//! The link model: one path with two directions, queues, serialisation, propagation, loss,
//! duplication, blackouts and an optional shared half-duplex medium.
//!
//! Owns: packet timing on a modelled path and its statistics and airtime (reported to the
//! path's `EnergyMeter`). Must not touch: the event loop (`world.rs`/`runner.rs` call
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

use crate::energy::EnergyMeter;
use crate::scenario::{BurstSpec, LinkSpec, PathSpec, RateSpec};
use crate::wifi::{Dcf, FULL_FRAME};
use braid_core::rng::splitmix64;
use braid_core::Rng;
use serde::Serialize;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

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
}

/// Merged blackout intervals plus the periodic schedule.
#[derive(Debug, Clone)]
struct Blackouts {
    list: Vec<(Nanos, Nanos)>,
    every: Option<(Nanos, Nanos)>,
}

impl Blackouts {
    fn new(spec: &LinkSpec) -> Blackouts {
        let mut raw: Vec<(Nanos, Nanos)> = spec
            .blackouts
            .iter()
            .copied()
            .filter(|b| b.1 > b.0)
            .collect();
        raw.sort_unstable();
        let mut list: Vec<(Nanos, Nanos)> = Vec::with_capacity(raw.len());
        for (s, e) in raw {
            match list.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => list.push((s, e)),
            }
        }
        let every = spec.blackout_every.filter(|&(p, d)| p > 0 && d > 0);
        Blackouts { list, every }
    }

    fn is_empty(&self) -> bool {
        self.list.is_empty() && self.every.is_none()
    }

    /// End of the single interval of each kind that contains `t`, if any.
    fn covering_end(&self, t: Nanos) -> Option<Nanos> {
        let mut end = None;
        let i = self.list.partition_point(|b| b.0 <= t);
        if i > 0 && self.list[i - 1].1 > t {
            end = Some(self.list[i - 1].1);
        }
        if let Some((p, d)) = self.every {
            if t >= p && t % p < d {
                let e = (t - t % p).saturating_add(d);
                end = Some(end.map_or(e, |x: Nanos| x.max(e)));
            }
        }
        end
    }

    #[inline]
    fn contains(&self, t: Nanos) -> bool {
        !self.is_empty() && self.covering_end(t).is_some()
    }

    /// End of the (union) blackout containing `t`, if `t` is in one.
    fn end_if_in(&self, t: Nanos) -> Option<Nanos> {
        let mut end = self.covering_end(t)?;
        while let Some(e) = self.covering_end(end) {
            if e <= end {
                break;
            }
            end = e;
        }
        Some(end)
    }

    /// The earliest blackout start strictly after `t`.
    fn next_start_after(&self, t: Nanos) -> Option<Nanos> {
        let i = self.list.partition_point(|b| b.0 <= t);
        let a = self.list.get(i).map(|b| b.0);
        let b = self.every.and_then(|(p, _)| (t / p + 1).checked_mul(p));
        match (a, b) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        }
    }
}

/// A packet propagating towards the far end.
struct Flight<P> {
    at: Nanos,
    seq: u64,
    wire: u32,
    payload: P,
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
enum Flights<P> {
    /// Without jitter arrivals are (almost) FIFO; duplicates are inserted from the back.
    Fifo(VecDeque<Flight<P>>),
    Heap(BinaryHeap<Flight<P>>),
}

impl<P> Flights<P> {
    #[inline]
    fn push(&mut self, f: Flight<P>) {
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
    fn next_at(&self) -> Option<Nanos> {
        match self {
            Flights::Fifo(q) => q.front().map(|f| f.at),
            Flights::Heap(h) => h.peek().map(|f| f.at),
        }
    }

    #[inline]
    fn pop(&mut self) -> Option<Flight<P>> {
        match self {
            Flights::Fifo(q) => q.pop_front(),
            Flights::Heap(h) => h.pop(),
        }
    }
}

/// The frame being serialised.
struct OnAir<P> {
    start: Nanos,
    /// `Nanos::MAX` when the rate never allows it to finish.
    end: Nanos,
    wire: u32,
    payload: P,
}

struct DirState<P> {
    /// The rate frames are serialised at (the medium's on a half-duplex path).
    rate: RateSpec,
    overhead: Nanos,
    delay: Nanos,
    jitter: Nanos,
    loss: f64,
    burst: Option<BurstSpec>,
    bad: bool,
    duplicate: f64,
    queue_limit: u64,
    blackouts: Blackouts,
    queue: VecDeque<(u32, P)>,
    queued_bytes: u64,
    on_air: Option<OnAir<P>>,
    flights: Flights<P>,
    seq: u64,
    rng: Rng,
    stats: LinkStats,
}

impl<P: Clone> DirState<P> {
    fn new(spec: &LinkSpec, rate: &RateSpec, overhead: Nanos, seed: u64) -> Self {
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
    fn start(
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
    fn complete(&mut self) {
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

    fn air_end(&self) -> Option<Nanos> {
        self.on_air
            .as_ref()
            .map(|f| f.end)
            .filter(|&e| e != Nanos::MAX)
    }
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
mod tests {
    use super::*;
    use crate::energy::EnergySpec;
    use crate::trace::Trace;
    use std::sync::Arc;

    const MS: Nanos = 1_000_000;
    const US: Nanos = 1_000;

    fn link(bps: u64, delay: Nanos) -> LinkSpec {
        LinkSpec {
            rate: RateSpec::Constant(bps),
            delay,
            jitter: 0,
            loss: 0.0,
            burst: None,
            duplicate: 0.0,
            queue_bytes: 10_000_000,
            blackouts: vec![],
            blackout_every: None,
        }
    }

    fn path(l: LinkSpec) -> PathSpec {
        PathSpec {
            name: "p".into(),
            up: l.clone(),
            down: l,
            half_duplex: false,
            frame_overhead: 0,
            wifi: None,
            energy: EnergySpec::default(),
            rate_hint: None,
        }
    }

    /// Steps through every internal event up to `until`.
    fn drain<P: Clone>(m: &mut PathModel<P>, until: Nanos) -> Vec<(Nanos, Dir, P)> {
        let mut out = Vec::new();
        while let Some(t) = m.next_event().filter(|&t| t <= until) {
            m.advance(t, &mut out);
        }
        m.advance(until, &mut out);
        out
    }

    #[test]
    fn saturated_constant_link_is_exact() {
        // 1500 B at 12 Mbit/s = 1 ms per packet.
        let mut m = PathModel::new(&path(link(12_000_000, 10 * MS)), 1);
        for i in 0..100u32 {
            m.send(0, Dir::Down, 1500, i);
        }
        assert_eq!(m.next_event(), Some(MS));
        let out = drain(&mut m, 10_000 * MS);
        assert_eq!(out.len(), 100);
        for (k, (t, d, p)) in out.iter().enumerate() {
            assert_eq!(
                (*t, *d, *p),
                ((k as u64 + 1) * MS + 10 * MS, Dir::Down, k as u32)
            );
        }
        let s = m.stats(Dir::Down);
        assert_eq!((s.delivered_packets, s.delivered_bytes), (100, 150_000));
        assert_eq!(s.airtime_ns, 100 * MS);
        assert_eq!(m.next_event(), None);
        // Rounds up: 1 byte at 3 bit/s takes ceil(8/3 s).
        let mut slow = PathModel::new(&path(link(3, 0)), 1);
        slow.send(0, Dir::Up, 1, ());
        assert_eq!(slow.next_event(), Some(2_666_666_667));
    }

    #[test]
    fn one_big_advance_equals_stepping() {
        let mut l = link(10_000_000, 5 * MS);
        l.jitter = 3 * MS;
        l.loss = 0.1;
        l.duplicate = 0.05;
        let run = |step: bool| {
            let mut m = PathModel::new(&path(l.clone()), 9);
            let mut out = Vec::new();
            for i in 0..2000u32 {
                let now = i as u64 * 500 * US;
                if step {
                    out.extend(drain(&mut m, now));
                }
                let dir = if i % 3 == 0 { Dir::Up } else { Dir::Down };
                m.send(now, dir, 1200, i);
            }
            m.advance(u64::MAX - 1, &mut out);
            out
        };
        let (a, b) = (run(true), run(false));
        assert_eq!(a, b);
        assert!(a.windows(2).all(|w| w[0].0 <= w[1].0), "arrival order");
        // Determinism: a second run gives identical results.
        assert_eq!(a, run(true));
    }

    #[test]
    fn trace_rate_changes_mid_packet() {
        // 12 Mbit/s until 0.5 ms, then 24 Mbit/s: 12000 bits end at 0.5 + 0.25 ms.
        let tr = Trace::new(vec![(0, 12_000_000), (500 * US, 24_000_000)]).unwrap();
        let mut l = link(0, 0);
        l.rate = RateSpec::Trace(Arc::new(tr));
        let mut m = PathModel::new(&path(l), 1);
        m.send(0, Dir::Up, 1500, ());
        assert_eq!(m.next_event(), Some(750 * US));
        let out = drain(&mut m, MS);
        assert_eq!(out, vec![(750 * US, Dir::Up, ())]);
        // A rate that drops to 0 forever: the frame never finishes.
        let dead = Trace::new(vec![(0, 0)]).unwrap();
        let mut l = link(0, 0);
        l.rate = RateSpec::Trace(Arc::new(dead));
        let mut m = PathModel::new(&path(l), 1);
        m.send(0, Dir::Up, 1500, ());
        assert_eq!(m.next_event(), None);
    }

    #[test]
    fn queue_overflow_drops() {
        let mut l = link(12_000_000, 0);
        l.queue_bytes = 3000;
        let mut m = PathModel::new(&path(l), 1);
        for i in 0..10 {
            m.send(0, Dir::Down, 1500, i);
        }
        assert_eq!(m.queued_bytes(Dir::Down), 3000);
        let s = m.stats(Dir::Down);
        assert_eq!(
            (s.offered_packets, s.queue_drops, s.queue_drop_bytes),
            (10, 7, 10_500)
        );
        let out = drain(&mut m, 10 * MS);
        assert_eq!(out.iter().map(|o| o.2).collect::<Vec<_>>(), vec![0, 1, 2]);
        // Room again once the queue drained.
        m.send(10 * MS, Dir::Down, 1500, 99);
        assert_eq!(drain(&mut m, 20 * MS), vec![(11 * MS, Dir::Down, 99)]);
    }

    #[test]
    fn delay_and_jitter_bounds() {
        let mut l = link(1_000_000_000, 10 * MS);
        l.jitter = 5 * MS;
        let mut m = PathModel::new(&path(l), 3);
        let mut sent = std::collections::HashMap::new();
        for i in 0..5000u64 {
            let now = i * 100 * US;
            sent.insert(i, now + 12 * US); // 1500 B at 1 Gbit/s = 12 us
            m.send(now, Dir::Up, 1500, i);
        }
        let out = drain(&mut m, u64::MAX - 1);
        assert_eq!(out.len(), 5000);
        let (mut lo, mut hi, mut reordered) = (u64::MAX, 0, false);
        for w in out.windows(2) {
            reordered |= w[1].2 < w[0].2;
        }
        for (t, _, i) in &out {
            let d = t - sent[i];
            lo = lo.min(d);
            hi = hi.max(d);
        }
        assert!(lo >= 10 * MS && hi <= 15 * MS, "{lo} {hi}");
        assert!(
            lo < 10 * MS + 100 * US && hi > 15 * MS - 100 * US,
            "{lo} {hi}"
        );
        assert!(reordered);
    }

    fn delivered_fraction(l: LinkSpec, n: u32) -> f64 {
        let mut m = PathModel::new(&path(l), 11);
        let mut out = Vec::new();
        for i in 0..n {
            m.send(i as u64 * 10 * US, Dir::Down, 100, ());
            if i % 64 == 0 {
                m.advance(i as u64 * 10 * US, &mut out);
            }
        }
        m.advance(u64::MAX - 1, &mut out);
        let s = m.stats(Dir::Down);
        assert_eq!(s.lost_packets + s.delivered_packets, n as u64);
        out.len() as f64 / n as f64
    }

    #[test]
    fn bernoulli_loss_within_binomial_bound() {
        let mut l = link(1_000_000_000, MS);
        l.loss = 0.1;
        let n = 100_000.0;
        let lost = (1.0 - delivered_fraction(l, 100_000)) * n;
        let sd = (n * 0.1 * 0.9f64).sqrt();
        assert!((lost - 10_000.0).abs() < 5.0 * sd, "lost {lost}");
    }

    #[test]
    fn gilbert_elliott_average_loss() {
        let mut l = link(1_000_000_000, MS);
        l.burst = Some(BurstSpec {
            p: 0.01,
            r: 0.3,
            loss_bad: 1.0,
        });
        let loss = 1.0 - delivered_fraction(l, 300_000);
        let expect = 0.01 / 0.31;
        assert!(
            (loss - expect).abs() < 0.004,
            "loss {loss} expected {expect}"
        );
    }

    #[test]
    fn duplicates_arrive_twice_without_airtime() {
        let mut l = link(12_000_000, MS);
        l.duplicate = 1.0;
        let mut m = PathModel::new(&path(l), 1);
        m.send(0, Dir::Up, 1500, 7);
        m.send(0, Dir::Up, 1500, 8);
        let out = drain(&mut m, 100 * MS);
        let expect = [(2, 7), (2, 7), (3, 8), (3, 8)];
        let got: Vec<_> = out.iter().map(|o| (o.0, o.2)).collect();
        let want: Vec<_> = expect
            .iter()
            .enumerate()
            .map(|(k, &(t, p))| (t * MS + (k as u64 % 2) * DUPLICATE_GAP, p))
            .collect();
        assert_eq!(got, want);
        assert_eq!(m.stats(Dir::Up).duplicated, 2);
        assert_eq!(m.stats(Dir::Up).airtime_ns, 2 * MS);
    }

    #[test]
    fn blackouts_drop_and_resume() {
        let mut l = link(12_000_000, 0);
        l.blackouts = vec![(10 * MS, 20 * MS)];
        let mut m = PathModel::new(&path(l), 1);
        // Five packets at 8 ms: the first is on the air 8-9 ms and the second 9-10 ms; the
        // rest would start during the blackout and are dropped.
        for i in 0..5 {
            m.send(8 * MS, Dir::Down, 1500, i);
        }
        let mut out = drain(&mut m, 15 * MS);
        m.send(15 * MS, Dir::Down, 1500, 10); // offered during the blackout
        m.send(20 * MS, Dir::Down, 1500, 11); // after it
        out.extend(drain(&mut m, 30 * MS));
        let got: Vec<_> = out.iter().map(|o| (o.0, o.2)).collect();
        assert_eq!(got, vec![(9 * MS, 0), (10 * MS, 1), (21 * MS, 11)]);
        assert_eq!(m.stats(Dir::Down).blackout_drops, 4);
        assert!(m.is_blacked_out(10 * MS) && m.is_blacked_out(20 * MS - 1));
        assert!(!m.is_blacked_out(20 * MS) && !m.is_blacked_out(10 * MS - 1));
    }

    #[test]
    fn periodic_blackouts() {
        let mut l = link(8_000_000, 0);
        l.blackout_every = Some((100 * MS, 10 * MS));
        let m: PathModel<()> = PathModel::new(&path(l), 1);
        assert!(!m.is_blacked_out(5 * MS)); // k starts at 1
        assert!(!m.is_blacked_out(100 * MS - 1));
        assert!(m.is_blacked_out(100 * MS));
        assert!(m.is_blacked_out(110 * MS - 1));
        assert!(!m.is_blacked_out(110 * MS));
        assert!(m.is_blacked_out(1_205 * MS));
        // 1 s at 8 Mbit/s minus ten blackouts of 10 ms.
        assert_eq!(
            m.capacity_bits(Dir::Up, 0, 1_000 * MS),
            8e6 * 0.9 + 8e6 * 0.01
        );
        assert_eq!(
            m.capacity_bits(Dir::Up, 0, 1_010 * MS),
            8e6 * 0.9 + 8e6 * 0.01
        );
    }

    #[test]
    fn capacity_with_blackouts_and_traces() {
        let tr = Trace::new(vec![(0, 10_000_000), (1_000 * MS, 20_000_000)]).unwrap();
        let mut l = link(0, 0);
        l.rate = RateSpec::Trace(Arc::new(tr));
        // Overlapping list entries and a periodic blackout overlapping one of them.
        l.blackouts = vec![
            (500 * MS, 700 * MS),
            (600 * MS, 800 * MS),
            (1_500 * MS, 1_600 * MS),
        ];
        l.blackout_every = Some((1_550 * MS, 100 * MS));
        let m: PathModel<()> = PathModel::new(&path(l), 1);
        let c = m.capacity_bits(Dir::Down, 0, 2_000 * MS);
        // 0-0.5 s at 10M, 0.8-1 s at 10M, 1-1.5 s at 20M, 1.65-2 s at 20M.
        let expect = 5e6 + 2e6 + 10e6 + 7e6;
        assert!((c - expect).abs() < 1e-6, "{c}");
        assert_eq!(m.capacity_bits(Dir::Down, 600 * MS, 650 * MS), 0.0);
        assert_eq!(m.capacity_bits(Dir::Down, 5, 5), 0.0);
    }

    #[test]
    fn half_duplex_alternates_and_charges_overhead() {
        let mut p = path(link(12_000_000, 0));
        p.half_duplex = true;
        p.up.rate = RateSpec::Constant(1_000); // ignored: the medium runs at the down rate
        p.frame_overhead = 100 * US;
        let mut m = PathModel::new(&p, 1);
        for i in 0..200 {
            m.send(0, Dir::Down, 1500, i);
            m.send(0, Dir::Up, 1500, i);
        }
        let out = drain(&mut m, 110 * MS);
        let ups = out.iter().filter(|o| o.1 == Dir::Up).count();
        let downs = out.len() - ups;
        assert!(
            out.len() >= 99 && (ups as i64 - downs as i64).abs() <= 1,
            "{ups} {downs}"
        );
        assert!(
            out.windows(2).all(|w| w[0].1 != w[1].1),
            "alternates frame by frame"
        );
        assert_eq!(out[0].0, 1_100 * US);
        // A 40-byte frame: 100 us of overhead plus 26.67 us of bytes.
        let mut m = PathModel::new(&p, 1);
        m.send(0, Dir::Up, 40, 0);
        assert_eq!(m.next_event(), Some(100 * US + 26_667));
        assert_eq!(m.capacity_bits(Dir::Up, 0, 1_000 * MS), 12e6);
    }

    #[test]
    fn energy_follows_airtime() {
        let mut p = path(link(12_000_000, 0));
        p.energy = EnergySpec {
            active_w: 1.0,
            idle_w: 0.0,
            ramp_j: 2.5,
            tail_s: 0.5,
        };
        let mut m = PathModel::new(&p, 1);
        // Both directions busy 0-10 ms (overlapping: counted once).
        for i in 0..10 {
            m.send(0, Dir::Up, 1500, i);
            m.send(0, Dir::Down, 1500, i);
        }
        drain(&mut m, 2_000 * MS);
        let e = m.energy_j_until(2_000 * MS);
        assert!((e - (2.5 + 0.010 + 0.5)).abs() < 1e-9, "{e}");
    }

    #[test]
    fn a_million_packets_quickly() {
        let mut m = PathModel::new(&path(link(10_000_000_000, MS)), 1);
        let mut out = Vec::with_capacity(1024);
        let start = std::time::Instant::now();
        let mut delivered = 0usize;
        for i in 0..1_000_000u64 {
            let now = i * 1_300;
            m.send(now, if i % 2 == 0 { Dir::Up } else { Dir::Down }, 1500, i);
            if i % 16 == 0 {
                m.advance(now, &mut out);
                delivered += out.len();
                out.clear();
            }
        }
        m.advance(u64::MAX - 1, &mut out);
        delivered += out.len();
        assert_eq!(delivered, 1_000_000);
        let el = start.elapsed();
        eprintln!("1M packets in {el:?}");
        assert!(el.as_secs_f64() < 10.0);
    }
}
