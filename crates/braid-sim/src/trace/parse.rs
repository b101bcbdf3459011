//! Trace files: the CSV (`time_s,rate_mbit` rows) and Mahimahi (one millisecond timestamp
//! per 1500-byte delivery opportunity) formats, telling them apart, and their validation.
//!
//! Owns: reading and checking the files, with errors naming the file and line. Must not
//! touch: what a trace means once loaded (the integrals in `mod.rs`).

use super::{Trace, TraceFormat, MAHIMAHI_PACKET_BYTES};
use crate::time::Nanos;
use std::path::Path;

impl Trace {
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
