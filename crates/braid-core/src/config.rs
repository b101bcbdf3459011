//! Session configuration.
//!
//! Owns: every tunable of a session, with defaults suitable for WAN paths. Must not touch:
//! runtime state.

use crate::cc::CcAlgorithm;
use crate::choices::{DatagramMode, SchedulerKind};
use std::time::Duration;

/// Tunables of a session. `Config::default()` is braid's default stack, what `braid agent`
/// runs and what a simulator variant naming no scheduler or controller runs: minRTT, `bbrq`
/// (BBR whose window keeps the path's standing queue to a few milliseconds) with RACK-style
/// loss detection, blackout freeze and random-loss recovery (measured against the
/// alternatives in docs/results.md, "One default" and "Latency under load").
#[derive(Debug, Clone)]
pub struct Config {
    /// Largest UDP payload the session emits (1500-byte MTU minus IPv4 and UDP headers).
    pub max_datagram_size: usize,
    /// Bytes reserved at the end of every packet for the AEAD tag.
    pub tag_len: usize,
    /// RTT assumed before a path's first sample.
    pub initial_rtt: Duration,
    /// Longest the receiver delays an acknowledgement.
    pub max_ack_delay: Duration,
    /// Acknowledge at once after this many ack-eliciting packets.
    pub ack_eliciting_threshold: u32,
    /// Initial congestion window in packets.
    pub initial_window_packets: u64,
    /// Congestion controller for every path.
    pub cc: CcAlgorithm,
    /// Packet scheduler.
    pub scheduler: SchedulerKind,
    /// Receive window granted per stream.
    pub stream_window: u64,
    /// Receive window granted for the whole session.
    pub session_window: u64,
    /// Streams the peer may open at once.
    pub max_streams: u64,
    /// Bytes an application may buffer unsent per stream before writes are refused.
    pub send_buffer: u64,
    /// Largest DATAGRAM payload accepted from the peer (0 disables datagrams).
    pub max_datagram_payload: usize,
    /// Received datagrams kept for the application before the oldest is dropped; also the
    /// most datagrams queued for sending.
    pub datagram_queue: usize,
    /// How datagrams use the paths (session/dgram.rs). The client's choice holds for both
    /// directions.
    pub datagram_mode: DatagramMode,
    /// A datagram waiting this long to be sent beyond its planned wait (the wait that keeps
    /// arrivals in order over paths of different delay) is dropped: a flow above capacity
    /// loses its excess instead of building a standing queue.
    pub datagram_max_wait: Duration,
    /// Auto mode: a datagram flow is real-time while its last second holds at most this
    /// many packets (`flows.rs`). 200 by default: calls (50/s), games (30-128/s), DNS.
    pub realtime_max_pps: u64,
    /// Auto mode: ... and at most this many payload bits. 300 kbit/s by default (a call of
    /// 50 × 160 bytes per second is 64 kbit/s).
    pub realtime_max_bitrate: u64,
    /// Auto mode: most datagram flows whose rate is tracked at once (1024); the flow heard
    /// from longest ago makes room, and a flow silent for 2 s is forgotten.
    pub flow_table: usize,
    /// Auto mode: copies of real-time datagrams (on the second-lowest-delay path) may add
    /// at most this fraction of the bytes the session sends (0.05), plus
    /// `duplicate_floor`.
    pub duplicate_fraction: f64,
    /// Auto mode: copy bytes per second allowed on top of `duplicate_fraction`, so that a
    /// call on an otherwise idle session is protected too: 16 000 bytes/s (128 kbit/s; a
    /// call of 50 × 160 bytes per second needs 8 000). The budget holds at most one second
    /// of it (at least 16 KiB).
    pub duplicate_floor: u64,
    /// The session ends when no packet arrived on any path for this long.
    pub idle_timeout: Duration,
    /// A path that sent nothing for this long sends a PING (keeps paths and NAT bindings up).
    /// 25 s by default: often enough for NATs seen dropping UDP bindings after 30 s, rarely
    /// enough that an idle cellular radio sleeps (5 s kept a standby 3G radio awake).
    pub keepalive: Duration,
    /// Upper bound of the probe timeout after backoff.
    pub max_pto: Duration,
    /// On an unvalidated path, send at most this many times the bytes received on it.
    pub amplification_factor: u64,
    /// Most paths at once.
    pub max_paths: usize,
    /// Seed for this session's random choices (challenge tokens).
    pub seed: u64,
    /// When nothing new is left to send, copy data in flight on much slower paths onto a
    /// faster one with room (cuts the tail of transfers over unequal paths). Linux MPTCP's
    /// minRTT has no such thing; turn it off to compare with it.
    pub tail_reinjection: bool,
    /// OPERETTA's user utility, 0 (least energy per bit) to 1 (most throughput). Only the
    /// `operetta` scheduler reads it.
    pub alpha: f64,
    /// Super-aggregation: acknowledgements of a path in congestion avoidance may travel on
    /// another path's uplink, as many as that uplink sustains.
    pub ack_offload: bool,
    /// Super-aggregation: a path found in a blackout is frozen (no window cut, no timer
    /// backoff, its data moved to the other paths) until it answers again.
    pub blackout_freeze: bool,
    /// Super-aggregation: an isolated loss without queue build-up is resent on another path
    /// and does not shrink the lossy path's window.
    pub loss_recovery: bool,
    /// Ask the peer (ACK_FREQUENCY, where its HELLO says it follows them) to acknowledge a
    /// path's packets less often as the path's window grows: one acknowledgement per 1/16
    /// of the window, 2 to 64 packets (session/ackfreq.rs). On by default.
    pub ack_frequency: bool,
    /// Find each path's datagram size (DPLPMTUD, `path/pmtud.rs`): start at 1200 bytes of
    /// UDP payload and probe up to the path's limit. Off: every path sends its limit at
    /// once (a path that drops large packets then carries next to nothing).
    pub pmtu_discovery: bool,
    /// How long after a search that stopped below a path's limit it searches upward again
    /// (RFC 8899's raise timer, 600 s).
    pub pmtu_raise_interval: Duration,
}

