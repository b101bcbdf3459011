//! The results database: one SQLite file holding every recorded run.
//!
//! Owns: the schema and its migrations, writing a [`Report`] (with its scenario source, the
//! git revision and throughput samples) in one transaction, and reading it back. Must not
//! touch: statistics, plots, HTML, how results are made.
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

use crate::{Error, Result, RunSamples};
use braid_sim::{Latency, PathResult, Report, RunResult};
use rusqlite::types::FromSql;
use rusqlite::{params, Connection, ErrorCode, OpenFlags, Row};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The schema version this build writes and the newest it reads.
pub const SCHEMA_VERSION: i64 = 2;

/// `PRAGMA application_id` of a braid results database ("brdR").
pub const APPLICATION_ID: i32 = 0x6272_6452;

/// Each migration takes the schema from version `index` to `index + 1`.
const MIGRATIONS: &[&str] = &[
    // 0 -> 1
    "CREATE TABLE schema_version (version INTEGER NOT NULL);
     CREATE TABLE runs (
         id INTEGER PRIMARY KEY,
         created_unix INTEGER NOT NULL,
         scenario TEXT NOT NULL,
         mode TEXT NOT NULL,
         scenario_text TEXT NOT NULL,
         git_rev TEXT NOT NULL,
         handshake_s REAL,
         virtual_s REAL,
         wall_s REAL
     );
     CREATE TABLE results (
         id INTEGER PRIMARY KEY,
         run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
         variant TEXT NOT NULL,
         repetition INTEGER NOT NULL,
         seed INTEGER NOT NULL,
         size_bytes INTEGER NOT NULL,
         verified INTEGER NOT NULL,
         completion_s REAL,
         goodput_bps REAL,
         capacity_bps REAL,
         efficiency REAL,
         energy_j REAL,
         retransmitted_bytes INTEGER NOT NULL,
         error TEXT,
         paths TEXT NOT NULL
     );
     CREATE INDEX results_run ON results(run_id);
     CREATE TABLE samples (
         id INTEGER PRIMARY KEY,
         run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
         variant TEXT NOT NULL,
         repetition INTEGER NOT NULL,
         size_bytes INTEGER NOT NULL,
         interval_s REAL,
         throughput_bps BLOB NOT NULL
     );
     CREATE INDEX samples_run ON samples(run_id);
     INSERT INTO schema_version (version) VALUES (0);",
    // 1 -> 2: latency (issue 23).
    "ALTER TABLE results ADD COLUMN latency_idle_p50_ms REAL;
     ALTER TABLE results ADD COLUMN latency_load_p50_ms REAL;
     ALTER TABLE results ADD COLUMN latency_load_p95_ms REAL;
     ALTER TABLE results ADD COLUMN latency_load_p99_ms REAL;
     ALTER TABLE results ADD COLUMN probe_loss REAL;
     ALTER TABLE results ADD COLUMN rpm REAL;
     ALTER TABLE samples ADD COLUMN probe_rtt_s BLOB;",
];

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

/// A float in JSON: a number when finite, else "NaN", "inf" or "-inf" (JSON has no such
/// numbers).
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum JsonF64 {
    Num(f64),
    Text(String),
}

impl JsonF64 {
    fn from_f64(v: f64) -> Self {
        if v.is_finite() {
            JsonF64::Num(v)
        } else if v.is_nan() {
            JsonF64::Text("NaN".into())
        } else if v > 0.0 {
            JsonF64::Text("inf".into())
        } else {
            JsonF64::Text("-inf".into())
        }
    }
    fn to_f64(&self) -> Option<f64> {
        match self {
            JsonF64::Num(v) => Some(*v),
            JsonF64::Text(t) => match t.as_str() {
                "NaN" => Some(f64::NAN),
                "inf" => Some(f64::INFINITY),
                "-inf" => Some(f64::NEG_INFINITY),
                _ => None,
            },
        }
    }
}

#[derive(Serialize, Deserialize)]
struct PathJson {
    name: String,
    bytes: u64,
    energy_j: JsonF64,
}

/// Seconds since the Unix epoch now (0 if the clock is before 1970).
fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// NULL reads back as NaN.
fn nan_if_null(v: Option<f64>) -> f64 {
    v.unwrap_or(f64::NAN)
}

