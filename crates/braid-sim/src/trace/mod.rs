//! Capacity traces: a link rate that changes over time, loaded from CSV or from Mahimahi's
//! packet-delivery traces (which loop at their end, as Mahimahi's `mm-link` does).
//!
//! Owns: the trace file formats (`time_s,rate_mbit` rows; one millisecond timestamp per
//! 1500-byte delivery opportunity), their loading and validation, looping, and
//! the integrals the link model needs (bits carried between two instants, time to carry a
//! given number of bits). Must not touch: the link's queues, loss or blackouts (`link`)
//! or scenario parsing (`scenario`). Integrals are computed in exact integer
//! "bit-nanoseconds" (rate in bit/s times nanoseconds) so serialisation times are exact.
//! The file formats are read in `parse`.

use crate::time::Nanos;
use serde::{Serialize, Serializer};
use std::sync::Arc;

mod parse;

pub use self::parse::detect_format;

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
mod tests;
