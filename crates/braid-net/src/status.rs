//! Status snapshots of a running agent or server: plain serde structs, the stable JSON of
//! `braid status --json` (documented field by field in docs/status.md; `version` changes
//! only when a field changes meaning or goes away), and the pure rules that turn the
//! core's per-path views into what is shown (a path's state, its loss rate, its energy).
//!
//! Owns: the snapshot types, [`CorePath`] (one path's view read from a `Session`),
//! [`display_state`] and [`PathMeter`] (per-path time since the last arrival and energy).
//! Must not touch: sockets, clocks (callers pass `now`), the session's state (it only reads
//! views), how snapshots are published or served (`agent`, `server`, braid-ops).

mod datagrams;
mod egress;
mod rate;
mod shares;

pub use datagrams::DatagramReport;
pub use egress::{EgressAgent, EgressReport};
pub use rate::RateMeter;
pub use shares::{AgentShare, SharesReport};

use crate::bridge::{Cmd, SessionFn};
use braid_core::path::PathStats;
use braid_core::sched::PathInfo;
use braid_core::{PathCondition, PathId, PathState, Session};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// The version of the status JSON.
pub const STATUS_VERSION: u32 = 1;

/// A path frozen by a confirmed blackout and silent for this long is shown as `down`
/// (before that: `frozen`, a blackout that may end in a moment).
pub const DOWN_AFTER: Duration = Duration::from_millis(500);

/// A path's state as shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShownState {
    /// In the session, waiting for path validation.
    Validating,
    /// Carrying data.
    Active,
    /// Validated, on standby (a `backup` path, or the peer asked for standby).
    Backup,
    /// Frozen by a blackout that may be short: no data until a packet arrives on it.
    Frozen,
    /// Not in the session (absent, no carrier, removed, no session), or frozen and silent
    /// for [`DOWN_AFTER`].
    Down,
    /// Over its data cap for this period: on standby until the period ends.
    Capped,
    /// Not validated, and its network answers the captive-portal check with a login page
    /// (agent): nothing goes on it until the portal lets traffic through.
    Captive,
}

/// One path's view, read from the session in one go.
#[derive(Debug, Clone)]
pub struct CorePath {
    /// The path id.
    pub id: PathId,
    /// Its counters.
    pub stats: PathStats,
    /// The scheduler's view (state, RTTs, window, rates).
    pub info: PathInfo,
    /// Validated, abandoned, frozen, last arrival.
    pub cond: PathCondition,
    /// How long nothing arrived on it, at the time of reading.
    pub silent: Duration,
    /// The peer's name for it (PATH_NAME: the agent's configured name, on the server).
    pub peer_name: Option<String>,
}

/// Every path the session knows (abandoned ones included), at `now`.
pub fn core_paths(s: &Session, now: braid_core::Instant) -> Vec<CorePath> {
    s.path_ids()
        .into_iter()
        .filter_map(|id| {
            let cond = s.path_condition(id)?;
            Some(CorePath {
                id,
                stats: s.path_stats(id)?,
                info: s.path_info(now, id)?,
                silent: Duration::from_nanos(
                    now.as_nanos().saturating_sub(cond.last_received.as_nanos()),
                ),
                cond,
                peer_name: s.peer_path_name(id).map(String::from),
            })
        })
        .collect()
}

/// What [`query_core`] reads from a session.
#[derive(Debug, Clone, Default)]
pub struct CoreQuery {
    /// Every path's view.
    pub paths: Vec<CorePath>,
    /// Open streams.
    pub streams: u64,
    /// Stream bytes received and not yet read ([`braid_core::Session::buffered_bytes`]).
    pub buffered: u64,
    /// The session's datagram counters.
    pub datagrams: DatagramReport,
}

/// Every path's view, the open stream count and the buffered bytes, read by the session
/// task through its command channel (`None` when the session is gone).
pub async fn query_core(cmd: &tokio::sync::mpsc::UnboundedSender<Cmd>) -> Option<CoreQuery> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    cmd.send(Cmd::Session(SessionFn(Box::new(move |s, now| {
        let _ = tx.send(CoreQuery {
            paths: core_paths(s, now),
            streams: s.stream_count() as u64,
            buffered: s.buffered_bytes(),
            datagrams: s.stats().into(),
        });
    }))))
    .ok()?;
    rx.await.ok()
}

