//! Datagram packetization-layer PMTU discovery (DPLPMTUD, RFC 8899) of one path: the
//! largest datagram the path is known to carry, found by probing upward from a size that
//! always passes, and lowered again when full-size packets fall into a black hole.
//!
//! Owns: the search state (the confirmed size, the probe in flight, the smallest size known
//! to fail), black-hole detection and the raise timer, as a plain state machine driven by
//! explicit `now` and by the fate (acknowledged, lost) of the path's packets. Must not
//! touch: packets, frames, the congestion controller or the session's timer table (the path
//! reports [`Pmtud::deadline`]; the session arms it as the path's `Timer::Pmtu`).
//!
//! Search: the path starts at [`BASE_DATAGRAM`] (or its route's limit when lower), which
//! every IPv4 and IPv6 path carries (RFC 9000, 14.1), then probes the route's limit; a size
//! lost [`MAX_PROBES`] times running is taken as too large, and the search halves the gap
//! between the largest size acknowledged and the smallest that failed until it is at most
//! [`SEARCH_STEP`] bytes. A probe carries no data (PING and PADDING) and is outside
//! congestion control, so its loss costs nothing but the probe. The size in use rises only
//! when a packet of the larger size is acknowledged.
//!
//! Black hole: [`BLACK_HOLE_LOSSES`] packets larger than the base size lost in a row, with
//! no packet larger than the base sent after them acknowledged (losses are only declared
//! when a later packet is acknowledged, so smaller ones do get through), make a black hole
//! suspected. A flight's tail lost to congestion looks the same, so a probe of the size in
//! use decides: [`CONFIRM_PROBES`] of them lost in a row confirm it, and the size falls back
//! to the base and the search starts again below the size that failed; one acknowledged
//! packet of that size clears it.
//! A path that only receives (a downloading agent sends acknowledgements) would never
//! notice: one that received something with no packet above the base acknowledged for
//! [`CONFIRM_AFTER`] checks its size the same way. The raise timer ([`Pmtud::new`]'s
//! `raise`, RFC 8899's 600 s by default) searches upward again after a search that stopped
//! below the route's limit.

use crate::time::Instant;
use std::time::Duration;

/// UDP payload every path carries: QUIC's smallest allowed maximum datagram size.
pub const BASE_DATAGRAM: usize = 1200;
/// Probes of one size lost in a row before the size is judged too large (RFC 8899's
/// MAX_PROBES).
pub(crate) const MAX_PROBES: u8 = 3;
/// The search stops when the gap between the largest size acknowledged and the smallest
/// that failed is at most this many bytes.
pub(crate) const SEARCH_STEP: usize = 16;
/// Packets larger than the base size lost in a row, none acknowledged, that make a black
/// hole suspected.
pub(crate) const BLACK_HOLE_LOSSES: u32 = 4;
/// Probes of the size in use lost in a row that confirm a suspected black hole.
pub(crate) const CONFIRM_PROBES: u8 = 2;
/// A path that receives but has had no packet larger than the base acknowledged for this
/// long (a downloading agent sends only acknowledgements) checks its size with a probe.
pub(crate) const CONFIRM_AFTER: Duration = Duration::from_secs(3);

/// The size in use changed: `from` → `to` bytes of UDP payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SizeChange {
    pub from: usize,
    pub to: usize,
}

/// The probe in flight.
#[derive(Debug, Clone, Copy)]
struct Probe {
    pn: u64,
    size: usize,
    /// Judged lost if not acknowledged by then (when loss detection has no later packet to
    /// go by).
    deadline: Instant,
}

/// DPLPMTUD of one path (see the module doc).
#[derive(Debug, Clone)]
pub(crate) struct Pmtud {
    /// The size that always passes.
    base: usize,
    /// The route's limit (the driver's `set_path_max_datagram`): never probed beyond.
    ceiling: usize,
    /// The largest size acknowledged: packets are built no larger.
    current: usize,
    /// Searching: the smallest size known to fail (`ceiling + 1` when none did).
    search_hi: Option<usize>,
    /// Probes of the next size lost in a row.
    fails: u8,
    probe: Option<Probe>,
    /// When to search upward again (a search that stopped below the ceiling).
    raise_at: Option<Instant>,
    raise: Duration,
    /// Packets larger than the base lost in a row, none of that size acknowledged since.
    big_lost: u32,
    /// The newest packet larger than the base acknowledged: a loss of an older one is
    /// congestion or reordering (a later packet of that size passed), not a black hole.
    big_acked_pn: Option<u64>,
    /// [`BLACK_HOLE_LOSSES`] losses make a black hole suspected: probes of the size in use
    /// confirm it ([`CONFIRM_PROBES`] lost) or clear it (one acknowledged).
    suspect: bool,
    /// When a packet larger than the base was last acknowledged (or the size last set).
    last_big_ack: Instant,
    /// Off: the size is the ceiling (a reliable transport carries any size).
    enabled: bool,
    /// Discovery is configured (`Config::pmtu_discovery`): without it, always off.
    configured: bool,
    /// Black holes detected.
    pub black_holes: u64,
}

