//! The `[workload.connections]` table of connection-level runs (`connlevel.rs`): its
//! classes, arrival window and time step.
//!
//! Owns: the table's keys, defaults and validation, and the resolved `ConnWorkload`. Must
//! not touch: the connection-level model that runs it (`connlevel.rs`).

use super::ScenarioError;
use crate::time::Nanos;
use crate::units::{parse_duration, parse_size};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One application's connections.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConnClass {
    pub name: String,
    /// Mean bytes per connection.
    pub size: f64,
    /// Connections opened per second.
    pub per_s: f64,
}

/// The `[workload.connections]` table, resolved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConnWorkload {
    /// Connections open during `[0, arrivals_for)`.
    pub arrivals_for: Nanos,
    /// The flow model's time step.
    pub step: Nanos,
    /// The fraction of connections whose server is OPERETTA-enabled (paper 003's gamma, as
    /// a fraction): their bytes may be split over every interface (packet-based).
    pub gamma: f64,
    pub classes: Vec<ConnClass>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename = "ConnectionsTable")]
pub(crate) struct RawConnections {
    arrivals_for: Option<String>,
    step: Option<String>,
    gamma: Option<f64>,
    #[serde(default)]
    class: Vec<RawClass>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename = "ClassTable")]
pub(crate) struct RawClass {
    name: Option<String>,
    size: Option<String>,
    per_s: Option<f64>,
}

impl RawConnections {
    /// Validates the table (`key` is `workload.connections`).
    pub(crate) fn resolve(self, file: &Path, key: &str) -> Result<ConnWorkload, ScenarioError> {
        let err = |k: String, m: String| ScenarioError::new(file, k, m);
        let dur = |k: &str, v: &Option<String>, default: &str| {
            let v = v.as_deref().unwrap_or(default);
            match parse_duration(v) {
                Ok(0) => Err(err(
                    format!("{key}.{k}"),
                    format!("expected more than 0, got {v:?}"),
                )),
                Ok(d) => Ok(d),
                Err(m) => Err(err(format!("{key}.{k}"), m)),
            }
        };
        let arrivals_for = dur("arrivals_for", &self.arrivals_for, "300s")?;
        let step = dur("step", &self.step, "10ms")?;
        let gamma = self.gamma.unwrap_or(0.0);
        if !(0.0..=1.0).contains(&gamma) {
            return Err(err(
                format!("{key}.gamma"),
                format!("expected a fraction of connections in [0, 1] (0.25 for the paper's 25 %), got {gamma}"),
            ));
        }
        if self.class.is_empty() {
            return Err(err(
                format!("{key}.class"),
                "expected at least one [[workload.connections.class]] with `size` and `per_s`"
                    .into(),
            ));
        }
        let mut classes = Vec::new();
        for (i, c) in self.class.into_iter().enumerate() {
            let k = format!("{key}.class[{i}]");
            let size = c.size.ok_or_else(|| {
                err(
                    format!("{k}.size"),
                    "missing `size`, such as \"22KB\"".into(),
                )
            })?;
            let size = match parse_size(&size) {
                Ok(0) => {
                    return Err(err(
                        format!("{k}.size"),
                        "expected more than 0 bytes".into(),
                    ))
                }
                Ok(b) => b as f64,
                Err(m) => return Err(err(format!("{k}.size"), m)),
            };
            let per_s = c
                .per_s
                .ok_or_else(|| err(format!("{k}.per_s"), "missing `per_s`".into()))?;
            if !per_s.is_finite() || per_s <= 0.0 || per_s > 1e4 {
                return Err(err(
                    format!("{k}.per_s"),
                    format!("expected connections per second in (0, 10000], got {per_s}"),
                ));
            }
            let name = c.name.unwrap_or_else(|| format!("class{i}"));
            classes.push(ConnClass { name, size, per_s });
        }
        Ok(ConnWorkload {
            arrivals_for,
            step,
            gamma,
            classes,
        })
    }
}
