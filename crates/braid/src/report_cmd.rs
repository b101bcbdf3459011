//! `braid report` and recording runs into the results database (`braid sim --db FILE`,
//! `braid testbed run`).
//!
//! Owns: the command's defaults and messages. Must not touch: the database schema, plots and
//! HTML (all in braid-results), running scenarios.

use anyhow::{Context, Result};
use braid_results::{RunSamples, Store};
use std::path::{Path, PathBuf};

/// The database `braid report` reads when `--db` is not given (in the current directory).
pub const DEFAULT_DB: &str = "braid-results.sqlite";
/// The directory `braid report` writes when `--out` is not given.
pub const DEFAULT_OUT: &str = "braid-report";

/// `braid report [--db FILE] [--out DIR]`: writes `DIR/index.html` and `DIR/plots/` for the
/// latest run of every scenario in the database, prints its tables (goodput and latency per
/// variant and size) and where the page is.
pub fn run(db: Option<PathBuf>, out: Option<PathBuf>) -> Result<()> {
    let db = db.unwrap_or_else(|| PathBuf::from(DEFAULT_DB));
    let out = out.unwrap_or_else(|| PathBuf::from(DEFAULT_OUT));
    let store = Store::open_existing(&db)?;
    let written = braid_results::write_report(&store, &out)?;
    out!("{}", written.text);
    outln!(
        "wrote {} ({} scenario{}, {} figure{})",
        written.index.display(),
        written.sections,
        if written.sections == 1 { "" } else { "s" },
        written.figures,
        if written.figures == 1 { "" } else { "s" },
    );
    Ok(())
}

/// Records a finished report, with the scenario file's text and the git revision of the
/// current directory, into the database at `db` (created if missing). Returns the run id.
pub fn store_report(db: &Path, report: &braid_sim::Report, scenario_path: &Path) -> Result<i64> {
    store_report_with_samples(db, report, scenario_path, &[])
}

/// [`store_report`] with throughput samples (from the testbed).
pub fn store_report_with_samples(
    db: &Path,
    report: &braid_sim::Report,
    scenario_path: &Path,
    samples: &[RunSamples],
) -> Result<i64> {
    let text = std::fs::read_to_string(scenario_path).with_context(|| {
        format!(
            "reading the scenario file {} to store it with the results",
            scenario_path.display()
        )
    })?;
    let rev = braid_results::git_revision(Path::new("."));
    let store = Store::open(db)?;
    Ok(store.record(report, &text, &rev, samples)?)
}