/// The state shown for a path: `core` is its live incarnation in the session (`None`:
/// not in the session; its `silent` says how long nothing arrived on it), `over_cap`
/// whether it passed its data cap.
pub fn display_state(core: Option<&CorePath>, over_cap: bool) -> ShownState {
    let Some(c) = core else {
        return ShownState::Down;
    };
    if c.cond.abandoned {
        return ShownState::Down;
    }
    if !c.cond.validated {
        return ShownState::Validating;
    }
    if c.cond.frozen || c.info.state == PathState::Frozen {
        return if c.silent >= DOWN_AFTER {
            ShownState::Down
        } else {
            ShownState::Frozen
        };
    }
    if over_cap {
        return ShownState::Capped;
    }
    match c.info.state {
        PathState::Standby => ShownState::Backup,
        _ => ShownState::Active,
    }
}

/// Packets declared lost over packets sent (0 when nothing was sent).
pub fn loss_rate(st: &PathStats) -> f64 {
    if st.packets_sent == 0 {
        0.0
    } else {
        st.packets_lost as f64 / st.packets_sent as f64
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A path's power model for the energy estimate (`power=` and `nj_per_byte=` of the path):
/// `active_w` × the seconds it carried packets + `nj_per_byte` × the bytes it carried.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PowerModel {
    /// Watts while active.
    pub active_w: f64,
    /// Nanojoules per byte carried, both ways.
    pub nj_per_byte: f64,
}

impl PowerModel {
    /// The model of a path with these options; `None` when neither is set (no estimate).
    pub fn new(power_w: Option<f64>, nj_per_byte: Option<f64>) -> Option<PowerModel> {
        (power_w.is_some() || nj_per_byte.is_some()).then(|| PowerModel {
            active_w: power_w.unwrap_or(0.0),
            nj_per_byte: nj_per_byte.unwrap_or(0.0),
        })
    }
}

/// What one meter keeps per configured path between snapshots (for the energy estimate).
#[derive(Debug, Clone, Default)]
pub struct PathMeter {
    last_total: u64,
    last_update: Option<Instant>,
    energy_j: f64,
}

impl PathMeter {
    /// A meter with nothing charged.
    pub fn new() -> PathMeter {
        PathMeter::default()
    }

    /// Take the path's cumulative byte count (both ways, over the agent's life) at `now`;
    /// `model` charges the time since the previous update when the path carried anything
    /// in it, and each byte carried since.
    pub fn update(&mut self, now: Instant, bytes: u64, model: Option<PowerModel>) {
        if let (Some(prev), Some(m)) = (self.last_update, model) {
            let moved = bytes.saturating_sub(self.last_total);
            if moved > 0 {
                self.energy_j += m.active_w * now.saturating_duration_since(prev).as_secs_f64()
                    + m.nj_per_byte * 1e-9 * moved as f64;
            }
        }
        self.last_total = bytes;
        self.last_update = Some(now);
    }

    /// Energy charged so far, joules.
    pub fn energy_j(&self) -> f64 {
        self.energy_j
    }
}

/// One path of a status snapshot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PathReport {
    /// The configured name (agent); on the server, the agent's name for the path (PATH_NAME)
    /// or, from an agent that sends none, the path id.
    pub name: String,
    /// The path id in the session (`null` while not in one).
    pub id: Option<PathId>,
    /// The interface the path is bound to (agent, when bound to one).
    pub interface: Option<String>,
    /// A slot of `--path auto` (agent): with `interface` `null` it has taken no interface
    /// (there is none left with a default route), and `braid status` counts it on one line
    /// instead of a `down` row.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub auto: bool,
    /// Local socket address (agent) while in a session: the address it sends from (a
    /// socket bound to an interface shows the interface's address, not `0.0.0.0`).
    pub local_address: Option<String>,
    /// Where its packets go: the server or a relay (agent), the agent's address (server).
    pub remote_address: Option<String>,
    /// See [`ShownState`].
    pub state: Option<ShownState>,
    /// Smoothed RTT, milliseconds (`null` before a sample).
    pub srtt_ms: Option<f64>,
    /// Minimum RTT, milliseconds (`null` before a sample).
    pub min_rtt_ms: Option<f64>,
    /// Congestion window, bytes.
    pub cwnd_bytes: u64,
    /// Bytes in flight.
    pub bytes_in_flight: u64,
    /// Pacing rate, bits per second.
    pub pacing_rate_bps: u64,
    /// Latest delivery-rate sample, bits per second (`null` before one): what the path
    /// carried of this side's own data (on an agent that downloads: acknowledgements).
    pub delivery_rate_bps: Option<u64>,
    /// The path's capacity estimate, bits per second of UDP payload (`null` before a sample
    /// showed it): what this side measured the path to carry when it filled it, the rate
    /// the schedulers use (braid-core `path/capacity.rs`).
    #[serde(default)]
    pub capacity_bps: Option<u64>,
    /// `capacity_bps` is the path's full bandwidth, not a lower bound still growing (slow
    /// start) (`null` with it).
    #[serde(default)]
    pub capacity_settled: Option<bool>,
    /// Bytes sent on the path over about the last second, bits per second (`null` until
    /// two snapshots a tenth of a second apart were taken).
    #[serde(default)]
    pub send_rate_bps: Option<u64>,
    /// Bytes received on the path over about the last second, bits per second (`null` as
    /// for `send_rate_bps`).
    #[serde(default)]
    pub receive_rate_bps: Option<u64>,
    /// Packets declared lost / packets sent, in the current session.
    pub loss_rate: f64,
    /// UDP payload bytes sent on the path: since the agent started (agent), in the
    /// session (server). The same holds for the counters below.
    pub bytes_sent: u64,
    /// UDP payload bytes received on the path.
    pub bytes_received: u64,
    /// Packets sent.
    pub packets_sent: u64,
    /// Packets received.
    pub packets_received: u64,
    /// Packets declared lost.
    pub packets_lost: u64,
    /// Stream bytes sent again (retransmissions).
    pub retransmitted_bytes: u64,
    /// Blackouts seen on the path (freezes).
    pub blackouts: u64,
    /// The largest datagram (UDP payload) the path carries now, as its discovery found it
    /// (DPLPMTUD: 1200 at first, then up to the route's MTU; `null` while not in a session).
    #[serde(default)]
    pub datagram_bytes: Option<u64>,
    /// The IP packet such a datagram makes (its address family's IP and UDP headers added).
    #[serde(default)]
    pub packet_bytes: Option<u64>,
    /// Times its datagram size dropped because full-size packets were lost while smaller
    /// ones got through (an MTU black hole), in the current session.
    #[serde(default)]
    pub datagram_drops: u64,
    /// The path's data cap per period, bytes (agent, `null` without a cap).
    pub cap_bytes: Option<u64>,
    /// Bytes counted against the cap this period, both directions (agent).
    pub cap_used_bytes: Option<u64>,
    /// Configured power while active, watts (agent, `power=`).
    pub power_w: Option<f64>,
    /// Configured energy per byte carried, nanojoules (agent, `nj_per_byte=`).
    pub nj_per_byte: Option<f64>,
    /// Energy estimate since the agent started: `power_w` × the time the path carried
    /// packets (at the status tick's resolution) + `nj_per_byte` × the bytes it carried
    /// (agent, `null` without `power=` or `nj_per_byte=`).
    pub energy_j: Option<f64>,
    /// The login page of the captive portal in front of the path, where it gave one
    /// (agent, while `state` is `captive`).
    #[serde(default)]
    pub portal_url: Option<String>,
}

