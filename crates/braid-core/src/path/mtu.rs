//! The path's side of its datagram-size discovery: the fate of its packets handed to
//! `pmtud.rs` (acknowledged first, so a loss older than an acknowledged packet of its size
//! is never taken for a black hole), the probe's deadline, and the drop the session reports.
//!
//! Owns: those methods of [`Path`]. Must not touch: the search itself (`pmtud.rs`), frames
//! or other paths.

use super::{Path, SentPacket, SizeChange};
use crate::time::Instant;
use std::time::Duration;

impl Path {
    /// Packets `acked[first_acked..]` were acknowledged and `lost[first_lost..]` declared
    /// lost: tell discovery, acknowledgements first.
    pub(crate) fn pmtu_observe(&mut self, now: Instant, acked: &[SentPacket], lost: &[SentPacket]) {
        for p in acked.iter().filter(|p| p.ack_eliciting) {
            self.pmtud.on_acked(now, p.pn, p.size as usize);
        }
        for p in lost.iter().filter(|p| p.ack_eliciting) {
            let drop = self.pmtud.on_lost(now, p.pn, p.size as usize);
            self.note_pmtu_drop(drop);
        }
    }

    /// Keep a drop of the datagram size for the session to report (several before it
    /// reports: one, from the largest size).
    fn note_pmtu_drop(&mut self, drop: Option<SizeChange>) {
        if let Some(c) = drop {
            let from = self.pmtu_dropped.map_or(c.from, |d| d.from);
            self.pmtu_dropped = Some(SizeChange { from, to: c.to });
        }
    }

    /// How long a probe may go unacknowledged before it counts as lost (when no later
    /// packet lets loss detection judge it): the probe-timeout base.
    pub(crate) fn pmtu_probe_timeout(&self, max_ack_delay: Duration) -> Duration {
        self.rtt.pto_base(max_ack_delay)
    }

    /// A PMTU probe of `size` bytes went out as packet `pn`.
    pub(crate) fn on_pmtu_probe_sent(&mut self, now: Instant, pn: u64, size: usize, mad: Duration) {
        let timeout = now + self.pmtu_probe_timeout(mad);
        self.pmtud.on_probe_sent(pn, size, timeout);
    }

    /// The discovery timer (`Timer::Pmtu`): the probe's deadline or the raise timer.
    pub(crate) fn pmtu_deadline(&self) -> Option<Instant> {
        self.pmtud.deadline(self.pmtu_received_since())
    }

    /// Something arrived on the path since a packet of ours above the base size was last
    /// acknowledged: the path is in use, its size worth checking.
    fn pmtu_received_since(&self) -> bool {
        self.last_recv > self.pmtud.last_big_ack()
    }

    /// The discovery timer fired.
    pub(crate) fn on_pmtu_timer(&mut self, now: Instant) {
        let drop = self.pmtud.on_timeout(now, self.pmtu_received_since());
        self.note_pmtu_drop(drop);
    }

    /// The size of the PMTU probe this path should send now, if any: searching (with room
    /// in the window, so that a full queue does not drop the probe and fail a size that
    /// passes) or confirming a suspected black hole, no probe in flight, usable and not
    /// failing.
    pub(crate) fn pmtu_probe_due(&self) -> Option<usize> {
        if !self.usable() || self.pto_count > 0 || self.reliable {
            return None;
        }
        if !self.pmtud.suspect() && !self.window_open() {
            return None;
        }
        self.pmtud.probe_due()
    }
}
