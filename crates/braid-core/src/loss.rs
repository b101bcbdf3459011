//! Loss detection of one path that survives reordering: RACK-style time-based detection
//! (RFC 8985) with a reordering window that adapts per path, a packet threshold that rises
//! with the reordering the path shows, and the bookkeeping that recognises a loss declared
//! in error (a packet declared lost and acknowledged after all) so its congestion response
//! can be undone.
//!
//! Owns: the RACK state (send time and RTT of the most recently sent packet known
//! delivered), the reordering window multiplier and its persistence, the packet threshold,
//! and the congestion episode whose losses may still prove spurious. Must not touch: the
//! packets themselves, the congestion controller or timers; the path asks and acts.
//!
//! Every packet number of a path is sent once (a retransmission carries a new one), so an
//! acknowledgement of a packet number declared lost is exact proof that the declaration was
//! spurious: no timestamps or D-SACK are needed to tell.

use crate::time::Instant;
use std::time::Duration;

/// Packet threshold before any reordering was seen (RFC 9002 §6.1.1, RFC 8985 DupThresh).
pub(crate) const INITIAL_PACKET_THRESHOLD: u64 = 3;
/// Highest the packet threshold rises (Linux caps `tcp_reordering` at 300).
pub(crate) const MAX_PACKET_THRESHOLD: u64 = 256;
/// Loss episodes without a spurious loss after which the reordering window shrinks back
/// (RFC 8985 §6.2, step 4).
const REO_WND_PERSIST: u32 = 16;

/// Reordering and spurious-loss state of one path.
#[derive(Debug, Clone)]
pub(crate) struct LossDetector {
    /// Send time and RTT of the most recently sent packet known delivered (RACK.xmit_ts,
    /// RACK.rtt).
    rack: Option<(Instant, Duration)>,
    /// An acknowledgement arrived for a packet sent before one acknowledged earlier.
    reordering_seen: bool,
    /// The reordering window in quarters of the minimum RTT.
    reo_wnd_mult: u32,
    /// Loss episodes left before the multiplier returns to 1.
    reo_wnd_persist: u32,
    /// When the multiplier last grew (at most once per round trip).
    mult_grown_at: Option<Instant>,
    /// Packets acknowledged after this many later ones still count as reordered, not lost.
    packet_threshold: u64,
    /// The current congestion episode: its number, when the window was cut, and how many of
    /// its lost packets have not been proven spurious yet.
    episode: Option<Episode>,
    next_episode: u64,
    /// Losses proven spurious.
    pub spurious: u64,
    /// Congestion responses undone because every loss of their episode proved spurious.
    pub undone: u64,
}

#[derive(Debug, Clone, Copy)]
struct Episode {
    id: u64,
    started: Instant,
    outstanding: u32,
    undoable: bool,
}

impl Default for LossDetector {
    fn default() -> Self {
        LossDetector {
            rack: None,
            reordering_seen: false,
            reo_wnd_mult: 1,
            reo_wnd_persist: REO_WND_PERSIST,
            mult_grown_at: None,
            packet_threshold: INITIAL_PACKET_THRESHOLD,
            episode: None,
            next_episode: 1,
            spurious: 0,
            undone: 0,
        }
    }
}

/// What a spurious loss means for the congestion controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spurious {
    /// Nothing to do (the episode still has real losses, or it cut nothing).
    Keep,
    /// Every loss of the episode that cut the window proved spurious: undo the cut.
    Undo,
}

impl LossDetector {
    /// A packet sent at `sent` was newly acknowledged at `now`.
    pub(crate) fn on_delivered(&mut self, sent: Instant, now: Instant) {
        if self.rack.is_none_or(|(t, _)| sent >= t) {
            self.rack = Some((sent, now.saturating_since(sent)));
        }
    }

