//! What a data packet carries besides acknowledgements and datagrams: pending control
//! frames (flow control, stream resets, path status and cost) and stream data, round-robin
//! over the streams with something to send.
//!
//! Owns: filling a packet with those frames and recording them in it. Must not touch: the
//! choice of path or packet (`send.rs`), or what acknowledgement or loss of a frame means.

use super::{Packet, Session};
use crate::ids::PathId;
use crate::path::SentFrame;
use crate::wire::frame::emit;
use crate::wire::Writer;
use smallvec::SmallVec;

impl Session {
    /// Pending control frames, as many as fit: flow control first, then streams' resets
    /// and stop requests, then paths' status, cost, abandonment and blackout.
    pub(super) fn write_control(&mut self, pkt: &mut Packet<'_>) {
        if !self.pending.any() {
            return;
        }
        let mut wrote = SmallVec::<[SentFrame; 8]>::new();
        self.write_flow_control(&mut pkt.w, &mut wrote);
        self.write_stream_control(&mut pkt.w, &mut wrote);
        self.write_path_control(&mut pkt.w, &mut wrote);
        if !wrote.is_empty() {
            pkt.ack_eliciting = true;
            pkt.frames.extend(wrote);
        }
    }

    /// HELLO, MAX_DATA, MAX_STREAMS and MAX_STREAM_DATA.
    fn write_flow_control(&mut self, w: &mut Writer<'_>, wrote: &mut SmallVec<[SentFrame; 8]>) {
        if self.pending.hello && emit::hello(w, &self.hello_params()).is_some() {
            self.pending.hello = false;
            wrote.push(SentFrame::Hello);
        }
        if self.pending.max_data && emit::max_data(w, self.local_max_data).is_some() {
            self.pending.max_data = false;
            wrote.push(SentFrame::MaxData);
        }
        if self.pending.max_streams && emit::max_streams(w, self.local_max_streams).is_some() {
            self.pending.max_streams = false;
            wrote.push(SentFrame::MaxStreams);
        }
        while let Some(&id) = self.pending.max_stream_data.first() {
            let Some(st) = self.streams.get(&id) else {
                self.pending.max_stream_data.remove(&id);
                continue;
            };
            if emit::max_stream_data(w, id, st.recv.max_advertised).is_none() {
                break;
            }
            self.pending.max_stream_data.remove(&id);
            wrote.push(SentFrame::MaxStreamData(id));
        }
    }

    /// RESET_STREAM and STOP_SENDING.
    fn write_stream_control(&mut self, w: &mut Writer<'_>, wrote: &mut SmallVec<[SentFrame; 8]>) {
        while let Some(&id) = self.pending.reset_stream.first() {
            let final_size = self.streams.get(&id).map_or(0, |s| s.send.next_new);
            let code = self
                .streams
                .get(&id)
                .and_then(|s| s.send.reset)
                .unwrap_or(0);
            if emit::reset_stream(w, id, code, final_size).is_none() {
                break;
            }
            self.pending.reset_stream.remove(&id);
            wrote.push(SentFrame::ResetStream(id));
        }
        while let Some(&id) = self.pending.stop_sending.first() {
            let code = self
                .streams
                .get(&id)
                .and_then(|s| s.recv.stop_sending)
                .unwrap_or(0);
            if emit::stop_sending(w, id, code).is_none() {
                break;
            }
            self.pending.stop_sending.remove(&id);
            wrote.push(SentFrame::StopSending(id));
        }
    }

    /// PATH_STATUS, PATH_COST, PATH_ABANDON and PATH_BLACKOUT.
    fn write_path_control(&mut self, w: &mut Writer<'_>, wrote: &mut SmallVec<[SentFrame; 8]>) {
        while let Some(&pid) = self.pending.path_status.first() {
            let Some(p) = self.paths.get(&pid) else {
                self.pending.path_status.remove(&pid);
                continue;
            };
            if emit::path_status(w, pid, p.status_seq, p.local_state).is_none() {
                break;
            }
            self.pending.path_status.remove(&pid);
            wrote.push(SentFrame::PathStatus(pid));
        }
        while let Some(&pid) = self.pending.path_cost.first() {
            let Some(c) = self
                .paths
                .get(&pid)
                .filter(|p| !p.abandoned)
                .and_then(|p| p.cost.map(|c| (p.cost_seq, c)))
            else {
                self.pending.path_cost.remove(&pid);
                continue;
            };
            let (seq, c) = c;
            if emit::path_cost(w, pid, seq, c.power_mw, c.rate_kbps).is_none() {
                break;
            }
            self.pending.path_cost.remove(&pid);
            wrote.push(SentFrame::PathCost(pid));
        }
        self.write_ack_frequency(w, wrote);
        let mut named = Vec::new();
        self.write_path_names(w, &mut named);
        wrote.extend(named.into_iter().map(SentFrame::PathName));
        while let Some(&pid) = self.pending.path_abandon.first() {
            if emit::path_abandon(w, pid).is_none() {
                break;
            }
            self.pending.path_abandon.remove(&pid);
            self.abandon_in_flight.insert(pid);
            wrote.push(SentFrame::PathAbandon(pid));
        }
        while let Some(&pid) = self.pending.path_blackout.first() {
            let largest = self
                .paths
                .get(&pid)
                .map_or(0, |p| p.recv.largest_received());
            if emit::path_blackout(w, pid, largest).is_none() {
                break;
            }
            self.pending.path_blackout.remove(&pid);
            wrote.push(SentFrame::PathBlackout(pid));
        }
    }

