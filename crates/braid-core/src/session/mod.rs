//! A session between two endpoints over 1 to 8 paths: the public face of the core.
//!
//! Owns: the set of paths, the streams and their connection-level flow control, datagram
//! queues, control frames waiting to be sent, the timer table and application events.
//! Must not touch: sockets, clocks or global randomness — every input carries `now`, every
//! output is a datagram tagged with its path (`poll_transmit`) or a deadline
//! (`poll_timeout`). The simulator and the network driver drive this same type.
//!
//! Inputs: [`Session::handle_datagram`], [`Session::handle_timeout`] and the application
//! calls (streams, datagrams, paths). Outputs: [`Session::poll_transmit`],
//! [`Session::poll_timeout`], [`Session::poll_event`].

mod ackfreq;
mod dgram;
mod names;
mod pathmap;
mod paths;
mod recv;
mod send;
mod streams;
mod superagg;
#[cfg(test)]
mod test_wire;
mod timers;

use crate::config::Config;
use crate::ids::PathId;
use crate::path::{Path, PathStats, SentFrame, SentPacket};
use crate::rng::Rng;
use crate::sched::{PathInfo, Scheduler};
use crate::stream::{initiated_by_client, RecvStream, SendStream, StreamError, StreamId};
use crate::time::Instant;
use crate::wire::{HelloParams, PathState};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use timers::TimerTable;

pub use dgram::DatagramMode;
/// Auto mode: what the duplicate budget holds at least when full, bytes.
pub const DUPLICATE_BUDGET_MIN_CAP: u64 = dgram::DUPLICATE_BUDGET_MIN_CAP;
pub use paths::PathError;
/// The smallest per-path datagram limit a driver may set
/// ([`Session::set_path_max_datagram`]): IPv6's minimum MTU of 1280 less its IP and UDP
/// headers.
pub const MIN_PATH_DATAGRAM: usize = 1232;
pub use send::BatchTransmit;

/// Which end of the session this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Opens the session and numbers the paths (the agent).
    Client,
    /// Accepts sessions (the server proxy).
    Server,
}

/// Why a session ended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// No packet arrived on any path for the idle timeout.
    #[error("no path has been usable for {0:?}; the session timed out")]
    TimedOut(std::time::Duration),
    /// The peer closed the session.
    #[error("peer closed the session (code {code}): {reason}")]
    PeerClosed { code: u64, reason: String },
    /// This end closed the session.
    #[error("session closed locally (code {code}): {reason}")]
    LocallyClosed { code: u64, reason: String },
    /// The peer broke the protocol; the session was closed.
    #[error("protocol violation by the peer: {0}")]
    ProtocolViolation(String),
}

/// Error codes carried in CLOSE frames.
pub mod close_code {
    /// Orderly close.
    pub const NO_ERROR: u64 = 0;
    /// Malformed frame or forbidden value.
    pub const PROTOCOL_VIOLATION: u64 = 1;
    /// Flow-control limit exceeded.
    pub const FLOW_CONTROL: u64 = 2;
    /// Too many streams opened.
    pub const STREAM_LIMIT: u64 = 3;
    /// Idle timeout.
    pub const TIMEOUT: u64 = 4;
}

/// Something the application should know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The handshake completed; streams may be opened.
    Established,
    /// A path passed validation and may carry data.
    PathValidated(PathId),
    /// A path was abandoned (by either end).
    PathClosed(PathId),
    /// Full-size packets of a path fell into a black hole (lost while smaller ones got
    /// through): its datagram size dropped from `from` to `to` bytes of UDP payload, and
    /// discovery searches upward again.
    PathDatagramSizeDropped {
        path: PathId,
        from: usize,
        to: usize,
    },
    /// The peer opened a stream.
    StreamOpened(StreamId),
    /// Data (or the end of the stream) can be read.
    StreamReadable(StreamId),
    /// A stream that refused writes accepts them again.
    StreamWritable(StreamId),
    /// Everything written on a finished stream was acknowledged.
    StreamSent(StreamId),
    /// The peer reset its sending side.
    StreamReset { id: StreamId, code: u64 },
    /// The peer asked us to stop sending.
    StreamStopped { id: StreamId, code: u64 },
    /// A datagram arrived.
    DatagramReceived,
    /// The session ended.
    Closed(SessionError),
}

