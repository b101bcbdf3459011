//! The database schema: its version, the migrations from each older version, and the
//! checks that refuse a file that is not a braid results database.
//!
//! Owns: `MIGRATIONS`, `SCHEMA_VERSION`, `APPLICATION_ID` and bringing a file up to date.
//! Must not touch: the rows (`write.rs`, `read.rs`).

use super::Store;
use crate::{Error, Result};

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

impl Store {
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
    pub(super) fn migrate(&self) -> Result<()> {
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
}
