//! Resolving the `[workload]` table: the transfer kind and sizes, repetitions, shared or
//! fresh sessions, the probe and the reverse transfer.
//!
//! Owns: the workload rules. Must not touch: the `[workload.connections]` table's own keys
//! (`connections.rs`), or how transfers run (`runner`).

use super::connections::{ConnWorkload, RawConnections};
use super::raw::{RawWorkload, WorkloadKind};
use super::resolve::{Resolver, R};
use super::{Direction, Workload};
use crate::units::parse_duration;

impl Resolver<'_> {
    pub(super) fn workload(&self, w: Option<RawWorkload>) -> R<Workload> {
        let mut w = w.ok_or_else(|| self.err("workload", "missing the [workload] table"))?;
        let connections = self.connections(w.kind, w.connections.take())?;
        let kind =
            match (w.kind, &w.size, &w.sizes) {
                (Some(k), _, _) => k,
                (None, Some(_), None) => WorkloadKind::Bulk,
                (None, None, Some(_)) => WorkloadKind::Sizes,
                _ => return Err(self.err(
                    "workload.kind",
                    r#"missing `kind`: expected "bulk" (with `size`) or "sizes" (with `sizes`)"#,
                )),
            };
        let sizes = self.sizes(kind, &w)?;
        let repetitions = w.repetitions.unwrap_or(1);
        if repetitions == 0 {
            return Err(self.err("workload.repetitions", "expected at least 1, got 0"));
        }
        let shared_session = match w.session.as_deref() {
            None | Some("fresh") => false,
            Some("shared") => true,
            Some(other) => {
                return Err(self.err(
                    "workload.session",
                    format!("expected \"fresh\" or \"shared\", got {other:?}"),
                ))
            }
        };
        let gap = match &w.gap {
            None => 0,
            Some(g) if shared_session => {
                parse_duration(&g.0).map_err(|m| self.err("workload.gap", m))?
            }
            Some(_) => {
                return Err(self.err(
                    "workload.gap",
                    "a gap between transfers needs session = \"shared\"",
                ))
            }
        };
        Ok(Workload {
            direction: w.direction.unwrap_or(Direction::Down),
            sizes,
            repetitions,
            shared_session,
            gap,
            probe: w.probe.unwrap_or(true),
            reverse: match &w.reverse {
                Some(v) => self.size("workload.reverse", v)?,
                None => 0,
            },
            connections,
        })
    }

    /// The `[workload.connections]` table: required by `kind = "connections"`, refused
    /// otherwise.
    fn connections(
        &self,
        kind: Option<WorkloadKind>,
        table: Option<RawConnections>,
    ) -> R<Option<ConnWorkload>> {
        let connections = match (kind, table) {
            (Some(WorkloadKind::Connections), Some(c)) => {
                Some(c.resolve(self.file, "workload.connections")?)
            }
            (Some(WorkloadKind::Connections), None) => {
                return Err(self.err(
                    "workload.connections",
                    r#"kind = "connections" needs a [workload.connections] table with [[workload.connections.class]] entries"#,
                ))
            }
            (_, Some(_)) => {
                return Err(self.err(
                    "workload.connections",
                    r#"[workload.connections] is only used with kind = "connections""#,
                ))
            }
            (_, None) => None,
        };
        Ok(connections)
    }

    /// The transfer sizes of `kind` (none for connection-level runs).
    fn sizes(&self, kind: WorkloadKind, w: &RawWorkload) -> R<Vec<u64>> {
        let sizes = match kind {
            WorkloadKind::Connections => {
                if w.size.is_some() || w.sizes.is_some() {
                    return Err(self.err(
                        "workload.size",
                        r#"kind = "connections" takes its sizes from [[workload.connections.class]]"#,
                    ));
                }
                Vec::new()
            }
            WorkloadKind::Bulk => {
                if w.sizes.is_some() {
                    return Err(self.err(
                        "workload.sizes",
                        r#"`sizes` is only used with kind = "sizes""#,
                    ));
                }
                let s = w.size.as_ref().ok_or_else(|| {
                    self.err(
                        "workload.size",
                        r#"kind = "bulk" needs `size`, such as size = "64MB""#,
                    )
                })?;
                vec![self.size("workload.size", s)?]
            }
            WorkloadKind::Sizes => {
                if w.size.is_some() {
                    return Err(
                        self.err("workload.size", r#"`size` is only used with kind = "bulk""#)
                    );
                }
                let list = w.sizes.as_ref().ok_or_else(|| {
                    self.err(
                        "workload.sizes",
                        r#"kind = "sizes" needs `sizes`, such as sizes = ["8KB", "4MB"]"#,
                    )
                })?;
                if list.is_empty() {
                    return Err(self.err(
                        "workload.sizes",
                        "expected at least one size, got an empty list",
                    ));
                }
                list.iter()
                    .enumerate()
                    .map(|(i, s)| self.size(&format!("workload.sizes[{i}]"), s))
                    .collect::<R<Vec<u64>>>()?
            }
        };
        Ok(sizes)
    }
}
