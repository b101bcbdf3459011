//! A token bucket in bytes: how long bytes must wait so that a sender keeps to a rate.
//!
//! Owns: the arithmetic (tokens, refill, debt). Must not touch: clocks (the caller passes
//! `now`), sleeping (the caller waits what [`TokenBucket::take`] returns).

use std::time::{Duration, Instant};

/// A bucket of `burst` bytes refilled at `rate` bytes per second. Taking more than it
/// holds leaves it in debt; the debt is the wait, so over time the bytes taken keep to the
/// rate exactly (a burst once, then the rate).
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// Full, at `rate` bytes per second (at least 1).
    pub fn new(now: Instant, rate: u64, burst: u64) -> TokenBucket {
        TokenBucket {
            rate: rate.max(1) as f64,
            burst: burst as f64,
            tokens: burst as f64,
            last: now,
        }
    }

    /// Bytes per second now.
    pub fn rate(&self) -> u64 {
        self.rate as u64
    }

    /// A new rate from `now` on (what was refilled so far at the old one stays).
    pub fn set_rate(&mut self, now: Instant, rate: u64) {
        self.refill(now);
        self.rate = rate.max(1) as f64;
    }

    /// Charge `n` bytes: how long the caller must wait before sending them (zero while the
    /// bucket holds them).
    pub fn take(&mut self, now: Instant, n: usize) -> Duration {
        self.refill(now);
        self.tokens -= n as f64;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.rate)
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = self.last.max(now);
        self.tokens = (self.tokens + dt * self.rate).min(self.burst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes sent by a sender that always has data and waits what the bucket says, over
    /// `secs` seconds in steps of 64 KiB.
    fn sent_in(b: &mut TokenBucket, t0: Instant, secs: f64) -> u64 {
        let (mut now, mut sent) = (t0, 0u64);
        let end = t0 + Duration::from_secs_f64(secs);
        while now < end {
            now += b.take(now, 65536);
            sent += 65536;
        }
        sent
    }

    #[test]
    fn a_busy_sender_keeps_to_the_rate_after_one_burst() {
        let t0 = Instant::now();
        let rate = 1_250_000; // 10 Mbit/s
        let mut b = TokenBucket::new(t0, rate, 65536);
        let sent = sent_in(&mut b, t0, 10.0) as f64;
        let want = rate as f64 * 10.0;
        assert!((sent - want).abs() <= 2.0 * 65536.0, "{sent} vs {want}");
    }

    #[test]
    fn an_idle_bucket_fills_only_to_its_burst_and_a_new_rate_counts_from_then() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(t0, 1000, 5000);
        assert_eq!(b.take(t0, 5000), Duration::ZERO);
        // An hour idle: still only the burst.
        let t1 = t0 + Duration::from_secs(3600);
        assert_eq!(b.take(t1, 5000), Duration::ZERO);
        assert_eq!(b.take(t1, 1000), Duration::from_secs(1));
        b.set_rate(t1, 2000);
        assert_eq!(b.rate(), 2000);
        assert_eq!(
            b.take(t1, 1000),
            Duration::from_secs(1),
            "2000 bytes of debt at 2000/s"
        );
    }
}
