//! The receive side of one path: which of the peer's packet numbers arrived, when an
//! acknowledgement is due, what the next ACK frame says, and how many packets arrived in
//! the last round trip.
//!
//! Owns: the received packet numbers (a bounded range set with a duplicate filter), the
//! ACK timer and its triggers (a gap, the ack-eliciting threshold, the maximum ack delay,
//! both as the peer last asked in ACK_FREQUENCY, the delay never above our own),
//! the floor below which ACK frames need not repeat ranges, and the receive window count.
//! Must not touch: our own packets in flight, the RTT estimator or the controller (the path
//! passes the smoothed RTT in where a round trip is needed).

use crate::config::Config;
use crate::ranges::RangeSet;
use crate::time::Instant;
use std::time::Duration;

/// Most ranges of received packet numbers kept (older ones move the duplicate floor up).
const MAX_RECV_RANGES: usize = 256;

/// The receive-side acknowledgement state of one path.
#[derive(Debug)]
pub(crate) struct AckState {
    recv_pns: RangeSet,
    /// Packet numbers below it count as duplicates (their ranges were dropped).
    recv_floor: u64,
    /// ACK frames need not report below it: the peer has our ACK up to it.
    ack_floor: u64,
    /// The largest packet number received, and when.
    largest_recv: Option<(u64, Instant)>,
    ack_eliciting_unacked: u32,
    ack_deadline: Option<Instant>,
    ack_immediate: bool,
    ack_pending: bool,
    /// Packets received in the current receive window (about one RTT) and the last full one.
    rx_window: (Instant, u32, u32),
    /// The peer's latest ACK_FREQUENCY: (sequence, ack-eliciting threshold, max delay).
    frequency: Option<(u64, u32, Duration)>,
}

/// Most ack-eliciting packets a peer may ask us to wait for before acknowledging.
pub(crate) const MAX_ACK_THRESHOLD: u64 = 256;

impl AckState {
    pub(crate) fn new(now: Instant) -> Self {
        AckState {
            recv_pns: RangeSet::new(),
            recv_floor: 0,
            ack_floor: 0,
            largest_recv: None,
            ack_eliciting_unacked: 0,
            ack_deadline: None,
            ack_immediate: false,
            ack_pending: false,
            rx_window: (now, 0, 0),
            frequency: None,
        }
    }

    /// The peer asks to be acknowledged after `threshold` ack-eliciting packets (1 to
    /// [`MAX_ACK_THRESHOLD`]) or `max_delay` (at most our own `max_ack_delay`, which its
    /// probe timeout counts on); an older request than the last one is ignored.
    pub(crate) fn on_ack_frequency(&mut self, seq: u64, threshold: u64, max_delay: Duration) {
        if self.frequency.is_some_and(|(s, _, _)| seq <= s) {
            return;
        }
        let threshold = threshold.clamp(1, MAX_ACK_THRESHOLD) as u32;
        self.frequency = Some((seq, threshold, max_delay));
    }

    /// The ack-eliciting threshold and the longest delay in force.
    fn ack_policy(&self, cfg: &Config) -> (u32, Duration) {
        match self.frequency {
            Some((_, t, d)) => (t, d.min(cfg.max_ack_delay)),
            None => (cfg.ack_eliciting_threshold, cfg.max_ack_delay),
        }
    }

    /// Record a received packet number. Returns false for a duplicate (drop the packet).
    pub(crate) fn on_received(
        &mut self,
        now: Instant,
        pn: u64,
        ack_eliciting: bool,
        srtt: Duration,
        cfg: &Config,
    ) -> bool {
        if pn < self.recv_floor || self.recv_pns.contains(pn) {
            return false;
        }
        let in_order = self.largest_recv.is_none_or(|(l, _)| pn == l + 1);
        let gap_before = self.recv_pns.last().is_some_and(|r| r.end < pn) || !in_order;
        self.recv_pns.insert(pn..pn + 1);
        if self.recv_pns.len() > MAX_RECV_RANGES {
            if let Some(r) = self.recv_pns.pop_first() {
                self.recv_floor = r.end;
            }
        }
        if self.largest_recv.is_none_or(|(l, _)| pn > l) {
            self.largest_recv = Some((pn, now));
        }
        let (start, count, _) = self.rx_window;
        if now.saturating_since(start) >= srtt {
            self.rx_window = (now, 1, count);
        } else {
            self.rx_window.1 += 1;
        }
        if ack_eliciting {
            // Packets that elicit nothing are acknowledged only alongside others.
            self.ack_pending = true;
            self.ack_eliciting_unacked += 1;
            let (threshold, max_delay) = self.ack_policy(cfg);
            if gap_before || self.ack_eliciting_unacked >= threshold {
                self.ack_immediate = true;
            } else if self.ack_deadline.is_none() {
                self.ack_deadline = Some(now + max_delay);
            }
        }
        true
    }

    /// Packets received per round trip lately (0 when the path went quiet).
    pub(crate) fn rx_per_rtt(&self, now: Instant, srtt: Duration) -> u32 {
        let (start, _, last) = self.rx_window;
        if now.saturating_since(start) > srtt * 2 {
            0
        } else {
            last
        }
    }

    /// An acknowledgement should be sent now.
    pub(crate) fn ack_due(&self, now: Instant) -> bool {
        self.ack_immediate || self.ack_deadline.is_some_and(|d| d <= now)
    }

    /// An acknowledgement could ride along with other frames.
    pub(crate) fn ack_pending(&self) -> bool {
        self.ack_pending
    }

    /// When the delayed acknowledgement is due, if one is pending.
    pub(crate) fn ack_deadline(&self) -> Option<Instant> {
        if self.ack_pending {
            self.ack_deadline
        } else {
            None
        }
    }

    /// The largest packet number received on this path (0 if none).
    pub(crate) fn largest_received(&self) -> u64 {
        self.largest_recv.map_or(0, |(pn, _)| pn)
    }

    /// The ranges to put in an ACK frame (highest first), the ack delay in microseconds, and
    /// the receive time of the largest in microseconds of our clock (it goes in ACK_TS).
    pub(crate) fn ack_contents(
        &self,
        now: Instant,
    ) -> Option<(impl Iterator<Item = std::ops::Range<u64>> + '_, u64, u64)> {
        let (_, t) = self.largest_recv?;
        let floor = self.ack_floor;
        let ranges = self
            .recv_pns
            .iter()
            .rev()
            .take_while(move |r| r.end > floor)
            .map(move |r| r.start.max(floor)..r.end);
        Some((ranges, (now - t).as_micros() as u64, t.as_nanos() / 1000))
    }

    /// An ACK frame for this path was written.
    pub(crate) fn on_ack_sent(&mut self) {
        self.ack_pending = false;
        self.ack_immediate = false;
        self.ack_deadline = None;
        self.ack_eliciting_unacked = 0;
    }

    /// The peer received our ACK frame reporting up to `largest`: later ACK frames need
    /// not repeat anything below it (the duplicate filter still remembers them).
    pub(crate) fn on_ack_acked(&mut self, largest: u64) {
        // Keep `largest` itself so an ACK frame is never empty.
        self.ack_floor = self.ack_floor.max(largest);
    }
}