impl Pmtud {
    /// A path whose route carries `ceiling` bytes; searching upward again `raise` after a
    /// search that stopped below it. Without `configured`, the size is the ceiling.
    pub(crate) fn new(ceiling: usize, raise: Duration, configured: bool) -> Self {
        let mut d = Pmtud::searching_from_base(ceiling, raise);
        d.configured = configured;
        if !configured {
            d.disable();
        }
        d
    }

    fn searching_from_base(ceiling: usize, raise: Duration) -> Self {
        let base = BASE_DATAGRAM.min(ceiling);
        Pmtud {
            base,
            ceiling,
            current: base,
            search_hi: (ceiling > base).then_some(ceiling + 1),
            fails: 0,
            probe: None,
            raise_at: None,
            raise,
            big_lost: 0,
            big_acked_pn: None,
            suspect: false,
            last_big_ack: Instant::ZERO,
            enabled: true,
            configured: true,
            black_holes: 0,
        }
    }

    /// The largest datagram to build now.
    pub(crate) fn current(&self) -> usize {
        self.current
    }

    /// The route's limit: never probed beyond.
    pub(crate) fn ceiling(&self) -> usize {
        self.ceiling
    }

    /// A black hole is suspected and being confirmed.
    pub(crate) fn suspect(&self) -> bool {
        self.suspect
    }

    /// Still searching upward.
    #[cfg(test)]
    pub(crate) fn searching(&self) -> bool {
        self.enabled && self.search_hi.is_some()
    }

    /// The route's limit changed (the driver read another MTU, or the path moved): start
    /// over from the base size.
    pub(crate) fn set_ceiling(&mut self, ceiling: usize) {
        if ceiling == self.ceiling {
            return;
        }
        let enabled = self.enabled;
        self.ceiling = ceiling;
        self.restart();
        if !enabled {
            self.disable();
        }
    }

    /// Back to the base size, searching (counters kept).
    fn restart(&mut self) {
        *self = Pmtud {
            black_holes: self.black_holes,
            configured: self.configured,
            ..Pmtud::searching_from_base(self.ceiling, self.raise)
        };
    }

    fn disable(&mut self) {
        self.enabled = false;
        self.current = self.ceiling;
        self.search_hi = None;
        self.probe = None;
        self.raise_at = None;
    }

    /// Turn discovery off (a reliable transport under the path: any size passes; the size
    /// is the ceiling) or on again (from the base size).
    pub(crate) fn set_enabled(&mut self, enabled: bool) {
        let enabled = enabled && self.configured;
        if enabled == self.enabled {
            return;
        }
        if enabled {
            self.restart();
        } else {
            self.disable();
        }
    }

    /// The size of the probe to send now, if one is due (searching or confirming a suspected
    /// black hole, none in flight).
    pub(crate) fn probe_due(&self) -> Option<usize> {
        if !self.enabled || self.probe.is_some() {
            return None;
        }
        if self.suspect {
            // Does a packet of the size in use still pass?
            return Some(self.current);
        }
        let hi = self.search_hi?;
        // The route's limit first (most paths carry it: one probe), then halve the gap.
        Some(if hi > self.ceiling {
            self.ceiling
        } else {
            (self.current + hi) / 2
        })
    }

    /// A probe of `size` bytes went out as packet `pn`; judged lost at `timeout` unless
    /// acknowledged.
    pub(crate) fn on_probe_sent(&mut self, pn: u64, size: usize, timeout: Instant) {
        self.probe = Some(Probe {
            pn,
            size,
            deadline: timeout,
        });
    }

