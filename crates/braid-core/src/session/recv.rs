//! Receiving: packet validation and the effect of each frame.

use super::{close_code, Event, Session, SessionError, Side, State};
use crate::ids::PathId;
use crate::path::Path;
use crate::stream::{RecvOutcome, StreamId};
use crate::time::Instant;
use crate::wire::{parse_header, Frame, FrameIter, Header, HelloParams, PacketType};
use bytes::Bytes;
use smallvec::SmallVec;

impl Session {
    /// A datagram arrived from the peer (after the driver removed any encryption; the last
    /// `tag_len` bytes are ignored). Malformed, duplicate or foreign packets are dropped
    /// and counted; they never affect other state.
    pub fn handle_datagram(&mut self, now: Instant, data: Bytes) {
        if self.state == State::Closed || self.state == State::Closing {
            return;
        }
        let Ok(hdr) = parse_header(&data) else {
            self.stats.malformed_packets += 1;
            return;
        };
        self.handle_packet(now, hdr, data);
    }

    /// [`Session::handle_datagram`] for a driver that parsed the header already (to
    /// authenticate the packet): `hdr` must be what [`parse_header`] gives for `data`, so the
    /// header is parsed once per packet. Its key phase is not looked at (it is the packet
    /// protection's business).
    pub fn handle_packet(&mut self, now: Instant, hdr: Header, data: Bytes) {
        let hlen = hdr.header_len;
        if self.state == State::Closed || self.state == State::Closing {
            return;
        }
        if hdr.ptype != PacketType::Transport
            || hdr.session_id != self.id
            || data.len() < hlen + self.cfg.tag_len
        {
            self.stats.malformed_packets += 1;
            return;
        }
        let payload = &data[hlen..data.len() - self.cfg.tag_len];
        let mut frames: SmallVec<[Frame<'_>; 8]> = SmallVec::new();
        for f in FrameIter::new(payload) {
            match f {
                Ok(f) => frames.push(f),
                Err(_) => {
                    self.stats.malformed_packets += 1;
                    return;
                }
            }
        }
        if frames.is_empty() {
            self.stats.malformed_packets += 1;
            return;
        }
        let pid = hdr.path_id;
        if !self.accept_path(now, pid, &frames) {
            return;
        }
        let ack_eliciting = frames.iter().any(|f| f.is_ack_eliciting());
        let cfg = &self.cfg;
        let Some(path) = self.paths.get_mut(&pid) else {
            return;
        };
        if !path.on_received(now, hdr.packet_number, ack_eliciting, cfg) {
            return;
        }
        path.record_received_bytes(data.len());
        self.last_recv = now;
        self.on_path_alive(now, pid, false);
        for f in frames {
            self.on_frame(now, pid, f, &data);
            if self.is_closed() {
                break;
            }
        }
        self.process_acked_and_lost(now);
        self.state_changed(now);
    }

    /// Find or create the path a packet arrived on. False: drop the packet.
    fn accept_path(&mut self, now: Instant, pid: PathId, frames: &[Frame<'_>]) -> bool {
        let has_challenge = frames.iter().any(|f| matches!(f, Frame::PathChallenge(_)));
        match self.paths.get(&pid) {
            Some(p) if !p.abandoned => true,
            Some(_) if self.side == Side::Server && has_challenge => {
                // The client reuses the id of an abandoned path: a new incarnation, which
                // continues our packet numbers (a (path, number) pair is never reused: it
                // is the AEAD nonce).
                let next_pn = self.paths.get(&pid).map_or(0, |p| p.next_pn);
                let ok = self.server_new_path(now, pid);
                if let Some(p) = self.paths.get_mut(&pid) {
                    p.next_pn = p.next_pn.max(next_pn);
                }
                ok
            }
            Some(_) => false,
            None if self.side == Side::Server => {
                let hello = frames.iter().any(|f| matches!(f, Frame::Hello(_)));
                if self.state == State::Handshaking && !hello {
                    return false;
                }
                self.server_new_path(now, pid)
            }
            None => false,
        }
    }

    fn server_new_path(&mut self, now: Instant, pid: PathId) -> bool {
        let abandoned = self.paths.get(&pid).is_some_and(|p| p.abandoned);
        if self.live_paths() >= self.cfg.max_paths && !abandoned {
            return false;
        }
        let mut token = [0u8; 8];
        self.rng.fill(&mut token);
        let mut p = Path::new(pid, &self.cfg, self.cfg.cc, now);
        if self.max_burst > 10 {
            p.set_max_burst(now, self.max_burst);
        }
        p.challenge = Some(token);
        p.challenge_due = true;
        p.adopt_early_cost(self.early_costs.remove(&pid));
        p.set_reliable(self.reliable.contains(&pid), self.cfg.cc, now);
        if let Some(&n) = self.max_datagrams.get(&pid) {
            p.set_max_datagram(n as u64, self.cfg.cc, now);
        }
        self.paths.insert(pid, p);
        true
    }

    fn on_frame(&mut self, now: Instant, pid: PathId, f: Frame<'_>, packet: &Bytes) {
        match f {
            Frame::Padding | Frame::Ping => {}
            Frame::Ack(a) => {
                let max_ack_delay = self.cfg.max_ack_delay;
                if let Some(p) = self.paths.get_mut(&a.path).filter(|p| !p.abandoned) {
                    let newly = p.on_ack_frame(
                        now,
                        &a,
                        max_ack_delay,
                        pid != a.path,
                        &mut self.scratch_acked,
                        &mut self.scratch_lost,
                    );
                    if newly {
                        self.on_path_alive(now, a.path, true);
                        self.ack_frequency_on_ack(now, a.path);
                    }
                }
            }
            Frame::Stream {
                id,
                offset,
                fin,
                data,
            } => {
                let data = packet.slice_ref(data);
                self.on_stream_frame(id, offset, fin, data);
            }
            Frame::ResetStream {
                id,
                code,
                final_size,
            } => self.on_reset_stream(id, code, final_size),
            Frame::StopSending { id, code } => self.on_stop_sending(id, code),
            Frame::MaxData(m) => {
                if m > self.peer_max_data {
                    self.peer_max_data = m;
                    self.requeue_sendable();
                }
            }
            Frame::MaxStreamData { id, max } => self.on_max_stream_data(id, max),
            Frame::MaxStreams(n) => self.peer_max_streams = self.peer_max_streams.max(n),
            Frame::Hello(params) => self.on_hello(now, params),
            Frame::PathChallenge(token) => {
                if let Some(p) = self.paths.get_mut(&pid) {
                    p.response_due = Some(token);
                }
            }
            Frame::PathResponse(token) => self.on_path_response(now, pid, token),
            Frame::Close { code, reason } => {
                let reason = String::from_utf8_lossy(reason).into_owned();
                let err = SessionError::PeerClosed { code, reason };
                self.events.push_back(Event::Closed(err.clone()));
                self.error = Some(err);
                self.state = State::Closed;
            }
            Frame::PathStatus { path, seq, state } => {
                if let Some(p) = self.paths.get_mut(&path) {
                    if seq > p.peer_status_seq || seq == 0 && p.peer_status_seq == 0 {
                        p.peer_status_seq = seq;
                        p.peer_state = state;
                    }
                }
            }
            Frame::PathAbandon { path } => self.abandon_path(now, path),
            Frame::PathBlackout { path, largest } => self.on_blackout_report(now, path, largest),
            Frame::PathCost {
                path,
                seq,
                power_mw,
                rate_kbps,
            } => {
                let cost = crate::path::PathCost {
                    power_mw,
                    rate_kbps,
                };
                self.on_path_cost(path, seq, cost);
            }
            Frame::DatagramSeq { seq, data } => {
                if self.datagrams_seen.first(seq) {
                    self.on_datagram(packet, data);
                } else {
                    self.stats.datagram_copies += 1;
                }
            }
            Frame::PathName { path, name } => self.on_path_name(path, name),
            Frame::AckFrequency {
                path,
                seq,
                threshold,
                max_delay_us,
            } => self.on_ack_frequency(path, seq, threshold, max_delay_us),
            Frame::Datagram(d) => self.on_datagram(packet, d),
        }
    }

    /// STOP_SENDING: the peer reads no more of stream `id`; reset our side with its code.
    fn on_stop_sending(&mut self, id: StreamId, code: u64) {
        if let Some(st) = self.stream_for_frame(id, true) {
            if st.send.stopped.is_none() && st.send.reset.is_none() {
                st.send.stopped = Some(code);
                self.events.push_back(Event::StreamStopped { id, code });
                let _ = self.stream_reset(id, code);
            }
        }
    }

    /// MAX_STREAM_DATA: more room on stream `id`; queue it if it has bytes waiting.
    fn on_max_stream_data(&mut self, id: StreamId, max: u64) {
        if let Some(st) = self.stream_for_frame(id, true) {
            if max > st.send.peer_max {
                st.send.peer_max = max;
                if st.send.has_pending() && !st.queued {
                    st.queued = true;
                    self.send_queue.push_back(id);
                }
            }
        }
    }

    /// HELLO: the handshake completes with the peer's parameters (a server adopts the
    /// client's choices; a client validates its other paths); a repeated HELLO from the
    /// client means it did not get ours.
    fn on_hello(&mut self, now: Instant, params: HelloParams) {
        if self.state == State::Handshaking {
            self.peer_params = Some(params);
            self.peer_max_data = params.max_data;
            self.peer_max_streams = params.max_streams;
            self.state = State::Established;
            if self.side == Side::Server {
                self.pending.hello = true;
                self.adopt_client_choices(now, &params);
            } else {
                // Validate the other paths now that the server knows the session.
                for p in self.paths.values_mut() {
                    if !p.validated && p.challenge.is_some() {
                        p.challenge_due = true;
                    }
                }
            }
            self.names_on_hello();
            self.events.push_back(Event::Established);
        } else if self.side == Side::Server {
            // The client sends HELLO again: it did not get ours.
            self.pending.hello = true;
        }
    }

    /// PATH_RESPONSE on path `pid`: the answer to its challenge validates it (and gives its
    /// first RTT sample when it has none).
    fn on_path_response(&mut self, now: Instant, pid: PathId, token: [u8; 8]) {
        if let Some(p) = self.paths.get_mut(&pid) {
            if p.challenge == Some(token) {
                p.challenge = None;
                p.challenge_due = false;
                p.validated = true;
                if let Some(sent) = p.challenge_sent {
                    if !p.rtt.has_sample() {
                        p.rtt.update(now - sent, std::time::Duration::ZERO);
                    }
                }
                self.events.push_back(Event::PathValidated(pid));
            }
        }
    }

    /// PATH_COST for `path` (newest sequence number wins); kept for later when the path is
    /// not here yet (at most one per id), moot when it was abandoned.
    fn on_path_cost(&mut self, path: PathId, seq: u64, cost: crate::path::PathCost) {
        match self.paths.get_mut(&path) {
            Some(p) if !p.abandoned => {
                if seq > p.peer_cost_seq {
                    p.peer_cost_seq = seq;
                    p.cost = Some(cost);
                }
            }
            // Abandoned: moot.
            Some(_) => {}
            // Not here yet: keep it for when the path appears (at most one per id).
            None => {
                let e = self.early_costs.entry(path).or_insert((seq, cost));
                if seq >= e.0 {
                    *e = (seq, cost);
                }
            }
        }
    }

    fn on_datagram(&mut self, packet: &Bytes, d: &[u8]) {
        if d.len() > self.cfg.max_datagram_payload {
            self.stats.datagrams_dropped += 1;
            return;
        }
        if self.datagrams_in.len() >= self.cfg.datagram_queue {
            self.datagrams_in.pop_front();
            self.stats.datagrams_dropped += 1;
        }
        if self.datagrams_in.is_empty() {
            self.events.push_back(Event::DatagramReceived);
        }
        self.datagrams_in.push_back(packet.slice_ref(d));
    }

    /// The client chooses the congestion controller and scheduler for both directions (the
    /// agent's owner knows the links); unknown codes leave the server's own settings.
    fn adopt_client_choices(&mut self, now: Instant, params: &crate::wire::HelloParams) {
        if let Some(cc) = crate::cc::CcAlgorithm::from_wire_id(params.cc) {
            if cc != self.cfg.cc {
                self.cfg.cc = cc;
                let packets = self.cfg.initial_window_packets;
                // Reliable (TCP) paths keep their BBR (`Path::set_reliable`).
                for p in self.paths.values_mut().filter(|p| !p.reliable) {
                    let mss = p.max_datagram() as u64;
                    p.cc = cc.build(mss, packets * mss, now);
                }
            }
        }
        use crate::wire::features as f;
        self.cfg.ack_offload = params.features & f::ACK_OFFLOAD != 0;
        self.cfg.blackout_freeze = params.features & f::BLACKOUT_FREEZE != 0;
        self.cfg.loss_recovery = params.features & f::LOSS_RECOVERY != 0;
        self.cfg.datagram_mode = if params.features & f::DATAGRAM_REDUNDANT != 0 {
            crate::session::DatagramMode::Redundant
        } else if params.features & f::DATAGRAM_AUTO != 0 {
            crate::session::DatagramMode::Auto
        } else {
            crate::session::DatagramMode::Spread
        };
        self.cfg.alpha = params.alpha_milli.min(1000) as f64 / 1000.0;
        if let Some(k) = crate::choices::SchedulerKind::from_wire_id(params.scheduler) {
            if k != self.cfg.scheduler {
                self.cfg.scheduler = k;
                self.sched = k.build();
            }
        }
        self.sched.configure(&self.cfg);
    }

    /// Re-queue every stream with new data after the connection window grew.
    fn requeue_sendable(&mut self) {
        for (&id, st) in self.streams.iter_mut() {
            if st.send.has_pending() && !st.queued {
                st.queued = true;
                self.send_queue.push_back(id);
            }
        }
    }

    /// The stream a frame refers to, opening peer streams as needed. `None` when the
    /// stream is already closed (the frame is ignored) or the frame is illegal (the session
    /// is closed with a protocol violation).
    fn stream_for_frame(
        &mut self,
        id: StreamId,
        sending_side: bool,
    ) -> Option<&mut super::StreamState> {
        let _ = sending_side;
        let index = id >> 1;
        if self.stream_is_local(id) {
            if index >= self.next_local_stream {
                self.protocol_violation(
                    close_code::PROTOCOL_VIOLATION,
                    "frame for a stream we never opened",
                );
                return None;
            }
        } else if !self.streams.contains_key(&id) {
            if index < self.next_peer_stream {
                return None;
            }
            if index >= self.local_max_streams {
                self.protocol_violation(close_code::STREAM_LIMIT, "peer opened too many streams");
                return None;
            }
            let bit = id & 1;
            for i in self.next_peer_stream..=index {
                let sid = i * 2 + bit;
                let st = self.new_stream_state();
                self.streams.insert(sid, st);
                self.events.push_back(Event::StreamOpened(sid));
            }
            self.next_peer_stream = index + 1;
        }
        self.streams.get_mut(&id)
    }

    fn on_stream_frame(&mut self, id: StreamId, offset: u64, fin: bool, data: Bytes) {
        let Some(st) = self.stream_for_frame(id, false) else {
            return;
        };
        match st.recv.on_data(offset, data, fin) {
            RecvOutcome::Ok {
                new_highest,
                readable,
            } => {
                if readable && !st.readable_signalled {
                    st.readable_signalled = true;
                    self.events.push_back(Event::StreamReadable(id));
                }
                self.received_data += new_highest;
                if self.received_data > self.local_max_data {
                    self.protocol_violation(
                        close_code::FLOW_CONTROL,
                        "session flow-control limit exceeded",
                    );
                }
            }
            RecvOutcome::FlowControl => self.protocol_violation(
                close_code::FLOW_CONTROL,
                "stream flow-control limit exceeded",
            ),
            RecvOutcome::FinalSize => {
                self.protocol_violation(close_code::PROTOCOL_VIOLATION, "stream final size changed")
            }
        }
    }

    fn on_reset_stream(&mut self, id: StreamId, code: u64, final_size: u64) {
        let Some(st) = self.stream_for_frame(id, false) else {
            return;
        };
        if st.recv.reset.is_some() {
            return;
        }
        if final_size < st.recv.highest || st.recv.final_size.is_some_and(|f| f != final_size) {
            self.protocol_violation(
                close_code::PROTOCOL_VIOLATION,
                "reset with a wrong final size",
            );
            return;
        }
        let grow = final_size - st.recv.highest;
        let unread = final_size - st.recv.read_offset;
        // Check the session limit before changing any counter.
        if self.received_data + grow > self.local_max_data {
            self.protocol_violation(
                close_code::FLOW_CONTROL,
                "session flow-control limit exceeded",
            );
            return;
        }
        if let Some(st) = self.streams.get_mut(&id) {
            st.recv.highest = final_size;
            st.recv.final_size = Some(final_size);
            st.recv.reset = Some(code);
        }
        self.received_data += grow;
        self.consumed_data += unread;
        self.pending.max_stream_data.remove(&id);
        self.events.push_back(Event::StreamReset { id, code });
        self.gc_stream(id);
    }
}
