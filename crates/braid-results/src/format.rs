//! Numbers formatted for people: rates, durations, sizes, energy, dates.
//!
//! Owns: the text of a number in the report and on plot axes. Must not touch: statistics,
//! HTML escaping (callers escape), the database. Every function accepts any `f64`: NaN prints
//! as "–" and infinities as "∞" / "−∞", so a broken run never breaks a report.

/// A non-finite value's text, or `None` for a finite one.
fn non_finite(v: f64) -> Option<String> {
    if v.is_nan() {
        Some("–".to_string())
    } else if v.is_infinite() {
        Some(if v > 0.0 { "∞" } else { "−∞" }.to_string())
    } else {
        None
    }
}

/// Three significant digits, without a trailing exponent: 123, 12.3, 1.23, 0.123.
fn sig3(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// `"94.3 Mbit/s"`, `"1.20 Gbit/s"`, `"850 kbit/s"`, `"12.0 bit/s"`.
pub fn rate(bps: f64) -> String {
    if let Some(s) = non_finite(bps) {
        return s;
    }
    let a = bps.abs();
    if a >= 1e9 {
        format!("{} Gbit/s", sig3(bps / 1e9))
    } else if a >= 1e6 {
        format!("{} Mbit/s", sig3(bps / 1e6))
    } else if a >= 1e3 {
        format!("{} kbit/s", sig3(bps / 1e3))
    } else {
        format!("{} bit/s", sig3(bps))
    }
}

/// `"1.23 s"`, `"45.6 ms"`, `"312 µs"`, `"2 min 05 s"`.
pub fn duration(s: f64) -> String {
    if let Some(t) = non_finite(s) {
        return t;
    }
    let a = s.abs();
    if a >= 120.0 {
        let total = s.round() as i64;
        format!("{} min {:02} s", total / 60, (total % 60).abs())
    } else if a >= 1.0 || a == 0.0 {
        format!("{} s", sig3(s))
    } else if a >= 1e-3 {
        format!("{} ms", sig3(s * 1e3))
    } else {
        format!("{} µs", sig3(s * 1e6))
    }
}

/// `"64.0 MB"`, `"8.0 KB"`, `"1500 B"` (the simulator's own format, SI units).
pub fn size(bytes: u64) -> String {
    braid_sim::units::format_size(bytes)
}

/// `"12.3 J"`, `"450 mJ"`.
pub fn energy(j: f64) -> String {
    if let Some(t) = non_finite(j) {
        return t;
    }
    if j.abs() >= 1.0 || j == 0.0 {
        format!("{} J", sig3(j))
    } else {
        format!("{} mJ", sig3(j * 1e3))
    }
}

/// A ratio as `"0.934"`.
pub fn ratio(v: f64) -> String {
    non_finite(v).unwrap_or_else(|| format!("{v:.3}"))
}

/// Milliseconds as `"45.6 ms"`, `"1234 ms"`.
pub fn millis(ms: f64) -> String {
    non_finite(ms).unwrap_or_else(|| format!("{} ms", sig3(ms)))
}

/// A fraction as a percentage: `"1.2 %"`, `"0 %"`.
pub fn percent(v: f64) -> String {
    non_finite(v).unwrap_or_else(|| {
        if v == 0.0 {
            "0 %".to_string()
        } else {
            format!("{} %", sig3(v * 100.0))
        }
    })
}

/// A count without decimals: `"612"`.
pub fn count(v: f64) -> String {
    non_finite(v).unwrap_or_else(|| format!("{v:.0}"))
}

/// An optional number with a formatter, "–" for `None`.
pub fn opt(v: Option<f64>, f: fn(f64) -> String) -> String {
    v.map(f).unwrap_or_else(|| "–".to_string())
}

/// Seconds since the Unix epoch as `"2024-05-01 13:45:12 UTC"`.
pub fn unix_time(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_numbers() {
        assert_eq!(rate(94.3e6), "94.3 Mbit/s");
        assert_eq!(rate(1.2e9), "1.20 Gbit/s");
        assert_eq!(rate(850e3), "850 kbit/s");
        assert_eq!(rate(f64::NAN), "–");
        assert_eq!(rate(f64::INFINITY), "∞");
        assert_eq!(duration(1.234), "1.23 s");
        assert_eq!(duration(0.0456), "45.6 ms");
        assert_eq!(duration(125.0), "2 min 05 s");
        assert_eq!(energy(0.45), "450 mJ");
        assert_eq!(millis(45.64), "45.6 ms");
        assert_eq!(millis(1234.4), "1234 ms");
        assert_eq!(percent(0.0123), "1.23 %");
        assert_eq!(percent(0.0), "0 %");
        assert_eq!(count(611.6), "612");
        assert_eq!(unix_time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(unix_time(1_714_571_112), "2024-05-01 13:45:12 UTC");
    }
}
