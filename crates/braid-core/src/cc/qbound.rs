//! The queue bound of `bbrq`: how much of the bottleneck's queue a path's own data may
//! occupy, measured as delay, and the window gain over the bandwidth-delay product that
//! keeps it there.
//!
//! Each round trip the bound takes the smallest RTT sample of the last two rounds: jitter
//! and delayed acknowledgements raise single samples, but only a queue that never drains
//! raises the smallest. That minus the path's propagation RTT is the standing queue. Above
//! the target the gain shrinks multiplicatively (towards 1: one BDP plus a little headroom,
//! which with pacing at the bottleneck rate still fills the link); well below it, the gain
//! grows back additively (towards 2, plain BBR's window), so a link that got faster is found.
//!
//! When the peer timestamps its acknowledgements, the standing queue is taken from the
//! one-way delay of the path's own direction instead: an upload beside a download fills
//! the queue the download's acknowledgements cross, and the RTT alone would read that as
//! the download's own queue and shrink its window to nothing. What the RTT shows above the
//! forward queue is the return direction's (`reverse_queue`): the window must cover it as
//! part of the pipe, as it covers the propagation delay.
//!
//! When the standing queue stays above the target at the smallest gain for many rounds, the
//! queue is not ours — another sender (CUBIC next door) keeps it full — and holding back
//! would only hand it the link: the bound is released (plain BBR) for a while, then tried
//! again.
//!
//! Owns: the standing-queue estimate, the gain and the release. Must not touch: the
//! bandwidth model, pacing or the window itself (the controller applies the gain).

use crate::time::Instant;
use std::time::Duration;

/// Smallest window gain: one bandwidth-delay product.
const MIN_GAIN: f64 = 1.0;
/// Largest window gain: plain BBR's.
const MAX_GAIN: f64 = 2.0;
/// Standing queue allowed on any path, and the share of the propagation RTT added to it
/// (a long path needs some slack for its acknowledgements' bunching).
const TARGET_FLOOR: Duration = Duration::from_millis(4);
const TARGET_RTT_DIVISOR: u32 = 8;
/// Rounds above the target at the smallest gain before the queue is judged another
/// sender's, and how long the bound is then released.
const RELEASE_ROUNDS: u32 = 30;
const RELEASE_TIME: Duration = Duration::from_secs(5);

/// The bound's state for one path.
#[derive(Debug, Clone)]
pub(crate) struct QueueBound {
    gain: f64,
    round_min: Option<Duration>,
    last_round_min: Option<Duration>,
    /// The same for the forward queue samples (ACK_TS), when the peer sends them.
    round_min_fwd: Option<Duration>,
    last_round_min_fwd: Option<Duration>,
    high_rounds: u32,
    released_until: Option<Instant>,
    standing: Duration,
    reverse: Duration,
}

