//! Parsing and formatting of human-readable units: rates, durations and sizes.
//!
//! Owns: the unit grammar used by scenario files (`"50Mbit"`, `"10ms"`, `"64KB"`) and the
//! human-readable formatting used in reports. Pure functions only. Must not touch: scenario
//! structure (see `scenario`), files, clocks or randomness. Errors are plain `String`s
//! that say what was expected and what was found; callers attach the file and key.

use crate::time::Nanos;

/// Splits `"1.5 Mbit"` into `(1.5, "Mbit")`. `None` when there is no non-negative finite
/// number at the start.
fn split_number(s: &str) -> Option<(f64, &str)> {
    let s = s.trim();
    let end = s
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_digit() || *c == '.'))
        .map_or(s.len(), |(i, _)| i);
    let (num, unit) = s.split_at(end);
    if num.is_empty() || num.chars().filter(|c| *c == '.').count() > 1 {
        return None;
    }
    let value: f64 = num.parse().ok()?;
    if !value.is_finite() || value < 0.0 {
        return None;
    }
    Some((value, unit.trim()))
}

/// Scales `value` by `mult`, rounds to the nearest integer and checks the range.
fn scaled(value: f64, mult: f64, what: &str, input: &str) -> Result<u64, String> {
    let v = (value * mult).round();
    // 2^64 as f64; anything at or above does not fit.
    if !v.is_finite() || v >= 18_446_744_073_709_551_616.0 {
        return Err(format!("{what} {input:?} is too large"));
    }
    Ok(v as u64)
}

const RATE_EXPECTED: &str = r#"expected a rate such as "50Mbit", "420Kbit" or "1Gbit""#;
const DURATION_EXPECTED: &str = r#"expected a duration such as "10ms", "500us", "1.5s" or "2min""#;
const SIZE_EXPECTED: &str = r#"expected a size such as "1500B", "64KB", "4MiB" or "1GB""#;

/// Parses a rate into bits per second. Accepts `bit`, `Kbit`, `Mbit`, `Gbit` (SI: 10^3,
/// 10^6, 10^9), the aliases `bps`, `kbps`, `Mbps`, `Gbps` and `.../s` spellings such as
/// `Mbit/s`; unit letters are case-insensitive and a space may separate number and unit.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let err = || format!("{RATE_EXPECTED}, got {s:?}");
    let (value, unit) = split_number(s).ok_or_else(err)?;
    let lower = unit.to_ascii_lowercase();
    let base = lower.strip_suffix("/s").unwrap_or(&lower);
    let mult = match base {
        "bit" | "bps" | "b" => 1.0,
        "kbit" | "kbps" | "kb" => 1e3,
        "mbit" | "mbps" | "mb" => 1e6,
        "gbit" | "gbps" | "gb" => 1e9,
        _ => return Err(err()),
    };
    // "MB" without "/s" would be a size in bytes; only accept the bare letter forms as
    // rates when spelled with "/s" (e.g. "Mb/s").
    if matches!(base, "b" | "kb" | "mb" | "gb") && !lower.ends_with("/s") {
        return Err(err());
    }
    scaled(value, mult, "rate", s)
}

/// Parses a duration into nanoseconds. Units: `ns`, `us` (or `µs`), `ms`, `s`, `min`, `h`.
/// Zero is allowed; negative, NaN and infinite values are refused.
pub fn parse_duration(s: &str) -> Result<Nanos, String> {
    let err = || format!("{DURATION_EXPECTED}, got {s:?}");
    let (value, unit) = split_number(s).ok_or_else(err)?;
    let mult = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "min" => 60e9,
        "h" => 3600e9,
        _ => return Err(err()),
    };
    scaled(value, mult, "duration", s)
}

/// Parses a size into bytes. `B`; `KB`, `MB`, `GB` are SI (1000-based); `KiB`, `MiB`, `GiB`
/// are binary (1024-based). `kB` is accepted as an alias of `KB`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let err = || format!("{SIZE_EXPECTED}, got {s:?}");
    let (value, unit) = split_number(s).ok_or_else(err)?;
    let mult = match unit {
        "B" => 1.0,
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "KiB" | "kiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(err()),
    };
    scaled(value, mult, "size", s)
}

/// `"50.0 Mbit/s"`, `"420.0 Kbit/s"`, `"800 bit/s"`.
pub fn format_rate(bps: u64) -> String {
    let v = bps as f64;
    if v >= 1e9 {
        format!("{:.1} Gbit/s", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.1} Mbit/s", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1} Kbit/s", v / 1e3)
    } else {
        format!("{bps} bit/s")
    }
}

/// `"64.0 MB"`, `"8.0 KB"`, `"1500 B"` (SI units, matching `parse_size`).
pub fn format_size(bytes: u64) -> String {
    let v = bytes as f64;
    if v >= 1e9 {
        format!("{:.1} GB", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.1} MB", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1} KB", v / 1e3)
    } else {
        format!("{bytes} B")
    }
}

