//! Results of a scenario run: the JSON `braid sim --json` prints and the readable table.
//!
//! Owns: the result types and their presentation. Must not touch: how results are made.

use serde::Serialize;
use std::fmt::Write;

/// Bytes and energy of one path during one transfer.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct PathResult {
    /// Path name from the scenario.
    pub name: String,
    /// Wire bytes the path delivered in the transfer's direction.
    pub bytes: u64,
    /// Joules the path's interface used during the transfer.
    pub energy_j: f64,
    /// Losses on this path the sender judged random (window kept; loss recovery).
    #[serde(default)]
    pub random_losses: u64,
    /// Blackouts that froze this path (either end).
    #[serde(default)]
    pub blackouts: u64,
    /// Acknowledgements of this path the receiver sent over another path (ACK offload).
    #[serde(default)]
    pub acks_offloaded: u64,
    /// Packets of this path the sender declared lost.
    #[serde(default)]
    pub losses: u64,
    /// Of those, packets acknowledged after all (reordering mistaken for loss).
    #[serde(default)]
    pub spurious_losses: u64,
}

/// One transfer.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RunResult {
    /// Variant name.
    pub variant: String,
    /// Repetition, from 0.
    pub repetition: u32,
    /// Seed of this repetition.
    pub seed: u64,
    /// Transfer size.
    pub size_bytes: u64,
    /// Every byte arrived exactly (length and hash).
    pub verified: bool,
    /// From the request to the last byte at the receiving application.
    pub completion_s: f64,
    /// size × 8 / completion_s.
    pub goodput_bps: f64,
    /// Time-average of the summed rates of the variant's paths (0 during blackouts).
    pub capacity_bps: f64,
    /// goodput / capacity.
    pub efficiency: f64,
    /// Energy of all the variant's interfaces during the transfer.
    pub energy_j: f64,
    /// Stream bytes the sender sent more than once.
    pub retransmitted_bytes: u64,
    /// Per path.
    pub paths: Vec<PathResult>,
    /// What a sparse probe flow waited beside the transfer (idle and loaded percentiles).
    #[serde(flatten)]
    pub latency: crate::latency::Latency,
    /// Why the transfer failed, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl RunResult {
    /// An empty result for a job.
    pub fn new(variant: &str, repetition: u32, seed: u64, size: u64) -> Self {
        RunResult {
            variant: variant.to_string(),
            repetition,
            seed,
            size_bytes: size,
            verified: false,
            completion_s: 0.0,
            goodput_bps: 0.0,
            capacity_bps: 0.0,
            efficiency: 0.0,
            energy_j: 0.0,
            retransmitted_bytes: 0,
            paths: Vec::new(),
            latency: Default::default(),
            error: None,
        }
    }
}

/// A whole scenario.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// "sim".
    pub mode: String,
    /// Median time to establish the session and validate every path.
    pub handshake_s: Option<f64>,
    /// One per variant, size and repetition.
    pub results: Vec<RunResult>,
    /// Virtual time simulated, all runs together (handshakes included).
    pub virtual_s: f64,
    /// Wall-clock time the simulation took (not deterministic, unlike everything else).
    pub wall_s: f64,
}

impl Report {
    /// True when every transfer arrived exactly.
    pub fn all_verified(&self) -> bool {
        self.results.iter().all(|r| r.verified)
    }

    /// A readable table.
    pub fn table(&self) -> String {
        use crate::units::{format_rate, format_size};
        let mut s = String::new();
        let _ = writeln!(s, "scenario {}", self.scenario);
        if let Some(h) = self.handshake_s {
            let _ = writeln!(s, "session set-up (all paths validated): {:.1} ms", h * 1e3);
        }
        // Sweep points make long variant names: the column fits the longest.
        let w = self
            .results
            .iter()
            .map(|r| r.variant.len())
            .max()
            .unwrap_or(0)
            .max(14);
        let _ = writeln!(
            s,
            "{:<w$} {:>4} {:>10} {:>10} {:>13} {:>13} {:>6} {:>9} {:>10} {:>17}  per path",
            "variant",
            "rep",
            "size",
            "time",
            "goodput",
            "capacity",
            "eff",
            "energy",
            "retx",
            "probe idle/load/95",
        );
        for r in &self.results {
            let per_path: Vec<String> = r
                .paths
                .iter()
                .map(|p| {
                    let mut t = format!("{} {}", p.name, format_size(p.bytes));
                    for (n, what) in [
                        (p.acks_offloaded, "ACKs offloaded"),
                        (p.losses, "lost"),
                        (p.spurious_losses, "spurious"),
                        (p.random_losses, "random losses"),
                        (p.blackouts, "blackouts"),
                    ] {
                        if n > 0 {
                            t += &format!(" ({n} {what})");
                        }
                    }
                    t
                })
                .collect();
            let _ = writeln!(
                s,
                "{:<w$} {:>4} {:>10} {:>9.3}s {:>13} {:>13} {:>6.3} {:>8.2}J {:>10} {:>17}  {}{}",
                r.variant,
                r.repetition,
                format_size(r.size_bytes),
                r.completion_s,
                format_rate(r.goodput_bps as u64),
                format_rate(r.capacity_bps as u64),
                r.efficiency,
                r.energy_j,
                format_size(r.retransmitted_bytes),
                probe_cell(&r.latency),
                per_path.join(", "),
                match (&r.error, r.verified) {
                    (Some(e), _) => format!("  FAILED: {e}"),
                    (None, false) => "  NOT VERIFIED".to_string(),
                    _ => String::new(),
                }
            );
        }
        if self.wall_s > 0.0 {
            let _ = writeln!(
                s,
                "simulated {:.1} s of virtual time in {:.2} s of wall time ({:.0}x real time)",
                self.virtual_s,
                self.wall_s,
                self.virtual_s / self.wall_s
            );
        }
        s
    }
}

/// "idle/loaded p50/loaded p95" in milliseconds, "-" where the probe did not run.
fn probe_cell(l: &crate::latency::Latency) -> String {
    let f = |v: Option<f64>| v.map_or("-".to_string(), |ms| format!("{ms:.1}"));
    if l.latency_load_p50_ms.is_none() && l.latency_idle_p50_ms.is_none() {
        return "-".to_string();
    }
    format!(
        "{}/{}/{}",
        f(l.latency_idle_p50_ms),
        f(l.latency_load_p50_ms),
        f(l.latency_load_p95_ms)
    )
}