    /// A packet `distance` packet numbers below the largest acknowledged one was newly
    /// acknowledged: it was reordered, and the threshold grows to let such packets pass.
    pub(crate) fn on_reordered(&mut self, distance: u64) {
        self.reordering_seen = true;
        self.packet_threshold = self
            .packet_threshold
            .max(distance.saturating_add(1))
            .min(MAX_PACKET_THRESHOLD);
    }

    /// The packet threshold now.
    pub(crate) fn packet_threshold(&self) -> u64 {
        self.packet_threshold
    }

    /// The reordering window (RFC 8985 §6.2): a quarter of the minimum RTT times the
    /// multiplier, at most the smoothed RTT, at least a millisecond.
    pub(crate) fn reo_wnd(&self, min_rtt: Duration, srtt: Duration) -> Duration {
        (min_rtt / 4 * self.reo_wnd_mult)
            .min(srtt)
            .max(Duration::from_millis(1))
    }

    /// When a packet sent at `sent` counts as lost by time (`None` before any delivery).
    pub(crate) fn deadline(
        &self,
        sent: Instant,
        min_rtt: Duration,
        srtt: Duration,
    ) -> Option<Instant> {
        let (_, rtt) = self.rack?;
        Some(sent + rtt + self.reo_wnd(min_rtt, srtt))
    }

    /// Packets were declared lost and the controller told (`cut`: it was a congestion
    /// signal, not a random loss or persistent congestion). Returns the episode the packets
    /// belong to, for [`LossDetector::on_spurious`].
    pub(crate) fn on_declared_lost(
        &mut self,
        now: Instant,
        newest_sent: Instant,
        count: u32,
        undoable: bool,
    ) -> u64 {
        match &mut self.episode {
            Some(e) if newest_sent <= e.started => {
                e.outstanding += count;
                e.undoable &= undoable;
                e.id
            }
            _ => {
                let id = self.next_episode;
                self.next_episode += 1;
                self.episode = Some(Episode {
                    id,
                    started: now,
                    outstanding: count,
                    undoable,
                });
                // RFC 8985 §6.2 step 4: the window shrinks back after 16 episodes in a row
                // without a spurious loss.
                self.reo_wnd_persist = self.reo_wnd_persist.saturating_sub(1);
                if self.reo_wnd_persist == 0 {
                    self.reo_wnd_mult = 1;
                    self.reo_wnd_persist = REO_WND_PERSIST;
                }
                id
            }
        }
    }

    /// A packet of episode `episode`, declared lost, was acknowledged at `now`: the
    /// reordering window widens (once per round trip) and, when every loss of the episode
    /// proved spurious, the controller's response is undone.
    pub(crate) fn on_spurious(&mut self, now: Instant, srtt: Duration, episode: u64) -> Spurious {
        self.spurious += 1;
        self.reordering_seen = true;
        self.reo_wnd_persist = REO_WND_PERSIST;
        if self
            .mult_grown_at
            .is_none_or(|t| now.saturating_since(t) >= srtt)
        {
            self.reo_wnd_mult = (self.reo_wnd_mult + 1).min(64);
            self.mult_grown_at = Some(now);
        }
        let Some(e) = &mut self.episode else {
            return Spurious::Keep;
        };
        if e.id != episode {
            return Spurious::Keep;
        }
        e.outstanding = e.outstanding.saturating_sub(1);
        if e.outstanding == 0 {
            let undo = e.undoable;
            self.episode = None;
            if undo {
                self.undone += 1;
                return Spurious::Undo;
            }
        }
        Spurious::Keep
    }

    /// Reordering seen on this path.
    #[cfg(test)]
    pub(crate) fn reordering_seen(&self) -> bool {
        self.reordering_seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }
    fn at(n: u64) -> Instant {
        Instant::ZERO + ms(n)
    }

    #[test]
    fn the_deadline_follows_the_most_recently_sent_delivered_packet() {
        let mut d = LossDetector::default();
        assert_eq!(d.deadline(at(0), ms(100), ms(100)), None);
        d.on_delivered(at(10), at(110));
        // An older packet acknowledged later does not move RACK back.
        d.on_delivered(at(5), at(150));
        assert_eq!(
            d.deadline(at(20), ms(100), ms(100)),
            Some(at(20 + 100 + 25))
        );
    }

