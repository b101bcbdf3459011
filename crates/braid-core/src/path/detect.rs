//! Loss detection of a path: which packets in flight are lost (RACK time threshold and the
//! adaptive packet threshold, from `crate::loss`), what a loss means for the congestion
//! controller (random or congestion, persistent or not), and packets declared lost that are
//! acknowledged after all (spurious losses and the undo of their window cut).
//!
//! Owns: those methods of [`Path`]. Must not touch: streams or other paths (lost packets go
//! back to the session, which decides what their frames mean).

use super::{Path, SentPacket, MAX_DECLARED_LOST};
use crate::cc::LossEvent;
use crate::loss::Spurious;
use crate::time::Instant;
use crate::wire::AckFrame;
use std::time::Duration;

impl Path {
    /// Declare lost what the packet and time thresholds say is lost: a packet sent before
    /// the most recently sent packet known delivered is lost once `packet_threshold` later
    /// packets were acknowledged or once RACK's deadline (its send time + the RTT of that
    /// delivered packet + the reordering window) passed.
    pub(crate) fn detect_lost(&mut self, now: Instant, lost: &mut Vec<SentPacket>) {
        self.loss_time = None;
        if self.reliable {
            // TCP underneath: a gap is a segment TCP is still recovering, never a loss.
            return;
        }
        let Some(largest) = self.largest_acked else {
            return;
        };
        let threshold = self.loss.packet_threshold();
        let (min_rtt, srtt) = (self.rtt.min(), self.rtt.smoothed());
        let fallback = self.rtt.loss_delay();
        let first_lost = lost.len();
        for idx in 0..self.sent.len() {
            let pn = self.sent_base + idx as u64;
            if pn >= largest {
                break;
            }
            let Some(pkt) = &self.sent[idx] else { continue };
            let deadline = self
                .loss
                .deadline(pkt.time_sent, min_rtt, srtt)
                .unwrap_or(pkt.time_sent + fallback);
            if largest - pn >= threshold || deadline <= now {
                if let Some(p) = self.sent[idx].take() {
                    lost.push(p);
                }
            } else {
                self.loss_time = Some(deadline);
                break;
            }
        }
        self.pop_front();
        self.on_lost(now, first_lost, lost);
    }

    /// Packets declared lost that this ACK frame acknowledges after all: each is proof of
    /// reordering (the window widens) and, when every loss of a window cut proved spurious,
    /// the cut is undone. They go to `acked` (not in flight any more) so their frames count
    /// as delivered and queued retransmissions of them are dropped. Returns true if any.
    pub(super) fn on_late_acks(
        &mut self,
        now: Instant,
        ack: &AckFrame<'_>,
        acked: &mut Vec<SentPacket>,
    ) -> bool {
        // Forget declarations too old for an acknowledgement to still be on its way.
        let keep = self.rtt.smoothed() * 2 + Duration::from_millis(50);
        while let Some((at, _)) = self.declared_lost.front() {
            if now.saturating_since(*at) <= keep && self.declared_lost.len() <= MAX_DECLARED_LOST {
                break;
            }
            self.declared_lost.pop_front();
        }
        let (Some((_, first)), Some((_, last))) =
            (self.declared_lost.front(), self.declared_lost.back())
        else {
            return false;
        };
        let (lo, hi) = (first.pn, last.pn);
        let mut found = false;
        for r in ack.ranges() {
            if r.end <= lo || r.start > hi {
                continue;
            }
            let i = self.declared_lost.partition_point(|(_, p)| p.pn < r.start);
            while i < self.declared_lost.len() && self.declared_lost[i].1.pn < r.end {
                let (_, mut pkt) = self.declared_lost.remove(i).expect("index checked");
                found = true;
                let largest = self.largest_acked.unwrap_or(pkt.pn).max(ack.largest);
                self.loss.on_reordered(largest.saturating_sub(pkt.pn));
                self.rate.on_late_delivery(pkt.size as u64);
                if self.loss.on_spurious(now, self.rtt.smoothed(), pkt.episode) == Spurious::Undo {
                    self.cc.undo_loss();
                }
                pkt.in_flight = false;
                acked.push(pkt);
            }
        }
        found
    }

    /// At most two packets lost at once, with no queue on the path (the latest RTT within
    /// a quarter of the minimum of the samples whose ACK came back the same way, plus a
    /// millisecond of slack): a random loss, such as a corrupted radio frame. Losses from a full queue come with a raised RTT or in bursts.
    pub(super) fn losses_look_random(&self, lost: &[SentPacket]) -> bool {
        let n = lost.iter().filter(|p| p.in_flight).count();
        if n == 0 || n > 2 || !self.rtt.has_sample() {
            return false;
        }
        let Some(min) = self.route_min_rtt[self.latest_route] else {
            return false;
        };
        self.rtt.latest() <= min + min / 4 + Duration::from_millis(1)
    }

    pub(super) fn on_lost(&mut self, now: Instant, first: usize, lost: &mut [SentPacket]) {
        let lost = &mut lost[first..];
        if self.random_loss_recovery && self.losses_look_random(lost) {
            for p in lost.iter_mut() {
                if p.in_flight {
                    self.in_flight -= p.size as u64;
                    self.ack_eliciting_in_flight -= 1;
                }
                p.random_loss = true;
            }
            self.stats.packets_lost += lost.len() as u64;
            self.stats.random_losses += lost.len() as u64;
            self.remember_declared(now, lost);
            return;
        }
        let mut bytes = 0;
        let mut newest = None;
        let mut oldest = None;
        for p in lost.iter().filter(|p| p.in_flight) {
            self.in_flight -= p.size as u64;
            self.ack_eliciting_in_flight -= 1;
            bytes += p.size as u64;
            newest = Some(newest.map_or(p.time_sent, |t: Instant| t.max(p.time_sent)));
            oldest = Some(oldest.map_or(p.time_sent, |t: Instant| t.min(p.time_sent)));
        }
        self.stats.packets_lost += lost.len() as u64;
        if let (Some(newest), Some(oldest)) = (newest, oldest) {
            let pc = (self.rtt.smoothed()
                + (self.rtt.var() * 4).max(Duration::from_millis(1))
                + Duration::from_millis(25))
                * 3;
            let persistent = self.rtt.has_sample() && newest - oldest > pc;
            let count = lost.iter().filter(|p| p.in_flight).count() as u32;
            let episode = self.loss.on_declared_lost(now, newest, count, !persistent);
            for p in lost.iter_mut() {
                p.episode = episode;
            }
            self.remember_declared(now, lost);
            self.cc.on_loss(&LossEvent {
                now,
                lost_bytes: bytes,
                largest_lost_sent: newest,
                persistent,
                in_flight: self.in_flight,
                coupling: self.coupling,
            });
            self.refresh_pacer(now);
        }
    }

    pub(super) fn remember_declared(&mut self, now: Instant, lost: &[SentPacket]) {
        for p in lost.iter().filter(|p| p.in_flight) {
            if self.declared_lost.len() >= MAX_DECLARED_LOST {
                self.declared_lost.pop_front();
            }
            self.declared_lost.push_back((now, p.clone()));
        }
    }
}
