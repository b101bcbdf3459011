//! Capacity traces: a link rate that changes over time, loaded from CSV or from Mahimahi's
//! packet-delivery traces (which loop at their end, as Mahimahi's `mm-link` does).
//!
//! Owns: the trace file formats (`time_s,rate_mbit` rows; one millisecond timestamp per
//! 1500-byte delivery opportunity), their loading and validation, looping, and
//! the integrals the link model needs (bits carried between two instants, time to carry a
//! given number of bits). Must not touch: the link's queues, loss or blackouts (`link.rs`)
//! or scenario parsing (`scenario.rs`). Integrals are computed in exact integer
//! "bit-nanoseconds" (rate in bit/s times nanoseconds) so serialisation times are exact.

use crate::time::Nanos;
use serde::{Serialize, Serializer};
use std::path::Path;
use std::sync::Arc;

/// A piecewise-constant rate: the rate of the last point at or before `t`; before the first
/// point, the first point's rate; after the last point, the last rate forever, or, for a
/// looping trace, the trace again from its start every `period`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trace {
    /// `(time, bits per second)`, non-empty, times strictly increasing (and, when looping,
    /// the first at 0 and all before `period`).
    points: Vec<(Nanos, u64)>,
    /// The trace repeats with this period.
    #[serde(skip_serializing_if = "Option::is_none")]
    period: Option<Nanos>,
}

/// Which format a trace file is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFormat {
    /// `time_s,rate_mbit` rows; the last rate holds forever.
    Csv,
    /// Mahimahi: one integer millisecond per line, one 1500-byte delivery opportunity each;
    /// loops at its end.
    Mahimahi,
}

