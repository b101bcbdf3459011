//! Capacity traces: a link rate that changes over time, loaded from CSV.
//!
//! Owns: the trace file format (`time_s,rate_mbit` rows), its loading and validation, and
//! the integrals the link model needs (bits carried between two instants, time to carry a
//! given number of bits). Must not touch: the link's queues, loss or blackouts (`link.rs`)
//! or scenario parsing (`scenario.rs`). Integrals are computed in exact integer
//! "bit-nanoseconds" (rate in bit/s times nanoseconds) so serialisation times are exact.

use crate::link::Nanos;
use serde::{Serialize, Serializer};
use std::path::Path;
use std::sync::Arc;

/// A piecewise-constant rate: the rate of the last point at or before `t`; before the first
/// point, the first point's rate; after the last point, the last rate forever.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trace {
    /// `(time, bits per second)`, non-empty, times strictly increasing.
    points: Vec<(Nanos, u64)>,
}

impl Trace {
    /// A trace from `(time, bps)` points; they must be non-empty with strictly increasing
    /// times.
    pub fn new(points: Vec<(Nanos, u64)>) -> Result<Trace, String> {
        if points.is_empty() {
            return Err("a trace needs at least one row".to_string());
        }
        if points.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err("trace times must be strictly increasing".to_string());
        }
        Ok(Trace { points })
    }

    /// A trace that always has `bps`.
    pub fn constant(bps: u64) -> Trace {
        Trace {
            points: vec![(0, bps)],
        }
    }

    /// Loads a trace file; errors name the file (and the line, for bad rows).
    pub fn load(path: &Path) -> Result<Trace, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read trace file {}: {e}", path.display()))?;
        Trace::parse(&text, &path.display().to_string())
    }

    /// Parses trace text. `name` is used in error messages. Rows are `time_s,rate_mbit`
    /// (floats); an optional header line (first non-comment line that is not numeric),
    /// `#` comments and blank lines are skipped.
    pub fn parse(text: &str, name: &str) -> Result<Trace, String> {
        let mut points: Vec<(Nanos, u64)> = Vec::new();
        let mut seen_row = false;
        for (i, raw) in text.lines().enumerate() {
            let lineno = i + 1;
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            let first_is_number = fields.first().is_some_and(|f| f.parse::<f64>().is_ok());
            if !seen_row && !first_is_number {
                // The header line.
                seen_row = true;
                continue;
            }
            seen_row = true;
            let err = |msg: String| format!("{name}: line {lineno}: {msg}");
            if fields.len() != 2 {
                return Err(err(format!(
                    "expected two comma-separated numbers `time_s,rate_mbit`, got {line:?}"
                )));
            }
            let t: f64 = fields[0]
                .parse()
                .map_err(|_| err(format!("expected a time in seconds, got {:?}", fields[0])))?;
            let r: f64 = fields[1]
                .parse()
                .map_err(|_| err(format!("expected a rate in Mbit/s, got {:?}", fields[1])))?;
            if !t.is_finite() || t < 0.0 || t * 1e9 >= 1.8e19 {
                return Err(err(format!(
                    "time must be a finite number of seconds >= 0, got {}",
                    fields[0]
                )));
            }
            if !r.is_finite() || r < 0.0 || r * 1e6 >= 1.8e19 {
                return Err(err(format!(
                    "rate must be a finite number of Mbit/s >= 0, got {}",
                    fields[1]
                )));
            }
            let tn = (t * 1e9).round() as Nanos;
            let bps = (r * 1e6).round() as u64;
            if let Some(&(prev, _)) = points.last() {
                if tn <= prev {
                    return Err(err(format!(
                        "times must be strictly increasing, but {} s does not come after {} s",
                        fields[0],
                        prev as f64 / 1e9
                    )));
                }
            }
            points.push((tn, bps));
        }
        if points.is_empty() {
            return Err(format!("{name}: the trace has no data rows"));
        }
        Ok(Trace { points })
    }

    /// The `(time, bps)` points.
    pub fn points(&self) -> &[(Nanos, u64)] {
        &self.points
    }

    /// Index of the segment that contains `t`.
    fn segment(&self, t: Nanos) -> usize {
        self.points.partition_point(|p| p.0 <= t).saturating_sub(1)
    }

    /// End of segment `i` (exclusive), `None` for the last one.
    fn segment_end(&self, i: usize) -> Option<Nanos> {
        self.points.get(i + 1).map(|p| p.0)
    }

    /// The rate at `t`, in bits per second.
    pub fn rate_at(&self, t: Nanos) -> u64 {
        self.points[self.segment(t)].1
    }

    /// Integral of the rate over `[t0, t1]` in bit-nanoseconds (bits times 10^9).
    pub(crate) fn bitns_between(&self, t0: Nanos, t1: Nanos) -> u128 {
        if t1 <= t0 {
            return 0;
        }
        let mut i = self.segment(t0);
        let mut cur = t0;
        let mut total: u128 = 0;
        loop {
            let end = self.segment_end(i).map_or(t1, |e| e.min(t1));
            total = total.saturating_add(self.points[i].1 as u128 * (end - cur) as u128);
            if end >= t1 {
                return total;
            }
            cur = end;
            i += 1;
        }
    }

    /// Bits the rate carries over `[t0, t1]`.
    pub fn bits_between(&self, t0: Nanos, t1: Nanos) -> f64 {
        self.bitns_between(t0, t1) as f64 / 1e9
    }

    /// Earliest `T` such that the integral from `start` to `T` reaches `bitns`
    /// bit-nanoseconds; `None` when the rate stays 0 forever or `T` does not fit in u64.
    pub(crate) fn time_to_send_bitns(&self, start: Nanos, bitns: u128) -> Option<Nanos> {
        if bitns == 0 {
            return Some(start);
        }
        let mut i = self.segment(start);
        let mut cur = start;
        let mut remaining = bitns;
        loop {
            let rate = self.points[i].1 as u128;
            match self.segment_end(i) {
                Some(end) => {
                    let avail = rate * (end - cur) as u128;
                    if rate > 0 && avail >= remaining {
                        return add_nanos(cur, remaining.div_ceil(rate));
                    }
                    remaining -= avail;
                    cur = end;
                    i += 1;
                }
                None => {
                    if rate == 0 {
                        return None;
                    }
                    return add_nanos(cur, remaining.div_ceil(rate));
                }
            }
        }
    }

    /// The earliest time `T` with `bits_between(start, T) >= bits`; `None` if the rate
    /// stays 0 forever (or the answer is beyond the representable time).
    pub fn time_to_send(&self, start: Nanos, bits: f64) -> Option<Nanos> {
        if bits.is_nan() {
            return None;
        }
        let bitns = (bits.max(0.0) * 1e9).ceil();
        if bitns >= 3.4e38 {
            return None;
        }
        self.time_to_send_bitns(start, bitns as u128)
    }

    /// Time-weighted mean rate over the span of the rows (the last row only marks the end
    /// of the span); with a single row, that row's rate.
    pub fn mean_rate(&self) -> u64 {
        let first = self.points[0].0;
        let last = self.points[self.points.len() - 1].0;
        if self.points.len() == 1 || last == first {
            return self.points[0].1;
        }
        (self.bitns_between(first, last) / (last - first) as u128) as u64
    }
}