/// `"12.3 ms"`, `"1.50 s"`, `"500.0 us"`, `"100 ns"`.
pub fn format_duration(ns: Nanos) -> String {
    let v = ns as f64;
    if v >= 1e9 {
        format!("{:.2} s", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.1} ms", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1} us", v / 1e3)
    } else {
        format!("{ns} ns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("50Mbit"), Ok(50_000_000));
        assert_eq!(parse_rate("1.5Mbit"), Ok(1_500_000));
        assert_eq!(parse_rate("420Kbit"), Ok(420_000));
        assert_eq!(parse_rate("1Gbit"), Ok(1_000_000_000));
        assert_eq!(parse_rate("800bit"), Ok(800));
        assert_eq!(parse_rate("50 Mbit"), Ok(50_000_000));
        assert_eq!(parse_rate(" 50mbit "), Ok(50_000_000));
        assert_eq!(parse_rate("10Mbps"), Ok(10_000_000));
        assert_eq!(parse_rate("64kbps"), Ok(64_000));
        assert_eq!(parse_rate("2Gbps"), Ok(2_000_000_000));
        assert_eq!(parse_rate("100bps"), Ok(100));
        assert_eq!(parse_rate("5Mbit/s"), Ok(5_000_000));
        assert_eq!(parse_rate("5Mb/s"), Ok(5_000_000));
        assert_eq!(parse_rate("0Mbit"), Ok(0));
    }

    #[test]
    fn bad_rates() {
        let e = parse_rate("50 furlongs").unwrap_err();
        assert_eq!(
            e,
            r#"expected a rate such as "50Mbit", "420Kbit" or "1Gbit", got "50 furlongs""#
        );
        for bad in [
            "",
            "Mbit",
            "fast",
            "-5Mbit",
            "50",
            "5MB",
            "1.2.3Mbit",
            "NaNMbit",
            "infMbit",
            ".Mbit",
        ] {
            assert!(parse_rate(bad).is_err(), "{bad:?} accepted");
        }
        let huge = format!("{}Gbit", "9".repeat(30));
        assert!(parse_rate(&huge).unwrap_err().contains("too large"));
        let enormous = format!("{}Gbit", "9".repeat(400));
        assert!(parse_rate(&enormous).is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10ms"), Ok(10_000_000));
        assert_eq!(parse_duration("2s"), Ok(2_000_000_000));
        assert_eq!(parse_duration("500us"), Ok(500_000));
        assert_eq!(parse_duration("500µs"), Ok(500_000));
        assert_eq!(parse_duration("1.5s"), Ok(1_500_000_000));
        assert_eq!(parse_duration("100ns"), Ok(100));
        assert_eq!(parse_duration("2min"), Ok(120_000_000_000));
        assert_eq!(parse_duration("1h"), Ok(3_600_000_000_000));
        assert_eq!(parse_duration("0ms"), Ok(0));
        assert_eq!(parse_duration("0.5 ms"), Ok(500_000));
        for bad in ["", "10", "-1ms", "NaNs", "infs", "10 sec", "10MS", "1e3ms"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse_duration("1x").unwrap_err().contains(r#"got "1x""#));
        assert!(parse_duration("99999999999999h")
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64KB"), Ok(64_000));
        assert_eq!(parse_size("8KB"), Ok(8_000));
        assert_eq!(parse_size("64MB"), Ok(64_000_000));
        assert_eq!(parse_size("1GB"), Ok(1_000_000_000));
        assert_eq!(parse_size("1500B"), Ok(1500));
        assert_eq!(parse_size("64KiB"), Ok(65_536));
        assert_eq!(parse_size("4MiB"), Ok(4_194_304));
        assert_eq!(parse_size("1GiB"), Ok(1_073_741_824));
        assert_eq!(parse_size("1.5 KB"), Ok(1500));
        assert_eq!(parse_size("125kB"), Ok(125_000));
        for bad in ["", "64", "64Kb", "64 bytes", "-1B", "KB", "64mb"] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse_size("x").unwrap_err().starts_with("expected a size"));
    }

    #[test]
    fn formatting() {
        assert_eq!(format_rate(50_000_000), "50.0 Mbit/s");
        assert_eq!(format_rate(420_000), "420.0 Kbit/s");
        assert_eq!(format_rate(1_500_000_000), "1.5 Gbit/s");
        assert_eq!(format_rate(800), "800 bit/s");
        assert_eq!(format_size(64_000_000), "64.0 MB");
        assert_eq!(format_size(8_000), "8.0 KB");
        assert_eq!(format_size(2_500_000_000), "2.5 GB");
        assert_eq!(format_size(1500), "1.5 KB");
        assert_eq!(format_size(999), "999 B");
        assert_eq!(format_duration(12_300_000), "12.3 ms");
        assert_eq!(format_duration(1_500_000_000), "1.50 s");
        assert_eq!(format_duration(500_000), "500.0 us");
        assert_eq!(format_duration(100), "100 ns");
    }

    #[test]
    fn round_trips() {
        for bps in [1u64, 999, 1000, 50_000_000, 7_000_000_000] {
            let s = format_rate(bps);
            let compact: String = s.split_whitespace().collect();
            let back = parse_rate(&compact).unwrap();
            let rel = (back as f64 - bps as f64).abs() / bps as f64;
            assert!(rel < 0.05, "{bps} -> {s} -> {back}");
        }
    }
}
