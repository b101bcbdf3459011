//! A token-bucket pacer for one path.
//!
//! Owns: when the next packet of a path may leave, given a rate and a burst allowance.
//! Must not touch: the congestion window (the controller decides the rate; the pacer only
//! spreads packets in time).

use crate::time::Instant;
use std::time::Duration;

/// The pacer's burst, in packets, unless the driver asks for more (`Path::set_max_burst`).
pub const MIN_BURST_PACKETS: u64 = 10;

/// Token bucket measured in bytes.
#[derive(Debug, Clone)]
pub struct Pacer {
    tokens: f64,
    capacity: f64,
    rate: f64, // bytes per second
    last: Instant,
}

impl Pacer {
    /// A full bucket of `burst` bytes.
    pub fn new(burst: u64, now: Instant) -> Self {
        Pacer {
            tokens: burst as f64,
            capacity: burst as f64,
            rate: 0.0,
            last: now,
        }
    }

    /// Set the pacing rate in bytes per second (0: no pacing) and the burst size.
    pub fn set(&mut self, now: Instant, rate_bytes_per_s: u64, burst: u64) {
        self.refill(now);
        self.rate = rate_bytes_per_s as f64;
        self.capacity = burst as f64;
        self.tokens = self.tokens.min(self.capacity);
    }

    fn refill(&mut self, now: Instant) {
        if now > self.last {
            if self.rate > 0.0 {
                let dt = (now - self.last).as_secs_f64();
                self.tokens = (self.tokens + dt * self.rate).min(self.capacity);
            } else {
                self.tokens = self.capacity;
            }
            self.last = now;
        }
    }

    /// When a packet of `bytes` may leave; `now` or earlier means immediately.
    pub fn ready_at(&self, now: Instant, bytes: u64) -> Instant {
        if self.rate <= 0.0 {
            return now;
        }
        let dt = now.saturating_since(self.last).as_secs_f64();
        let tokens = (self.tokens + dt * self.rate).min(self.capacity);
        if tokens >= bytes as f64 {
            now
        } else {
            let wait = (bytes as f64 - tokens) / self.rate;
            now + Duration::from_nanos((wait * 1e9).ceil() as u64)
        }
    }

    /// Account for a packet of `bytes` leaving at `now`.
    pub fn on_sent(&mut self, now: Instant, bytes: u64) {
        self.refill(now);
        self.tokens -= bytes as f64;
        if self.tokens < -(self.capacity) {
            self.tokens = -self.capacity;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_packets_at_the_rate() {
        let t0 = Instant(0);
        let mut p = Pacer::new(3000, t0);
        p.set(t0, 1_000_000, 3000); // 1 MB/s
        assert_eq!(p.ready_at(t0, 1500), t0);
        p.on_sent(t0, 1500);
        p.on_sent(t0, 1500);
        // Bucket empty: the next 1500 bytes need 1.5 ms.
        assert_eq!(p.ready_at(t0, 1500), Instant(1_500_000));
        let t1 = Instant(1_500_000);
        assert_eq!(p.ready_at(t1, 1500), t1);
    }

    #[test]
    fn zero_rate_means_no_pacing() {
        let mut p = Pacer::new(0, Instant(0));
        p.on_sent(Instant(0), 100_000);
        assert_eq!(p.ready_at(Instant(0), 1500), Instant(0));
    }
}