fn add_nanos(t: Nanos, d: u128) -> Option<Nanos> {
    u64::try_from(d).ok().and_then(|d| t.checked_add(d))
}

/// A link's rate: fixed, or following a trace.
#[derive(Debug, Clone)]
pub enum RateSpec {
    /// Bits per second.
    Constant(u64),
    Trace(Arc<Trace>),
}

impl RateSpec {
    /// The rate at `t` in bits per second.
    pub fn rate_at(&self, t: Nanos) -> u64 {
        match self {
            RateSpec::Constant(bps) => *bps,
            RateSpec::Trace(tr) => tr.rate_at(t),
        }
    }

    /// When serialising `bits` that start at `start` ends (exactly, rounded up to whole
    /// nanoseconds); `None` if never.
    #[inline]
    pub fn end_of(&self, start: Nanos, bits: u64) -> Option<Nanos> {
        let bitns = bits as u128 * 1_000_000_000;
        match self {
            RateSpec::Constant(0) => None,
            RateSpec::Constant(bps) => u64::try_from(bitns.div_ceil(*bps as u128))
                .ok()
                .and_then(|d| start.checked_add(d)),
            RateSpec::Trace(t) => t.time_to_send_bitns(start, bitns),
        }
    }

    /// Integral of the rate over `[t0, t1]` in bit-nanoseconds.
    pub(crate) fn bitns(&self, t0: Nanos, t1: Nanos) -> u128 {
        match self {
            RateSpec::Constant(bps) => *bps as u128 * t1.saturating_sub(t0) as u128,
            RateSpec::Trace(t) => t.bitns_between(t0, t1),
        }
    }

    /// The constant rate, or the trace's time-weighted mean rate.
    pub fn mean_rate(&self) -> u64 {
        match self {
            RateSpec::Constant(bps) => *bps,
            RateSpec::Trace(tr) => tr.mean_rate(),
        }
    }
}

