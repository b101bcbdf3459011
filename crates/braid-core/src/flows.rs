//! Datagram flows and their class: real-time (sparse and steady: calls, games, DNS) or bulk.
//!
//! The application names the flow of each datagram ([`crate::Session::send_flow_datagram`]);
//! this module counts, per flow, the packets and bytes of the last second (a sliding window
//! of [`SLOTS`] slots of [`SLOT`]) and says what the flow is. A new flow starts real-time; a
//! flow whose last second holds more than `realtime_max_pps` packets or more than
//! `realtime_max_bitrate` bits is bulk; a bulk flow is real-time again once its last second
//! falls to three quarters of both limits (hysteresis, so a flow at the limit does not flap).
//! A short burst of a new flow stays real-time: only a whole second's worth counts.
//!
//! The table holds at most `flow_table` flows. A flow silent for [`IDLE`] is forgotten (swept
//! at most once per [`SLOT`] × [`SLOTS`]); when the table is full, the flow heard from
//! longest ago makes room. A forgotten flow starts again as a new one.
//!
//! Owns: the flow table, per-flow rate measurement and class. Must not touch: paths,
//! packets, queues or the duplicate budget (the session decides what a class means).

use crate::time::Instant;
use std::collections::BTreeMap;
use std::time::Duration;

/// One slot of the rate window.
pub const SLOT: Duration = Duration::from_millis(125);
/// Slots in the window (together one second).
pub const SLOTS: usize = 8;
/// A flow silent this long is forgotten.
pub const IDLE: Duration = Duration::from_secs(2);

/// What a flow is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowClass {
    /// Sparse and steady: sent at once on the lowest-delay path, with a copy when the
    /// budget allows.
    RealTime,
    /// Above the real-time limits: spread over the paths.
    Bulk,
}

/// The limits of a real-time flow and the table size (from `Config`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowLimits {
    /// Most packets in one second.
    pub max_pps: u64,
    /// Most bits in one second (payload bytes × 8).
    pub max_bitrate: u64,
    /// Most flows tracked at once (at least 1).
    pub table: usize,
}

impl FlowLimits {
    /// The limits `cfg` sets.
    pub fn from_config(cfg: &crate::Config) -> FlowLimits {
        FlowLimits {
            max_pps: cfg.realtime_max_pps,
            max_bitrate: cfg.realtime_max_bitrate,
            table: cfg.flow_table,
        }
    }
}

#[derive(Debug, Clone)]
struct Flow {
    /// (packets, bytes) per slot; slot `i` holds slot number `i mod SLOTS`.
    slots: [(u64, u64); SLOTS],
    /// The slot number (time / SLOT) of the newest slot.
    newest: u64,
    class: FlowClass,
    last: Instant,
}

impl Flow {
    fn new(now: Instant) -> Flow {
        Flow {
            slots: [(0, 0); SLOTS],
            newest: slot_of(now),
            class: FlowClass::RealTime,
            last: now,
        }
    }

    /// Count one packet of `bytes` at `now`; returns the last second's (packets, bytes).
    fn count(&mut self, now: Instant, bytes: u64) -> (u64, u64) {
        let s = slot_of(now);
        if s > self.newest {
            // Clear the slots that fell out of the window (all when it moved past them).
            let gap = (s - self.newest).min(SLOTS as u64);
            for k in 1..=gap {
                self.slots[((self.newest + k) % SLOTS as u64) as usize] = (0, 0);
            }
            self.newest = s;
        }
        // An instant older than the newest slot (a caller's clock is monotonic; anything
        // else counts in the newest slot).
        let slot = &mut self.slots[(self.newest % SLOTS as u64) as usize];
        slot.0 = slot.0.saturating_add(1);
        slot.1 = slot.1.saturating_add(bytes);
        self.last = self.last.max(now);
        self.slots.iter().fold((0, 0), |(p, b), s| {
            (p.saturating_add(s.0), b.saturating_add(s.1))
        })
    }
}

fn slot_of(now: Instant) -> u64 {
    now.as_nanos() / SLOT.as_nanos() as u64
}

/// The flow table.
#[derive(Debug, Clone)]
pub struct Classifier {
    limits: FlowLimits,
    flows: BTreeMap<u64, Flow>,
    next_sweep: Instant,
}

impl Classifier {
    /// An empty table.
    pub fn new(limits: FlowLimits) -> Classifier {
        Classifier {
            limits,
            flows: BTreeMap::new(),
            next_sweep: Instant::ZERO,
        }
    }

    /// Flows tracked now.
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    /// No flow tracked.
    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// The class of `flow` as last measured (a flow not tracked is new: real-time).
    pub fn class(&self, flow: u64) -> FlowClass {
        self.flows
            .get(&flow)
            .map_or(FlowClass::RealTime, |f| f.class)
    }

    /// A datagram of `bytes` of `flow` is sent at `now`: count it and return the flow's
    /// class.
    pub fn observe(&mut self, now: Instant, flow: u64, bytes: usize) -> FlowClass {
        if now >= self.next_sweep {
            self.flows
                .retain(|_, f| now.saturating_since(f.last) < IDLE);
            self.next_sweep = now + SLOT * SLOTS as u32;
        }
        if !self.flows.contains_key(&flow) && self.flows.len() >= self.limits.table.max(1) {
            self.evict_oldest();
        }
        let limits = self.limits;
        let f = self.flows.entry(flow).or_insert_with(|| Flow::new(now));
        let (pkts, bytes) = f.count(now, bytes as u64);
        let bits = bytes.saturating_mul(8);
        f.class = match f.class {
            FlowClass::RealTime if pkts > limits.max_pps || bits > limits.max_bitrate => {
                FlowClass::Bulk
            }
            FlowClass::Bulk
                if pkts <= limits.max_pps / 4 * 3 && bits <= limits.max_bitrate / 4 * 3 =>
            {
                FlowClass::RealTime
            }
            c => c,
        };
        f.class
    }

    /// Make room: forget the flow heard from longest ago.
    fn evict_oldest(&mut self) {
        let oldest = self
            .flows
            .iter()
            .min_by_key(|(id, f)| (f.last, **id))
            .map(|(id, _)| *id);
        if let Some(id) = oldest {
            self.flows.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests;
