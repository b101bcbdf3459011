//! The raw scenario file format: the TOML tables exactly as written, before validation.
//!
//! Owns: the serde shapes of the tables (`[[path]]`, `[path.up]`, `[workload]`,
//! `[[variant]]`, ...) and which keys each accepts (unknown keys are refused here).
//! Must not touch: defaults, units or validation (`resolve.rs` and its siblings turn these
//! into the resolved types).

use super::connections::RawConnections;
use super::{BurstSpec, Direction, EnergySpec, VariantKind};
use serde::{Deserialize, Deserializer};
use std::fmt;

/// A string that carries a unit, like "10ms"; converted with `units.rs` during resolution.
#[derive(Debug, Clone)]
pub(super) struct UnitStr(pub(super) String);

impl<'de> Deserialize<'de> for UnitStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = UnitStr;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(r#"a quoted value with a unit, such as "10ms", "50Mbit" or "64KB""#)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<UnitStr, E> {
                Ok(UnitStr(v.to_string()))
            }
        }
        d.deserialize_str(V)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename = "Scenario")]
pub(super) struct RawScenario {
    pub(super) name: Option<String>,
    pub(super) seed: Option<u64>,
    pub(super) time_limit: Option<UnitStr>,
    pub(super) path_timeout: Option<UnitStr>,
    #[serde(default)]
    pub(super) path: Vec<RawPath>,
    pub(super) workload: Option<RawWorkload>,
    #[serde(default)]
    pub(super) variant: Vec<RawVariant>,
    /// Sweeps: checked and expanded by `sweep.rs`, ignored here.
    #[allow(dead_code)]
    pub(super) sweep: Option<toml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename = "PathTable")]
pub(super) struct RawPath {
    pub(super) name: Option<String>,
    pub(super) rate: Option<UnitStr>,
    pub(super) delay: Option<UnitStr>,
    pub(super) jitter: Option<UnitStr>,
    pub(super) loss: Option<f64>,
    pub(super) duplicate: Option<f64>,
    pub(super) queue: Option<UnitStr>,
    pub(super) trace: Option<String>,
    pub(super) trace_format: Option<String>,
    pub(super) burst: Option<BurstSpec>,
    pub(super) half_duplex: Option<bool>,
    pub(super) frame_overhead: Option<UnitStr>,
    pub(super) wifi: Option<String>,
    pub(super) rate_control: Option<String>,
    pub(super) frame_error: Option<f64>,
    #[serde(default)]
    pub(super) blackouts: Vec<RawBlackout>,
    pub(super) blackout_every: Option<UnitStr>,
    pub(super) blackout_duration: Option<UnitStr>,
    pub(super) up: Option<RawDir>,
    pub(super) down: Option<RawDir>,
    pub(super) energy: Option<EnergySpec>,
    pub(super) rate_hint: Option<UnitStr>,
}

/// `[path.up]` / `[path.down]`: the per-direction keys.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename = "DirectionTable")]
pub(super) struct RawDir {
    pub(super) frame_error: Option<f64>,
    pub(super) rate: Option<UnitStr>,
    pub(super) delay: Option<UnitStr>,
    pub(super) jitter: Option<UnitStr>,
    pub(super) loss: Option<f64>,
    pub(super) duplicate: Option<f64>,
    pub(super) queue: Option<UnitStr>,
    pub(super) trace: Option<String>,
    pub(super) trace_format: Option<String>,
    pub(super) burst: Option<BurstSpec>,
    /// Blackouts of this direction only (beside the path's, which darken both).
    #[serde(default)]
    pub(super) blackouts: Vec<RawBlackout>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename = "Blackout")]
pub(super) struct RawBlackout {
    pub(super) at: Option<UnitStr>,
    pub(super) duration: Option<UnitStr>,
}

#[derive(Deserialize, Clone, Copy, PartialEq)]
#[serde(rename_all = "lowercase")]
pub(super) enum WorkloadKind {
    Bulk,
    Sizes,
    Connections,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename = "WorkloadTable")]
pub(super) struct RawWorkload {
    pub(super) kind: Option<WorkloadKind>,
    pub(super) direction: Option<Direction>,
    pub(super) size: Option<UnitStr>,
    pub(super) sizes: Option<Vec<UnitStr>>,
    pub(super) repetitions: Option<u32>,
    pub(super) session: Option<String>,
    pub(super) gap: Option<UnitStr>,
    pub(super) probe: Option<bool>,
    pub(super) reverse: Option<UnitStr>,
    pub(super) connections: Option<RawConnections>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename = "VariantTable")]
pub(super) struct RawVariant {
    pub(super) name: Option<String>,
    pub(super) kind: Option<VariantKind>,
    pub(super) scheduler: Option<String>,
    pub(super) cc: Option<String>,
    pub(super) paths: Option<Vec<String>>,
    pub(super) tail_reinjection: Option<bool>,
    pub(super) alpha: Option<f64>,
    pub(super) ack_offload: Option<bool>,
    pub(super) blackout_freeze: Option<bool>,
    pub(super) loss_recovery: Option<bool>,
    pub(super) ack_frequency: Option<bool>,
    pub(super) standby: Option<Vec<String>>,
    pub(super) keepalive: Option<UnitStr>,
    pub(super) protection: Option<bool>,
}
