//! The summary of one run: a row per variant and transfer size (goodput, time, efficiency,
//! energy, latency), and the same rows as a plain-text table for the terminal.
//!
//! Owns: which numbers a summary row holds and the text table. Must not touch: HTML (the page
//! is [`crate::html`]'s), the database, drawing.

use crate::format;
use crate::stats::{median, sorted_finite};
use braid_sim::{Latency, RunResult};
use std::fmt::Write;

/// One row of a scenario's table: the transfers of one variant and size.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryRow {
    /// Variant name.
    pub variant: String,
    /// Transfer size.
    pub size_bytes: u64,
    /// Number of transfers.
    pub repetitions: usize,
    /// Median goodput over the finite values.
    pub goodput_median: Option<f64>,
    /// Smallest finite goodput.
    pub goodput_min: Option<f64>,
    /// Largest finite goodput.
    pub goodput_max: Option<f64>,
    /// Median completion time.
    pub completion_median: Option<f64>,
    /// Median efficiency.
    pub efficiency_median: Option<f64>,
    /// Median energy.
    pub energy_median: Option<f64>,
    /// Transfers that arrived exactly.
    pub verified: usize,
    /// The median over the transfers of each latency field (`None` where no transfer has
    /// it).
    pub latency: Latency,
}

/// Rows by size (ascending), then variant in order of first appearance.
pub fn summarise(results: &[RunResult]) -> Vec<SummaryRow> {
    let mut variants: Vec<&str> = Vec::new();
    let mut sizes: Vec<u64> = Vec::new();
    for r in results {
        if !variants.contains(&r.variant.as_str()) {
            variants.push(&r.variant);
        }
        if !sizes.contains(&r.size_bytes) {
            sizes.push(r.size_bytes);
        }
    }
    sizes.sort_unstable();
    let mut rows = Vec::new();
    for &size in &sizes {
        for &v in &variants {
            let rs: Vec<&RunResult> = results
                .iter()
                .filter(|r| r.size_bytes == size && r.variant == v)
                .collect();
            if rs.is_empty() {
                continue;
            }
            let goodput = sorted_finite(rs.iter().map(|r| r.goodput_bps));
            rows.push(SummaryRow {
                variant: v.to_string(),
                size_bytes: size,
                repetitions: rs.len(),
                goodput_median: median(goodput.iter().copied()),
                goodput_min: goodput.first().copied(),
                goodput_max: goodput.last().copied(),
                completion_median: median(rs.iter().map(|r| r.completion_s)),
                efficiency_median: median(rs.iter().map(|r| r.efficiency)),
                energy_median: median(rs.iter().map(|r| r.energy_j)),
                verified: rs.iter().filter(|r| r.verified).count(),
                latency: median_latency(&rs),
            });
        }
    }
    rows
}

/// The median of each latency field over the transfers that have it.
fn median_latency(rs: &[&RunResult]) -> Latency {
    let m = |f: fn(&Latency) -> Option<f64>| median(rs.iter().filter_map(|r| f(&r.latency)));
    Latency {
        latency_idle_p50_ms: m(|l| l.latency_idle_p50_ms),
        latency_load_p50_ms: m(|l| l.latency_load_p50_ms),
        latency_load_p95_ms: m(|l| l.latency_load_p95_ms),
        latency_load_p99_ms: m(|l| l.latency_load_p99_ms),
        probe_loss: m(|l| l.probe_loss),
        rpm: m(|l| l.rpm),
    }
}

/// The rows as a text table: variant, size, runs, median goodput, then the latency medians
/// (idle p50, loaded p50/p95/p99 in ms, probe loss, RPM), "–" where not measured.
pub fn text_table(results: &[RunResult]) -> String {
    let rows = summarise(results);
    let w = rows
        .iter()
        .map(|r| r.variant.len())
        .max()
        .unwrap_or(0)
        .max(8);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<w$} {:>10} {:>4} {:>13} {:>10} {:>10} {:>10} {:>10} {:>8} {:>7}",
        "variant",
        "size",
        "runs",
        "goodput",
        "idle p50",
        "load p50",
        "load p95",
        "load p99",
        "loss",
        "RPM",
    );
    for r in rows {
        let l = &r.latency;
        let _ = writeln!(
            s,
            "{:<w$} {:>10} {:>4} {:>13} {:>10} {:>10} {:>10} {:>10} {:>8} {:>7}",
            r.variant,
            format::size(r.size_bytes),
            r.repetitions,
            format::opt(r.goodput_median, format::rate),
            format::opt(l.latency_idle_p50_ms, format::millis),
            format::opt(l.latency_load_p50_ms, format::millis),
            format::opt(l.latency_load_p95_ms, format::millis),
            format::opt(l.latency_load_p99_ms, format::millis),
            format::opt(l.probe_loss, format::percent),
            format::opt(l.rpm, format::count),
        );
    }
    s
}