impl Config {
    /// The keepalive interval in force: `keepalive`, but at most half the idle timeout, so
    /// an idle session always hears from its peer before it would give up.
    pub fn keepalive_interval(&self) -> std::time::Duration {
        self.keepalive.min(self.idle_timeout / 2)
    }

    /// This configuration with `scheduler`; `super` also turns on every super-aggregation
    /// mechanism (each can be turned off again afterwards).
    pub fn with_scheduler(mut self, scheduler: SchedulerKind) -> Config {
        self.scheduler = scheduler;
        if scheduler == SchedulerKind::Super {
            self.ack_offload = true;
            self.blackout_freeze = true;
            self.loss_recovery = true;
        }
        self
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_datagram_size: 1472,
            tag_len: 16,
            initial_rtt: Duration::from_millis(333),
            max_ack_delay: Duration::from_millis(25),
            ack_eliciting_threshold: 2,
            initial_window_packets: 10,
            cc: CcAlgorithm::Bbrq,
            scheduler: SchedulerKind::MinRtt,
            stream_window: 16 << 20,
            session_window: 32 << 20,
            max_streams: 1024,
            send_buffer: 1 << 20,
            max_datagram_payload: 1400,
            datagram_queue: 1024,
            datagram_mode: DatagramMode::Auto,
            datagram_max_wait: Duration::from_millis(25),
            realtime_max_pps: 200,
            realtime_max_bitrate: 300_000,
            flow_table: 1024,
            duplicate_fraction: 0.05,
            duplicate_floor: 16_000,
            idle_timeout: Duration::from_secs(30),
            keepalive: Duration::from_secs(25),
            max_pto: Duration::from_secs(2),
            amplification_factor: 1,
            max_paths: 8,
            seed: 0,
            tail_reinjection: true,
            alpha: 1.0,
            ack_offload: false,
            blackout_freeze: true,
            loss_recovery: true,
            ack_frequency: true,
            pmtu_discovery: true,
            pmtu_raise_interval: Duration::from_secs(600),
        }
    }
}
