//! Time as the core sees it: an opaque instant in nanoseconds, supplied by the caller.
//!
//! Owns: the `Instant` type and its arithmetic with `std::time::Duration`. Must not touch:
//! any clock. The simulator passes virtual time, the network driver passes a monotonic clock
//! mapped onto nanoseconds since its start.

use std::ops::{Add, AddAssign, Sub};
use std::time::Duration;

/// How late a driver's timer may fire (tokio's timer wheel has a resolution of 1 ms, as
/// RFC 9002's kGranularity assumes): pacing lets out at least what the rate allows over
/// two of these at once, and the window of a model-based controller covers it, so that a
/// timer firing late never leaves the path idle.
pub const TIMER_GRANULARITY: Duration = Duration::from_millis(1);

/// A point in time, in nanoseconds since an epoch chosen by the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(pub u64);

impl Instant {
    /// The epoch.
    pub const ZERO: Instant = Instant(0);
    /// Later than any real instant; used as "never".
    pub const FAR_FUTURE: Instant = Instant(u64::MAX);

    /// Nanoseconds since the epoch.
    pub fn as_nanos(self) -> u64 {
        self.0
    }

    /// Seconds since the epoch as a float (for reports).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// An instant `d` after the epoch.
    pub fn from_duration(d: Duration) -> Instant {
        Instant(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    /// The time elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(
            self.0
                .saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_since(rhs)
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, d: Duration) -> Instant {
        Instant(
            self.0
                .saturating_sub(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Instant(5);
        assert_eq!(t - Instant(10), Duration::ZERO);
        assert_eq!(
            Instant::FAR_FUTURE + Duration::from_secs(1),
            Instant::FAR_FUTURE
        );
        assert_eq!(t - Duration::from_secs(1), Instant::ZERO);
        assert_eq!(
            (Instant(1_000) + Duration::from_micros(1)).as_nanos(),
            2_000
        );
    }
}
