//! ACK frequency (after draft-ietf-quic-ack-frequency): how often the peer acknowledges the
//! packets of each path we send on, negotiated in ACK_FREQUENCY frames.
//!
//! By default a receiver acknowledges every second ack-eliciting packet (or after its
//! maximum ack delay): at a window of hundreds of packets that is an acknowledgement, with
//! its packet, its uplink bytes (on a cellular or half-duplex WiFi uplink, capacity taken
//! from the data) and its processing at both ends, for every two data packets. As a path's
//! window grows past about 150 Mbit/s (12 500 packets a second over the propagation RTT),
//! the sender asks for one acknowledgement per 1/16 of the window (2 to 64 ack-eliciting
//! packets) and after at most a quarter of the propagation RTT (1 ms to our
//! `max_ack_delay`): still at least 16 acknowledgements per window, enough for the
//! controller's rate samples and for loss detection, which a gap in the packet numbers
//! still triggers at once (the receiver acknowledges out-of-order arrivals immediately).
//! A new request goes out when the threshold or the delay changes by half or more, at most
//! once per smoothed RTT, and only to a peer whose HELLO announces
//! `features::ACK_FREQUENCY` (an older peer would refuse the frame, and its packet).
//!
//! Owns: that policy, the requests' sequence numbers, their resending on loss, and applying
//! the peer's requests to our receive side. Must not touch: the ACK timer itself
//! (`path/recv.rs` applies the request), loss detection or the controllers.

use super::Session;
use crate::ids::PathId;
use crate::path::AckFrequencyAsked;
use crate::path::SentFrame;
use crate::time::{Instant, TIMER_GRANULARITY};
use crate::wire::frame::emit;
use crate::wire::{features, Writer};
use smallvec::SmallVec;
use std::time::Duration;

/// One acknowledgement per this share of the window.
const WINDOW_SHARE: u64 = 16;
/// Packets a second (a window over the propagation RTT) from which a path asks at all:
/// about 150 Mbit/s of full-size packets. Below it an acknowledgement per two packets is a
/// few thousand a second, cheap to make and to process, and the simulator's results at
/// those rates (the paper scenarios' receivers, calibrated against every second packet;
/// datagram flows and CUBIC on 10-85 Mbit/s paths) stay as they were measured.
const FAST_PACKETS_PER_S: f64 = 12_500.0;
/// The threshold the receiver uses unasked, and the largest asked for.
const DEFAULT_THRESHOLD: u64 = 2;
const MAX_THRESHOLD: u64 = 64;

/// The threshold and delay to ask for, given a path's window, packet size and
/// propagation RTT, and our own maximum ack delay (the longest the peer may be asked for).
pub(crate) fn desired(
    cwnd: u64,
    mss: u64,
    min_rtt: Duration,
    max_ack_delay: Duration,
) -> (u64, Duration) {
    let packets = cwnd / mss.max(1);
    if packets as f64 / min_rtt.as_secs_f64().max(1e-6) < FAST_PACKETS_PER_S {
        return (DEFAULT_THRESHOLD, max_ack_delay);
    }
    let threshold = (packets / WINDOW_SHARE).clamp(DEFAULT_THRESHOLD, MAX_THRESHOLD);
    let delay = (min_rtt / 4).clamp(TIMER_GRANULARITY, max_ack_delay.max(TIMER_GRANULARITY));
    (threshold, delay)
}

/// True when `new` differs from `old` by half of `old` or more.
fn far(old: u64, new: u64) -> bool {
    new.abs_diff(old) * 2 >= old
}

impl Session {
    /// True when the peer's HELLO says it follows ACK_FREQUENCY frames.
    pub(super) fn peer_follows_ack_frequency(&self) -> bool {
        self.cfg.ack_frequency
            && self
                .peer_params
                .is_some_and(|h| h.features & features::ACK_FREQUENCY != 0)
    }

