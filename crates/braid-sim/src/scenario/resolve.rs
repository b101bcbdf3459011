//! Validation: the `Resolver` that turns the raw tables into a `Scenario`, with the
//! scenario-level checks and the value helpers (units, probabilities, names, trace files).
//!
//! Owns: the top-level keys (`name`, `seed`, `time_limit`, `path_timeout`), the path and
//! variant counts and names, and the shared trace cache. Must not touch: the per-table
//! rules (`path.rs`, `workload.rs`, `variant.rs`) beyond calling them.

use super::raw::{RawScenario, UnitStr};
use super::{PathSpec, Scenario, ScenarioError, VariantSpec, MAX_PATHS};
use crate::time::Nanos;
use crate::trace::{Trace, TraceFormat};
use crate::units::{parse_duration, parse_rate, parse_size};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub(super) struct Resolver<'a> {
    pub(super) file: &'a Path,
    pub(super) traces: HashMap<PathBuf, Arc<Trace>>,
}

pub(super) type R<T> = Result<T, ScenarioError>;

impl Resolver<'_> {
    pub(super) fn err(&self, key: impl Into<String>, message: impl Into<String>) -> ScenarioError {
        ScenarioError::new(self.file, key, message)
    }

    pub(super) fn duration(&self, key: &str, v: &UnitStr) -> R<Nanos> {
        parse_duration(&v.0).map_err(|m| self.err(key, m))
    }

    pub(super) fn opt_duration(&self, key: &str, v: Option<&UnitStr>, default: Nanos) -> R<Nanos> {
        v.map_or(Ok(default), |v| self.duration(key, v))
    }

    pub(super) fn probability(&self, key: &str, v: f64) -> R<f64> {
        if (0.0..=1.0).contains(&v) {
            Ok(v)
        } else {
            Err(self.err(
                key,
                format!("expected a probability between 0 and 1, got {v}"),
            ))
        }
    }

    pub(super) fn name(&self, key: &str, v: Option<String>, what: &str) -> R<String> {
        match v {
            Some(n) if !n.trim().is_empty() => Ok(n),
            Some(_) => Err(self.err(key, format!("{what} name must not be empty"))),
            None => Err(self.err(key, format!("missing required key `name` ({what} name)"))),
        }
    }

    pub(super) fn trace(
        &mut self,
        key: &str,
        rel: &str,
        format: Option<(&str, &str)>,
    ) -> R<Arc<Trace>> {
        let format = match format {
            None => None,
            Some((_, "csv")) => Some(TraceFormat::Csv),
            Some((_, "mahimahi")) => Some(TraceFormat::Mahimahi),
            Some((fkey, other)) => {
                return Err(self.err(
                    fkey,
                    format!("unknown trace format {other:?}; expected \"csv\" (time_s,rate_mbit rows) or \"mahimahi\" (one millisecond timestamp per 1500-byte delivery opportunity); leave it out to detect it"),
                ))
            }
        };
        let base = self.file.parent().unwrap_or(Path::new(""));
        let full = base.join(rel);
        let cache_key = full.join(format!("{format:?}"));
        if let Some(t) = self.traces.get(&cache_key) {
            return Ok(t.clone());
        }
        let t = Arc::new(Trace::load(&full, format).map_err(|m| self.err(key, m))?);
        if t.points().iter().all(|p| p.1 == 0) {
            let msg = format!(
                "{}: expected some rate above 0, but every row is 0",
                full.display()
            );
            return Err(self.err(key, msg));
        }
        self.traces.insert(cache_key, t.clone());
        Ok(t)
    }

    pub(super) fn rate(&self, key: &str, v: &UnitStr) -> R<u64> {
        match parse_rate(&v.0) {
            Ok(0) => Err(self.err(
                key,
                format!("expected a rate greater than 0, got {:?}", v.0),
            )),
            Ok(r) => Ok(r),
            Err(m) => Err(self.err(key, m)),
        }
    }

    pub(super) fn size(&self, key: &str, v: &UnitStr) -> R<u64> {
        match parse_size(&v.0) {
            Ok(0) => Err(self.err(
                key,
                format!("expected a size greater than 0, got {:?}", v.0),
            )),
            Ok(b) => Ok(b),
            Err(m) => Err(self.err(key, m)),
        }
    }

    pub(super) fn scenario(mut self, raw: RawScenario) -> R<Scenario> {
        let name = self.name("name", raw.name, "scenario")?;
        let time_limit =
            self.opt_duration("time_limit", raw.time_limit.as_ref(), 600_000_000_000)?;
        if time_limit == 0 {
            return Err(self.err("time_limit", "must be greater than 0"));
        }
        let path_timeout =
            self.opt_duration("path_timeout", raw.path_timeout.as_ref(), 15_000_000_000)?;
        if path_timeout == 0 {
            return Err(self.err("path_timeout", "must be greater than 0"));
        }
        let n = raw.path.len();
        if n == 0 {
            return Err(self.err("path", "expected 1 to 8 [[path]] tables, found none"));
        }
        if n > MAX_PATHS {
            return Err(self.err(
                "path",
                format!("expected 1 to {MAX_PATHS} [[path]] tables, found {n}"),
            ));
        }
        let mut paths: Vec<PathSpec> = Vec::with_capacity(n);
        for (i, rp) in raw.path.into_iter().enumerate() {
            let p = self.path(i, rp)?;
            if let Some(j) = paths.iter().position(|q| q.name == p.name) {
                return Err(self.err(
                    format!("path[{i}].name"),
                    format!("duplicate path name {:?} (also path[{j}])", p.name),
                ));
            }
            paths.push(p);
        }
        let workload = self.workload(raw.workload)?;
        if raw.variant.is_empty() {
            return Err(self.err(
                "variant",
                "expected at least one [[variant]] table, found none",
            ));
        }
        let mut variants: Vec<VariantSpec> = Vec::with_capacity(raw.variant.len());
        for (i, rv) in raw.variant.into_iter().enumerate() {
            let v = self.variant(i, rv, &paths)?;
            if let Some(j) = variants.iter().position(|w| w.name == v.name) {
                return Err(self.err(
                    format!("variant[{i}].name"),
                    format!("duplicate variant name {:?} (also variant[{j}])", v.name),
                ));
            }
            variants.push(v);
        }
        Ok(Scenario {
            name,
            seed: raw.seed.unwrap_or(1),
            time_limit,
            path_timeout,
            paths,
            workload,
            variants,
            file: self.file.to_path_buf(),
        })
    }
}
