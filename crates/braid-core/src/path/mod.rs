//! One path of a session: its packet-number space, loss recovery, RTT, congestion
//! controller, pacer and acknowledgement state.
//!
//! Owns: everything that is per path (RFC 9002 recovery applied to one path, the
//! delivery-rate sampler, the receive-side ACK state, validation tokens, statistics).
//! Must not touch: streams, flow control or other paths. Packets declared acknowledged or
//! lost are handed back to the session, which decides what their frames mean; that is how a
//! lost frame can be resent on any path. Loss detection and spurious losses are in
//! `detect.rs`.

use crate::blackout::BlackoutWatch;
use crate::cc::{AckEvent, CcAlgorithm, CongestionController, Coupling};
use crate::config::Config;
use crate::ids::PathId;
use crate::loss::LossDetector;
use crate::pacer::Pacer;
use crate::rtt::RttEstimator;
use crate::sched::PathInfo;
use crate::time::{Instant, TIMER_GRANULARITY};
use crate::wire::{AckFrame, PathState};
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::time::Duration;

use crate::pacer::MIN_BURST_PACKETS as MIN_MAX_BURST;

mod ack;
mod capacity;
mod detect;
mod mtu;
mod owd;
pub(crate) mod pmtud;
mod rate;
mod recv;
mod sent;
mod stats;
mod timers;

pub(crate) use pmtud::SizeChange;
pub use pmtud::BASE_DATAGRAM;
pub(crate) use sent::{SentFrame, SentPacket};
pub use stats::{ip_kbps_to_payload_bytes, PathCost, PathStats, IP_UDP_OVERHEAD};

/// Most packets declared lost that are remembered, so a late acknowledgement proves the
/// declaration spurious.
const MAX_DECLARED_LOST: usize = 4096;
/// Most ranges in one ACK frame, and most kept in the receive history.
pub(crate) const MAX_ACK_RANGES: usize = 32;

/// The ACK frequency we asked of the peer for one path (session/ackfreq.rs decides).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct AckFrequencyAsked {
    /// Sequence number of the latest request (0: none sent).
    pub seq: u64,
    /// Its ack-eliciting threshold and longest delay; the peer's defaults before any.
    pub asked: Option<(u64, Duration)>,
    /// When it was decided.
    pub at: Option<Instant>,
}

