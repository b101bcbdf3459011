//! The timers of one path: loss detection's deadline and probe timeout (RFC 9002), and the
//! blackout watch's wait for an answer, with what freezing and unfreezing a path does to
//! its packets in flight and its timers.
//!
//! Owns: when those timers fire and what firing does to the path. Must not touch: the
//! session's timer table (the session asks each path for its deadlines) or other paths.

use super::{Path, SentPacket};
use crate::config::Config;
use crate::time::Instant;
use std::time::Duration;

impl Path {
    /// When an acknowledgement of our oldest ack-eliciting packet in flight was due
    /// (`None` when nothing of ours is in flight).
    pub(crate) fn ack_expected(&self, max_ack_delay: Duration) -> Option<Instant> {
        if self.ack_eliciting_in_flight == 0 {
            return None;
        }
        let oldest = self
            .sent
            .iter()
            .flatten()
            .find(|p| p.in_flight && p.ack_eliciting)?;
        Some(oldest.time_sent + self.blackout_wait(max_ack_delay))
    }

    /// How long an answer (an acknowledgement, a probe's reply) may take before the blackout
    /// watch suspects the path: the probe-timeout base, but at most four minimum RTTs (at
    /// least a second). A path that held packets in a queue while it carried nothing (out
    /// of WiFi range) comes back with a smoothed RTT of seconds; waiting that long to
    /// notice its next outage once left a transfer's last bytes on it for a minute.
    pub(crate) fn blackout_wait(&self, max_ack_delay: Duration) -> Duration {
        let base = self.rtt.pto_base(max_ack_delay);
        if !self.rtt.has_sample() {
            return base;
        }
        base.min((self.rtt.min() * 4 + max_ack_delay).max(Duration::from_secs(1)))
    }

    /// A blackout froze the path: forget every packet in flight without a congestion
    /// signal (their frames are returned for resending elsewhere) and without backing off
    /// the probe timer, so the path resumes with the window and timers it had.
    /// Returns false when the path was frozen already (the drain is repeated regardless).
    pub(crate) fn freeze(
        &mut self,
        now: Instant,
        reported: bool,
        out: &mut Vec<SentPacket>,
    ) -> bool {
        let newly = if reported {
            self.watch.freeze_reported(now)
        } else {
            self.watch.freeze(now)
        };
        self.drain_all(out);
        self.pto_count = 0;
        self.last_pto = None;
        self.probes_due = 0;
        newly
    }

    /// The first packet after a blackout arrived: sending resumes at the previous rate.
    pub(crate) fn on_unfrozen(&mut self, now: Instant) {
        self.pto_count = 0;
        self.last_pto = None;
        self.refresh_pacer(now);
    }

    /// The loss-detection timer: the time-threshold deadline, or the probe timeout.
    pub(crate) fn loss_timer(&self, cfg: &Config) -> Option<Instant> {
        if let Some(t) = self.loss_time {
            return Some(t);
        }
        if self.ack_eliciting_in_flight == 0 {
            return None;
        }
        // Counted from the last probe timeout too, so a timeout whose probe could not be
        // sent (anti-amplification) does not fire again at once.
        let from = self
            .last_ack_eliciting_sent?
            .max(self.last_pto.unwrap_or(Instant::ZERO));
        Some(from + self.pto_duration(cfg))
    }

    /// The loss-detection timer can only be a probe timeout (no packet waits for the
    /// time threshold).
    pub(crate) fn probe_timer_only(&self) -> bool {
        self.loss_time.is_none()
    }

    pub(crate) fn pto_duration(&self, cfg: &Config) -> Duration {
        let base = self.rtt.pto_base(cfg.max_ack_delay);
        let backed = base.saturating_mul(1u32 << self.pto_count.min(16));
        backed.min(cfg.max_pto.max(base))
    }

    /// The loss-detection timer fired. Returns true when it was a probe timeout.
    pub(crate) fn on_loss_timer(&mut self, now: Instant, lost: &mut Vec<SentPacket>) -> bool {
        if self.loss_time.is_some_and(|t| t <= now) {
            let first = lost.len();
            self.detect_lost(now, lost);
            self.pmtu_observe(now, &[], &lost[first..]);
            return false;
        }
        self.pto_count += 1;
        self.last_pto = Some(now);
        self.stats.ptos += 1;
        self.probes_due = 2;
        true
    }
}
