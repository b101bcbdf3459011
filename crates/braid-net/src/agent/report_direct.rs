//! The status board in direct mode: the paths as direct mode sees them, published while no
//! session is up.
//!
//! Owns: building the snapshot from direct mode's view of its paths. Must not touch: what
//! direct mode decides (`direct_paths`), the session's snapshot (`report`).

use super::{add_counters, set_counters, AgentStatus, StatusBoard, Totals, STATUS_VERSION};
use crate::status::ShownState;
use std::time::Instant;

/// One path as direct mode shows it (no session; [`StatusBoard::publish_direct`]).
pub(in crate::agent) struct DirectPath {
    pub state: ShownState,
    /// The interface an `auto` path took.
    pub interface: Option<String>,
    pub local: Option<String>,
    /// Bytes of its direct connections since the agent started, both ways.
    pub sent: u64,
    pub received: u64,
    /// The connection scheduler's rate estimate, bits/s (shown as CAPACITY).
    pub rate_bps: Option<u64>,
    pub cap_used: Option<u64>,
}

impl StatusBoard {
    /// Direct mode, no session: show each path as `direct` sees it; its byte counters
    /// (and so its rates and energy) are its sessions' so far plus its direct connections'.
    pub(in crate::agent) fn publish_direct(&self, direct: &[DirectPath]) {
        let now = Instant::now();
        let mut paths = self.base.clone();
        let mut totals = Totals::default();
        {
            let (Ok(mut meters), Ok(counts)) = (self.meters.lock(), self.counts.lock()) else {
                return;
            };
            for (slot, (p, d)) in paths.iter_mut().zip(direct).enumerate() {
                let mut life = counts[slot].0;
                add_counters(&mut life, &counts[slot].1);
                life.bytes_sent += d.sent;
                life.bytes_received += d.received;
                let (energy, rates) = &mut meters[slot];
                energy.update(now, life.bytes_sent + life.bytes_received, self.power[slot]);
                rates.update(now, life.bytes_sent, life.bytes_received);
                set_counters(p, &life);
                p.set_rates(rates);
                p.state = Some(d.state);
                p.interface = d.interface.clone().or(p.interface.take());
                p.local_address = d.local.clone();
                p.delivery_rate_bps = d.rate_bps;
                p.capacity_bps = d.rate_bps;
                p.capacity_settled = d.rate_bps.map(|_| true);
                p.cap_used_bytes = d.cap_used;
                p.energy_j = p.energy_j.map(|_| energy.energy_j());
                totals.bytes_sent += p.bytes_sent;
                totals.bytes_received += p.bytes_received;
                if let Some(e) = p.energy_j {
                    *totals.energy_j.get_or_insert(0.0) += e;
                }
            }
        }
        if let Ok(mut d) = self.down_at.lock() {
            d.iter_mut().for_each(|x| *x = None);
        }
        if let Ok(mut l) = self.latest.lock() {
            *l = AgentStatus {
                version: STATUS_VERSION,
                paths,
                totals,
                ..Default::default()
            };
        }
    }
}