/// Bytes one Mahimahi delivery opportunity carries.
pub const MAHIMAHI_PACKET_BYTES: u64 = 1500;

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
        Ok(Trace {
            points,
            period: None,
        })
    }

    /// A trace from `points` that repeats every `period` (the first point must be at 0 and
    /// every point before `period`).
    pub fn looping(points: Vec<(Nanos, u64)>, period: Nanos) -> Result<Trace, String> {
        let mut t = Trace::new(points)?;
        if t.points[0].0 != 0 {
            return Err("a looping trace starts at time 0".to_string());
        }
        if period == 0 || t.points.last().is_some_and(|p| p.0 >= period) {
            return Err("a looping trace's points all come before its period".to_string());
        }
        t.period = Some(period);
        Ok(t)
    }

    /// A trace that always has `bps`.
    pub fn constant(bps: u64) -> Trace {
        Trace {
            points: vec![(0, bps)],
            period: None,
        }
    }

    /// The period of a looping trace.
    pub fn period(&self) -> Option<Nanos> {
        self.period
    }

    /// Loads a trace file in `format`, or the format its content shows when `None` (a
    /// single integer per line is Mahimahi's); errors name the file (and the line).
    pub fn load(path: &Path, format: Option<TraceFormat>) -> Result<Trace, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read trace file {}: {e}", path.display()))?;
        let name = path.display().to_string();
        match format.unwrap_or_else(|| detect_format(&text)) {
            TraceFormat::Csv => Trace::parse(&text, &name),
            TraceFormat::Mahimahi => Trace::parse_mahimahi(&text, &name),
        }
    }

    /// Parses a Mahimahi trace: one integer per line, a time in milliseconds; each line is
    /// one opportunity for a 1500-byte packet, several lines with the same time several
    /// packets in that millisecond. Each millisecond becomes a constant rate over that
    /// millisecond (n opportunities: n x 12 Mbit/s), and the trace loops with a period of
    /// its last timestamp, as Mahimahi's link does (a trace of one timestamp, or ending at
    /// 0, loops every millisecond).
    pub fn parse_mahimahi(text: &str, name: &str) -> Result<Trace, String> {
        const MS: Nanos = 1_000_000;
        let mut counts: Vec<u64> = Vec::new();
        let mut last: Option<u64> = None;
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() {
                continue;
            }
            let err = |msg: String| format!("{name}: line {}: {msg}", i + 1);
            let t: u64 = line.parse().map_err(|_| {
                err(format!(
                    "expected a Mahimahi timestamp (whole milliseconds), got {line:?}"
                ))
            })?;
            if last.is_some_and(|l| t < l) {
                return Err(err(format!(
                    "Mahimahi timestamps never decrease, but {t} comes after {}",
                    last.unwrap_or(0)
                )));
            }
            if t > 100_000_000 {
                return Err(err(format!("timestamp {t} ms is beyond 100 000 s")));
            }
            last = Some(t);
            let idx = t as usize;
            if counts.len() <= idx {
                counts.resize(idx + 1, 0);
            }
            counts[idx] += 1;
        }
        let Some(end) = last else {
            return Err(format!("{name}: the Mahimahi trace has no timestamps"));
        };
        // Mahimahi loops with the last timestamp as the period; the opportunities at that
        // very millisecond are those of time 0 in the next round.
        let period_ms = end.max(1);
        if end > 0 {
            let at_end = counts.pop().unwrap_or(0);
            counts[0] += at_end;
        }
        let per_opportunity = MAHIMAHI_PACKET_BYTES * 8 * 1000;
        let mut points: Vec<(Nanos, u64)> = Vec::new();
        for (ms, &n) in counts.iter().enumerate() {
            let bps = n * per_opportunity;
            if points.last().is_none_or(|&(_, r)| r != bps) {
                points.push((ms as Nanos * MS, bps));
            }
        }
        Trace::looping(points, period_ms * MS).map_err(|e| format!("{name}: {e}"))
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
        Ok(Trace {
            points,
            period: None,
        })
    }

    /// The `(time, bps)` points.
    pub fn points(&self) -> &[(Nanos, u64)] {
        &self.points
    }

    /// Index of the segment that contains `t` (within one period for a looping trace).
    fn segment(&self, t: Nanos) -> usize {
        self.points.partition_point(|p| p.0 <= t).saturating_sub(1)
    }

    /// End of segment `i` (exclusive); `None` for the last one of a trace that does not loop.
    fn segment_end(&self, i: usize) -> Option<Nanos> {
        self.points.get(i + 1).map(|p| p.0).or(self.period)
    }

    /// The rate at `t`, in bits per second.
    pub fn rate_at(&self, t: Nanos) -> u64 {
        let t = self.period.map_or(t, |p| t % p);
        self.points[self.segment(t)].1
    }

    /// Integral of the rate over `[t0, t1]` in bit-nanoseconds (bits times 10^9).
    pub(crate) fn bitns_between(&self, t0: Nanos, t1: Nanos) -> u128 {
        if t1 <= t0 {
            return 0;
        }
        let Some(p) = self.period else {
            return self.bitns_within(t0, t1);
        };
        let (k0, k1) = (t0 / p, t1 / p);
        let (r0, r1) = (t0 % p, t1 % p);
        if k0 == k1 {
            return self.bitns_within(r0, r1);
        }
        let whole = (k1 - k0 - 1) as u128 * self.bitns_within(0, p);
        self.bitns_within(r0, p) + whole + self.bitns_within(0, r1)
    }

    /// The integral over `[t0, t1]` read straight off the points (for a looping trace, both
    /// within one period: `t1 <= period`).
    fn bitns_within(&self, t0: Nanos, t1: Nanos) -> u128 {
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
        let Some(p) = self.period else {
            return self.time_within(start, bitns);
        };
        let base = start - start % p;
        let first = self.bitns_within(start % p, p);
        if first >= bitns {
            return self
                .time_within(start % p, bitns)
                .and_then(|t| t.checked_add(base));
        }
        let per = self.bitns_within(0, p);
        if per == 0 {
            return None;
        }
        // Whole periods, then the rest within the next one (never 0 bits: the earliest time).
        let rest = bitns - first;
        let whole = (rest - 1) / per;
        let rest = rest - whole * per;
        let round = u64::try_from(whole).ok()?.checked_add(1)?;
        let offset = base.checked_add(round.checked_mul(p)?)?;
        self.time_within(0, rest)
            .and_then(|t| t.checked_add(offset))
    }

    /// `time_to_send_bitns` read straight off the points (for a looping trace, starting
    /// within the first period and ending within it).
    fn time_within(&self, start: Nanos, bitns: u128) -> Option<Nanos> {
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
                    if i >= self.points.len() {
                        // The end of a looping trace's period: the caller made sure the
                        // bits fit before it.
                        return None;
                    }
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
        if let Some(p) = self.period {
            return (self.bitns_within(0, p) / p as u128) as u64;
        }
        let first = self.points[0].0;
        let last = self.points[self.points.len() - 1].0;
        if self.points.len() == 1 || last == first {
            return self.points[0].1;
        }
        (self.bitns_between(first, last) / (last - first) as u128) as u64
    }
}

