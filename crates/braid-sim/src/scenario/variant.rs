//! Resolving a `[[variant]]` table: its paths, standby paths, alpha, keepalive and the
//! scheduler, controller and super-aggregation switches and packet protection with their
//! defaults.
//!
//! Owns: the variant rules and defaults. Must not touch: whether a scheduler or controller
//! name exists (the runner checks those).

use super::raw::{RawVariant, UnitStr};
use super::resolve::{Resolver, R};
use super::{PathSpec, VariantKind, VariantSpec};
use crate::time::Nanos;

impl Resolver<'_> {
    pub(super) fn variant(&self, i: usize, v: RawVariant, paths: &[PathSpec]) -> R<VariantSpec> {
        let k = format!("variant[{i}]");
        let name = self.name(&format!("{k}.name"), v.name, "variant")?;
        let idx = self.variant_paths(&k, v.paths, paths)?;
        let alpha = match v.alpha {
            None => 1.0,
            Some(a) if (0.0..=1.0).contains(&a) => a,
            Some(a) => {
                return Err(self.err(
                    format!("{k}.alpha"),
                    format!(
                        "expected a number from 0 (least energy) to 1 (most throughput), got {a}"
                    ),
                ))
            }
        };
        let standby = self.standby(&k, v.standby.unwrap_or_default(), &idx, paths)?;
        let keepalive = self.keepalive(&k, v.keepalive.as_ref())?;
        // A variant that names neither a scheduler nor a controller runs what `braid agent`
        // runs by default (`Config::default()`, switches included); one that names either
        // gets exactly that, with the super-aggregation switches off unless it sets them or
        // names `super`.
        let default = braid_core::Config::default();
        let named = v.scheduler.is_some() || v.cc.is_some();
        let scheduler = v.scheduler.unwrap_or_else(|| default.scheduler.to_string());
        let all_on = scheduler == "super";
        let switch = |set: Option<bool>, agent_default: bool| {
            set.unwrap_or(if named { all_on } else { agent_default })
        };
        let kind = v.kind.unwrap_or_default();
        // A kernel stack left unnamed runs the kernel's own default, CUBIC; braid's default
        // controller exists only in braid.
        let default_cc = match kind {
            VariantKind::Braid => default.cc.to_string(),
            _ => "cubic".to_string(),
        };
        Ok(VariantSpec {
            name,
            kind,
            scheduler,
            cc: v.cc.unwrap_or(default_cc),
            paths: idx,
            tail_reinjection: v.tail_reinjection.unwrap_or(default.tail_reinjection),
            alpha,
            ack_offload: switch(v.ack_offload, default.ack_offload),
            blackout_freeze: switch(v.blackout_freeze, default.blackout_freeze),
            loss_recovery: switch(v.loss_recovery, default.loss_recovery),
            ack_frequency: v.ack_frequency.unwrap_or(default.ack_frequency),
            standby,
            keepalive,
            protection: v.protection.unwrap_or(false),
        })
    }

    /// The variant's paths (every path when it names none), as indices into `paths`.
    fn variant_paths(
        &self,
        k: &str,
        list: Option<Vec<String>>,
        paths: &[PathSpec],
    ) -> R<Vec<usize>> {
        let idx = match list {
            None => (0..paths.len()).collect(),
            Some(list) => {
                if list.is_empty() {
                    return Err(self.err(
                        format!("{k}.paths"),
                        "expected at least one path name, got an empty list",
                    ));
                }
                let mut idx: Vec<usize> = Vec::with_capacity(list.len());
                for n in &list {
                    let Some(j) = paths.iter().position(|p| &p.name == n) else {
                        let known: Vec<String> =
                            paths.iter().map(|p| format!("{:?}", p.name)).collect();
                        return Err(self.err(
                            format!("{k}.paths"),
                            format!("no path named {n:?}; the paths are {}", known.join(", ")),
                        ));
                    };
                    if idx.contains(&j) {
                        return Err(
                            self.err(format!("{k}.paths"), format!("path {n:?} is listed twice"))
                        );
                    }
                    idx.push(j);
                }
                idx
            }
        };
        Ok(idx)
    }

    /// The variant's standby paths, each one of its own paths (`idx`), at least one left
    /// active.
    fn standby(
        &self,
        k: &str,
        list: Vec<String>,
        idx: &[usize],
        paths: &[PathSpec],
    ) -> R<Vec<usize>> {
        let mut standby: Vec<usize> = Vec::new();
        for n in list {
            let Some(j) = paths
                .iter()
                .position(|p| p.name == n)
                .filter(|j| idx.contains(j))
            else {
                let mine: Vec<String> = idx
                    .iter()
                    .map(|&j| format!("{:?}", paths[j].name))
                    .collect();
                return Err(self.err(
                    format!("{k}.standby"),
                    format!(
                        "{n:?} is not one of this variant's paths ({}); list only paths the variant uses",
                        mine.join(", ")
                    ),
                ));
            };
            if standby.contains(&j) {
                return Err(self.err(
                    format!("{k}.standby"),
                    format!("path {n:?} is listed twice"),
                ));
            }
            standby.push(j);
        }
        if standby.len() == idx.len() {
            return Err(self.err(
                format!("{k}.standby"),
                "every path of the variant is on standby; leave at least one active (standby \
                 paths carry data only when no active path works)",
            ));
        }
        Ok(standby)
    }

    /// The keepalive interval, if the variant sets one (more than 0).
    fn keepalive(&self, k: &str, keepalive: Option<&UnitStr>) -> R<Option<Nanos>> {
        let keepalive = match keepalive {
            Some(u) => {
                let d = self.duration(&format!("{k}.keepalive"), u)?;
                if d == 0 {
                    return Err(self.err(
                        format!("{k}.keepalive"),
                        "a keepalive interval must be more than 0".to_string(),
                    ));
                }
                Some(d)
            }
            None => None,
        };
        Ok(keepalive)
    }
}