    /// When [`Pmtud::on_timeout`] must run: the probe's deadline, else the earlier of the
    /// raise timer and, when the path received something since (`received_since`: after
    /// [`Pmtud::last_big_ack`]), the check of a size no packet confirmed lately.
    pub(crate) fn deadline(&self, received_since: bool) -> Option<Instant> {
        if !self.enabled {
            return None;
        }
        if let Some(p) = self.probe {
            return Some(p.deadline);
        }
        let confirm = self.confirm_at().filter(|_| received_since);
        match (self.raise_at, confirm) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When a packet larger than the base was last acknowledged.
    pub(crate) fn last_big_ack(&self) -> Instant {
        self.last_big_ack
    }

    /// When the size in use needs a check: settled above the base, nothing confirming it
    /// for [`CONFIRM_AFTER`].
    fn confirm_at(&self) -> Option<Instant> {
        let settled = !self.suspect && self.search_hi.is_none() && self.current > self.base;
        settled.then(|| self.last_big_ack + CONFIRM_AFTER)
    }

    /// Time passed: a probe not acknowledged by its deadline failed (which may confirm a
    /// black hole: the drop is returned); the raise timer starts a new search; a size no
    /// packet confirmed lately on a path that receives is checked with a probe.
    pub(crate) fn on_timeout(&mut self, now: Instant, received_since: bool) -> Option<SizeChange> {
        let mut drop = None;
        if let Some(p) = self.probe.filter(|p| p.deadline <= now) {
            drop = self.probe_failed(now, p.size);
        }
        if self.confirm_at().is_some_and(|t| t <= now) {
            if received_since {
                self.suspect = true;
                self.fails = 0;
            } else {
                self.last_big_ack = now;
            }
        }
        if self.raise_at.is_some_and(|t| t <= now) {
            self.raise_at = None;
            self.fails = 0;
            self.search_hi = Some(self.ceiling + 1);
        }
        drop
    }

    /// A packet of `size` bytes was acknowledged: a size that passes.
    pub(crate) fn on_acked(&mut self, now: Instant, pn: u64, size: usize) {
        if !self.enabled {
            return;
        }
        if size > self.base {
            // A packet of that size passed: congestion, not a black hole.
            self.big_lost = 0;
            self.last_big_ack = now;
            if self.suspect {
                self.suspect = false;
                self.fails = 0;
            }
            self.big_acked_pn = Some(self.big_acked_pn.map_or(pn, |a| a.max(pn)));
        }
        if self.probe.is_some_and(|p| p.pn == pn) {
            self.probe = None;
        }
        if size <= self.current {
            return;
        }
        // A larger size passes (a probe, or a late acknowledgement of one).
        self.current = size.min(self.ceiling);
        self.fails = 0;
        match self.search_hi {
            Some(hi) if hi > self.current => self.narrowed(now, hi),
            _ => self.search_hi = (self.current < self.ceiling).then_some(self.ceiling + 1),
        }
    }

    /// Packet `pn` of `size` bytes was declared lost. Returns the drop to the base size when
    /// this loss confirms a black hole.
    pub(crate) fn on_lost(&mut self, now: Instant, pn: u64, size: usize) -> Option<SizeChange> {
        if !self.enabled {
            return None;
        }
        if let Some(p) = self.probe.filter(|p| p.pn == pn) {
            return self.probe_failed(now, p.size);
        }
        // Probes (larger than the size in use) say nothing about the packets in use, nor
        // does a packet older than one of its size that was acknowledged.
        if size <= self.base || size > self.current || self.big_acked_pn.is_some_and(|a| a > pn) {
            return None;
        }
        self.big_lost += 1;
        if self.big_lost >= BLACK_HOLE_LOSSES && !self.suspect {
            // A tail of a flight lost to congestion looks the same: a probe of the size in
            // use tells them apart (sent at once, outside congestion control).
            self.suspect = true;
            self.fails = 0;
            self.probe = None;
        }
        None
    }

    /// The size in use fell into a black hole: back to the base, search again below it.
    fn fall_back(&mut self, now: Instant) -> SizeChange {
        let from = self.current;
        self.suspect = false;
        self.black_holes += 1;
        self.big_lost = 0;
        self.current = self.base;
        self.probe = None;
        self.raise_at = None;
        self.fails = 0;
        // Search again below the size that fell into the hole.
        self.search_hi = Some(from);
        self.narrowed(now, from);
        SizeChange {
            from,
            to: self.current,
        }
    }

    fn probe_failed(&mut self, now: Instant, size: usize) -> Option<SizeChange> {
        self.probe = None;
        if self.suspect {
            if size != self.current {
                return None;
            }
            self.fails += 1;
            return (self.fails >= CONFIRM_PROBES).then(|| self.fall_back(now));
        }
        let hi = self.search_hi?;
        // A probe of a size no longer searched (the search moved on) is forgotten.
        if size <= self.current || size >= hi {
            return None;
        }
        self.fails += 1;
        if self.fails >= MAX_PROBES {
            self.fails = 0;
            self.narrowed(now, size);
        }
        None
    }

    /// The search now lies between `current` (passes) and `hi` (fails): stop when the gap
    /// is small, arming the raise timer.
    fn narrowed(&mut self, now: Instant, hi: usize) {
        if hi.saturating_sub(self.current) <= SEARCH_STEP {
            self.search_hi = None;
            self.raise_at = (self.current < self.ceiling).then_some(now + self.raise);
        } else {
            self.search_hi = Some(hi);
        }
    }
}

#[cfg(test)]
#[path = "pmtud_tests.rs"]
mod tests;