/// A datagram to send: `len` bytes of the caller's buffer, on `path`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Path to send on.
    pub path: PathId,
    /// Bytes written into the buffer passed to `poll_transmit`.
    pub len: usize,
}

/// Where a path is in its life (see [`Session::path_condition`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PathCondition {
    /// Passed validation.
    pub validated: bool,
    /// Abandoned (removed by either side); kept until the session ends.
    pub abandoned: bool,
    /// Frozen by a confirmed blackout (no data until a packet arrives on it again).
    pub frozen: bool,
    /// When a packet last arrived on it (its creation before the first).
    pub last_received: Instant,
}

/// Session-wide counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionStats {
    /// Stream bytes sent more than once (on any path).
    pub retransmitted_bytes: u64,
    /// Datagrams dropped because the queue was full or the payload too big.
    pub datagrams_dropped: u64,
    /// Second copies of redundant or real-time datagrams, dropped on arrival.
    pub datagram_copies: u64,
    /// Auto mode: datagrams of real-time flows sent (first copies).
    pub realtime_datagrams: u64,
    /// Auto mode: second copies of real-time datagrams sent.
    pub duplicates_sent: u64,
    /// Auto mode: payload bytes of those copies.
    pub duplicate_bytes: u64,
    /// Auto mode: copies a second path could have carried but the budget refused.
    pub duplicates_refused: u64,
    /// Packets that could not be parsed and were dropped.
    pub malformed_packets: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Handshaking,
    Established,
    /// CLOSE must still be sent on each path.
    Closing,
    Closed,
}

#[derive(Debug)]
struct StreamState {
    send: SendStream,
    recv: RecvStream,
    queued: bool,
    blocked_write: bool,
    readable_signalled: bool,
    sent_signalled: bool,
}

/// Control frames waiting for a packet.
#[derive(Debug, Default)]
struct Pending {
    hello: bool,
    max_data: bool,
    max_streams: bool,
    max_stream_data: BTreeSet<StreamId>,
    reset_stream: BTreeSet<StreamId>,
    stop_sending: BTreeSet<StreamId>,
    path_status: BTreeSet<PathId>,
    path_abandon: BTreeSet<PathId>,
    /// Paths whose confirmed blackout the peer must hear about.
    path_blackout: BTreeSet<PathId>,
    path_cost: BTreeSet<PathId>,
    path_name: BTreeSet<PathId>,
    /// Paths whose ACK_FREQUENCY request the peer must hear (session/ackfreq.rs).
    ack_frequency: BTreeSet<PathId>,
}

impl Pending {
    fn any(&self) -> bool {
        self.hello
            || self.max_data
            || self.max_streams
            || !self.max_stream_data.is_empty()
            || !self.reset_stream.is_empty()
            || !self.stop_sending.is_empty()
            || !self.path_status.is_empty()
            || !self.path_abandon.is_empty()
            || !self.path_blackout.is_empty()
            || !self.path_cost.is_empty()
            || !self.path_name.is_empty()
            || !self.ack_frequency.is_empty()
    }
}

