//! Writing: recording a report with its results and samples in one transaction, and
//! deleting a run.
//!
//! Owns: the INSERT and DELETE statements. Must not touch: the schema (`schema.rs`) or
//! how a value is encoded (`codec.rs`).

use super::codec::{encode_samples, u64_bits, JsonF64, PathJson};
use super::Store;
use crate::{Result, RunSamples};
use braid_sim::{Report, RunResult};
use rusqlite::{params, Transaction};

/// Seconds since the Unix epoch now (0 if the clock is before 1970).
fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl Store {
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
        self.insert_results(&tx, run_id, &report.results)?;
        self.insert_samples(&tx, run_id, samples)?;
        tx.commit().map_err(e)?;
        Ok(run_id)
    }

    /// One `results` row per result of run `run_id`.
    fn insert_results(
        &self,
        tx: &Transaction<'_>,
        run_id: i64,
        results: &[RunResult],
    ) -> Result<()> {
        let action = "record the report";
        let e = |e| self.err(action, e);
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
        for r in results {
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
        Ok(())
    }

    /// One `samples` row per series of run `run_id`.
    fn insert_samples(
        &self,
        tx: &Transaction<'_>,
        run_id: i64,
        samples: &[RunSamples],
    ) -> Result<()> {
        let e = |e| self.err("record the report", e);
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
        Ok(())
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
}