/// The smaller of two optional samples.
fn min2(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl Default for QueueBound {
    fn default() -> Self {
        QueueBound {
            gain: MAX_GAIN,
            round_min: None,
            last_round_min: None,
            round_min_fwd: None,
            last_round_min_fwd: None,
            high_rounds: 0,
            released_until: None,
            standing: Duration::ZERO,
            reverse: Duration::ZERO,
        }
    }
}

impl QueueBound {
    /// The standing queue allowed on a path of this propagation RTT.
    pub(crate) fn target(min_rtt: Duration) -> Duration {
        TARGET_FLOOR + min_rtt / TARGET_RTT_DIVISOR
    }

    /// An RTT sample of the current round, with the forward queue the packet met when the
    /// peer timestamps its acknowledgements.
    pub(crate) fn on_rtt_sample(&mut self, sample: Duration, fwd_queue: Option<Duration>) {
        self.round_min = min2(self.round_min, Some(sample));
        self.round_min_fwd = min2(self.round_min_fwd, fwd_queue);
    }

    /// A new round began: judge the standing queue of the last two rounds. `own_floor` is
    /// the queue the controller's smallest window alone may keep (on a slow link with a
    /// short RTT, four packets are more than the pipe holds): a standing queue within it
    /// may be ours, and never releases the bound.
    pub(crate) fn on_round_start(&mut self, now: Instant, min_rtt: Duration, own_floor: Duration) {
        let smallest = min2(self.round_min, self.last_round_min);
        self.last_round_min = self.round_min.take();
        let fwd = min2(self.round_min_fwd, self.last_round_min_fwd);
        self.last_round_min_fwd = self.round_min_fwd.take();
        let Some(smallest) = smallest else { return };
        let rtt_standing = smallest.saturating_sub(min_rtt);
        self.standing = fwd.unwrap_or(rtt_standing);
        self.reverse = rtt_standing.saturating_sub(self.standing);
        let target = Self::target(min_rtt);
        if self.standing > target {
            self.gain = (self.gain * 0.8).max(MIN_GAIN);
            if self.gain <= MIN_GAIN && !self.released(now) && self.standing > target + own_floor {
                self.high_rounds += 1;
            }
        } else {
            self.high_rounds = 0;
            if self.standing < target / 2 {
                self.gain = (self.gain + 0.1).min(MAX_GAIN);
            }
        }
        if self.high_rounds >= RELEASE_ROUNDS {
            self.high_rounds = 0;
            self.released_until = Some(now + RELEASE_TIME);
        }
    }

    /// A new round began while the controller is still in startup: whether the last round's
    /// smallest sample (of the forward queue when the peer timestamps) stood above the
    /// target all round, which ends startup (as HyStart++'s delay increase ends slow start,
    /// RFC 9406). Startup otherwise runs until the bandwidth stops growing for three rounds
    /// or packets are lost: on a short path with a deep buffer (a home router's 80 ms) that
    /// filled the buffer, and a call beside a starting upload waited 50-100 ms for 0.2 s.
    pub(crate) fn startup_round_ends_startup(&mut self, min_rtt: Duration) -> bool {
        let rtt = self.round_min.take();
        let fwd = self.round_min_fwd.take();
        let standing = match (fwd, rtt) {
            (Some(f), _) => f,
            (None, Some(r)) => r.saturating_sub(min_rtt),
            (None, None) => return false,
        };
        standing > Self::target(min_rtt)
    }

    fn released(&self, now: Instant) -> bool {
        self.released_until.is_some_and(|t| now < t)
    }

    /// The window gain over the bandwidth-delay product in force now.
    pub(crate) fn gain(&self, now: Instant) -> f64 {
        if self.released(now) {
            MAX_GAIN
        } else {
            self.gain
        }
    }

    /// The queues in the pipe that are not ours, which the window must cover: the return
    /// direction's standing queue, and while released the forward one too.
    pub(crate) fn foreign_queue(&self, now: Instant) -> Duration {
        if self.released(now) {
            self.reverse + self.standing
        } else {
            self.reverse
        }
    }

    /// The last standing-queue estimate (for tests and diagnostics).
    #[cfg(test)]
    pub(crate) fn standing(&self) -> Duration {
        self.standing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn rounds(b: &mut QueueBound, n: u32, samples: &[u64], t: &mut Instant) {
        for _ in 0..n {
            for &s in samples {
                b.on_rtt_sample(ms(s), None);
            }
            *t += ms(20);
            b.on_round_start(*t, ms(20), ms(1));
        }
    }

    #[test]
    fn a_standing_queue_shrinks_the_gain_to_one_bdp() {
        let mut b = QueueBound::default();
        let mut t = Instant(0);
        rounds(&mut b, 10, &[45, 50, 60], &mut t);
        assert_eq!(b.standing(), ms(25));
        assert!((b.gain(t) - MIN_GAIN).abs() < 1e-9, "gain {}", b.gain(t));
    }

    #[test]
    fn jitter_without_a_standing_queue_keeps_the_full_gain() {
        // Samples spread over 20..40 ms, but the smallest of each round is the propagation
        // RTT: no standing queue.
        let mut b = QueueBound::default();
        let mut t = Instant(0);
        rounds(&mut b, 20, &[21, 35, 40, 28], &mut t);
        assert!(b.standing() <= ms(1));
        assert!((b.gain(t) - MAX_GAIN).abs() < 1e-9);
    }

    #[test]
    fn the_gain_grows_back_once_the_queue_is_gone() {
        let mut b = QueueBound::default();
        let mut t = Instant(0);
        rounds(&mut b, 5, &[40], &mut t);
        let low = b.gain(t);
        rounds(&mut b, 20, &[20], &mut t);
        assert!(b.gain(t) > low);
        assert!((b.gain(t) - MAX_GAIN).abs() < 1e-9);
    }

    #[test]
    fn another_senders_queue_releases_the_bound_for_a_while() {
        let mut b = QueueBound::default();
        let mut t = Instant(0);
        // 80 ms of someone else's queue that no gain of ours drains.
        rounds(&mut b, RELEASE_ROUNDS + 10, &[100], &mut t);
        assert!((b.gain(t) - MAX_GAIN).abs() < 1e-9, "released: full gain");
        t += RELEASE_TIME;
        assert!((b.gain(t) - MIN_GAIN).abs() < 1e-9, "then tried again");
    }

    #[test]
    fn a_queue_on_the_return_direction_is_not_ours_and_widens_the_pipe() {
        // An upload keeps 30 ms queued where this path's acknowledgements pass; this path's
        // own packets meet 1 ms. Without timestamps that is our queue (gain down to 1);
        // with them the gain stays and the 30 ms are part of the pipe.
        let mut b = QueueBound::default();
        let mut t = Instant(0);
        for _ in 0..20 {
            b.on_rtt_sample(ms(51), Some(ms(1)));
            t += ms(50);
            b.on_round_start(t, ms(20), ms(1));
        }
        assert_eq!(b.standing(), ms(1));
        assert!((b.gain(t) - MAX_GAIN).abs() < 1e-9, "gain {}", b.gain(t));
        assert_eq!(b.foreign_queue(t), ms(30));
    }

    #[test]
    fn a_queue_the_smallest_window_keeps_is_ours_and_never_releases() {
        // Four packets on a slow link with a short RTT queue 12 ms whatever the gain.
        let mut b = QueueBound::default();
        let mut t = Instant(0);
        for _ in 0..RELEASE_ROUNDS * 3 {
            b.on_rtt_sample(ms(32), Some(ms(12)));
            t += ms(30);
            b.on_round_start(t, ms(20), ms(12));
        }
        assert!((b.gain(t) - MIN_GAIN).abs() < 1e-9, "gain {}", b.gain(t));
    }

    #[test]
    fn the_target_grows_with_the_path() {
        assert_eq!(QueueBound::target(ms(0)), ms(4));
        assert_eq!(QueueBound::target(ms(80)), ms(14));
    }
}