    /// After an acknowledgement of path `pid`'s packets: ask the peer for a new frequency
    /// if the path's window moved it far enough from the last request.
    pub(super) fn ack_frequency_on_ack(&mut self, now: Instant, pid: PathId) {
        if !self.peer_follows_ack_frequency() {
            return;
        }
        let max_ack_delay = self.cfg.max_ack_delay;
        let Some(p) = self.paths.get_mut(&pid).filter(|p| p.usable()) else {
            return;
        };
        if !p.rtt.has_sample() {
            return;
        }
        let srtt = p.rtt.smoothed();
        let want = desired(
            p.cc.window(),
            p.max_datagram() as u64,
            p.rtt.min(),
            max_ack_delay,
        );
        let AckFrequencyAsked { seq, asked, at } = p.ack_freq;
        let (old_t, old_d) = asked.unwrap_or((DEFAULT_THRESHOLD, max_ack_delay));
        let changed =
            far(old_t, want.0) || far(old_d.as_micros() as u64, want.1.as_micros() as u64);
        let recent = at.is_some_and(|t| now.saturating_since(t) < srtt);
        if !changed || recent || (asked.is_none() && want.0 == DEFAULT_THRESHOLD) {
            return;
        }
        p.ack_freq = AckFrequencyAsked {
            seq: seq + 1,
            asked: Some(want),
            at: Some(now),
        };
        self.pending.ack_frequency.insert(pid);
        self.state_changed(now);
    }

    /// An ACK_FREQUENCY was lost: send it again if it is still the latest request.
    pub(super) fn ack_frequency_lost(&mut self, pid: PathId, seq: u64) {
        if self
            .paths
            .get(&pid)
            .is_some_and(|p| !p.abandoned && p.ack_freq.seq == seq)
        {
            self.pending.ack_frequency.insert(pid);
        }
    }

    /// The peer's ACK_FREQUENCY for the packets we receive on `path`.
    pub(super) fn on_ack_frequency(
        &mut self,
        path: PathId,
        seq: u64,
        threshold: u64,
        delay_us: u64,
    ) {
        if let Some(p) = self.paths.get_mut(&path) {
            p.recv
                .on_ack_frequency(seq, threshold, Duration::from_micros(delay_us));
        }
    }

    /// Write the pending ACK_FREQUENCY frames that fit.
    pub(super) fn write_ack_frequency(
        &mut self,
        w: &mut Writer<'_>,
        wrote: &mut SmallVec<[SentFrame; 8]>,
    ) {
        if !self.peer_follows_ack_frequency() {
            self.pending.ack_frequency.clear();
            return;
        }
        while let Some(&pid) = self.pending.ack_frequency.first() {
            let Some((seq, (t, d))) = self
                .paths
                .get(&pid)
                .filter(|p| !p.abandoned)
                .and_then(|p| p.ack_freq.asked.map(|a| (p.ack_freq.seq, a)))
            else {
                self.pending.ack_frequency.remove(&pid);
                continue;
            };
            if emit::ack_frequency(w, pid, seq, t, d.as_micros() as u64).is_none() {
                break;
            }
            self.pending.ack_frequency.remove(&pid);
            wrote.push(SentFrame::AckFrequency(pid, seq));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn a_small_window_keeps_the_default_and_a_large_one_asks_for_less() {
        let mad = ms(25);
        // 20 packets in 40 ms, 500 a second: the default.
        assert_eq!(desired(20 * 1200, 1200, ms(40), mad), (2, mad));
        // 320 packets in 40 ms, 8 000 a second (77 Mbit/s): still the default.
        assert_eq!(desired(320 * 1200, 1200, ms(40), mad), (2, mad));
        // 800 packets in 40 ms, 20 000 a second.
        assert_eq!(desired(800 * 1200, 1200, ms(40), mad), (50, ms(10)));
        assert_eq!(desired(10_000 * 1200, 1200, ms(400), mad), (64, ms(25)));
        // A loopback-short path: the delay is never below the timer granularity.
        assert_eq!(
            desired(1000 * 1200, 1200, Duration::from_micros(50), mad).1,
            ms(1)
        );
    }

    #[test]
    fn only_a_change_by_half_or_more_is_far() {
        assert!(!far(20, 29));
        assert!(far(20, 30));
        assert!(far(20, 10));
        assert!(!far(20, 11));
    }
}