impl PathReport {
    /// Show the rates `meter` measured.
    pub fn set_rates(&mut self, meter: &RateMeter) {
        let r = meter.rates_bps();
        self.send_rate_bps = r.map(|r| r.0);
        self.receive_rate_bps = r.map(|r| r.1);
    }

    /// Fill the session-derived fields from the live incarnation `c` and the counters
    /// `sum` (all incarnations of the path together; the agent passes its counts over
    /// its life, then sets `loss_rate` from the session's).
    pub fn fill_core(&mut self, c: &CorePath, sum: &PathStats) {
        self.id = Some(c.id);
        let sampled = c.stats.packets_received > 0 && !c.info.min_rtt.is_zero();
        self.srtt_ms = sampled.then(|| ms(c.info.srtt));
        self.min_rtt_ms = sampled.then(|| ms(c.info.min_rtt));
        self.cwnd_bytes = c.info.cwnd;
        self.bytes_in_flight = c.info.in_flight;
        self.pacing_rate_bps = c.info.pacing_rate.saturating_mul(8);
        self.delivery_rate_bps = c.info.delivery_rate.map(|d| d.1.saturating_mul(8));
        self.capacity_bps = c.info.capacity.map(|c| c.rate.saturating_mul(8));
        self.capacity_settled = c.info.capacity.map(|c| c.full);
        self.loss_rate = loss_rate(sum);
        self.bytes_sent = sum.bytes_sent;
        self.bytes_received = sum.bytes_received;
        self.packets_sent = sum.packets_sent;
        self.packets_received = sum.packets_received;
        self.packets_lost = sum.packets_lost;
        self.retransmitted_bytes = sum.retransmitted_bytes;
        self.blackouts = sum.blackouts;
        self.datagram_bytes = Some(c.stats.datagram_size);
        self.datagram_drops = c.stats.datagram_black_holes;
        self.set_packet_bytes();
    }