/// One path.
#[derive(Debug)]
pub struct Path {
    /// Identifier.
    pub id: PathId,
    /// How we want this path used.
    pub local_state: PathState,
    /// How the peer asked us to use it.
    pub peer_state: PathState,
    pub(crate) status_seq: u64,
    pub(crate) peer_status_seq: u64,
    /// We received the answer to our challenge on this path.
    pub validated: bool,
    pub(crate) challenge: Option<[u8; 8]>,
    pub(crate) challenge_due: bool,
    pub(crate) challenge_sent: Option<Instant>,
    pub(crate) response_due: Option<[u8; 8]>,
    /// No longer used, by us or by the peer.
    pub abandoned: bool,
    pub(crate) rtt: RttEstimator,
    pub(crate) cc: Box<dyn CongestionController>,
    pacer: Pacer,
    mss: u64,
    /// Most packets the pacer lets out at once when the rate allows (`set_max_burst`).
    max_burst: u64,
    pub(crate) next_pn: u64,
    sent: VecDeque<Option<SentPacket>>,
    sent_base: u64,
    pub(crate) in_flight: u64,
    ack_eliciting_in_flight: u64,
    largest_acked: Option<u64>,
    loss_time: Option<Instant>,
    /// RACK, the reordering window and the spurious-loss undo (see `loss.rs`).
    loss: LossDetector,
    /// Packets declared lost lately (by packet number, with when), kept so a late
    /// acknowledgement is recognised.
    declared_lost: VecDeque<(Instant, SentPacket)>,
    pub(crate) pto_count: u32,
    last_ack_eliciting_sent: Option<Instant>,
    last_pto: Option<Instant>,
    /// Delivery-rate samples (see `rate.rs`).
    rate: rate::DeliveryRate,
    /// The capacity estimate the samples make (see `capacity.rs`).
    capacity: capacity::PathCapacity,
    /// The receive side: packet numbers received, the ACK timer, the receive window.
    pub(crate) recv: recv::AckState,
    pub(crate) last_recv: Instant,
    /// The last sign of life of the path: a packet received on it, or an acknowledgement
    /// of our packets on it (which may come back over another path).
    pub(crate) last_heard: Instant,
    pub(crate) last_sent: Instant,
    pub(crate) bytes_received_unvalidated: u64,
    pub(crate) bytes_sent_unvalidated: u64,
    pub(crate) probes_due: u32,
    /// Blackout detection and the frozen state (super-aggregation).
    pub(crate) watch: BlackoutWatch,
    /// Judge isolated losses without queue build-up random and keep the window.
    pub(crate) random_loss_recovery: bool,
    /// Smallest RTT sample by the ACK's way back (0: on this path, 1: on another, as with
    /// ACK offload), and the way of the latest sample: an RTT rise is judged against
    /// samples that came back the same way.
    route_min_rtt: [Option<Duration>; 2],
    /// The forward direction's one-way delay floor (from the peer's ACK_TS frames).
    owd: owd::OneWayDelay,
    latest_route: usize,
    pub(crate) stats: PathStats,
    /// Summary of all the session's paths, refreshed by the session (coupled controllers).
    pub(crate) coupling: Coupling,
    /// What the path costs (latest of ours and the peer's PATH_COST).
    pub(crate) cost: Option<PathCost>,
    pub(crate) cost_seq: u64,
    pub(crate) peer_cost_seq: u64,
    /// What we asked the peer in our latest ACK_FREQUENCY for this path: its sequence
    /// number, the threshold and delay, and when (session/ackfreq.rs).
    pub(crate) ack_freq: AckFrequencyAsked,
    /// The scheduler's limit on this path: `None` unlimited, `Some(0)` not to be used,
    /// otherwise bytes per second applied to the pacer.
    rate_cap: Option<u64>,
    /// The transport under the path is reliable and ordered (braid packets over a TCP
    /// connection): nothing is declared lost by threshold, and the controller is BBR.
    pub(crate) reliable: bool,
    /// The path's datagram size, found by probing (`pmtud.rs`).
    pub(crate) pmtud: pmtud::Pmtud,
    /// A drop of the datagram size (black hole) the session has not reported yet.
    pub(crate) pmtu_dropped: Option<SizeChange>,
}

impl Path {
    pub(crate) fn new(id: PathId, cfg: &Config, cc: CcAlgorithm, now: Instant) -> Self {
        let mss = cfg.max_datagram_size as u64;
        let iw = cfg.initial_window_packets * mss;
        Path {
            id,
            local_state: PathState::Active,
            peer_state: PathState::Active,
            status_seq: 0,
            peer_status_seq: 0,
            validated: false,
            challenge: None,
            challenge_due: false,
            challenge_sent: None,
            response_due: None,
            abandoned: false,
            rtt: RttEstimator::new(cfg.initial_rtt),
            cc: cc.build(mss, iw, now),
            pacer: Pacer::new(iw, now),
            mss,
            max_burst: MIN_MAX_BURST,
            next_pn: 0,
            sent: VecDeque::new(),
            sent_base: 0,
            in_flight: 0,
            ack_eliciting_in_flight: 0,
            largest_acked: None,
            loss_time: None,
            loss: LossDetector::default(),
            declared_lost: VecDeque::new(),
            pto_count: 0,
            last_ack_eliciting_sent: None,
            last_pto: None,
            rate: rate::DeliveryRate::new(now),
            capacity: capacity::PathCapacity::default(),
            recv: recv::AckState::new(now),
            last_recv: now,
            last_heard: now,
            last_sent: now,
            bytes_received_unvalidated: 0,
            bytes_sent_unvalidated: 0,
            probes_due: 0,
            watch: BlackoutWatch::default(),
            random_loss_recovery: cfg.loss_recovery,
            route_min_rtt: [None; 2],
            owd: owd::OneWayDelay::default(),
            latest_route: 0,
            stats: PathStats::default(),
            coupling: Coupling::default(),
            cost: None,
            cost_seq: 0,
            peer_cost_seq: 0,
            ack_freq: AckFrequencyAsked::default(),
            rate_cap: None,
            reliable: false,
            pmtud: pmtud::Pmtud::new(mss as usize, cfg.pmtu_raise_interval, cfg.pmtu_discovery),
            pmtu_dropped: None,
        }
    }

