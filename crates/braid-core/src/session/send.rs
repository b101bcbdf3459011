//! Sending: which packet goes out next, on which path, and what it carries.
//!
//! Order of precedence: CLOSE while closing; probe packets after a probe timeout; path
//! validation (with the handshake); data and control frames on the path the scheduler
//! picks; acknowledgement-only packets on the path the scheduler names for them; keepalives.

use super::{Session, Side, State};
use crate::ids::PathId;
use crate::path::{SentFrame, MAX_ACK_RANGES};
use crate::time::Instant;
use crate::wire::frame::emit;
use crate::wire::{Header, HelloParams, PacketType, Writer};
use smallvec::SmallVec;

mod batch;
mod datagrams;
mod frames;
mod mtu_probe;
mod redundant;

pub use batch::BatchTransmit;
pub(super) use batch::Stash;
pub(super) use frames::write_stream_range;

/// Packets carrying a PATH_CHALLENGE are padded to this size (or the datagram size).
const CHALLENGE_PADDED: usize = 1200;

pub(super) struct Packet<'a> {
    pub(super) w: Writer<'a>,
    pub(super) frames: SmallVec<[SentFrame; 3]>,
    pub(super) ack_eliciting: bool,
    /// A blackout probe: ack-eliciting but outside congestion control.
    pub(super) probe: bool,
    pad_to: usize,
}

