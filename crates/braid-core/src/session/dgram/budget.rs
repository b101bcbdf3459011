//! The duplicate budget of auto mode: how many bytes of copies of real-time datagrams the
//! session may send. A token bucket of bytes, refilled with `fraction` of every byte the
//! session sends (its packets, whole) and with `floor` bytes per second; it holds at most one
//! second of the floor (at least [`MIN_CAP`]) and starts full. Over any stretch of time,
//! copies add at most `fraction` × the bytes sent + `floor` × its length + the cap.
//!
//! Owns: the bucket. Must not touch: queues, paths, packets (the session reports what it
//! sent and asks before each copy).

use crate::time::Instant;

/// The least the bucket holds when full.
pub const MIN_CAP: u64 = 16 * 1024;

/// The bucket.
#[derive(Debug, Clone)]
pub(in crate::session) struct DupBudget {
    tokens: f64,
    cap: f64,
    fraction: f64,
    floor: f64,
    last: Option<Instant>,
}

impl DupBudget {
    /// A full bucket for `fraction` (clamped to 0..=1) of the bytes sent plus `floor` bytes
    /// per second.
    pub fn new(fraction: f64, floor: u64) -> DupBudget {
        let cap = floor.max(MIN_CAP) as f64;
        DupBudget {
            tokens: cap,
            cap,
            fraction: if fraction.is_finite() {
                fraction.clamp(0.0, 1.0)
            } else {
                0.0
            },
            floor: floor as f64,
            last: None,
        }
    }

    /// The session sent a packet of `len` bytes.
    pub fn on_sent(&mut self, len: usize) {
        self.tokens = (self.tokens + self.fraction * len as f64).min(self.cap);
    }

    /// Take `len` bytes for a copy at `now`; false (nothing taken) when the bucket holds
    /// fewer.
    pub fn take(&mut self, now: Instant, len: usize) -> bool {
        if let Some(last) = self.last {
            let dt = now.saturating_since(last).as_secs_f64();
            self.tokens = (self.tokens + self.floor * dt).min(self.cap);
        }
        self.last = Some(now);
        if self.tokens >= len as f64 {
            self.tokens -= len as f64;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_alone_refills_its_rate() {
        let mut b = DupBudget::new(0.05, 16_000);
        let mut granted = 0u64;
        // 200 bytes every millisecond for 10 s: 200 kB/s asked, the floor gives 16 kB/s.
        for ms in 0..10_000u64 {
            if b.take(Instant(ms * 1_000_000), 200) {
                granted += 200;
            }
        }
        assert!(granted <= 16_000 * 10 + 16_384, "{granted}");
        assert!(granted >= 16_000 * 10 - 200, "{granted}");
    }

    #[test]
    fn sent_bytes_refill_their_fraction() {
        let mut b = DupBudget::new(0.05, 0);
        assert!(b.take(Instant(0), MIN_CAP as usize), "starts full");
        assert!(!b.take(Instant(0), 1));
        b.on_sent(20_000);
        assert!(b.take(Instant(0), 1000));
        assert!(!b.take(Instant(0), 1));
        assert!(!DupBudget::new(f64::NAN, 0).take(Instant(0), MIN_CAP as usize + 1));
    }
}