    /// Say whether the transport under the path is reliable (a TCP connection, which
    /// neither loses nor reorders; it only delays). A reliable path declares nothing lost
    /// by the packet or time threshold: a late acknowledgement there is TCP recovering a
    /// segment, and treating it as loss would resend what is already on its way and cut
    /// the window for nothing. Its data leaves only through acknowledgement, the probe
    /// timeout's reinjection on other paths, or the path's abandonment. Without loss a
    /// loss-based controller would grow its window without end into the TCP socket's
    /// buffer, so the path's controller becomes BBR, which caps the data in flight at
    /// twice its bandwidth-delay estimate; back to `cc` when the path is no longer
    /// reliable.
    pub(crate) fn set_reliable(&mut self, reliable: bool, cc: CcAlgorithm, now: Instant) {
        if self.reliable == reliable {
            return;
        }
        self.reliable = reliable;
        // TCP carries packets of any size: nothing to discover.
        self.pmtud.set_enabled(!reliable);
        let iw = self.cc.window().max(2 * self.mss);
        self.cc = if reliable {
            CcAlgorithm::Bbr.build(self.mss, iw, now)
        } else {
            cc.build(self.mss, iw, now)
        };
        self.loss_time = None;
        self.refresh_pacer(now);
    }

    /// The largest datagram this path carries now: the size its discovery confirmed
    /// (`pmtud.rs`), at most the network driver's per-path limit
    /// (`Session::set_path_max_datagram`; the session's `max_datagram_size` otherwise).
    pub(crate) fn max_datagram(&self) -> usize {
        self.pmtud.current()
    }

    /// Limit this path's datagrams to `size` bytes: discovery searches up to it, and the
    /// controller and pacer count in packets of that size (the controller is rebuilt
    /// with its window scaled to the new size, `reliable` choosing BBR as
    /// [`Path::set_reliable`] does).
    pub(crate) fn set_max_datagram(&mut self, size: u64, cc: CcAlgorithm, now: Instant) {
        if size == 0 {
            return;
        }
        self.pmtud.set_ceiling(size as usize);
        if size == self.mss {
            return;
        }
        let iw = (self.cc.window() * size / self.mss).max(2 * size);
        self.mss = size;
        let algo = if self.reliable { CcAlgorithm::Bbr } else { cc };
        self.cc = algo.build(size, iw, now);
        self.refresh_pacer(now);
    }

    /// A PATH_COST that arrived before the path existed.
    pub(crate) fn adopt_early_cost(&mut self, early: Option<(u64, PathCost)>) {
        if let Some((seq, cost)) = early {
            if seq > self.peer_cost_seq {
                self.peer_cost_seq = seq;
                self.cost = Some(cost);
            }
        }
    }

    /// The scheduler's rate limit for this path (see [`crate::sched::RateLimit`]).
    pub(crate) fn rate_cap(&self) -> Option<u64> {
        self.rate_cap
    }

    /// Apply the scheduler's limit; the pacer follows at once. True when it changed.
    pub(crate) fn set_rate_cap(&mut self, now: Instant, cap: Option<u64>) -> bool {
        if self.rate_cap == cap {
            return false;
        }
        self.rate_cap = cap;
        self.refresh_pacer(now);
        true
    }

    /// The stricter of our state and the peer's request.
    pub fn state(&self) -> PathState {
        use PathState::*;
        match (self.local_state, self.peer_state) {
            (Frozen, _) | (_, Frozen) => Frozen,
            (Standby, _) | (_, Standby) => Standby,
            _ => Active,
        }
    }

    /// Validated, not abandoned and not frozen by a blackout.
    pub fn usable(&self) -> bool {
        self.validated && !self.abandoned && !self.watch.frozen()
    }

