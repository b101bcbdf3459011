//! Byte quotas per agent key: the bytes an agent moved (both directions) in the current
//! UTC day and month, against its limits, and their line in the usage file that keeps them
//! across restarts.
//!
//! Owns: the counting, the day and month boundaries (UTC, from unix seconds the caller
//! passes) and the line format. Must not touch: files and clocks (`shares` reads and writes
//! the file), the relay.

/// Days since 1970-01-01 of unix time `secs`.
fn day_of(secs: u64) -> u64 {
    secs / 86_400
}

/// Months since January 1970 of unix day `day` (UTC; the civil calendar).
fn month_of(day: u64) -> u64 {
    // Howard Hinnant's civil_from_days.
    let z = day as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    ((year - 1970) * 12 + month - 1).max(0) as u64
}

/// An agent's limits: bytes per UTC day and per UTC month (`None`: no limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuotaLimits {
    pub day: Option<u64>,
    pub month: Option<u64>,
}

/// What one agent moved this day and this month.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    day: u64,
    day_bytes: u64,
    month: u64,
    month_bytes: u64,
}

impl Usage {
    /// Count `n` bytes at unix time `secs` (a new day or month starts from zero).
    pub fn add(&mut self, secs: u64, n: u64) {
        self.roll(secs);
        self.day_bytes += n;
        self.month_bytes += n;
    }

    /// (bytes this day, bytes this month) at unix time `secs`.
    pub fn used(&self, secs: u64) -> (u64, u64) {
        let mut u = *self;
        u.roll(secs);
        (u.day_bytes, u.month_bytes)
    }

    /// Which limit of `limits` the agent has reached at unix time `secs`: "day", "month".
    pub fn reached(&self, secs: u64, limits: QuotaLimits) -> Option<&'static str> {
        let (d, m) = self.used(secs);
        if limits.day.is_some_and(|l| d >= l) {
            return Some("day");
        }
        limits.month.is_some_and(|l| m >= l).then_some("month")
    }

    fn roll(&mut self, secs: u64) {
        let day = day_of(secs);
        if day != self.day {
            self.day = day;
            self.day_bytes = 0;
        }
        let month = month_of(day);
        if month != self.month {
            self.month = month;
            self.month_bytes = 0;
        }
    }

    /// Its line in the usage file (after the agent key): `DAY DAY_BYTES MONTH MONTH_BYTES`.
    pub fn to_line(&self) -> String {
        format!(
            "{} {} {} {}",
            self.day, self.day_bytes, self.month, self.month_bytes
        )
    }

    /// The usage of a line written by [`Usage::to_line`]; `None` if it is not one.
    pub fn from_line(s: &str) -> Option<Usage> {
        let v: Vec<u64> = s
            .split_whitespace()
            .map(|w| w.parse().ok())
            .collect::<Option<_>>()?;
        match v[..] {
            [day, day_bytes, month, month_bytes] => Some(Usage {
                day,
                day_bytes,
                month,
                month_bytes,
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-28 12:00:00 UTC.
    const NOV_28: u64 = 1_795_867_200;

    #[test]
    fn months_follow_the_civil_calendar() {
        assert_eq!(month_of(0), 0);
        assert_eq!(month_of(30), 0, "1970-01-31");
        assert_eq!(month_of(31), 1, "1970-02-01");
        assert_eq!(month_of(day_of(NOV_28)), 56 * 12 + 10, "2026-11");
        // 2024-02-29 and 2024-03-01 (a leap day).
        assert_eq!(month_of(19_782), 54 * 12 + 1);
        assert_eq!(month_of(19_783), 54 * 12 + 2);
    }

    #[test]
    fn a_quota_is_reached_and_starts_again_with_the_day_and_month() {
        let lim = QuotaLimits {
            day: Some(1000),
            month: Some(2500),
        };
        let mut u = Usage::default();
        u.add(NOV_28, 999);
        assert_eq!(u.reached(NOV_28, lim), None);
        u.add(NOV_28 + 60, 1);
        assert_eq!(u.reached(NOV_28, lim), Some("day"));
        let next_day = NOV_28 + 86_400;
        assert_eq!(u.reached(next_day, lim), None, "a new day");
        u.add(next_day, 1000);
        u.add(next_day + 86_400, 600);
        assert_eq!(u.used(next_day + 86_400), (600, 2600));
        assert_eq!(u.reached(next_day + 86_400, lim), Some("month"));
        // 2026-12-01 00:00 UTC: both start again.
        assert_eq!(u.used(1_796_083_200), (0, 0));
        assert_eq!(Usage::from_line(&u.to_line()), Some(u));
        assert_eq!(Usage::from_line("1 2 3"), None);
        assert_eq!(Usage::from_line("1 2 x 4"), None);
    }
}
