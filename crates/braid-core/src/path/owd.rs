//! One-way delay of a path's forward direction, from the peer's receive timestamps
//! (ACK_TS frames): how long this path's packets now wait in queues on their way out, apart
//! from what their acknowledgements wait on the way back.
//!
//! A sample is the peer's clock when it received a packet minus ours when we sent it: the
//! one-way delay plus the unknown, constant offset between the two clocks. The smallest
//! sample of the last 10 to 20 seconds stands for the propagation delay (plus the offset);
//! a sample minus it is the forward queueing delay. Two ten-second buckets bound how far
//! clock drift (tens of microseconds a second) can skew the floor.
//!
//! Owns: the floor and the forward-queue sample. Must not touch: the RTT estimator or the
//! controller (the path hands the sample to both in its `AckEvent`).

use crate::time::Instant;
use std::time::Duration;

/// How long one bucket of the floor's two lasts.
const BUCKET: Duration = Duration::from_secs(10);

/// The forward-delay floor of one path.
#[derive(Debug, Clone, Default)]
pub(crate) struct OneWayDelay {
    /// (bucket start, smallest sample in it), the current bucket and the one before.
    current: Option<(Instant, i64)>,
    previous: Option<i64>,
}

impl OneWayDelay {
    /// A packet sent at `sent` (our clock) reached the peer at `peer_recv_us` (its clock,
    /// microseconds): the forward queueing delay it met.
    pub(crate) fn on_sample(&mut self, now: Instant, sent: Instant, peer_recv_us: u64) -> Duration {
        let sample = i64::try_from(peer_recv_us)
            .unwrap_or(i64::MAX)
            .saturating_sub(i64::try_from(sent.as_nanos() / 1000).unwrap_or(i64::MAX));
        match self.current {
            Some((start, min)) if now.saturating_since(start) < BUCKET => {
                self.current = Some((start, min.min(sample)));
            }
            Some((_, min)) => {
                self.previous = Some(min);
                self.current = Some((now, sample));
            }
            None => self.current = Some((now, sample)),
        }
        let floor = self
            .current
            .map(|(_, m)| m)
            .into_iter()
            .chain(self.previous)
            .min()
            .unwrap_or(sample);
        Duration::from_micros(sample.saturating_sub(floor).unsigned_abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_duration(Duration::from_millis(ms))
    }

    #[test]
    fn the_queue_is_the_delay_above_the_floor_whatever_the_clocks_offset() {
        let mut owd = OneWayDelay::default();
        // The peer's clock is 5 s ahead of ours; the path's one-way delay is 10 ms.
        let peer = |sent_ms: u64, delay_ms: u64| (sent_ms + delay_ms) * 1000 + 5_000_000;
        assert_eq!(
            owd.on_sample(at(110), at(100), peer(100, 10)),
            Duration::ZERO
        );
        assert_eq!(
            owd.on_sample(at(230), at(200), peer(200, 16)),
            Duration::from_millis(6)
        );
        // A sample below the floor lowers it.
        assert_eq!(
            owd.on_sample(at(310), at(300), peer(300, 9)),
            Duration::ZERO
        );
        assert_eq!(
            owd.on_sample(at(420), at(400), peer(400, 12)),
            Duration::from_millis(3)
        );
    }

    #[test]
    fn an_old_floor_is_forgotten_after_two_buckets() {
        let mut owd = OneWayDelay::default();
        owd.on_sample(at(0), at(0), 1_000);
        // The route got 20 ms longer: after 10-20 s the new delay is the floor.
        let mut t = 1_000;
        let mut last = Duration::MAX;
        while t < 25_000 {
            last = owd.on_sample(at(t), at(t), t * 1000 + 21_000);
            t += 500;
        }
        assert_eq!(last, Duration::ZERO);
    }
}
