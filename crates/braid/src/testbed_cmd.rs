//! `braid testbed run SCENARIO.toml [--json]`: a scenario over real kernels in network
//! namespaces, with links emulated by the simulator's model (see the braid-testbed crate).
//!
//! Owns: the `testbed` subcommand's flags, its progress bar and its output (the table of
//! `braid sim`, or one JSON object: braid-sim's report with `"mode": "testbed"` plus
//! `samples`). Must not touch: the testbed itself (namespaces, emulators, variants: all in
//! braid-testbed) or the other commands.

use anyhow::{Context, Result};
use braid_sim::Scenario;
use braid_testbed::{run_scenario, RunOptions};
use clap::Subcommand;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

/// `braid testbed ...`.
#[derive(Subcommand, Debug)]
pub enum TestbedCommand {
    /// Run every variant (braid, tcp, mptcp, ss-mptcp, bond) of a scenario over real kernels
    /// in network namespaces, links emulated in userspace (needs root; one run at a time).
    Run {
        /// The scenario file (TOML; see docs/scenarios.md).
        scenario: PathBuf,
        /// Print one JSON object on stdout instead of a table.
        #[arg(long)]
        json: bool,
        /// Also record the results and throughput samples into this SQLite database (see
        /// `braid report`).
        #[arg(long, value_name = "FILE")]
        db: Option<PathBuf>,
        /// Take a path's carrier down during every transfer that uses it, AT seconds after
        /// the transfer starts, for DURATION (e.g. carrier:wifi:10s:5s), or change the
        /// client's address on it at AT (addr:wifi:10s: the next address of its subnet,
        /// put back after the transfer); repeatable. The probe's longest gap and loss, the
        /// time to fall back to the other paths and to recover are printed (scenario
        /// blackouts are measured the same way, as black holes).
        #[arg(long, value_name = "carrier:PATH:AT:DURATION|addr:PATH:AT")]
        fault: Vec<braid_testbed::faults::Fault>,
    },
}

/// Runs a `braid testbed` subcommand.
pub fn dispatch(cmd: TestbedCommand) -> Result<bool> {
    match cmd {
        TestbedCommand::Run {
            scenario,
            json,
            db,
            fault,
        } => run(&scenario, json, db.as_deref(), fault),
    }
}

/// `braid testbed run`: true when every transfer was verified.
pub fn run(
    scenario: &Path,
    json: bool,
    db: Option<&Path>,
    faults: Vec<braid_testbed::faults::Fault>,
) -> Result<bool> {
    let scn = Scenario::load(scenario)?;
    let bar = indicatif::ProgressBar::hidden();
    if std::io::stderr().is_terminal() {
        bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    }
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{prefix} [{bar:30}] {pos}/{len} transfers, {elapsed} elapsed, ETA {eta}  {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("#>-"),
    );
    bar.set_prefix(format!("testbed {}", scn.name));
    let opts = RunOptions {
        faults,
        ..RunOptions::default()
    };
    let result = run_scenario(&scn, &opts, |p| {
        bar.set_length(p.total as u64);
        bar.set_position(p.done as u64);
        bar.set_message(p.what.to_string());
    });
    bar.finish_and_clear();
    let report = result.with_context(|| format!("testbed run of {}", scenario.display()))?;
    if let Some(db) = db {
        let samples: Vec<braid_results::RunSamples> = report
            .samples
            .iter()
            .map(|s| braid_results::RunSamples {
                variant: s.variant.clone(),
                repetition: s.repetition,
                size_bytes: s.size_bytes,
                interval_s: s.interval_s,
                throughput_bps: s.throughput_bps.clone(),
                probe_rtt_s: s.probe_rtt_s.clone(),
            })
            .collect();
        let id =
            crate::report_cmd::store_report_with_samples(db, &report.report, scenario, &samples)?;
        eprintln!("recorded run {id} in {}", db.display());
    }
    if json {
        let text = serde_json::to_string(&report).context("encoding the report as JSON")?;
        outln!("{text}");
    } else {
        // The table's last line talks about virtual time; the testbed runs in real time.
        let mut table = report.report.clone();
        table.wall_s = 0.0;
        out!("{}", table.table());
        out!("{}", braid_testbed::faults::table(&report.faults));
        outln!(
            "ran {} transfers on the testbed in {:.1} s (real kernels; links emulated with \
             the simulator's model)",
            report.report.results.len(),
            report.report.wall_s
        );
    }
    Ok(report.report.all_verified())
}
