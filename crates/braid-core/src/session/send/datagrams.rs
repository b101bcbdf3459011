//! The session's side of datagram sending: which paths may carry datagrams (the views the
//! plan in `session/dgram.rs` works on), writing the datagrams a path may carry into its
//! packet, and giving a path the scheduler did not pick its turn when a datagram is due on it.

use super::{Packet, Session, State, Transmit};
use crate::sched::PathId;
use crate::session::dgram::View;
use crate::session::DatagramMode;
use crate::time::Instant;
use crate::wire::frame::emit;
use crate::wire::PathState;
use smallvec::SmallVec;

impl Session {
    /// Paths that may carry datagrams, fastest first: usable, not failing, not kept out by
    /// the scheduler, and active (standby paths only when no path is active).
    pub(in crate::session) fn datagram_views(&self) -> SmallVec<[View; 8]> {
        let ok = |p: &&crate::path::Path| p.usable() && p.pto_count == 0 && p.rate_cap() != Some(0);
        let any_active = self
            .paths
            .values()
            .filter(ok)
            .any(|p| p.state() == PathState::Active);
        let mut v: SmallVec<[View; 8]> = self
            .paths
            .values()
            .filter(ok)
            .filter(|p| !any_active || p.state() == PathState::Active)
            .map(|p| View {
                id: p.id,
                owd: p.rtt.latest() / 2,
            })
            .collect();
        v.sort_by_key(|x| (x.owd, x.id));
        v
    }

    /// Writes the datagrams `pid` may carry now into `pkt`.
    pub(super) fn write_datagrams(&mut self, now: Instant, pid: PathId, pkt: &mut Packet<'_>) {
        if self.datagrams_out.is_empty() {
            return;
        }
        let views = self.datagram_views();
        let mode = self.cfg.datagram_mode;
        let max_wait = self.cfg.datagram_max_wait;
        self.stats.datagrams_dropped += self.datagrams_out.maintain(now, mode, &views, max_wait);
        while let Some(pick) = self.datagrams_out.pick(now, mode, &views, pid) {
            let (d, seq) = self.datagrams_out.data(pick);
            let wrote = match mode {
                DatagramMode::Spread => emit::datagram(&mut pkt.w, d),
                DatagramMode::Redundant => emit::datagram_seq(&mut pkt.w, seq, d),
            };
            if wrote.is_none() {
                break;
            }
            self.datagrams_out.sent(mode, &views, pick, pid);
            pkt.ack_eliciting = true;
        }
    }

    /// A packet on a ready path other than `tried` that has a datagram due.
    pub(super) fn send_datagrams_elsewhere(
        &mut self,
        now: Instant,
        tried: Option<PathId>,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        if self.datagrams_out.is_empty() || self.state != State::Established {
            return None;
        }
        let views = self.datagram_views();
        let mode = self.cfg.datagram_mode;
        let pid = self
            .scratch_infos
            .iter()
            .filter(|i| i.send_ready && Some(i.id) != tried)
            .map(|i| i.id)
            .find(|&id| self.datagrams_out.pick(now, mode, &views, id).is_some())?;
        self.send_data(now, pid, buf)
    }

    /// When a datagram held back for arrival order becomes due (spread mode).
    pub(in crate::session) fn datagram_due(&self) -> Option<Instant> {
        if self.datagrams_out.is_empty() {
            return None;
        }
        let views = self.datagram_views();
        self.datagrams_out.next_due(self.cfg.datagram_mode, &views)
    }
}