impl Session {
    /// The next datagram to send, written into `buf` (at least `max_datagram_size` bytes),
    /// or `None` when nothing may be sent now (see [`Session::poll_timeout`]).
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if buf.len() < self.cfg.max_datagram_size {
            return None;
        }
        // A packet a batch made but could not take (`poll_transmit_batch`) goes first.
        if let Some(t) = self.stash.take(buf) {
            return Some(t);
        }
        self.produce(now, buf)
    }

    /// Make the next datagram (no stash involved); `buf` holds at least
    /// `max_datagram_size` bytes.
    fn produce(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let buf = &mut buf[..self.cfg.max_datagram_size];
        let t = match self.state {
            State::Closed => None,
            State::Closing => self.send_close(now, buf),
            _ => self.send_next(now, buf),
        };
        if let Some(t) = &t {
            // The tag space is the network driver's to fill; leave it zeroed, not stale.
            buf[t.len - self.cfg.tag_len..t.len].fill(0);
        }
        if t.is_some() || self.state == State::Closed {
            self.state_changed(now);
        }
        t
    }

    pub(super) fn begin<'a>(&self, pid: PathId, buf: &'a mut [u8]) -> Option<Packet<'a>> {
        // The path's own limit (the size its discovery confirmed).
        let size = self.paths.get(&pid)?.max_datagram();
        self.begin_sized(pid, buf, size)
    }

    /// Begin a packet of at most `size` bytes (a PMTU probe's size) on `pid`.
    pub(super) fn begin_sized<'a>(
        &self,
        pid: PathId,
        buf: &'a mut [u8],
        size: usize,
    ) -> Option<Packet<'a>> {
        let p = self.paths.get(&pid)?;
        let end = buf.len().min(size).checked_sub(self.cfg.tag_len)?;
        let mut w = Writer::new(&mut buf[..end]);
        let h = Header::new(PacketType::Transport, self.id, pid, p.next_pn).ok()?;
        h.write_into(w.slot(h.header_len)?)?;
        Some(Packet {
            w,
            frames: SmallVec::new(),
            ack_eliciting: false,
            probe: false,
            pad_to: 0,
        })
    }

    pub(super) fn finish(
        &mut self,
        now: Instant,
        pid: PathId,
        mut pkt: Packet<'_>,
    ) -> Option<Transmit> {
        if pkt.w.pos() < pkt.pad_to {
            let n = (pkt.pad_to - pkt.w.pos()).min(pkt.w.remaining());
            emit::padding(&mut pkt.w, n);
        }
        let body = pkt.w.pos();
        let len = body + self.cfg.tag_len;
        let p = self.paths.get_mut(&pid)?;
        p.on_sent(now, len, pkt.ack_eliciting, pkt.probe, pkt.frames);
        self.dup_budget.on_sent(len);
        Some(Transmit { path: pid, len })
    }

    /// Room to send `len` more bytes on a path the server has not validated yet.
    pub(super) fn amplification_ok(&self, pid: PathId, len: usize) -> bool {
        match self.paths.get(&pid) {
            Some(p) if self.side == Side::Server && !p.validated => {
                p.bytes_sent_unvalidated + len as u64
                    <= self.cfg.amplification_factor * p.bytes_received_unvalidated
            }
            Some(_) => true,
            None => false,
        }
    }

    pub(super) fn write_ack(&mut self, now: Instant, for_path: PathId, pkt: &mut Packet<'_>) {
        let Some(p) = self.paths.get_mut(&for_path) else {
            return;
        };
        if !p.recv.ack_pending() {
            return;
        }
        let Some((ranges, delay, recv_us)) = p.recv.ack_contents(now) else {
            return;
        };
        let stamp = self
            .peer_params
            .is_some_and(|h| h.features & crate::wire::features::ACK_TIMESTAMPS != 0)
            .then_some(recv_us);
        if let Some(largest) = emit::ack(&mut pkt.w, for_path, ranges, delay, stamp, MAX_ACK_RANGES)
        {
            pkt.frames.push(SentFrame::Ack {
                path: for_path,
                largest,
            });
            p.recv.on_ack_sent();
        }
    }

    fn send_close(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let (code, reason) = self.close_frame.clone().unwrap_or_default();
        let target = self
            .paths
            .values()
            .filter(|p| !p.abandoned && (p.validated || p.stats.packets_received > 0))
            .map(|p| p.id)
            .find(|id| !self.close_sent_on.contains(id) && self.amplification_ok(*id, 64));
        let Some(pid) = target else {
            self.state = State::Closed;
            return None;
        };
        self.close_sent_on.insert(pid);
        let mut pkt = self.begin(pid, buf)?;
        emit::close(&mut pkt.w, code, reason.as_bytes())?;
        self.finish(now, pid, pkt)
    }

    fn send_next(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        // 0. Blackout probes (super-aggregation's blackout freeze).
        if let Some(pid) = self.blackout_probe_path() {
            if let Some(t) = self.send_blackout_probe(now, pid, buf) {
                return Some(t);
            }
        }
        // 1. Probes after a probe timeout, on the path that timed out.
        if let Some(probe) = self.send_pto_probe(now, buf) {
            return probe;
        }

        // 2. Path validation, carrying the handshake.
        if let Some(t) = self.send_validation(now, buf) {
            return Some(t);
        }
        // 2b. A probe of a larger datagram size (no data, outside congestion control).
        if let Some(t) = self.send_mtu_probe(now, buf) {
            return Some(t);
        }
        if self.state != State::Established {
            return self.send_ack_only(now, buf);
        }

        // 3. Real-time datagrams (a call, a game) at once, window or not; then random losses
        //    resent on another path, redundant copies, then data and control frames where
        //    the scheduler says.
        if let Some(t) = self.send_realtime_first(now, buf) {
            return Some(t);
        }
        if !self.fetch.is_empty() {
            if let Some(t) = self.send_fetch(now, buf) {
                return Some(t);
            }
        }
        if let Some(t) = self.send_redundant_copy(now, buf) {
            return Some(t);
        }
        if self.has_data() {
            self.refresh_infos(now);
            let ctx = self.sched_context();
            let picked = self.sched.select(now, &self.scratch_infos, &ctx);
            if let Some(pid) = picked {
                if let Some(t) = self.send_data(now, pid, buf) {
                    self.note_original_sent(pid);
                    return Some(t);
                }
            }
            // Datagrams have their own plan of paths (`dgram`): one the scheduler did not
            // pick may be due to carry one now.
            if let Some(t) = self.send_datagrams_elsewhere(now, picked, buf) {
                return Some(t);
            }
        } else {
            // Nothing to send: what any path delivers now says nothing about its capacity
            // (paths still validating included: their challenges are a trickle).
            for p in self.paths.values_mut() {
                if !p.abandoned && p.window_open() {
                    p.mark_app_limited();
                }
            }
            if self.cfg.tail_reinjection && self.reinject_tail(now) {
                self.refresh_infos(now);
                let ctx = self.sched_context();
                if let Some(pid) = self.sched.select(now, &self.scratch_infos, &ctx) {
                    if let Some(t) = self.send_data(now, pid, buf) {
                        return Some(t);
                    }
                }
            }
        }

        // 4. Acknowledgements that cannot wait for data.
        if let Some(t) = self.send_ack_only(now, buf) {
            return Some(t);
        }

        // 5. Keepalives.
        self.send_keepalive(now, buf)
    }

    /// The probe owed to a path whose probe timeout fired: `Some(transmit)` when one was
    /// due (the transmit itself `None` when it could not be built), `None` when none was.
    fn send_pto_probe(&mut self, now: Instant, buf: &mut [u8]) -> Option<Option<Transmit>> {
        let pid = self
            .paths
            .values()
            .find(|p| p.probes_due > 0 && !p.abandoned)
            .map(|p| p.id)?;
        if let Some(p) = self.paths.get_mut(&pid) {
            p.probes_due -= 1;
        }
        if !self.amplification_ok(pid, 64) {
            return None;
        }
        Some(self.ping(now, pid, buf))
    }

    /// A PING on the first usable path that sent nothing for a keepalive interval.
    fn send_keepalive(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let keepalive = self.cfg.keepalive_interval();
        let due = self
            .paths
            .values()
            .find(|p| p.usable() && now >= p.last_sent + keepalive)
            .map(|p| p.id)?;
        self.ping(now, due, buf)
    }

    /// An ack-eliciting PING on `pid`, with its acknowledgement.
    fn ping(&mut self, now: Instant, pid: PathId, buf: &mut [u8]) -> Option<Transmit> {
        let mut pkt = self.begin(pid, buf)?;
        self.write_ack(now, pid, &mut pkt);
        emit::ping(&mut pkt.w)?;
        pkt.ack_eliciting = true;
        self.finish(now, pid, pkt)
    }

    /// A path with a challenge or response that may go out now.
    pub(super) fn validation_ready(&self, p: &crate::path::Path) -> bool {
        let handshaking_client = self.side == Side::Client && self.state == State::Handshaking;
        !p.abandoned
            && (self.challenge_ready(p) || p.response_due.is_some())
            // Before the server knows the session, only the path carrying HELLO may speak.
            && (!handshaking_client || p.id == self.first_path())
            && self.amplification_ok(p.id, 64)
    }

    /// The path's challenge is due and may go: not while the abandonment of an earlier
    /// incarnation under its id is on its way (the peer could take the challenge for the
    /// old incarnation, then end the new one when the abandonment arrives).
    fn challenge_ready(&self, p: &crate::path::Path) -> bool {
        p.challenge_due && !self.abandon_in_flight.contains(&p.id)
    }

    fn send_validation(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let pid = self
            .paths
            .values()
            .find(|p| self.validation_ready(p))
            .map(|p| p.id)?;
        let padded = CHALLENGE_PADDED.min(self.cfg.max_datagram_size) - self.cfg.tag_len;
        let mut pkt = self.begin(pid, buf)?;
        self.write_ack(now, pid, &mut pkt);
        if self.pending.hello {
            emit::hello(&mut pkt.w, &self.hello_params())?;
            pkt.frames.push(SentFrame::Hello);
            self.pending.hello = false;
            pkt.ack_eliciting = true;
        }
        let challenge = self
            .paths
            .get(&pid)
            .is_some_and(|p| self.challenge_ready(p));
        let p = self.paths.get_mut(&pid)?;
        if let Some(token) = p.response_due.take() {
            emit::path_token(&mut pkt.w, true, &token)?;
            pkt.ack_eliciting = true;
            // Padded like challenges: proves the path's MTU and gives the server credit
            // under its anti-amplification limit.
            pkt.pad_to = padded;
        }
        if challenge {
            if let Some(token) = p.challenge {
                emit::path_token(&mut pkt.w, false, &token)?;
                p.challenge_due = false;
                p.challenge_sent = Some(now);
                pkt.frames.push(SentFrame::PathChallenge(pid));
                pkt.ack_eliciting = true;
                pkt.pad_to = padded;
            }
        }
        // Never send more than allowed on a path the server has not validated.
        if self.side == Side::Server
            && !self.amplification_ok(pid, pkt.pad_to.max(pkt.w.pos()) + self.cfg.tag_len)
        {
            pkt.pad_to = 0;
        }
        self.finish(now, pid, pkt)
    }

    pub(super) fn first_path(&self) -> PathId {
        self.first_path
    }

    pub(super) fn hello_params(&self) -> HelloParams {
        HelloParams {
            max_data: self.local_max_data,
            max_stream_data: self.cfg.stream_window,
            max_streams: self.local_max_streams,
            idle_timeout_ms: self.cfg.idle_timeout.as_millis() as u64,
            max_datagram: self.cfg.max_datagram_payload as u64,
            cc: self.cfg.cc.wire_id(),
            scheduler: self.cfg.scheduler.wire_id(),
            features: self.feature_bits(),
            alpha_milli: (self.cfg.alpha.clamp(0.0, 1.0) * 1000.0).round() as u64,
        }
    }

    /// The super-aggregation mechanisms this side uses, as HELLO feature bits.
    pub(super) fn feature_bits(&self) -> u64 {
        use crate::wire::features as f;
        // Every build reads ACK_TS; announcing it lets the peer timestamp its ACKs.
        // Every build reads PATH_NAME too.
        // And every build follows ACK_FREQUENCY (whether it asks is `Config::ack_frequency`).
        let mut bits = f::ACK_TIMESTAMPS | f::PATH_NAMES | f::ACK_FREQUENCY;
        if self.cfg.ack_offload {
            bits |= f::ACK_OFFLOAD;
        }
        if self.cfg.blackout_freeze {
            bits |= f::BLACKOUT_FREEZE;
        }
        if self.cfg.loss_recovery {
            bits |= f::LOSS_RECOVERY;
        }
        bits |= match self.cfg.datagram_mode {
            super::DatagramMode::Redundant => f::DATAGRAM_REDUNDANT,
            super::DatagramMode::Auto => f::DATAGRAM_AUTO,
            super::DatagramMode::Spread => 0,
        };
        bits
    }

    pub(super) fn has_data(&self) -> bool {
        self.pending.any()
            || !self.datagrams_out.is_empty()
            || !self.realtime_out.is_empty()
            || !self.send_queue.is_empty()
            || !self.fetch.is_empty()
    }

    /// What schedulers may know about the data waiting to be sent.
    pub(super) fn sched_context(&self) -> crate::sched::SchedContext {
        let pending_bytes = self
            .send_queue
            .iter()
            .filter_map(|id| self.streams.get(id))
            .map(|st| st.send.retransmit.total() + (st.send.write_offset() - st.send.next_new))
            .sum();
        crate::sched::SchedContext {
            pending_bytes,
            send_window: self.peer_max_data.saturating_sub(self.sent_new_data),
            mss: self.cfg.max_datagram_size as u64,
        }
    }

    /// Fresh scheduler views of the live paths, with the scheduler's rate limits applied
    /// to the paths first (a limit lives in the path's pacer, so the timer table knows when
    /// a limited path may send again).
    pub(super) fn refresh_infos(&mut self, now: Instant) {
        self.scratch_infos.clear();
        for p in self.paths.values().filter(|p| !p.abandoned) {
            self.scratch_infos.push(p.info(now));
        }
        self.scratch_limits.clear();
        self.sched
            .rate_limits(now, &self.scratch_infos, &mut self.scratch_limits);
        let mut changed = false;
        for info in &self.scratch_infos {
            let limit = self
                .scratch_limits
                .iter()
                .find(|(id, _)| *id == info.id)
                .and_then(|(_, l)| *l);
            if let Some(p) = self.paths.get_mut(&info.id) {
                changed |= p.set_rate_cap(now, limit);
            }
        }
        if changed {
            self.scratch_infos.clear();
            for p in self.paths.values().filter(|p| !p.abandoned) {
                self.scratch_infos.push(p.info(now));
            }
        }
    }

    /// Nothing new to send while a fast path has room: copy stream data in flight on much
    /// slower paths onto it when the copy would arrive first. This removes the tail of a
    /// transfer (the last bytes waiting on the slow path) at the cost of a few duplicates.
    fn reinject_tail(&mut self, now: Instant) -> bool {
        if self.streams.is_empty() {
            return false;
        }
        let fast = self
            .paths
            .values()
            .filter(|p| {
                p.usable()
                    && p.pto_count == 0
                    && p.state() == crate::wire::PathState::Active
                    // Not a path the scheduler keeps out of use.
                    && p.rate_cap() != Some(0)
            })
            .filter(|p| p.window_open() && p.pacer_ready_at(now) <= now)
            .min_by_key(|p| p.rtt.smoothed());
        let Some(fast) = fast else { return false };
        let (fast_id, fast_rtt, fast_min) = (fast.id, fast.rtt.smoothed(), fast.rtt.min());
        let mut frames = Vec::new();
        for q in self.paths.values_mut() {
            let q_rtt = q.rtt.smoothed();
            if q.id == fast_id || q.abandoned || q.in_flight == 0 || q_rtt <= fast_rtt * 2 {
                continue;
            }
            // A copy sent now arrives after about fast_rtt/2; the original after q_rtt/2
            // from its send time. Only later originals are worth copying.
            let fast_one_way = fast_rtt.saturating_sub(fast_min / 2);
            let q_one_way = q_rtt.saturating_sub(q.rtt.min() / 2);
            let cutoff = (now + fast_one_way) - q_one_way;
            q.take_for_reinjection(cutoff, &mut frames);
        }
        frames.retain(|f| matches!(f, SentFrame::Stream { .. }));
        if frames.is_empty() {
            return false;
        }
        self.on_frames_lost(now, &frames);
        !self.send_queue.is_empty()
    }

    fn send_ack_only(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let for_path = self
            .paths
            .values()
            .find(|p| p.recv.ack_due(now) && !p.abandoned)
            .map(|p| p.id)?;
        self.refresh_infos(now);
        let offload = self.offload_carrier(now, for_path);
        let carrier = offload
            .or_else(|| self.sched.ack_path(now, for_path, &self.scratch_infos))
            .filter(|c| self.paths.get(c).is_some_and(|p| !p.abandoned))
            .unwrap_or(for_path);
        if !self.amplification_ok(carrier, 64) {
            // Cannot answer yet; forget the urgency, the ACK rides on a later packet.
            if let Some(p) = self.paths.get_mut(&for_path) {
                p.recv.on_ack_sent();
            }
            return None;
        }
        let mut pkt = self.begin(carrier, buf)?;
        self.write_ack(now, for_path, &mut pkt);
        if carrier != for_path {
            self.write_ack(now, carrier, &mut pkt);
        }
        if offload.is_some() {
            // Offloaded ACKs ride under the carrier's congestion control: it learns how
            // many its uplink sustains.
            emit::ping(&mut pkt.w)?;
            pkt.ack_eliciting = true;
            if let Some(p) = self.paths.get_mut(&for_path) {
                p.stats.acks_offloaded += 1;
            }
        }
        self.finish(now, carrier, pkt)
    }

    pub(super) fn send_data(
        &mut self,
        now: Instant,
        pid: PathId,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let mut pkt = self.begin(pid, buf)?;
        self.write_ack(now, pid, &mut pkt);
        self.write_control(&mut pkt);
        self.write_datagrams(now, pid, &mut pkt);
        self.write_streams(pid, &mut pkt);
        if !pkt.ack_eliciting && pkt.frames.is_empty() {
            return None;
        }
        self.finish(now, pid, pkt)
    }
}

use super::Transmit;