/// One multipath session.
#[derive(Debug)]
pub struct Session {
    side: Side,
    cfg: Config,
    id: u64,
    state: State,
    error: Option<SessionError>,
    close_frame: Option<(u64, String)>,
    close_sent_on: BTreeSet<PathId>,
    paths: pathmap::PathMap,
    /// The path the client's handshake goes on.
    first_path: PathId,
    sched: Box<dyn Scheduler>,
    rng: Rng,
    streams: BTreeMap<StreamId, StreamState>,
    send_queue: VecDeque<StreamId>,
    next_local_stream: u64,
    next_peer_stream: u64,
    local_max_streams: u64,
    peer_max_streams: u64,
    peer_params: Option<HelloParams>,
    // Connection flow control.
    peer_max_data: u64,
    sent_new_data: u64,
    local_max_data: u64,
    received_data: u64,
    consumed_data: u64,
    datagrams_out: dgram::Outbox,
    /// Auto mode: real-time datagrams, their flows' classes and the copies' budget.
    realtime_out: dgram::RtQueue,
    flows: crate::flows::Classifier,
    dup_budget: dgram::DupBudget,
    datagrams_seen: dgram::Dedup,
    datagrams_in: VecDeque<Bytes>,
    pending: Pending,
    events: VecDeque<Event>,
    timers: TimerTable,
    last_recv: Instant,
    stats: SessionStats,
    // Scratch space reused across calls.
    scratch_acked: Vec<SentPacket>,
    scratch_lost: Vec<SentPacket>,
    scratch_infos: Vec<PathInfo>,
    /// Stream ranges lost at random on one path, to resend on another (loss recovery).
    fetch: VecDeque<superagg::Fetch>,
    scratch_limits: Vec<(PathId, crate::sched::RateLimit)>,
    /// PATH_COST received for paths this end does not know yet (the frame may travel on
    /// another path and arrive first), applied when the path appears.
    early_costs: BTreeMap<PathId, (u64, crate::path::PathCost)>,
    /// Redundant scheduler: per (path, stream), the stream offset up to which the path
    /// carried the data (`send/redundant.rs`).
    redundant_sent: BTreeMap<(PathId, StreamId), u64>,
    /// Path ids whose transport the driver says is reliable (TCP), kept across a path's
    /// incarnations (`set_path_reliable`).
    reliable: BTreeSet<PathId>,
    /// Path ids whose PATH_ABANDON is on its way (sent, neither acknowledged nor lost).
    /// A path re-added under such an id holds its challenge until the peer has the
    /// abandonment: the abandonment may travel on another path and arrive after the new
    /// incarnation's first packets, and would then end the new incarnation at the peer.
    abandon_in_flight: BTreeSet<PathId>,
    /// Path ids whose datagrams the driver limited below `max_datagram_size` (their
    /// address family's or interface's MTU), kept across incarnations
    /// (`set_path_max_datagram`).
    max_datagrams: BTreeMap<PathId, usize>,
    /// A packet `poll_transmit_batch` made but could not add to its batch: the next
    /// `poll_transmit` or `poll_transmit_batch` returns it first.
    stash: send::Stash,
    /// The pacers' burst in packets (`set_max_burst`; 10 unless a driver asks for more).
    max_burst: u64,
    /// Path names, both ends' (`names`).
    names: names::PathNames,
}

impl Session {
    fn new(side: Side, cfg: Config, id: u64, now: Instant) -> Session {
        let sched = cfg.scheduler.build_with(&cfg);
        let rng = Rng::new(cfg.seed ^ id ^ if side == Side::Client { 0 } else { 0x5555 });
        Session {
            side,
            id,
            state: State::Handshaking,
            error: None,
            close_frame: None,
            close_sent_on: BTreeSet::new(),
            paths: pathmap::PathMap::default(),
            first_path: 0,
            sched,
            rng,
            streams: BTreeMap::new(),
            send_queue: VecDeque::new(),
            next_local_stream: 0,
            next_peer_stream: 0,
            local_max_streams: cfg.max_streams,
            peer_max_streams: 0,
            peer_params: None,
            peer_max_data: 0,
            sent_new_data: 0,
            local_max_data: cfg.session_window,
            received_data: 0,
            consumed_data: 0,
            datagrams_out: dgram::Outbox::new(cfg.datagram_queue),
            realtime_out: dgram::RtQueue::new(cfg.datagram_queue),
            flows: crate::flows::Classifier::new(crate::flows::FlowLimits::from_config(&cfg)),
            dup_budget: dgram::DupBudget::new(cfg.duplicate_fraction, cfg.duplicate_floor),
            datagrams_seen: dgram::Dedup::default(),
            datagrams_in: VecDeque::new(),
            pending: Pending::default(),
            events: VecDeque::new(),
            timers: TimerTable::default(),
            last_recv: now,
            stats: SessionStats::default(),
            scratch_acked: Vec::new(),
            scratch_lost: Vec::new(),
            scratch_infos: Vec::new(),
            fetch: VecDeque::new(),
            scratch_limits: Vec::new(),
            early_costs: BTreeMap::new(),
            redundant_sent: BTreeMap::new(),
            reliable: BTreeSet::new(),
            abandon_in_flight: BTreeSet::new(),
            max_datagrams: BTreeMap::new(),
            stash: send::Stash::default(),
            max_burst: 10,
            names: names::PathNames::default(),
            cfg,
        }
    }