    /// Derive `packet_bytes` from `datagram_bytes` and the family of `remote_address`
    /// (IPv4 when unknown); call again when the address is set.
    pub fn set_packet_bytes(&mut self) {
        let v6 = self
            .remote_address
            .as_deref()
            .and_then(|a| a.parse::<std::net::SocketAddr>().ok())
            .is_some_and(crate::pmtu::is_ipv6_on_wire);
        let headers = if v6 { 48 } else { 28 };
        self.packet_bytes = self.datagram_bytes.map(|d| d + headers);
    }
}

/// Add `b`'s counters into `a` (window and RTT fields are left alone).
pub fn add_counters(a: &mut PathStats, b: &PathStats) {
    a.packets_sent += b.packets_sent;
    a.bytes_sent += b.bytes_sent;
    a.packets_received += b.packets_received;
    a.bytes_received += b.bytes_received;
    a.packets_lost += b.packets_lost;
    a.retransmitted_bytes += b.retransmitted_bytes;
    a.blackouts += b.blackouts;
}

/// The agent's session, as shown.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionReport {
    /// Session id, 16 hex digits.
    pub id: String,
    /// The server carrying it.
    pub server: String,
    /// Seconds since it was established.
    pub age_s: f64,
    /// Packet scheduler.
    pub scheduler: String,
    /// Congestion controller.
    pub cc: String,
    /// Streams open in the session.
    pub open_streams: u64,
    /// Its datagram counters.
    #[serde(default)]
    pub datagrams: DatagramReport,
}

/// One proxied TCP connection (a stream) of the agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamReport {
    /// `socks5` or `http`.
    pub proxy: String,
    /// The application's address.
    pub client: String,
    /// Where it goes, as the application asked (`host:port`).
    pub destination: String,
    /// Bytes from the application to the destination.
    pub bytes_up: u64,
    /// Bytes from the destination to the application.
    pub bytes_down: u64,
    /// Seconds since it opened.
    pub age_s: f64,
    /// `session` (packet level through the server) or, in direct mode, the path's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The way it took: `session`, `direct` (direct mode), `bypass` or `pin PATH`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

/// One SOCKS5 UDP association (a datagram flow) of the agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FlowReport {
    /// The flow id.
    pub flow: u32,
    /// The application's address.
    pub client: String,
    /// The last destination the application sent to.
    pub destination: String,
    /// Payload bytes from the application.
    pub bytes_up: u64,
    /// Payload bytes to the application.
    pub bytes_down: u64,
    /// Seconds since it opened.
    pub age_s: f64,
    /// `session` or, in direct mode, the path's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The way its latest datagram took: `session`, `direct`, `bypass` or `pin PATH`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

/// Sums over the paths.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// UDP payload bytes sent on all paths (the paths' counters summed).
    pub bytes_sent: u64,
    /// UDP payload bytes received on all paths (the paths' counters summed).
    pub bytes_received: u64,
    /// Energy of all paths with a power model (agent), joules.
    pub energy_j: Option<f64>,
}