/// A file of single integers, one per line, is Mahimahi's format; anything else is CSV.
pub fn detect_format(text: &str) -> TraceFormat {
    let mut lines = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .peekable();
    if lines.peek().is_none() {
        return TraceFormat::Csv;
    }
    if lines
        .take(1000)
        .all(|l| l.bytes().all(|b| b.is_ascii_digit()))
    {
        TraceFormat::Mahimahi
    } else {
        TraceFormat::Csv
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
    const MS_NS: Nanos = 1_000_000;

    #[test]
    fn mahimahi_one_packet_per_millisecond_is_12_mbit_forever() {
        // Mahimahi's own example: a file holding just "1".
        let t = Trace::parse_mahimahi("1\n", "one").unwrap();
        assert_eq!(t.period(), Some(MS_NS));
        assert_eq!(t.mean_rate(), 12_000_000);
        assert_eq!(t.rate_at(5_000_000_123), 12_000_000);
        // 1500 bytes take one millisecond, wherever they start.
        assert_eq!(
            t.time_to_send(7 * MS_NS + 300, 12_000.0),
            Some(8 * MS_NS + 300)
        );
    }

    #[test]
    fn mahimahi_counts_repeated_timestamps_and_loops_at_the_last_one() {
        // ms 0: 2 packets, ms 1: none, ms 2: 1, then at 4 (the period) the loop starts.
        let t = Trace::parse_mahimahi("0\n0\n2\n4\n", "t").unwrap();
        assert_eq!(t.period(), Some(4 * MS_NS));
        // The opportunity at 4 ms is time 0 of the next round: 3 at ms 0.
        assert_eq!(t.rate_at(0), 36_000_000);
        assert_eq!(t.rate_at(MS_NS), 0);
        assert_eq!(t.rate_at(2 * MS_NS), 12_000_000);
        assert_eq!(t.rate_at(3 * MS_NS), 0);
        assert_eq!(t.rate_at(4 * MS_NS + 10), 36_000_000);
        // 4 packets of 1500 bytes per 4 ms.
        assert_eq!(t.mean_rate(), 12_000_000);
        assert_eq!(t.bits_between(0, 400 * MS_NS), 100.0 * 4.0 * 12_000.0);
        // ms 3..9: 0 + 3 (ms 4 = 0) + 0 + 1 (ms 6 = 2) + 0 + 3 (ms 8 = 0).
        assert_eq!(t.bits_between(3 * MS_NS, 9 * MS_NS), 12_000.0 * 7.0);
    }

    #[test]
    fn a_looping_trace_sends_across_its_end_and_many_periods() {
        let t = Trace::parse_mahimahi("0\n2\n4\n", "t").unwrap();
        // 1 packet at ms 0 (2 with the wrap) and 1 at ms 2: 3 per 4 ms... the last line is
        // the next round's first: ms 0 has 2, ms 2 has 1.
        assert_eq!(t.bits_between(0, 4 * MS_NS), 3.0 * 12_000.0);
        // From inside ms 3 (rate 0), 1500 bytes need the next round's ms 0, half of it.
        let end = t.time_to_send(3 * MS_NS, 12_000.0).unwrap();
        assert_eq!(end, 4 * MS_NS + MS_NS / 2);
        // 1000 rounds later, exactly.
        let bits = 1000.0 * 3.0 * 12_000.0;
        let end = t.time_to_send(0, bits).unwrap();
        assert_eq!(t.bits_between(0, end), bits);
        assert!(t.bits_between(0, end - 1) < bits);
    }

    #[test]
    fn the_format_is_detected_from_the_content() {
        assert_eq!(detect_format("0\n1\n1\n"), TraceFormat::Mahimahi);
        assert_eq!(detect_format("time_s,rate_mbit\n0,1\n"), TraceFormat::Csv);
        assert_eq!(detect_format("0,1\n"), TraceFormat::Csv);
    }

    #[test]
    fn bad_mahimahi_traces_are_refused_with_the_line() {
        let e = Trace::parse_mahimahi("0\n5\n3\n", "f.down").unwrap_err();
        assert!(
            e.contains("f.down: line 3") && e.contains("never decrease"),
            "{e}"
        );
        let e = Trace::parse_mahimahi("0\n1.5\n", "f.down").unwrap_err();
        assert!(
            e.contains("line 2") && e.contains("whole milliseconds"),
            "{e}"
        );
        assert!(Trace::parse_mahimahi("\n", "f")
            .unwrap_err()
            .contains("no timestamps"));
    }

    #[test]
    fn the_shipped_mahimahi_traces_have_the_mean_rates_their_readme_gives() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/traces/mahimahi");
        for (f, mbit) in [
            ("Verizon-LTE-short.down", 5.0),
            ("ATT-LTE-driving-2016.down", 4.6),
        ] {
            let t = Trace::load(&dir.join(f), None).unwrap();
            assert!(t.period().is_some(), "{f} loops");
            let m = t.mean_rate() as f64 / 1e6;
            assert!((m - mbit).abs() < 0.15, "{f}: {m} Mbit/s");
        }
    }

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
        let e = Trace::load(Path::new("/nonexistent/trace.csv"), None).unwrap_err();
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
