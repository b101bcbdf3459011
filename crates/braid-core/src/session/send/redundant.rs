//! The `redundant` scheduler's session side: copies of stream data onto every usable path.
//!
//! Owns: the per-path, per-stream watermark of stream offsets a path has carried
//! (`Session::redundant_sent`) and the copy packets built from it. The scheduler
//! ([`crate::sched::Redundant`]) places each original where minRTT would; this module then
//! sends, on every other usable path with window room and pacing credit, the stream bytes
//! that path has not carried yet and the peer has not acknowledged. A path never carries the
//! same new data twice: its watermark only moves forward, and a path sends originals only
//! when it has no copy backlog (copies go first). The receiver discards duplicates by range.
//! Copies are ordinary STREAM frames: if one is declared lost, only the bytes still
//! unacknowledged are queued again, as for any lost frame.
//!
//! Must not touch: the stream send queue, new-data bookkeeping (`next_new`, flow control),
//! or other schedulers' behaviour (everything here is a no-op unless the session's
//! scheduler is `redundant`).

use super::{write_stream_range, Packet, Session, Transmit};
use crate::choices::SchedulerKind;
use crate::ids::PathId;
use crate::time::Instant;

/// Smallest room in a packet worth a stream frame (header plus a few bytes).
const MIN_FRAME_ROOM: usize = 24;

impl Session {
    fn redundant(&self) -> bool {
        self.cfg.scheduler == SchedulerKind::Redundant
    }

    /// Where the stream's copy on `pid` would start and end, if `pid` lags behind.
    fn copy_backlog(&self, pid: PathId, id: crate::stream::StreamId) -> Option<(u64, u64)> {
        let st = self.streams.get(&id)?;
        if st.send.reset.is_some() {
            return None;
        }
        let from = self.redundant_sent.get(&(pid, id)).copied().unwrap_or(0);
        let r = st.send.first_unacked(from..st.send.next_new)?;
        Some((r.start, r.end))
    }

    /// A packet of copies on the first usable path with room that has not carried stream
    /// data other paths sent (redundant scheduler only).
    pub(super) fn send_redundant_copy(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if !self.redundant() || self.streams.is_empty() || self.paths.len() < 2 {
            return None;
        }
        self.refresh_infos(now);
        let state = crate::sched::candidate_state(&self.scratch_infos)?;
        let ready: Vec<PathId> = self
            .scratch_infos
            .iter()
            .filter(|p| p.eligible(state) && p.send_ready)
            .map(|p| p.id)
            .collect();
        let ids: Vec<_> = self.streams.keys().copied().collect();
        let pid = ready
            .into_iter()
            .find(|&pid| ids.iter().any(|&id| self.copy_backlog(pid, id).is_some()))?;
        let mut pkt = self.begin(pid, buf)?;
        self.write_ack(now, pid, &mut pkt);
        for id in ids {
            while pkt.w.remaining() >= MIN_FRAME_ROOM {
                let Some((start, end)) = self.copy_backlog(pid, id) else {
                    break;
                };
                if !self.write_copy(pid, id, start, end, &mut pkt) {
                    break;
                }
            }
        }
        if !pkt.ack_eliciting {
            return None;
        }
        self.finish(now, pid, pkt)
    }

    /// Write one STREAM frame copying `start..end` (or its head) of stream `id` onto the
    /// packet for `pid`; moves the path's watermark. False when nothing fit.
    fn write_copy(
        &mut self,
        pid: PathId,
        id: crate::stream::StreamId,
        start: u64,
        end: u64,
        pkt: &mut Packet<'_>,
    ) -> bool {
        let Some(st) = self.streams.get(&id) else {
            return false;
        };
        let Some((len, _)) = write_stream_range(pkt, &st.send, id, start..end, true) else {
            return false;
        };
        let stop = start + len as u64;
        self.redundant_sent.insert((pid, id), stop);
        true
    }

    /// The scheduler sent a packet on `pid`: everything sent so far counts as carried by
    /// `pid` (it had no copy backlog, or it would have sent copies first). Forgets streams
    /// that are gone.
    pub(super) fn note_original_sent(&mut self, pid: PathId) {
        if !self.redundant() {
            return;
        }
        for (&id, st) in &self.streams {
            let e = self.redundant_sent.entry((pid, id)).or_insert(0);
            *e = (*e).max(st.send.next_new);
        }
        if self.redundant_sent.len() > 2 * self.streams.len() * self.paths.len() + 16 {
            let streams = &self.streams;
            self.redundant_sent
                .retain(|(_, id), _| streams.contains_key(id));
        }
    }
}