/// Bits of a u64 as the SQLite integer.
fn u64_bits(v: u64) -> i64 {
    v as i64
}

/// The u64 with the bits of a stored integer.
fn bits_u64(v: i64) -> u64 {
    v as u64
}

/// Samples as a BLOB of little-endian f64s.
fn encode_samples(values: &[f64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn decode_samples(blob: &[u8]) -> Option<Vec<f64>> {
    let chunks = blob.chunks_exact(8);
    if !chunks.remainder().is_empty() {
        return None;
    }
    Some(
        chunks
            .map(|c| {
                let mut b = [0u8; 8];
                b.copy_from_slice(c);
                f64::from_le_bytes(b)
            })
            .collect(),
    )
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

    fn err(&self, action: &str, e: rusqlite::Error) -> Error {
        classify(&self.path, action, e)
    }

    fn corrupt(&self, table: &'static str, row: i64, what: impl Into<String>) -> Error {
        Error::CorruptRow {
            path: self.path.clone(),
            table,
            row,
            what: what.into(),
        }
    }

    fn foreign(&self, why: impl Into<String>) -> Error {
        Error::ForeignDatabase {
            path: self.path.clone(),
            why: why.into(),
        }
    }

    /// The schema version in the file (0 for an empty database).
    pub fn schema_version(&self) -> Result<i64> {
        let has_table: bool = self
            .conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map_err(|e| self.err("read the list of tables", e))?
            > 0;
        if !has_table {
            return Ok(0);
        }
        let mut stmt = self
            .conn
            .prepare("SELECT version FROM schema_version")
            .map_err(|e| self.foreign(format!("its schema_version table cannot be read: {e}")))?;
        let versions: Vec<rusqlite::Result<i64>> = stmt
            .query_map([], |r| r.get::<_, i64>(0))
            .map_err(|e| self.err("read the schema version", e))?
            .collect();
        match versions.as_slice() {
            [Ok(v)] => Ok(*v),
            [] => Err(self.foreign("its schema_version table is empty")),
            [Err(e)] => Err(self.foreign(format!("its schema version is not a number: {e}"))),
            _ => Err(self.foreign("its schema_version table has more than one row")),
        }
    }

    /// Brings the schema to [`SCHEMA_VERSION`].
    fn migrate(&self) -> Result<()> {
        let app_id: i32 = self
            .conn
            .query_row("PRAGMA application_id", [], |r| r.get(0))
            .map_err(|e| self.err("read the file header", e))?;
        if app_id != 0 && app_id != APPLICATION_ID {
            return Err(self.foreign(format!(
                "its application id is {app_id:#010x}, not braid's {APPLICATION_ID:#010x}"
            )));
        }
        let version = self.schema_version()?;
        if version == 0 {
            let tables = self.tables()?;
            if !tables.is_empty() {
                return Err(self.foreign(format!(
                    "it has the tables {} but no schema_version table",
                    tables.join(", ")
                )));
            }
        }
        if version > SCHEMA_VERSION {
            return Err(Error::FutureSchema {
                path: self.path.clone(),
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        if version < 0 {
            return Err(self.foreign(format!("its schema version is {version}")));
        }
        for (from, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            let to = from as i64 + 1;
            let action = format!("migrate the schema from version {from} to {to}");
            let tx = self
                .conn
                .unchecked_transaction()
                .map_err(|e| self.err(&action, e))?;
            tx.execute_batch(sql).map_err(|e| self.err(&action, e))?;
            tx.execute("UPDATE schema_version SET version = ?1", [to])
                .map_err(|e| self.err(&action, e))?;
            tx.execute_batch(&format!("PRAGMA application_id = {APPLICATION_ID};"))
                .map_err(|e| self.err(&action, e))?;
            tx.commit().map_err(|e| self.err(&action, e))?;
        }
        Ok(())
    }

    fn tables(&self) -> Result<Vec<String>> {
        let mut stmt = self
            .conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .map_err(|e| self.err("read the list of tables", e))?;
        let names = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|e| self.err("read the list of tables", e))?;
        Ok(names)
    }

    /// Records a report, with the scenario's TOML source, the git revision of the code that
    /// ran and (from the testbed) throughput samples, in one transaction. Returns the run id.
    pub fn record(
        &self,
        report: &Report,
        scenario_text: &str,
        git_rev: &str,
        samples: &[RunSamples],
    ) -> Result<i64> {
        self.record_at(report, scenario_text, git_rev, samples, now_unix())
    }

    /// [`Store::record`] with the recording time given (seconds since the Unix epoch).
    pub fn record_at(
        &self,
        report: &Report,
        scenario_text: &str,
        git_rev: &str,
        samples: &[RunSamples],
        created_unix: i64,
    ) -> Result<i64> {
        let action = "record the report";
        let e = |e| self.err(action, e);
        let tx = self.conn.unchecked_transaction().map_err(e)?;
        tx.execute(
            "INSERT INTO runs (created_unix, scenario, mode, scenario_text, git_rev, handshake_s,
                               virtual_s, wall_s)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                created_unix,
                report.scenario,
                report.mode,
                scenario_text,
                git_rev,
                report.handshake_s,
                report.virtual_s,
                report.wall_s
            ],
        )
        .map_err(e)?;
        let run_id = tx.last_insert_rowid();
        {
            let mut ins = tx
                .prepare(
                    "INSERT INTO results (run_id, variant, repetition, seed, size_bytes, verified,
                         completion_s, goodput_bps, capacity_bps, efficiency, energy_j,
                         retransmitted_bytes, error, paths, latency_idle_p50_ms,
                         latency_load_p50_ms, latency_load_p95_ms, latency_load_p99_ms,
                         probe_loss, rpm)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15,
                             ?16, ?17, ?18, ?19, ?20)",
                )
                .map_err(e)?;
            for r in &report.results {
                let paths: Vec<PathJson> = r
                    .paths
                    .iter()
                    .map(|p| PathJson {
                        name: p.name.clone(),
                        bytes: p.bytes,
                        energy_j: JsonF64::from_f64(p.energy_j),
                    })
                    .collect();
                let paths = serde_json::to_string(&paths).map_err(|je| {
                    self.err(
                        action,
                        rusqlite::Error::ToSqlConversionFailure(Box::new(je)),
                    )
                })?;
                ins.execute(params![
                    run_id,
                    r.variant,
                    r.repetition,
                    u64_bits(r.seed),
                    u64_bits(r.size_bytes),
                    r.verified,
                    r.completion_s,
                    r.goodput_bps,
                    r.capacity_bps,
                    r.efficiency,
                    r.energy_j,
                    u64_bits(r.retransmitted_bytes),
                    r.error,
                    paths,
                    r.latency.latency_idle_p50_ms,
                    r.latency.latency_load_p50_ms,
                    r.latency.latency_load_p95_ms,
                    r.latency.latency_load_p99_ms,
                    r.latency.probe_loss,
                    r.latency.rpm
                ])
                .map_err(e)?;
            }
            let mut ins = tx
                .prepare(
                    "INSERT INTO samples (run_id, variant, repetition, size_bytes, interval_s,
                                          throughput_bps, probe_rtt_s)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .map_err(e)?;
            for s in samples {
                ins.execute(params![
                    run_id,
                    s.variant,
                    s.repetition,
                    u64_bits(s.size_bytes),
                    s.interval_s,
                    encode_samples(&s.throughput_bps),
                    (!s.probe_rtt_s.is_empty()).then(|| encode_samples(&s.probe_rtt_s))
                ])
                .map_err(e)?;
            }
        }
        tx.commit().map_err(e)?;
        Ok(run_id)
    }

    /// Every run, oldest first.
    pub fn runs(&self) -> Result<Vec<StoredRun>> {
        self.query_runs("", [])
    }

    /// One run, if it exists.
    pub fn run(&self, id: i64) -> Result<Option<StoredRun>> {
        Ok(self.query_runs("WHERE id = ?1", [id])?.into_iter().next())
    }

    fn query_runs<P: rusqlite::Params>(&self, filter: &str, p: P) -> Result<Vec<StoredRun>> {
        let action = "read the runs";
        let sql = format!(
            "SELECT id, created_unix, scenario, mode, scenario_text, git_rev, handshake_s,
                    virtual_s, wall_s
             FROM runs {filter} ORDER BY id"
        );
        let mut stmt = self.conn.prepare(&sql).map_err(|e| self.err(action, e))?;
        let mut rows = stmt.query(p).map_err(|e| self.err(action, e))?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(|e| self.err(action, e))? {
            let id: i64 = self.col(row, 0, "runs", 0)?;
            let c = Cells {
                store: self,
                row,
                table: "runs",
                id,
            };
            out.push(StoredRun {
                id,
                created_unix: c.get(1)?,
                scenario: c.get(2)?,
                mode: c.get(3)?,
                scenario_text: c.get(4)?,
                git_rev: c.get(5)?,
                handshake_s: c.get(6)?,
                virtual_s: nan_if_null(c.get(7)?),
                wall_s: nan_if_null(c.get(8)?),
            });
        }
        Ok(out)
    }

    /// Results matching the filter, in the order they were recorded.
    pub fn results(&self, filter: &ResultFilter) -> Result<Vec<StoredResult>> {
        let action = "read the results";
        let mut stmt = self
            .conn
            .prepare(
                "SELECT r.id, r.run_id, r.variant, r.repetition, r.seed, r.size_bytes, r.verified,
                        r.completion_s, r.goodput_bps, r.capacity_bps, r.efficiency, r.energy_j,
                        r.retransmitted_bytes, r.error, r.paths, r.latency_idle_p50_ms,
                        r.latency_load_p50_ms, r.latency_load_p95_ms, r.latency_load_p99_ms,
                        r.probe_loss, r.rpm
                 FROM results r JOIN runs u ON u.id = r.run_id
                 WHERE (?1 IS NULL OR r.run_id = ?1) AND (?2 IS NULL OR u.scenario = ?2)
                 ORDER BY r.run_id, r.id",
            )
            .map_err(|e| self.err(action, e))?;
        let mut rows = stmt
            .query(params![filter.run, filter.scenario])
            .map_err(|e| self.err(action, e))?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(|e| self.err(action, e))? {
            let id: i64 = self.col(row, 0, "results", 0)?;
            let c = Cells {
                store: self,
                row,
                table: "results",
                id,
            };
            let repetition: i64 = c.get(3)?;
            let repetition = u32::try_from(repetition)
                .map_err(|_| self.corrupt("results", id, format!("repetition {repetition}")))?;
            let paths_json: String = c.get(14)?;
            let paths: Vec<PathJson> = serde_json::from_str(&paths_json)
                .map_err(|je| self.corrupt("results", id, format!("paths JSON: {je}")))?;
            let paths = paths
                .into_iter()
                .map(|p| {
                    let energy_j = p.energy_j.to_f64().ok_or_else(|| {
                        self.corrupt("results", id, "a path's energy_j is not a number")
                    })?;
                    Ok(PathResult {
                        name: p.name,
                        bytes: p.bytes,
                        energy_j,
                        ..Default::default()
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            out.push(StoredResult {
                run_id: c.get(1)?,
                result: RunResult {
                    variant: c.get(2)?,
                    repetition,
                    seed: bits_u64(c.get(4)?),
                    size_bytes: bits_u64(c.get(5)?),
                    verified: c.get(6)?,
                    completion_s: nan_if_null(c.get(7)?),
                    goodput_bps: nan_if_null(c.get(8)?),
                    capacity_bps: nan_if_null(c.get(9)?),
                    efficiency: nan_if_null(c.get(10)?),
                    energy_j: nan_if_null(c.get(11)?),
                    retransmitted_bytes: bits_u64(c.get(12)?),
                    paths,
                    latency: Latency {
                        latency_idle_p50_ms: c.get(15)?,
                        latency_load_p50_ms: c.get(16)?,
                        latency_load_p95_ms: c.get(17)?,
                        latency_load_p99_ms: c.get(18)?,
                        probe_loss: c.get(19)?,
                        rpm: c.get(20)?,
                    },
                    error: c.get(13)?,
                },
            });
        }
        Ok(out)
    }

    /// The throughput samples of a run, in the order they were recorded.
    pub fn samples(&self, run_id: i64) -> Result<Vec<RunSamples>> {
        let action = "read the samples";
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, variant, repetition, size_bytes, interval_s, throughput_bps,
                        probe_rtt_s
                 FROM samples WHERE run_id = ?1 ORDER BY id",
            )
            .map_err(|e| self.err(action, e))?;
        let mut rows = stmt.query([run_id]).map_err(|e| self.err(action, e))?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(|e| self.err(action, e))? {
            let id: i64 = self.col(row, 0, "samples", 0)?;
            let c = Cells {
                store: self,
                row,
                table: "samples",
                id,
            };
            let repetition: i64 = c.get(2)?;
            let repetition = u32::try_from(repetition)
                .map_err(|_| self.corrupt("samples", id, format!("repetition {repetition}")))?;
            let blob: Vec<u8> = c.get(5)?;
            let values = decode_samples(&blob).ok_or_else(|| {
                self.corrupt(
                    "samples",
                    id,
                    format!(
                        "throughput_bps is {} bytes, not a multiple of 8",
                        blob.len()
                    ),
                )
            })?;
            let probe: Option<Vec<u8>> = c.get(6)?;
            let probe = decode_samples(probe.as_deref().unwrap_or_default()).ok_or_else(|| {
                self.corrupt("samples", id, "probe_rtt_s is not a multiple of 8 bytes")
            })?;
            out.push(RunSamples {
                variant: c.get(1)?,
                repetition,
                size_bytes: bits_u64(c.get(3)?),
                interval_s: nan_if_null(c.get(4)?),
                throughput_bps: values,
                probe_rtt_s: probe,
            });
        }
        Ok(out)
    }

    /// Column `i` of a row, a wrong type reported as a damaged row.
    fn col<T: FromSql>(&self, row: &Row<'_>, i: usize, table: &'static str, id: i64) -> Result<T> {
        row.get::<_, T>(i).map_err(|e| match e {
            rusqlite::Error::InvalidColumnType(_, name, ty) => {
                self.corrupt(table, id, format!("column {name} holds an unexpected {ty}"))
            }
            rusqlite::Error::FromSqlConversionFailure(_, ty, err) => {
                self.corrupt(table, id, format!("a {ty} column cannot be read: {err}"))
            }
            rusqlite::Error::IntegralValueOutOfRange(_, v) => {
                self.corrupt(table, id, format!("integer {v} is out of range"))
            }
            other => self.err("read a row", other),
        })
    }

    /// Deletes a run with its results and samples. Returns whether it existed.
    pub fn delete_run(&self, id: i64) -> Result<bool> {
        let action = "delete a run";
        let tx = self
            .conn
            .unchecked_transaction()
            .map_err(|e| self.err(action, e))?;
        for sql in [
            "DELETE FROM samples WHERE run_id = ?1",
            "DELETE FROM results WHERE run_id = ?1",
        ] {
            tx.execute(sql, [id]).map_err(|e| self.err(action, e))?;
        }
        let n = tx
            .execute("DELETE FROM runs WHERE id = ?1", [id])
            .map_err(|e| self.err(action, e))?;
        tx.commit().map_err(|e| self.err(action, e))?;
        Ok(n > 0)
    }

    /// The latest run of each (scenario, mode), ordered by scenario name then mode.
    pub fn latest_runs(&self) -> Result<Vec<StoredRun>> {
        let ids: Vec<i64> = {
            let action = "read the latest runs";
            let mut stmt = self
                .conn
                .prepare("SELECT max(id) FROM runs GROUP BY scenario, mode ORDER BY scenario, mode")
                .map_err(|e| self.err(action, e))?;
            let ids = stmt
                .query_map([], |r| r.get::<_, i64>(0))
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(|e| self.err(action, e))?;
            ids
        };
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(r) = self.run(id)? {
                out.push(r);
            }
        }
        Ok(out)
    }
}

/// The cells of one row, a wrong type reported as a damaged row.
struct Cells<'a, 'r> {
    store: &'a Store,
    row: &'a Row<'r>,
    table: &'static str,
    id: i64,
}

impl Cells<'_, '_> {
    fn get<T: FromSql>(&self, i: usize) -> Result<T> {
        self.store.col(self.row, i, self.table, self.id)
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
