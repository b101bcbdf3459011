//! Data caps of the agent's paths while a session runs: count each capped path's bytes
//! (both directions) against the ledger, warn at 80 %, put a path over its cap on standby,
//! and make it active again when a new period begins.
//!
//! Owns: applying the ledger's verdicts to the session. Must not touch: the ledger's
//! arithmetic and its file (`crate::policy`), the path manager.

use super::*;

impl Runner {
    /// Count the bytes of capped paths (both directions), warn at 80 %, put a path over its
    /// cap on standby, save the ledger.
    pub(super) fn count_caps(
        &mut self,
        cmd: &mpsc::UnboundedSender<Cmd>,
        stats: &[(PathId, PathStats)],
        counted: &mut HashMap<PathId, u64>,
    ) {
        if self.cfg.paths.iter().all(|p| p.policy.cap.is_none()) {
            return;
        }
        let totals = stats
            .iter()
            .map(|(id, st)| (*id, st.bytes_sent + st.bytes_received));
        let now = unix_secs();
        // A new period: paths that were over their cap are active again (unless backups).
        for slot in 0..self.slots.len() {
            let p = &self.cfg.paths[slot];
            let Some(cap) = p.policy.cap else { continue };
            if self.slots[slot].over_cap
                && self.ledger.status(&p.name, &cap, now) != CapStatus::Over
            {
                info!(path = %p.name, "a new cap period began: the path carries data again");
                self.slots[slot] = SlotState::default();
                if !p.policy.backup {
                    for id in [slot as PathId, slot as PathId + 8] {
                        let _ = cmd.send(Cmd::Session(SessionFn(Box::new(move |s, now| {
                            let _ = s.set_path_state(now, id, PathState::Active);
                        }))));
                    }
                }
            }
        }
        let mut changed = false;
        for (id, total) in totals {
            let last = counted.insert(id, total).unwrap_or(0);
            // A re-added path starts its counters again.
            let delta = if total >= last { total - last } else { total };
            let Some(slot) = self.client.paths.slot_of(id).or_else(|| {
                let s = (id as usize) % 8;
                (s < self.cfg.paths.len()).then_some(s)
            }) else {
                continue;
            };
            let p = &self.cfg.paths[slot];
            let Some(cap) = p.policy.cap else { continue };
            if delta == 0 {
                continue;
            }
            changed = true;
            let st = self.ledger.add(&p.name, &cap, now, delta);
            let used = self.ledger.used(&p.name, &cap, now);
            match st {
                CapStatus::Near if !self.slots[slot].warned => {
                    warn!(path = %p.name, used, cap = cap.bytes, "path has used 80 % of its cap");
                    self.slots[slot].warned = true;
                }
                CapStatus::Over if !self.slots[slot].over_cap => {
                    warn!(path = %p.name, used, cap = cap.bytes, "path reached its cap: it is a backup until the period ends");
                    self.slots[slot].over_cap = true;
                    for id in [slot as PathId, slot as PathId + 8] {
                        let _ = cmd.send(Cmd::Session(SessionFn(Box::new(move |s, now| {
                            let _ = s.set_path_state(now, id, PathState::Standby);
                        }))));
                    }
                }
                _ => {}
            }
        }
        if changed {
            if let Err(e) = self.ledger.save() {
                warn!("{e}");
            }
        }
    }
}