    #[test]
    fn reordering_raises_the_packet_threshold_up_to_its_cap() {
        let mut d = LossDetector::default();
        assert_eq!(d.packet_threshold(), 3);
        d.on_reordered(1);
        assert_eq!(d.packet_threshold(), 3);
        d.on_reordered(9);
        assert_eq!(d.packet_threshold(), 10);
        d.on_reordered(5);
        assert_eq!(d.packet_threshold(), 10);
        d.on_reordered(10_000);
        assert_eq!(d.packet_threshold(), MAX_PACKET_THRESHOLD);
        assert!(d.reordering_seen());
    }

    #[test]
    fn spurious_losses_widen_the_window_once_per_round_trip() {
        let mut d = LossDetector::default();
        assert_eq!(d.reo_wnd(ms(100), ms(120)), ms(25));
        let e = d.on_declared_lost(at(0), at(0), 3, true);
        d.on_spurious(at(10), ms(100), e);
        assert_eq!(d.reo_wnd(ms(100), ms(120)), ms(50));
        d.on_spurious(at(50), ms(100), e);
        assert_eq!(d.reo_wnd(ms(100), ms(120)), ms(50), "same round trip");
        d.on_spurious(at(200), ms(100), e);
        // 75 ms, then capped by the smoothed RTT.
        assert_eq!(d.reo_wnd(ms(100), ms(120)), ms(75));
        for i in 0..10 {
            d.on_spurious(at(400 + 200 * i), ms(100), e);
        }
        assert_eq!(d.reo_wnd(ms(100), ms(120)), ms(120));
    }

    #[test]
    fn an_episode_is_undone_only_when_all_its_losses_prove_spurious() {
        let mut d = LossDetector::default();
        let e = d.on_declared_lost(at(100), at(90), 2, true);
        // More losses of packets sent before the cut join the same episode.
        assert_eq!(d.on_declared_lost(at(105), at(95), 1, true), e);
        assert_eq!(d.on_spurious(at(110), ms(50), e), Spurious::Keep);
        assert_eq!(d.on_spurious(at(111), ms(50), e), Spurious::Keep);
        assert_eq!(d.on_spurious(at(112), ms(50), e), Spurious::Undo);
        assert_eq!(d.undone, 1);
        // A later episode with one real loss is never undone.
        let e2 = d.on_declared_lost(at(300), at(290), 2, true);
        assert_ne!(e, e2);
        assert_eq!(d.on_spurious(at(310), ms(50), e2), Spurious::Keep);
        // A packet sent after the cut starts a new episode; the old one can no longer be undone.
        let e3 = d.on_declared_lost(at(400), at(350), 1, true);
        assert_ne!(e2, e3);
        assert_eq!(d.on_spurious(at(410), ms(50), e2), Spurious::Keep);
        assert_eq!(d.on_spurious(at(411), ms(50), e3), Spurious::Undo);
    }

    #[test]
    fn persistent_congestion_is_never_undone() {
        let mut d = LossDetector::default();
        let e = d.on_declared_lost(at(100), at(90), 1, false);
        assert_eq!(d.on_spurious(at(110), ms(50), e), Spurious::Keep);
        assert_eq!(d.undone, 0);
    }

    #[test]
    fn the_window_shrinks_back_after_sixteen_episodes_without_spurious_losses() {
        let mut d = LossDetector::default();
        let e = d.on_declared_lost(at(0), at(0), 1, true);
        d.on_spurious(at(1), ms(10), e);
        assert_eq!(d.reo_wnd(ms(100), ms(200)), ms(50));
        for i in 1..=16u64 {
            d.on_declared_lost(at(i * 1000), at(i * 1000), 1, true);
        }
        assert_eq!(d.reo_wnd(ms(100), ms(200)), ms(25));
    }
}
