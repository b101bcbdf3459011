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
use crate::cc::{AckEvent, CcAlgorithm, CongestionController, Coupling, RateSample};
use crate::config::Config;
use crate::ids::PathId;
use crate::loss::LossDetector;
use crate::pacer::Pacer;
use crate::ranges::RangeSet;
use crate::rtt::RttEstimator;
use crate::sched::PathInfo;
use crate::stream::StreamId;
use crate::time::Instant;
use crate::wire::{AckFrame, PathState};
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::time::Duration;

/// The pacer's burst, in packets, unless the driver asks for more (`Path::set_max_burst`).
const MIN_MAX_BURST: u64 = 10;

mod detect;
mod owd;

/// Most packets declared lost that are remembered, so a late acknowledgement proves the
/// declaration spurious.
const MAX_DECLARED_LOST: usize = 4096;
/// Most ranges in one ACK frame, and most kept in the receive history.
pub(crate) const MAX_ACK_RANGES: usize = 32;
const MAX_RECV_RANGES: usize = 256;

/// A frame remembered in a sent packet, to act on when the packet is acked or lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SentFrame {
    Stream {
        id: StreamId,
        off: u64,
        len: u32,
        fin: bool,
    },
    Ack {
        path: PathId,
        largest: u64,
    },
    MaxData,
    MaxStreamData(StreamId),
    MaxStreams,
    ResetStream(StreamId),
    StopSending(StreamId),
    PathStatus(PathId),
    PathAbandon(PathId),
    PathBlackout(PathId),
    PathCost(PathId),
    Hello,
    PathChallenge(PathId),
}

/// A packet in flight (or an ack-only packet awaiting its fate).
#[derive(Debug, Clone)]
pub(crate) struct SentPacket {
    /// The path it was sent on.
    pub path: PathId,
    /// Its packet number on that path.
    pub pn: u64,
    pub time_sent: Instant,
    pub size: u32,
    pub ack_eliciting: bool,
    pub in_flight: bool,
    pub frames: SmallVec<[SentFrame; 3]>,
    delivered: u64,
    delivered_time: Instant,
    /// The peer's receive time of the newest delivered packet when this one was sent.
    delivered_peer_us: Option<u64>,
    first_sent_time: Instant,
    is_app_limited: bool,
    /// Its stream data was already queued on other paths after a probe timeout.
    pub reinjected: bool,
    /// Declared lost and judged a random (not a congestion) loss: the window was kept.
    pub random_loss: bool,
    /// The loss episode it was declared lost in (0: none).
    episode: u64,
}

/// Counters of one path, for reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PathStats {
    /// Packets sent.
    pub packets_sent: u64,
    /// UDP payload bytes sent.
    pub bytes_sent: u64,
    /// Packets received.
    pub packets_received: u64,
    /// UDP payload bytes received.
    pub bytes_received: u64,
    /// Packets declared lost.
    pub packets_lost: u64,
    /// Stream bytes sent that had been sent before (on any path).
    pub retransmitted_bytes: u64,
    /// Stream bytes sent for the first time.
    pub stream_bytes_sent: u64,
    /// Probe timeouts.
    pub ptos: u64,
    /// Congestion window now.
    pub cwnd: u64,
    /// Smoothed RTT now, microseconds.
    pub srtt_us: u64,
    /// Losses judged random (isolated, no queue build-up): the window was not cut.
    pub random_losses: u64,
    /// Blackouts confirmed on this path or reported by the peer (the path was frozen).
    pub blackouts: u64,
    /// Acknowledgements of this path carried on another path's uplink (ACK offload).
    pub acks_offloaded: u64,
    /// Packets declared lost and acknowledged after all (reordering, not loss).
    pub spurious_losses: u64,
    /// Window cuts undone because every loss behind them proved spurious.
    pub undone_cuts: u64,
    /// The packet threshold of loss detection now (raised by reordering).
    pub packet_threshold: u64,
}