    /// Frozen by a confirmed blackout.
    pub fn frozen(&self) -> bool {
        self.watch.frozen()
    }

    /// Room in the congestion window for another packet.
    pub(crate) fn window_open(&self) -> bool {
        self.in_flight < self.cc.window()
    }

    /// When the pacer lets a full packet leave.
    pub(crate) fn pacer_ready_at(&self, now: Instant) -> Instant {
        self.pacer.ready_at(now, self.max_datagram() as u64)
    }

    /// A read-only view for schedulers.
    pub(crate) fn info(&self, now: Instant) -> PathInfo {
        PathInfo {
            id: self.id,
            state: self.state(),
            usable: self.usable(),
            potentially_failed: self.pto_count > 0,
            srtt: self.rtt.smoothed(),
            min_rtt: self.rtt.min(),
            rttvar: self.rtt.var(),
            cwnd: self.cc.window(),
            in_flight: self.in_flight,
            pacing_rate: self.cc.pacing_rate(&self.rtt),
            send_ready: self.window_open() && self.pacer_ready_at(now) <= now,
            power_mw: self.cost.map(|c| c.power_mw),
            rate_hint: self
                .cost
                .filter(|c| c.rate_kbps > 0)
                .map(|c| ip_kbps_to_payload_bytes(c.rate_kbps, self.mss)),
            delivery_rate: self.rate.last_rate(),
            rate_cap: self.rate_cap,
            capacity: self.capacity.view(),
        }
    }

    /// Statistics, with the current window and RTT filled in.
    pub fn stats(&self) -> PathStats {
        let mut s = self.stats;
        s.blackouts = self.watch.freezes;
        s.cwnd = self.cc.window();
        s.srtt_us = self.rtt.smoothed().as_micros() as u64;
        s.spurious_losses = self.loss.spurious;
        s.undone_cuts = self.loss.undone;
        s.packet_threshold = self.loss.packet_threshold();
        s.datagram_size = self.pmtud.current() as u64;
        s.datagram_black_holes = self.pmtud.black_holes;
        s
    }

    // ---- sending ----------------------------------------------------------------------

    /// Record a packet just sent.
    pub(crate) fn on_sent(
        &mut self,
        now: Instant,
        size: usize,
        ack_eliciting: bool,
        probe: bool,
        frames: SmallVec<[SentFrame; 3]>,
    ) {
        // Probes of a frozen path are not congestion-controlled: their loss says nothing
        // about congestion and must not shrink the window the path resumes with.
        let in_flight = ack_eliciting && !probe;
        let stamp = self.rate.on_sent(now, self.in_flight);
        let pkt = SentPacket {
            path: self.id,
            pn: self.next_pn,
            time_sent: now,
            size: size as u32,
            ack_eliciting,
            in_flight,
            frames,
            stamp,
            reinjected: false,
            random_loss: false,
            episode: 0,
        };
        if self.sent.is_empty() {
            self.sent_base = self.next_pn;
        }
        self.sent.push_back(Some(pkt));
        self.next_pn += 1;
        self.last_sent = now;
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += size as u64;
        if !self.validated {
            self.bytes_sent_unvalidated += size as u64;
        }
        if in_flight {
            self.in_flight += size as u64;
            self.ack_eliciting_in_flight += 1;
            self.last_ack_eliciting_sent = Some(now);
            self.pacer.on_sent(now, size as u64);
            self.cc.on_sent(now, size as u64, self.in_flight);
        }
    }

    /// The sender had nothing to send while this path had window space.
    pub(crate) fn mark_app_limited(&mut self) {
        self.rate.mark_app_limited(self.in_flight);
    }

    /// Say that the driver sends batches of up to `packets` datagrams (UDP GSO) on timers of
    /// [`TIMER_GRANULARITY`]: the pacer then lets out what 2 ms at the pacing rate allow
    /// (at least 10 packets, the default burst), so that neither a batch nor a late timer
    /// cuts the rate.
    pub fn set_max_burst(&mut self, now: Instant, packets: u64) {
        self.max_burst = packets.max(MIN_MAX_BURST);
        self.refresh_pacer(now);
    }