impl Serialize for RateSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(rename_all = "lowercase")]
        enum Repr<'a> {
            Constant(u64),
            Trace(&'a Trace),
        }
        match self {
            RateSpec::Constant(bps) => Repr::Constant(*bps).serialize(s),
            RateSpec::Trace(tr) => Repr::Trace(tr).serialize(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Nanos = 1_000_000_000;

    fn example() -> Trace {
        // 0-1 s: 10 Mbit, 1-3 s: 0, from 3 s: 20 Mbit.
        Trace::parse("time_s,rate_mbit\n0,10\n1,0\n3,20\n", "t.csv").unwrap()
    }

    #[test]
    fn parse_skips_header_comments_blank_lines() {
        let t = Trace::parse(
            "# a comment\n\ntime_s, rate_mbit\n0.5, 1.5 # trailing\n\n2,0\n",
            "x",
        )
        .unwrap();
        assert_eq!(t.points(), &[(S / 2, 1_500_000), (2 * S, 0)]);
        let t = Trace::parse("0,5\n", "x").unwrap();
        assert_eq!(t.points(), &[(0, 5_000_000)]);
    }

    #[test]
    fn parse_errors_name_file_and_line() {
        let e = Trace::parse("t,r\n0,10\n1,abc\n", "walk.csv").unwrap_err();
        assert!(e.starts_with("walk.csv: line 3: "), "{e}");
        assert!(e.contains("abc"));
        let e = Trace::parse("0,10\n0,5\n", "w").unwrap_err();
        assert!(
            e.contains("line 2") && e.contains("strictly increasing"),
            "{e}"
        );
        let e = Trace::parse("0,10\n-1,5\n", "w").unwrap_err();
        assert!(e.contains("line 2"), "{e}");
        let e = Trace::parse("0,-10\n", "w").unwrap_err();
        assert!(e.contains("line 1") && e.contains(">= 0"), "{e}");
        let e = Trace::parse("0,10,3\n", "w").unwrap_err();
        assert!(e.contains("two comma-separated"), "{e}");
        assert!(Trace::parse("# nothing\n", "w")
            .unwrap_err()
            .contains("no data rows"));
        assert!(Trace::parse("0,nan\n", "w").is_err());
        assert!(Trace::parse("inf,1\n", "w").is_err());
        assert!(Trace::parse("1e30,1\n", "w").is_err());
        let e = Trace::load(Path::new("/nonexistent/trace.csv")).unwrap_err();
        assert!(e.contains("/nonexistent/trace.csv"), "{e}");
    }

    #[test]
    fn rate_is_piecewise_constant() {
        let t = Trace::parse("1,10\n2,20\n", "x").unwrap();
        assert_eq!(t.rate_at(0), 10_000_000); // before the first row
        assert_eq!(t.rate_at(S), 10_000_000);
        assert_eq!(t.rate_at(2 * S - 1), 10_000_000);
        assert_eq!(t.rate_at(2 * S), 20_000_000);
        assert_eq!(t.rate_at(u64::MAX), 20_000_000);
    }

    #[test]
    fn integrals() {
        let t = example();
        assert_eq!(t.bits_between(0, S), 10e6);
        assert_eq!(t.bits_between(0, 4 * S), 10e6 + 20e6);
        assert_eq!(t.bits_between(S / 2, 3 * S + S / 2), 5e6 + 10e6);
        assert_eq!(t.bits_between(2 * S, S), 0.0);
        assert_eq!(t.bits_between(S, 3 * S), 0.0);
    }

    #[test]
    fn time_to_send_crosses_segments() {
        let t = example();
        // 12000 bits at 10 Mbit/s: 1.2 ms.
        assert_eq!(t.time_to_send(0, 12_000.0), Some(1_200_000));
        // Starting 0.6 ms before the gap: 6000 bits before, then wait 2 s, then 6000 at 20M.
        let start = S - 600_000;
        assert_eq!(t.time_to_send(start, 12_000.0), Some(3 * S + 300_000));
        assert_eq!(t.time_to_send(5, 0.0), Some(5));
        // Rounds up to whole nanoseconds: 1 bit at 10 Mbit/s = 100 ns; 1 bit at 3 bit/s.
        assert_eq!(t.time_to_send(0, 1.0), Some(100));
        let slow = Trace::constant(3);
        assert_eq!(slow.time_to_send(0, 1.0), Some(333_333_334));
        let dead = Trace::parse("0,10\n1,0\n", "x").unwrap();
        assert_eq!(dead.time_to_send(0, 20e6), None);
        assert_eq!(dead.time_to_send(0, f64::NAN), None);
        assert_eq!(dead.time_to_send(0, f64::INFINITY), None);
        assert_eq!(Trace::constant(1).time_to_send(u64::MAX - 1, 1e9), None);
    }

    #[test]
    fn mean_rate_is_time_weighted() {
        assert_eq!(example().mean_rate(), 10_000_000 / 3);
        assert_eq!(Trace::constant(7).mean_rate(), 7);
        let t = Trace::parse("0,10\n1,30\n2,0\n", "x").unwrap();
        assert_eq!(t.mean_rate(), 20_000_000);
    }

    #[test]
    fn new_validates() {
        assert!(Trace::new(vec![]).is_err());
        assert!(Trace::new(vec![(5, 1), (5, 2)]).is_err());
        assert!(Trace::new(vec![(5, 1), (6, 2)]).is_ok());
    }
}
