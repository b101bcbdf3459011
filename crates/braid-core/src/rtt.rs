//! Round-trip time estimation for one path (RFC 9002 §5).
//!
//! Owns: smoothed RTT, RTT variation, minimum and latest RTT of one path. Must not touch:
//! loss detection decisions or timers (it only answers questions about time).

use std::time::Duration;

/// RTT state of one path.
#[derive(Debug, Clone)]
pub struct RttEstimator {
    latest: Duration,
    smoothed: Option<Duration>,
    var: Duration,
    min: Duration,
    initial: Duration,
}

impl RttEstimator {
    /// A path with no sample yet assumes `initial`.
    pub fn new(initial: Duration) -> Self {
        RttEstimator {
            latest: initial,
            smoothed: None,
            var: initial / 2,
            min: initial,
            initial,
        }
    }

    /// Take one sample; `ack_delay` is the peer's reported delay (already capped).
    pub fn update(&mut self, sample: Duration, ack_delay: Duration) {
        self.latest = sample;
        match self.smoothed {
            None => {
                self.min = sample;
                self.smoothed = Some(sample);
                self.var = sample / 2;
            }
            Some(srtt) => {
                self.min = self.min.min(sample);
                // Subtract the ack delay only when that leaves at least min_rtt.
                let adjusted = if sample >= self.min + ack_delay {
                    sample - ack_delay
                } else {
                    sample
                };
                let diff = srtt.abs_diff(adjusted);
                self.var = (self.var * 3 + diff) / 4;
                self.smoothed = Some((srtt * 7 + adjusted) / 8);
            }
        }
    }

    /// True once a sample was taken.
    pub fn has_sample(&self) -> bool {
        self.smoothed.is_some()
    }

    /// Smoothed RTT (the initial RTT before any sample).
    pub fn smoothed(&self) -> Duration {
        self.smoothed.unwrap_or(self.initial)
    }

    /// RTT variation.
    pub fn var(&self) -> Duration {
        self.var
    }

    /// Smallest sample seen (the initial RTT before any sample).
    pub fn min(&self) -> Duration {
        self.min
    }

    /// Most recent sample.
    pub fn latest(&self) -> Duration {
        self.latest
    }

    /// Probe timeout before backoff: srtt + max(4·rttvar, 1 ms) + max_ack_delay.
    pub fn pto_base(&self, max_ack_delay: Duration) -> Duration {
        self.smoothed() + (self.var * 4).max(Duration::from_millis(1)) + max_ack_delay
    }

    /// Time threshold of loss detection: 9/8 · max(srtt, latest), at least 1 ms.
    pub fn loss_delay(&self) -> Duration {
        (self.smoothed().max(self.latest) * 9 / 8).max(Duration::from_millis(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_sample_then_smoothing() {
        let ms = Duration::from_millis;
        let mut r = RttEstimator::new(ms(333));
        assert_eq!(r.smoothed(), ms(333));
        r.update(ms(100), ms(0));
        assert_eq!((r.smoothed(), r.var(), r.min()), (ms(100), ms(50), ms(100)));
        r.update(ms(180), ms(0));
        assert_eq!(r.smoothed(), ms(110));
        assert_eq!(r.var(), ms(57) + Duration::from_micros(500));
        // ack delay is subtracted only when the result stays above min_rtt
        r.update(ms(120), ms(10));
        assert_eq!(r.latest(), ms(120));
        assert_eq!(r.smoothed(), (ms(110) * 7 + ms(110)) / 8);
        assert!(r.loss_delay() >= ms(123));
    }
}
