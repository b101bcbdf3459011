//! The results database: one SQLite file holding every recorded run.
//!
//! Owns: opening a database file and the errors it reports; the schema and its migrations
//! (`schema`), writing a [`Report`] (with its scenario source, the git revision and
//! throughput samples) in one transaction (`write`), reading it back (`read`) and how values
//! are encoded in cells (`codec`). Must not touch: statistics, plots, HTML, how results are
//! made.
//!
//! # Schema (version 2)
//!
//! - `schema_version(version)`: one row. A database with a newer version is refused.
//! - `runs(id, created_unix, scenario, mode, scenario_text, git_rev, handshake_s, virtual_s,
//!   wall_s)`: one row per [`Report`].
//! - `results(id, run_id, variant, repetition, seed, size_bytes, verified, completion_s,
//!   goodput_bps, capacity_bps, efficiency, energy_j, retransmitted_bytes, error, paths,
//!   latency_idle_p50_ms, latency_load_p50_ms, latency_load_p95_ms, latency_load_p99_ms,
//!   probe_loss, rpm)`: one row per [`RunResult`]; `paths` is a JSON array of `{name, bytes,
//!   energy_j}`; the latency columns are `braid_sim::Latency`'s, NULL where not measured.
//! - `samples(id, run_id, variant, repetition, size_bytes, interval_s, throughput_bps,
//!   probe_rtt_s)`: one row per [`RunSamples`]; `throughput_bps` and `probe_rtt_s` (the
//!   latency probe's loaded round trips, infinite for a lost packet; NULL when none) are
//!   BLOBs of little-endian IEEE-754 f64s.
//!
//! Version 1 had neither the latency columns nor `probe_rtt_s`; migrating adds them (NULL
//! in the rows already there), so an older file opens and reads back without latency.
//!
//! Unsigned 64-bit numbers (seeds, sizes, byte counts) are stored as the SQLite integer with
//! the same bits, so seeds above 2^63 read back exactly (and look negative to plain SQL). A
//! NaN is stored as NULL (SQLite has no NaN) and reads back as NaN; infinities are stored as
//! such. The file carries `PRAGMA application_id` = [`APPLICATION_ID`].

mod codec;
mod read;
mod schema;
mod write;

pub use self::schema::{APPLICATION_ID, SCHEMA_VERSION};
use crate::{Error, Result};
use braid_sim::RunResult;
use rusqlite::{Connection, ErrorCode, OpenFlags};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One recorded report, without its results.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRun {
    /// Row id, increasing with every record.
    pub id: i64,
    /// When it was recorded, seconds since the Unix epoch.
    pub created_unix: i64,
    /// Scenario name.
    pub scenario: String,
    /// "sim" or "testbed".
    pub mode: String,
    /// The scenario file's source text.
    pub scenario_text: String,
    /// `git rev-parse --short HEAD` of the code that ran, "-dirty" appended for local changes.
    pub git_rev: String,
    /// Median session set-up time.
    pub handshake_s: Option<f64>,
    /// Virtual time simulated (NaN when not stored).
    pub virtual_s: f64,
    /// Wall-clock time taken (NaN when not stored).
    pub wall_s: f64,
}

/// One transfer read back from the database.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredResult {
    /// The run it belongs to.
    pub run_id: i64,
    /// The transfer, as the simulator or testbed reported it.
    pub result: RunResult,
}

/// Which results [`Store::results`] returns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResultFilter {
    /// Only this run.
    pub run: Option<i64>,
    /// Only runs of this scenario.
    pub scenario: Option<String>,
}

impl ResultFilter {
    /// Every result.
    pub fn all() -> Self {
        Self::default()
    }
    /// The results of one run.
    pub fn run(id: i64) -> Self {
        ResultFilter {
            run: Some(id),
            scenario: None,
        }
    }
    /// The results of every run of a scenario.
    pub fn scenario(name: &str) -> Self {
        ResultFilter {
            run: None,
            scenario: Some(name.to_string()),
        }
    }
}

/// An open results database.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

impl Store {
    /// Opens the database at `path`, creating it (and its schema) if it does not exist and
    /// migrating an older schema. Refuses a file that is not SQLite, an SQLite database of
    /// another program, and a schema newer than [`SCHEMA_VERSION`].
    pub fn open(path: impl AsRef<Path>) -> Result<Store> {
        let path = path.as_ref();
        let conn = Connection::open(path).map_err(|e| classify(path, "open the file", e))?;
        Self::init(conn, path.to_path_buf())
    }

    /// Like [`Store::open`], but the file must exist already: nothing is created.
    pub fn open_existing(path: impl AsRef<Path>) -> Result<Store> {
        let path = path.as_ref();
        if !path.is_file() {
            return Err(Error::NoDatabase {
                path: path.to_path_buf(),
            });
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags)
            .map_err(|e| classify(path, "open the file", e))?;
        Self::init(conn, path.to_path_buf())
    }

    /// A new database in memory (for tests and one-off reports).
    pub fn open_in_memory() -> Result<Store> {
        let path = PathBuf::from(":memory:");
        let conn = Connection::open_in_memory().map_err(|e| classify(&path, "open", e))?;
        Self::init(conn, path)
    }

    fn init(conn: Connection, path: PathBuf) -> Result<Store> {
        let store = Store { conn, path };
        let _ = store.conn.busy_timeout(Duration::from_secs(10));
        store.migrate()?;
        store
            .conn
            .execute_batch("PRAGMA foreign_keys = ON;")
            .map_err(|e| store.err("enable foreign keys", e))?;
        Ok(store)
    }

    /// The file this store reads and writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(super) fn err(&self, action: &str, e: rusqlite::Error) -> Error {
        classify(&self.path, action, e)
    }

    pub(super) fn corrupt(&self, table: &'static str, row: i64, what: impl Into<String>) -> Error {
        Error::CorruptRow {
            path: self.path.clone(),
            table,
            row,
            what: what.into(),
        }
    }

    pub(super) fn foreign(&self, why: impl Into<String>) -> Error {
        Error::ForeignDatabase {
            path: self.path.clone(),
            why: why.into(),
        }
    }
}

/// A "not a database" or "corrupt" SQLite error becomes [`Error::NotADatabase`].
fn classify(path: &Path, action: &str, e: rusqlite::Error) -> Error {
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) | Some(ErrorCode::DatabaseCorrupt) => Error::NotADatabase {
            path: path.to_path_buf(),
            source: e,
        },
        Some(ErrorCode::CannotOpen) => Error::Sqlite {
            path: path.to_path_buf(),
            action: format!("{action} (does its directory exist, and may we write there?)"),
            source: e,
        },
        _ => Error::Sqlite {
            path: path.to_path_buf(),
            action: action.to_string(),
            source: e,
        },
    }
}

/// The git revision of the working tree at `dir`: `git rev-parse --short HEAD`, with "-dirty"
/// appended when `git status --porcelain` lists anything; "unknown" when git is not installed
/// or `dir` is not in a repository. Never writes to the repository.
pub fn git_revision(dir: &Path) -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            // Do not refresh the index: another git command may be running.
            .env("GIT_OPTIONAL_LOCKS", "0")
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let Some(rev) = git(&["rev-parse", "--short", "HEAD"]).filter(|r| !r.is_empty()) else {
        return "unknown".to_string();
    };
    match git(&["status", "--porcelain"]) {
        Some(s) if !s.is_empty() => format!("{rev}-dirty"),
        _ => rev,
    }
}