/// What using a path costs, as set locally or told by the peer (PATH_COST).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PathCost {
    /// Power the interface draws while active, above its idle power, milliwatts.
    pub power_mw: u64,
    /// The path's rate if known, kbit/s at the IP layer (0: unknown, estimate it).
    pub rate_kbps: u64,
}

/// IPv4 and UDP headers, which a rate given at the IP layer also carries.
pub const IP_UDP_OVERHEAD: u64 = 28;

/// A rate at the IP layer (kbit/s) as UDP payload bytes per second for full-size packets
/// of `mss` bytes, the unit the session counts in.
pub fn ip_kbps_to_payload_bytes(kbps: u64, mss: u64) -> u64 {
    let bytes = kbps as u128 * 1000 / 8 * mss as u128 / (mss + IP_UDP_OVERHEAD) as u128;
    u64::try_from(bytes).unwrap_or(u64::MAX)
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
    delivered: u64,
    delivered_time: Instant,
    /// The peer's clock (ACK_TS, microseconds) when the newest delivered packet arrived:
    /// rate samples measure the interval where the bottleneck spaced the packets, not where
    /// a congested return path bunched their acknowledgements.
    delivered_peer_us: Option<u64>,
    first_sent_time: Instant,
    app_limited_until: u64,
    // Receive side.
    recv_pns: RangeSet,
    recv_floor: u64,
    ack_floor: u64,
    largest_recv: Option<(u64, Instant)>,
    ack_eliciting_unacked: u32,
    ack_deadline: Option<Instant>,
    ack_immediate: bool,
    ack_pending: bool,
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
    /// Packets received in the current receive window (about one RTT) and the last full one.
    rx_window: (Instant, u32, u32),
    pub(crate) stats: PathStats,
    /// Summary of all the session's paths, refreshed by the session (coupled controllers).
    pub(crate) coupling: Coupling,
    /// What the path costs (latest of ours and the peer's PATH_COST).
    pub(crate) cost: Option<PathCost>,
    pub(crate) cost_seq: u64,
    pub(crate) peer_cost_seq: u64,
    /// The scheduler's limit on this path: `None` unlimited, `Some(0)` not to be used,
    /// otherwise bytes per second applied to the pacer.
    rate_cap: Option<u64>,
    /// Latest delivery-rate sample: when, bytes per second, application-limited.
    last_rate: Option<(Instant, u64, bool)>,
    /// The transport under the path is reliable and ordered (braid packets over a TCP
    /// connection): nothing is declared lost by threshold, and the controller is BBR.
    pub(crate) reliable: bool,
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
            delivered: 0,
            delivered_time: now,
            delivered_peer_us: None,
            first_sent_time: now,
            // Application-limited until data flows: the first packets (validation, the
            // handshake) are a trickle, not a measure of the path.
            app_limited_until: 1,
            recv_pns: RangeSet::new(),
            recv_floor: 0,
            ack_floor: 0,
            largest_recv: None,
            ack_eliciting_unacked: 0,
            ack_deadline: None,
            ack_immediate: false,
            ack_pending: false,
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
            rx_window: (now, 0, 0),
            stats: PathStats::default(),
            coupling: Coupling::default(),
            cost: None,
            cost_seq: 0,
            peer_cost_seq: 0,
            rate_cap: None,
            last_rate: None,
            reliable: false,
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
        let iw = self.cc.window().max(2 * self.mss);
        self.cc = if reliable {
            CcAlgorithm::Bbr.build(self.mss, iw, now)
        } else {
            cc.build(self.mss, iw, now)
        };
        self.loss_time = None;
        self.refresh_pacer(now);
    }

    /// The largest datagram this path carries (the network driver's per-path limit,
    /// `Session::set_path_max_datagram`; the session's `max_datagram_size` otherwise).
    pub(crate) fn max_datagram(&self) -> usize {
        self.mss as usize
    }

    /// Limit this path's datagrams to `size` bytes: its packets are built no larger, and
    /// its controller and pacer count in packets of that size (the controller is rebuilt
    /// with its window scaled to the new size, `reliable` choosing BBR as
    /// [`Path::set_reliable`] does).
    pub(crate) fn set_max_datagram(&mut self, size: u64, cc: CcAlgorithm, now: Instant) {
        if size == self.mss || size == 0 {
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
        self.pacer.ready_at(now, self.mss)
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
            delivery_rate: self.last_rate,
            rate_cap: self.rate_cap,
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
        if self.in_flight == 0 {
            self.first_sent_time = now;
            self.delivered_time = now;
            self.delivered_peer_us = None;
        }
        let pkt = SentPacket {
            path: self.id,
            pn: self.next_pn,
            time_sent: now,
            size: size as u32,
            ack_eliciting,
            in_flight,
            frames,
            delivered: self.delivered,
            delivered_time: self.delivered_time,
            delivered_peer_us: self.delivered_peer_us,
            first_sent_time: self.first_sent_time,
            // Sent while the application left the path idle: until the mark ends, and also a
            // packet that leaves an empty pipe once the mark's own packets were delivered
            // (a call's packets, each acknowledged before the next; see the regression test
            // `sparse_packets_sent_from_an_idle_path_are_app_limited`).
            is_app_limited: self.app_limited_until > self.delivered
                || (self.app_limited_until != 0 && self.in_flight == 0),
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
        self.app_limited_until = (self.delivered + self.in_flight).max(1);
    }

    // ---- acknowledgements received ----------------------------------------------------

    /// Process an ACK frame for this path. Acknowledged packets go to `acked`, packets
    /// declared lost to `lost`.
    pub(crate) fn on_ack_frame(
        &mut self,
        now: Instant,
        ack: &AckFrame<'_>,
        max_ack_delay: Duration,
        carried_elsewhere: bool,
        acked: &mut Vec<SentPacket>,
        lost: &mut Vec<SentPacket>,
    ) -> bool {
        let first_acked = acked.len();
        let prior_in_flight = self.in_flight;
        let prior_largest = self.largest_acked;
        let spurious = self.on_late_acks(now, ack, acked);
        let first_acked_now = acked.len();
        let end = self.sent_base + self.sent.len() as u64;
        let mut newest: Option<(u64, Instant, bool)> = None;
        let mut rs_prior_delivered = 0u64;
        let mut rs_prior_time = None;
        let mut rs_prior_peer_us = None;
        let mut rs_app_limited = false;
        let mut rs_send_elapsed = Duration::ZERO;
        for r in ack.ranges() {
            let lo = r.start.max(self.sent_base);
            let hi = r.end.min(end);
            for pn in lo..hi {
                let idx = (pn - self.sent_base) as usize;
                let Some(pkt) = self.sent[idx].take() else {
                    continue;
                };
                if newest.is_none_or(|(n, _, _)| pn > n) {
                    newest = Some((pn, pkt.time_sent, pkt.ack_eliciting));
                }
                if let Some(l) = prior_largest.filter(|&l| pn < l) {
                    self.loss.on_reordered(l - pn);
                }
                if pkt.in_flight {
                    self.in_flight -= pkt.size as u64;
                    self.ack_eliciting_in_flight -= 1;
                    self.delivered += pkt.size as u64;
                    self.delivered_time = now;
                    if pkt.delivered >= rs_prior_delivered {
                        rs_prior_delivered = pkt.delivered;
                        rs_prior_time = Some(pkt.delivered_time);
                        rs_prior_peer_us = pkt.delivered_peer_us;
                        rs_app_limited = pkt.is_app_limited;
                        rs_send_elapsed = pkt.time_sent - pkt.first_sent_time;
                        self.first_sent_time = pkt.time_sent;
                    }
                }
                acked.push(pkt);
            }
        }
        let Some((largest_new, largest_sent, eliciting)) = newest else {
            if spurious {
                self.refresh_pacer(now);
            }
            return spurious;
        };
        self.loss.on_delivered(largest_sent, now);
        self.largest_acked = Some(
            self.largest_acked
                .map_or(largest_new, |l| l.max(largest_new)),
        );
        let mut rtt_sample = None;
        let mut fwd_queue = None;
        // An ACK that came back over another path (ACK offload) gives a sample too: the
        // feedback loop it measures is the one loss recovery and pacing must follow.
        if largest_new == ack.largest && eliciting {
            let sample = now - largest_sent;
            let delay = Duration::from_micros(ack.ack_delay_us).min(max_ack_delay);
            self.rtt.update(sample, delay);
            rtt_sample = Some(sample);
            let route = usize::from(carried_elsewhere);
            let m = &mut self.route_min_rtt[route];
            *m = Some(m.map_or(sample, |m| m.min(sample)));
            self.latest_route = route;
            fwd_queue = ack
                .recv_time_us
                .map(|t| self.owd.on_sample(now, largest_sent, t));
        }
        self.pto_count = 0;
        self.pop_front();

        // Delivery-rate sample.
        let mut rate = RateSample {
            delivered: self.delivered,
            prior_delivered: rs_prior_delivered,
            is_app_limited: rs_app_limited,
            delivery_rate: 0.0,
        };
        let peer_now = ack.recv_time_us.filter(|_| largest_new == ack.largest);
        if let Some(prior_time) = rs_prior_time {
            // Where the peer timestamps its ACKs, the interval over which they arrived is
            // taken at the receiver, in its clock.
            let ack_elapsed = match (peer_now, rs_prior_peer_us) {
                (Some(t), Some(p)) => Duration::from_micros(t.saturating_sub(p)),
                _ => self.delivered_time - prior_time,
            };
            let interval = rs_send_elapsed.max(ack_elapsed);
            let bytes = self.delivered - rs_prior_delivered;
            if interval >= self.rtt.min() / 2 && !interval.is_zero() {
                rate.delivery_rate = bytes as f64 / interval.as_secs_f64();
                self.last_rate = Some((now, rate.delivery_rate as u64, rs_app_limited));
            }
        }
        if peer_now.is_some() {
            self.delivered_peer_us = peer_now;
        }
        if self.app_limited_until != 0 && self.delivered > self.app_limited_until {
            self.app_limited_until = 0;
        }
        debug_assert!(first_acked <= first_acked_now);
        let acked_bytes: u64 = acked[first_acked_now..]
            .iter()
            .filter(|p| p.in_flight)
            .map(|p| p.size as u64)
            .sum();

        self.detect_lost(now, lost);
        if acked_bytes > 0 {
            self.cc.on_ack(&AckEvent {
                now,
                acked_bytes,
                largest_acked_sent: largest_sent,
                prior_in_flight,
                in_flight: self.in_flight,
                rtt: &self.rtt,
                rtt_sample,
                fwd_queue,
                rate,
                coupling: self.coupling,
            });
        }
        self.refresh_pacer(now);
        true
    }

    /// Let the pacer release up to `packets` packets at once (at least 10, the default),
    /// as far as 2 ms at the pacing rate allow: a driver that hands the kernel batches of
    /// datagrams (UDP GSO) sets its batch size, so that a batch is not cut at 10.
    pub fn set_max_burst(&mut self, now: Instant, packets: u64) {
        self.max_burst = packets.max(MIN_MAX_BURST);
        self.refresh_pacer(now);
    }

    fn refresh_pacer(&mut self, now: Instant) {
        let cwnd = self.cc.window();
        let cc_rate = self.cc.pacing_rate(&self.rtt);
        let mut max_burst = MIN_MAX_BURST * self.mss;
        if self.max_burst > MIN_MAX_BURST {
            // 2 ms at the controller's rate, as QUIC stacks burst; never below 10 packets.
            let two_ms = cc_rate / 500;
            max_burst = two_ms.clamp(max_burst, self.max_burst * self.mss);
        }
        let burst = cwnd.clamp(2 * self.mss, max_burst);
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

    /// When an acknowledgement of our oldest ack-eliciting packet in flight was due
    /// (`None` when nothing of ours is in flight).
    pub(crate) fn ack_expected(&self, max_ack_delay: Duration) -> Option<Instant> {
        if self.ack_eliciting_in_flight == 0 {
            return None;
        }
        let oldest = self
            .sent
            .iter()
            .flatten()
            .find(|p| p.in_flight && p.ack_eliciting)?;
        Some(oldest.time_sent + self.blackout_wait(max_ack_delay))
    }

    /// How long an answer (an acknowledgement, a probe's reply) may take before the blackout
    /// watch suspects the path: the probe-timeout base, but at most four minimum RTTs (at
    /// least a second). A path that held packets in a queue while it carried nothing (out
    /// of WiFi range) comes back with a smoothed RTT of seconds; waiting that long to
    /// notice its next outage once left a transfer's last bytes on it for a minute.
    pub(crate) fn blackout_wait(&self, max_ack_delay: Duration) -> Duration {
        let base = self.rtt.pto_base(max_ack_delay);
        if !self.rtt.has_sample() {
            return base;
        }
        base.min((self.rtt.min() * 4 + max_ack_delay).max(Duration::from_secs(1)))
    }

    /// A blackout froze the path: forget every packet in flight without a congestion
    /// signal (their frames are returned for resending elsewhere) and without backing off
    /// the probe timer, so the path resumes with the window and timers it had.
    /// Returns false when the path was frozen already (the drain is repeated regardless).
    pub(crate) fn freeze(&mut self, now: Instant, out: &mut Vec<SentPacket>) -> bool {
        let newly = self.watch.freeze(now);
        self.drain_all(out);
        self.pto_count = 0;
        self.last_pto = None;
        self.probes_due = 0;
        newly
    }

    /// The first packet after a blackout arrived: sending resumes at the previous rate.
    pub(crate) fn on_unfrozen(&mut self, now: Instant) {
        self.pto_count = 0;
        self.last_pto = None;
        self.refresh_pacer(now);
    }

    /// Packets received per second lately (0 when the path went quiet).
    pub(crate) fn rx_rate(&self, now: Instant) -> f64 {
        let rtt = self.rtt.smoothed().as_secs_f64().max(1e-6);
        self.rx_per_rtt(now) as f64 / rtt
    }

    /// Packets received per round trip lately (0 when the path went quiet).
    pub(crate) fn rx_per_rtt(&self, now: Instant) -> u32 {
        let (start, _, last) = self.rx_window;
        if now.saturating_since(start) > self.rtt.smoothed() * 2 {
            0
        } else {
            last
        }
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

    /// The loss-detection timer: the time-threshold deadline, or the probe timeout.
    pub(crate) fn loss_timer(&self, cfg: &Config) -> Option<Instant> {
        if let Some(t) = self.loss_time {
            return Some(t);
        }
        if self.ack_eliciting_in_flight == 0 {
            return None;
        }
        // Counted from the last probe timeout too, so a timeout whose probe could not be
        // sent (anti-amplification) does not fire again at once.
        let from = self
            .last_ack_eliciting_sent?
            .max(self.last_pto.unwrap_or(Instant::ZERO));
        Some(from + self.pto_duration(cfg))
    }

    pub(crate) fn pto_duration(&self, cfg: &Config) -> Duration {
        let base = self.rtt.pto_base(cfg.max_ack_delay);
        let backed = base.saturating_mul(1u32 << self.pto_count.min(16));
        backed.min(cfg.max_pto.max(base))
    }

    /// The loss-detection timer fired. Returns true when it was a probe timeout.
    pub(crate) fn on_loss_timer(&mut self, now: Instant, lost: &mut Vec<SentPacket>) -> bool {
        if self.loss_time.is_some_and(|t| t <= now) {
            self.detect_lost(now, lost);
            return false;
        }
        self.pto_count += 1;
        self.last_pto = Some(now);
        self.stats.ptos += 1;
        self.probes_due = 2;
        true
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
        if pn < self.recv_floor || self.recv_pns.contains(pn) {
            return false;
        }
        let in_order = self.largest_recv.is_none_or(|(l, _)| pn == l + 1);
        let gap_before = self.recv_pns.last().is_some_and(|r| r.end < pn) || !in_order;
        self.recv_pns.insert(pn..pn + 1);
        if self.recv_pns.len() > MAX_RECV_RANGES {
            if let Some(r) = self.recv_pns.pop_first() {
                self.recv_floor = r.end;
            }
        }
        if self.largest_recv.is_none_or(|(l, _)| pn > l) {
            self.largest_recv = Some((pn, now));
        }
        let (start, count, _) = self.rx_window;
        if now.saturating_since(start) >= self.rtt.smoothed() {
            self.rx_window = (now, 1, count);
        } else {
            self.rx_window.1 += 1;
        }
        self.last_recv = now;
        if ack_eliciting {
            // Packets that elicit nothing are acknowledged only alongside others.
            self.ack_pending = true;
            self.ack_eliciting_unacked += 1;
            if gap_before || self.ack_eliciting_unacked >= cfg.ack_eliciting_threshold {
                self.ack_immediate = true;
            } else if self.ack_deadline.is_none() {
                self.ack_deadline = Some(now + cfg.max_ack_delay);
            }
        }
        true
    }

    /// An acknowledgement should be sent now.
    pub(crate) fn ack_due(&self, now: Instant) -> bool {
        self.ack_immediate || self.ack_deadline.is_some_and(|d| d <= now)
    }

    /// An acknowledgement could ride along with other frames.
    pub(crate) fn ack_pending(&self) -> bool {
        self.ack_pending
    }

    pub(crate) fn ack_deadline(&self) -> Option<Instant> {
        if self.ack_pending {
            self.ack_deadline
        } else {
            None
        }
    }

    /// The ranges to put in an ACK frame (highest first) and the ack delay in microseconds.
    /// The largest packet number received on this path (0 if none).
    pub(crate) fn largest_received(&self) -> u64 {
        self.largest_recv.map_or(0, |(pn, _)| pn)
    }

    /// The largest of our packet numbers the peer acknowledged on this path.
    pub(crate) fn largest_acked(&self) -> Option<u64> {
        self.largest_acked
    }

    /// The receive time of the largest, in microseconds of our clock, goes in ACK_TS.
    pub(crate) fn ack_contents(
        &self,
        now: Instant,
    ) -> Option<(impl Iterator<Item = std::ops::Range<u64>> + '_, u64, u64)> {
        let (_, t) = self.largest_recv?;
        let floor = self.ack_floor;
        let ranges = self
            .recv_pns
            .iter()
            .rev()
            .take_while(move |r| r.end > floor)
            .map(move |r| r.start.max(floor)..r.end);
        Some((ranges, (now - t).as_micros() as u64, t.as_nanos() / 1000))
    }

    /// An ACK frame for this path was written.
    pub(crate) fn on_ack_sent(&mut self) {
        self.ack_pending = false;
        self.ack_immediate = false;
        self.ack_deadline = None;
        self.ack_eliciting_unacked = 0;
    }

    /// The peer received our ACK frame reporting up to `largest`: later ACK frames need
    /// not repeat anything below it (the duplicate filter still remembers them).
    pub(crate) fn on_ack_acked(&mut self, largest: u64) {
        // Keep `largest` itself so an ACK frame is never empty.
        self.ack_floor = self.ack_floor.max(largest);
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