/// `braid status` of an agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentStatus {
    /// [`STATUS_VERSION`].
    pub version: u32,
    /// Seconds since the agent started.
    pub uptime_s: f64,
    /// The current session (`null` while there is none).
    pub session: Option<SessionReport>,
    /// Every configured path, in configuration order.
    pub paths: Vec<PathReport>,
    /// Open proxied TCP connections.
    pub streams: Vec<StreamReport>,
    /// Open UDP associations.
    pub flows: Vec<FlowReport>,
    /// Sums.
    pub totals: Totals,
    /// Where new connections go: `session` (through the server, packet level) or `direct`
    /// (each whole on one path: no server configured or none answers); absent when direct
    /// mode is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Why there is no session: the last handshake's failure, as the agent's log says it
    /// (no answer, the server's session limit, no common packet cipher); absent while a
    /// session runs and before the first attempt ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_error: Option<String>,
    /// Connections and flows opened per way taken since the agent started: `session`,
    /// `direct`, `bypass`, `pin PATH` (`--bypass`, `--pin`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub rules: std::collections::BTreeMap<String, u64>,
}

/// One agent session on the server.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerSession {
    /// Session id, 16 hex digits.
    pub id: String,
    /// The agent's key: `SHA256:` and the unpadded base64 of its SHA-256 (the server's
    /// logs name agents so: `agent=SHA256:...`).
    pub agent_key_fingerprint: String,
    /// The agent's public key in base64, as in the authorized file (and the `key=` of the
    /// server's "agent authenticated" log line).
    #[serde(default)]
    pub agent_key: String,
    /// Seconds since the handshake.
    pub age_s: f64,
    /// The agent answered the handshake with an authenticated packet (its first exchange
    /// completed). `false`: a half-open session, e.g. from the message 1 that lost the
    /// race on another path or server; it ends after the first-exchange timeout (10 s).
    #[serde(default)]
    pub established: bool,
    /// Its paths (name = the path id).
    pub paths: Vec<PathReport>,
    /// Streams open.
    pub open_streams: u64,
    /// Its datagram counters.
    #[serde(default)]
    pub datagrams: DatagramReport,
    /// Sums over its paths.
    pub totals: Totals,
    /// The public ports it holds for the agent (inbound ports), like `tcp:8080`.
    #[serde(default)]
    pub inbound_ports: Vec<String>,
}

/// One limit and how close the server is to it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Limit {
    /// The limit.
    pub max: u64,
    /// Use now (for per-session limits: the largest over sessions).
    pub used: u64,
}

/// The server's limits.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerLimits {
    /// Sessions at once (`--max-sessions`).
    pub sessions: Limit,
    /// Streams per session (`--max-streams`); `used` = the busiest session's.
    pub streams_per_session: Limit,
    /// Bytes buffered per session (`--max-buffered`); `used` = the most any session holds
    /// received but not yet read by its destination.
    pub buffered_bytes_per_session: Limit,
    /// UDP flows per session; `used` = the busiest session's open flows.
    pub udp_flows_per_session: Limit,
}

/// `braid status` of a server.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerStatus {
    /// [`STATUS_VERSION`].
    pub version: u32,
    /// Seconds since the server started.
    pub uptime_s: f64,
    /// The UDP listen address.
    pub listen: String,
    /// Agent sessions.
    pub sessions: Vec<ServerSession>,
    /// Limits and use.
    pub limits: ServerLimits,
    /// Handshakes accepted since start.
    pub handshakes_accepted: u64,
    /// Handshakes refused (unknown key, replay, ...) since start.
    pub handshakes_refused: u64,
    /// Handshakes accepted whose agent has sent no packet yet (not in `sessions`; each
    /// holds a slot of `limits.sessions`, counted in its `used`, and ends 10 s after its
    /// handshake unless a packet comes).
    #[serde(default)]
    pub handshakes_waiting: u64,
    /// Sums over sessions.
    pub totals: Totals,
    /// The egress policy and its refusals per agent.
    #[serde(default)]
    pub egress: EgressReport,
    /// Each agent's bytes, rate limit, fair-share cap and quotas.
    #[serde(default)]
    pub shares: SharesReport,
    /// The agent keys the server accepts now (`null` from a server that does not say).
    #[serde(default)]
    pub authorized_keys: Option<u64>,
    /// The file they are read from (`null` without one).
    #[serde(default)]
    pub authorized_file: Option<String>,
}

/// Either snapshot; its JSON has `"role": "agent"` or `"role": "server"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Status {
    /// An agent's.
    Agent(AgentStatus),
    /// A server's.
    Server(ServerStatus),
}

#[cfg(test)]
mod tests;
