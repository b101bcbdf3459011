//! braid-results: a SQLite database of simulator and testbed runs, plots of them, and a
//! self-contained HTML report.
//!
//! Owns: the results database schema ([`store`]), box plots ([`plot`]), throughput-over-time
//! and loaded-latency CDF figures ([`plot_lines`]), the HTML page ([`html`]), the summary
//! rows and their text table ([`summary`]), the statistics and number formatting they share
//! ([`stats`], [`format`]), the figures' drawing kit (`canvas`), and putting them together into a report directory ([`report`]).
//! Must not touch: how results are made (that is braid-sim and the testbed), the command line
//! (the `braid` crate calls [`Store::record`] and [`write_report`]).
//!
//! ```no_run
//! # fn main() -> Result<(), braid_results::Error> {
//! # let report: braid_sim::Report = unimplemented!();
//! let store = braid_results::Store::open("braid-results.sqlite")?;
//! let rev = braid_results::git_revision(std::path::Path::new("."));
//! store.record(&report, "name = \"x\"\n", &rev, &[])?;
//! let written = braid_results::write_report(&store, std::path::Path::new("braid-report"))?;
//! println!("{}", written.index.display());
//! # Ok(())
//! # }
//! ```

mod canvas;
pub mod format;
pub mod html;
pub mod plot;
pub mod plot_lines;
pub mod report;
pub mod stats;
pub mod store;
pub mod summary;

pub use plot::Figure;
pub use report::{write_report, WrittenReport};
pub use store::{git_revision, ResultFilter, Store, StoredResult, StoredRun, SCHEMA_VERSION};

use std::path::PathBuf;

/// Throughput samples of one transfer, taken at a fixed interval (the testbed samples every
/// 100 ms), and the latency probe's round trips while it ran. Keyed, like a
/// [`braid_sim::RunResult`], by variant, repetition and size.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSamples {
    /// Variant name.
    pub variant: String,
    /// Repetition, from 0.
    pub repetition: u32,
    /// Transfer size.
    pub size_bytes: u64,
    /// Seconds between samples.
    pub interval_s: f64,
    /// Goodput of each interval, in bit/s; sample `i` covers `[i, i + 1) × interval_s`.
    pub throughput_bps: Vec<f64>,
    /// Round trips (seconds) of the latency probe's packets sent while the transfer ran, in
    /// send order; `f64::INFINITY` for a packet never answered; empty when not measured.
    pub probe_rtt_s: Vec<f64>,
}

/// Everything that can go wrong in this crate. Each message says what was wrong, where, and
/// what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file exists but is not an SQLite database.
    #[error(
        "{path} is not an SQLite database (it may be corrupt, or another kind of file): {source}; \
         give the path of a braid results database (written by `braid sim --db`), or the name \
         of a new file to start one"
    )]
    NotADatabase {
        /// The file.
        path: PathBuf,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// There is no database where one must exist.
    #[error(
        "there is no results database at {path}: record runs into it first with \
         `braid sim SCENARIO --db {path}`, or give the database with --db FILE"
    )]
    NoDatabase {
        /// The path looked at.
        path: PathBuf,
    },
    /// The file is an SQLite database of some other program.
    #[error(
        "{path} is an SQLite database but not a braid results database ({why}); \
         give the path of a braid results database (written by `braid sim --db`), or the name \
         of a new file to start one"
    )]
    ForeignDatabase {
        /// The file.
        path: PathBuf,
        /// What gave it away.
        why: String,
    },
    /// The database was written by a newer braid.
    #[error(
        "{path} has results schema version {found}, but this braid understands versions up to \
         {supported}; use a newer braid to read it, or give another database file"
    )]
    FutureSchema {
        /// The file.
        path: PathBuf,
        /// The version in the file.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// A database operation failed.
    #[error("results database {path}: could not {action}: {source}")]
    Sqlite {
        /// The file (":memory:" for an in-memory database).
        path: PathBuf,
        /// What we were doing, like "create the schema".
        action: String,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// A row holds a value that cannot be read back (the file was edited or damaged).
    #[error(
        "results database {path}: table {table}, row {row}: {what}; the row was damaged or \
         written by another program: delete it or use another database file"
    )]
    CorruptRow {
        /// The file.
        path: PathBuf,
        /// The table.
        table: &'static str,
        /// The row's id.
        row: i64,
        /// What is wrong with it.
        what: String,
    },
    /// Reading or writing a file of the report failed.
    #[error("could not {action} {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What we were doing, like "write".
        action: &'static str,
        /// What the system said.
        source: std::io::Error,
    },
    /// Drawing a plot failed.
    #[error("could not draw the plot {path}: {message}; check that the directory is writable")]
    Plot {
        /// The output file.
        path: PathBuf,
        /// What the plotting library said.
        message: String,
    },
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