    fn refresh_pacer(&mut self, now: Instant) {
        let cwnd = self.cc.window();
        let cc_rate = self.cc.pacing_rate(&self.rtt);
        // In packets of the size in use (discovery may still be below the route's limit).
        let pkt = self.max_datagram() as u64;
        let mut max_burst = MIN_MAX_BURST * pkt;
        if self.max_burst > MIN_MAX_BURST {
            // A driver whose timers fire up to TIMER_GRANULARITY late (tokio: 1 ms) and that
            // sends in batches: the bucket holds what two granularities at the controller's
            // rate allow, never fewer than 10 packets, so that a late timer never costs
            // rate. (Capped at one batch, 64 datagrams, a path paced at more than 94 kB per
            // millisecond ran no faster than that where nothing but the timer woke it: 750
            // Mbit/s on a gigabit link.)
            let ticks = cc_rate as f64 * 2.0 * TIMER_GRANULARITY.as_secs_f64();
            max_burst = max_burst.max(ticks as u64);
        }
        let burst = cwnd.clamp(2 * pkt, max_burst);
        let rate = match self.rate_cap {
            // The scheduler's cap; the controller's own rate when lower (0: no pacing).
            Some(cap) if cap > 0 => {
                if cc_rate == 0 {
                    cap
                } else {
                    cc_rate.min(cap)
                }
            }
            _ => cc_rate,
        };
        self.pacer.set(now, rate, burst);
    }

    fn pop_front(&mut self) {
        while matches!(self.sent.front(), Some(None)) {
            self.sent.pop_front();
            self.sent_base += 1;
        }
    }

    /// Packets received per second lately (0 when the path went quiet).
    pub(crate) fn rx_rate(&self, now: Instant) -> f64 {
        let rtt = self.rtt.smoothed().as_secs_f64().max(1e-6);
        self.rx_per_rtt(now) as f64 / rtt
    }

    /// Packets received per round trip lately (0 when the path went quiet).
    pub(crate) fn rx_per_rtt(&self, now: Instant) -> u32 {
        self.recv.rx_per_rtt(now, self.rtt.smoothed())
    }

    /// Every packet still in flight is given up (the path is abandoned).
    pub(crate) fn drain_all(&mut self, out: &mut Vec<SentPacket>) {
        for p in self.sent.drain(..).flatten() {
            out.push(p);
        }
        self.sent_base = self.next_pn;
        self.in_flight = 0;
        self.ack_eliciting_in_flight = 0;
        self.loss_time = None;
        self.declared_lost.clear();
    }

    /// Frames of packets in flight sent after `sent_after` whose stream data has not been
    /// reinjected yet; marks them.
    pub(crate) fn take_for_reinjection(&mut self, sent_after: Instant, out: &mut Vec<SentFrame>) {
        // Newest first: stop at the first packet sent before the cutoff.
        for p in self.sent.iter_mut().rev().flatten() {
            if p.time_sent < sent_after {
                break;
            }
            if p.in_flight && !p.reinjected {
                p.reinjected = true;
                out.extend(p.frames.iter().copied());
            }
        }
    }

    // ---- packets received -------------------------------------------------------------

    /// Record a received packet number. Returns false for a duplicate (drop the packet).
    pub(crate) fn on_received(
        &mut self,
        now: Instant,
        pn: u64,
        ack_eliciting: bool,
        cfg: &Config,
    ) -> bool {
        let srtt = self.rtt.smoothed();
        if !self.recv.on_received(now, pn, ack_eliciting, srtt, cfg) {
            return false;
        }
        self.last_recv = now;
        true
    }

    /// The largest of our packet numbers the peer acknowledged on this path.
    pub(crate) fn largest_acked(&self) -> Option<u64> {
        self.largest_acked
    }

    pub(crate) fn record_received_bytes(&mut self, n: usize) {
        self.stats.packets_received += 1;
        self.stats.bytes_received += n as u64;
        if !self.validated {
            self.bytes_received_unvalidated += n as u64;
        }
    }
}

#[cfg(test)]
mod tests;