    /// Open a session as the client, sending the handshake on `first_path`.
    pub fn connect(cfg: Config, now: Instant, session_id: u64, first_path: PathId) -> Session {
        let mut s = Session::new(Side::Client, cfg, session_id, now);
        s.pending.hello = true;
        s.first_path = first_path;
        s.insert_path(now, first_path);
        s.state_changed(now);
        s
    }

    /// Accept a session as the server. The first datagram received for a new session id
    /// must be handed to [`Session::handle_datagram`] right after this.
    pub fn accept(cfg: Config, now: Instant, session_id: u64) -> Session {
        Session::new(Side::Server, cfg, session_id, now)
    }

    /// The session id carried in every packet header.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Client or server.
    pub fn side(&self) -> Side {
        self.side
    }

    /// The configuration this session runs with.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// True once the handshake completed and until the session closes.
    pub fn is_established(&self) -> bool {
        self.state == State::Established
    }

    /// True once the session ended (for any reason).
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed | State::Closing)
    }

    /// Why the session ended, once it did.
    pub fn error(&self) -> Option<&SessionError> {
        self.error.as_ref()
    }

    /// Next thing the application should know about.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Stream bytes received from the peer that the application has not read yet: what the
    /// session's receive window (`Config::session_window`) bounds.
    pub fn buffered_bytes(&self) -> u64 {
        self.received_data.saturating_sub(self.consumed_data)
    }

    /// Counters.
    pub fn stats(&self) -> SessionStats {
        let mut s = self.stats;
        s.retransmitted_bytes = self
            .paths
            .values()
            .map(|p| p.stats.retransmitted_bytes)
            .sum();
        s
    }

    // ---- datagrams ----------------------------------------------------------------------

    /// Queue an unreliable datagram of flow 0 ([`Session::send_flow_datagram`]: all
    /// datagrams sent this way are one flow).
    pub fn send_datagram(&mut self, now: Instant, data: Bytes) -> Result<(), DatagramError> {
        self.send_flow_datagram(now, 0, data)
    }

    /// Next received datagram.
    pub fn recv_datagram(&mut self) -> Option<Bytes> {
        self.datagrams_in.pop_front()
    }

    // ---- closing ------------------------------------------------------------------------

    /// Close the session: a CLOSE frame goes out on every path, then nothing more.
    pub fn close(&mut self, now: Instant, code: u64, reason: &str) {
        if self.is_closed() {
            return;
        }
        self.fail(
            SessionError::LocallyClosed {
                code,
                reason: reason.to_string(),
            },
            code,
            reason,
        );
        self.state_changed(now);
    }

    fn fail(&mut self, err: SessionError, code: u64, reason: &str) {
        if self.is_closed() {
            return;
        }
        self.close_frame = Some((code, reason.chars().take(200).collect()));
        self.state = State::Closing;
        self.events.push_back(Event::Closed(err.clone()));
        self.error = Some(err);
    }

    fn protocol_violation(&mut self, code: u64, what: &str) {
        self.fail(
            SessionError::ProtocolViolation(what.to_string()),
            code,
            what,
        );
    }

    // ---- frames acknowledged or lost ----------------------------------------------------

    fn on_frames_acked(&mut self, frames: &[SentFrame]) {
        for f in frames {
            match *f {
                SentFrame::Stream { id, off, len, fin } => {
                    if let Some(st) = self.streams.get_mut(&id) {
                        st.send.on_acked(off..off + len as u64, fin);
                        if st.blocked_write && st.send.writable() > 0 {
                            st.blocked_write = false;
                            self.events.push_back(Event::StreamWritable(id));
                        }
                        if st.send.is_done() && st.send.reset.is_none() && !st.sent_signalled {
                            st.sent_signalled = true;
                            self.events.push_back(Event::StreamSent(id));
                        }
                        self.gc_stream(id);
                    }
                }
                SentFrame::Ack { path, largest } => {
                    if let Some(p) = self.paths.get_mut(&path) {
                        p.recv.on_ack_acked(largest);
                    }
                }
                SentFrame::Hello => {}
                SentFrame::PathAbandon(p) => {
                    self.abandon_in_flight.remove(&p);
                }
                _ => {}
            }
        }
    }

    fn on_frames_lost(&mut self, _now: Instant, frames: &[SentFrame]) {
        for f in frames {
            match *f {
                SentFrame::Stream { id, off, len, fin } => {
                    if let Some(st) = self.streams.get_mut(&id) {
                        if st.send.on_lost(off..off + len as u64, fin) && !st.queued {
                            st.queued = true;
                            self.send_queue.push_back(id);
                        }
                    }
                }
                SentFrame::Ack { .. } => {}
                SentFrame::MaxData => self.pending.max_data = true,
                SentFrame::MaxStreams => self.pending.max_streams = true,
                SentFrame::MaxStreamData(id) => {
                    if self
                        .streams
                        .get(&id)
                        .is_some_and(|s| s.recv.final_size.is_none())
                    {
                        self.pending.max_stream_data.insert(id);
                    }
                }
                SentFrame::ResetStream(id) => {
                    if self.streams.contains_key(&id) {
                        self.pending.reset_stream.insert(id);
                    }
                }
                SentFrame::StopSending(id) => {
                    if self.streams.contains_key(&id) {
                        self.pending.stop_sending.insert(id);
                    }
                }
                SentFrame::PathStatus(p) => {
                    self.pending.path_status.insert(p);
                }
                SentFrame::PathName(p) => self.name_lost(p),
                SentFrame::AckFrequency(p, seq) => self.ack_frequency_lost(p, seq),
                SentFrame::PathCost(p) => {
                    if self.paths.get(&p).is_some_and(|p| !p.abandoned) {
                        self.pending.path_cost.insert(p);
                    }
                }
                SentFrame::PathAbandon(p) => {
                    // Sent again while the path stays abandoned; moot if it was re-added
                    // (the peer did not get it, as far as this end can tell).
                    self.abandon_in_flight.remove(&p);
                    if self.paths.get(&p).is_some_and(|p| p.abandoned) {
                        self.pending.path_abandon.insert(p);
                    }
                }
                SentFrame::PathBlackout(p) => {
                    if self
                        .paths
                        .get(&p)
                        .is_some_and(|p| p.frozen() && !p.abandoned)
                    {
                        self.pending.path_blackout.insert(p);
                    }
                }
                SentFrame::PathChallenge(p) => {
                    if let Some(p) = self.paths.get_mut(&p) {
                        if !p.validated && !p.abandoned && p.challenge.is_some() {
                            p.challenge_due = true;
                        }
                    }
                }
                SentFrame::Hello => {
                    if self.side == Side::Client && self.state == State::Handshaking
                        || self.side == Side::Server
                    {
                        self.pending.hello = true;
                    }
                }
            }
        }
    }

    fn process_acked_and_lost(&mut self, now: Instant) {
        let mut acked = std::mem::take(&mut self.scratch_acked);
        let mut lost = std::mem::take(&mut self.scratch_lost);
        for p in acked.drain(..) {
            self.on_frames_acked(&p.frames);
        }
        for p in lost.drain(..) {
            if p.random_loss {
                self.route_random_loss(now, &p);
            } else {
                self.on_frames_lost(now, &p.frames);
            }
        }
        self.scratch_acked = acked;
        self.scratch_lost = lost;
        self.report_pmtu_drops();
    }
}

/// Errors of sending a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DatagramError {
    /// Larger than the peer accepts or than fits in one packet.
    #[error("datagram of {len} bytes exceeds the limit of {max}")]
    TooLarge { len: usize, max: usize },
}
