//! The per-transfer series a testbed run reports beside braid-sim's `Report`: throughput
//! samples and the latency probe's round trips.
//!
//! Owns: `RunSamples` (the same fields as `braid_results::RunSamples`). Kept apart from the
//! runner so that the fault results (`faults`) can read samples without importing the runner.
//! Must not touch: how they are measured (`traffic`, `measure`).

use serde::Serialize;

/// Throughput samples of one transfer (the same fields as `braid_results::RunSamples`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSamples {
    /// Variant name.
    pub variant: String,
    /// Repetition, from 0.
    pub repetition: u32,
    /// Transfer size.
    pub size_bytes: u64,
    /// Seconds between samples.
    pub interval_s: f64,
    /// Receiver goodput of each interval, bit/s; sample `i` covers `[i, i+1) × interval_s`
    /// from the start of the connection.
    pub throughput_bps: Vec<f64>,
    /// Round trips (seconds) of the latency probe's packets sent while the transfer ran, in
    /// send order, 50 a second; a packet never answered is infinite (`null` in JSON).
    pub probe_rtt_s: Vec<f64>,
}