    /// Fill the packet with stream frames, round-robin over streams with something to send:
    /// lost ranges first, then new data within the flow-control limits, then a lone FIN.
    pub(super) fn write_streams(&mut self, pid: PathId, pkt: &mut Packet<'_>) {
        let mut budget = self.send_queue.len();
        while budget > 0 {
            budget -= 1;
            let Some(&id) = self.send_queue.front() else {
                break;
            };
            if pkt.w.remaining() < 24 {
                break;
            }
            let wrote = self.write_one_stream(pid, id, pkt);
            // Keep the stream queued only while it can make progress.
            self.send_queue.pop_front();
            if self.requeue(id, wrote.is_some() && pkt.w.remaining() >= 24) {
                budget += 1;
            }
        }
    }

    /// One STREAM frame of stream `id` in the packet: its first lost range, else new data,
    /// else a lone FIN. Returns the bytes written (`Some(0)` for the FIN), `None` if none.
    fn write_one_stream(
        &mut self,
        pid: PathId,
        id: crate::stream::StreamId,
        pkt: &mut Packet<'_>,
    ) -> Option<usize> {
        let st = self.streams.get_mut(&id)?;
        let s = &mut st.send;
        if s.reset.is_some() {
            // Nothing more to send on a reset stream.
            return None;
        }
        if let Some(r) = s.retransmit.first() {
            let fin_ok = s.fin_pending;
            let (len, fin) = write_stream_range(pkt, s, id, r.clone(), fin_ok)?;
            s.retransmit.remove(r.start..r.start + len as u64);
            if fin {
                s.fin_pending = false;
            }
            if let Some(p) = self.paths.get_mut(&pid) {
                p.stats.retransmitted_bytes += len as u64;
            }
            return Some(len);
        }
        let conn_room = self.peer_max_data.saturating_sub(self.sent_new_data);
        let avail = s.new_sendable().min(conn_room);
        let off = s.next_new;
        if avail > 0 {
            let (len, fin) = write_stream_range(pkt, s, id, off..off + avail, true)?;
            s.next_new = off + len as u64;
            self.sent_new_data += len as u64;
            if fin {
                s.fin_pending = false;
            }
            if let Some(p) = self.paths.get_mut(&pid) {
                p.stats.stream_bytes_sent += len as u64;
            }
            return Some(len);
        }
        if s.fin_pending
            && off == s.write_offset()
            && emit::stream(&mut pkt.w, id, off, true, &[]).is_some()
        {
            s.fin_pending = false;
            pkt.frames.push(SentFrame::Stream {
                id,
                off,
                len: 0,
                fin: true,
            });
            pkt.ack_eliciting = true;
            return Some(0);
        }
        None
    }

    /// Stream `id` left the front of the send queue: queue it again while it can make
    /// progress, at the front when `again` (more of it fits in this packet; returns true
    /// then), else at the back. Tells the application when its stream became writable.
    fn requeue(&mut self, id: crate::stream::StreamId, again: bool) -> bool {
        let conn_room = self.peer_max_data.saturating_sub(self.sent_new_data);
        let Some(st) = self.streams.get_mut(&id) else {
            return false;
        };
        if st.blocked_write && st.send.writable() > 0 {
            st.blocked_write = false;
            self.events
                .push_back(crate::session::Event::StreamWritable(id));
        }
        let s = &st.send;
        let progress = s.reset.is_none()
            && (!s.retransmit.is_empty()
                || (s.new_sendable() > 0 && conn_room > 0)
                || (s.fin_pending && s.next_new == s.write_offset()));
        if !progress {
            st.queued = false;
            false
        } else if again {
            self.send_queue.push_front(id);
            true
        } else {
            self.send_queue.push_back(id);
            false
        }
    }
}

/// Write bytes `r` of send stream `s` (as many as fit in the packet) as one STREAM frame,
/// with the FIN when `fin_ok` and the frame reaches the end of the stream, and record it in
/// the packet. Returns the bytes written and whether the FIN went; `None` when nothing fits.
/// `r` must be buffered (not yet acknowledged) data of `s`.
pub(in crate::session) fn write_stream_range(
    pkt: &mut Packet<'_>,
    s: &crate::stream::SendStream,
    id: crate::stream::StreamId,
    r: std::ops::Range<u64>,
    fin_ok: bool,
) -> Option<(usize, bool)> {
    let room = pkt.w.remaining();
    let max = room.saturating_sub(emit::stream_header_len(id, r.start, room));
    let len = ((r.end - r.start) as usize).min(max);
    if len == 0 {
        return None;
    }
    let fin = fin_ok && s.fin && r.start + len as u64 == s.write_offset();
    // Straight from the send buffer's chunks into the packet: the one copy.
    emit::stream_with(&mut pkt.w, id, r.start, fin, len, |dst| {
        s.copy_out(r.start, dst)
    })?;
    pkt.frames.push(SentFrame::Stream {
        id,
        off: r.start,
        len: len as u32,
        fin,
    });
    pkt.ack_eliciting = true;
    Some((len, fin))
}
