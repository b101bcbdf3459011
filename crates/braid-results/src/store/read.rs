//! Reading: runs, results and samples back out of the database, a damaged row reported as
//! such (table, row id, what is wrong) rather than read wrongly.
//!
//! Owns: the SELECT statements and turning rows into `StoredRun`, `StoredResult` and
//! `RunSamples`. Must not touch: the schema (`schema.rs`) or how a value is encoded
//! (`codec.rs`).

use super::codec::{bits_u64, decode_samples, nan_if_null, PathJson};
use super::{ResultFilter, Store, StoredResult, StoredRun};
use crate::{Result, RunSamples};
use braid_sim::{Latency, PathResult, RunResult};
use rusqlite::types::FromSql;
use rusqlite::{params, Row};

impl Store {
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
