//! Packet schedulers: which path carries the next packet.
//!
//! Owns: the choice of path for data packets and for acknowledgements, from a read-only view
//! of every path. Must not touch: path state (schedulers only read `PathInfo`), packets or
//! streams. New schedulers implement [`Scheduler`] and are listed in [`SchedulerKind`].

use crate::time::Instant;
use crate::wire::PathState;
use std::fmt;
use std::time::Duration;

pub use crate::choices::SchedulerKind;
pub use crate::ids::PathId;

/// What a scheduler may know about a path.
#[derive(Debug, Clone, Copy)]
pub struct PathInfo {
    /// The path.
    pub id: PathId,
    /// How the path may be used (the stricter of our setting and the peer's request).
    pub state: PathState,
    /// Validated in both directions and not abandoned.
    pub usable: bool,
    /// Probe timeouts fired without an acknowledgement since: the path may be down.
    pub potentially_failed: bool,
    /// Smoothed RTT.
    pub srtt: Duration,
    /// Minimum RTT.
    pub min_rtt: Duration,
    /// RTT variation.
    pub rttvar: Duration,
    /// Congestion window, bytes.
    pub cwnd: u64,
    /// Bytes in flight.
    pub in_flight: u64,
    /// Pacing rate, bytes per second.
    pub pacing_rate: u64,
    /// The path has window space for a full packet and its pacer lets one go now.
    pub send_ready: bool,
    /// Power the interface draws while active, above idle, milliwatts (PATH_COST), if known.
    pub power_mw: Option<u64>,
    /// The path's rate as told by PATH_COST, UDP payload bytes per second, if known.
    pub rate_hint: Option<u64>,
    /// Latest delivery-rate sample: when it was taken, bytes per second, and whether the
    /// sender was application-limited then.
    pub delivery_rate: Option<(Instant, u64, bool)>,
    /// The limit the scheduler put on the path (see [`RateLimit`]), as applied now.
    pub rate_cap: Option<u64>,
    /// The path's capacity estimate (`path/capacity.rs`), once a sample showed it.
    pub capacity: Option<Capacity>,
}

/// A path's capacity estimate, from the delivery-rate samples taken while the sender filled
/// the path (`path/capacity.rs` says which those are): what OPERETTA without rate hints,
/// `braid status` and the agent's placement of direct connections read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// UDP payload bytes per second: the capacity once [`full`](Self::full), a lower bound
    /// before.
    pub rate: u64,
    /// The path has been seen at its full bandwidth (its delivery rate, with the sender free
    /// to send, stopped growing): slow start's first samples are not a capacity.
    pub full: bool,
    /// The latest sample was held back by the scheduler's limit: the capacity may be higher.
    pub bound: bool,
}

/// A delivery-rate sample at or above this fraction of the scheduler's limit on the path was
/// held back by the limit: it shows the capacity is at least that much.
pub const LIMIT_BOUND: f64 = 0.9;

/// A scheduler's limit on one path, applied by the session before each `select`: `None`
/// unlimited, `Some(0)` the path must not carry data, `Some(r)` at most `r` bytes per second
/// (the path's pacer runs at the lower of `r` and the congestion controller's rate, so the
/// timer table knows when the path may send again).
pub type RateLimit = Option<u64>;

impl PathInfo {
    /// Usable, not suspected down and in the given state.
    pub fn eligible(&self, state: PathState) -> bool {
        self.usable && !self.potentially_failed && self.state == state
    }
}

/// What a scheduler may know about the data waiting to be sent.
#[derive(Debug, Clone, Copy, Default)]
pub struct SchedContext {
    /// Stream bytes queued and not yet sent (new data and data to resend).
    pub pending_bytes: u64,
    /// Bytes the peer's session-level flow control still lets us send.
    pub send_window: u64,
    /// Largest packet, bytes.
    pub mss: u64,
}

/// A scheduler decides, packet by packet, which path sends.
pub trait Scheduler: fmt::Debug + Send {
    /// Name as used in scenarios.
    fn name(&self) -> &'static str;

    /// The path for the next data packet, or `None` to wait (for window or pacing, or
    /// because waiting for a faster path is better).
    fn select(&mut self, now: Instant, paths: &[PathInfo], ctx: &SchedContext) -> Option<PathId>;

    /// Take the session's settings (called when the scheduler is built and again when the
    /// server adopts the client's choices). Default: nothing to take.
    fn configure(&mut self, _cfg: &crate::config::Config) {}

    /// Per-path limits for the paths in `paths` (see [`RateLimit`]), written into `out` as
    /// `(path, limit)`; a path left out is unlimited. Called by the session before every
    /// `select`. Default: no limits.
    fn rate_limits(
        &mut self,
        _now: Instant,
        _paths: &[PathInfo],
        _out: &mut Vec<(PathId, RateLimit)>,
    ) {
    }

    /// The path that carries acknowledgements of packets received on `acked`.
    /// Default: the same path when usable, otherwise the lowest-RTT usable path.
    fn ack_path(&mut self, _now: Instant, acked: PathId, paths: &[PathInfo]) -> Option<PathId> {
        match paths.iter().find(|p| p.id == acked) {
            Some(p) if p.usable && !p.potentially_failed => Some(acked),
            _ => paths
                .iter()
                .filter(|p| p.usable && !p.potentially_failed)
                .min_by_key(|p| p.srtt)
                .map(|p| p.id)
                .or(Some(acked)),
        }
    }
}

/// Paths that may carry data now: active ones if any active path is usable, else standby.
pub(crate) fn candidate_state(paths: &[PathInfo]) -> Option<PathState> {
    if paths.iter().any(|p| p.eligible(PathState::Active)) {
        Some(PathState::Active)
    } else if paths.iter().any(|p| p.eligible(PathState::Standby)) {
        Some(PathState::Standby)
    } else {
        None
    }
}

mod blest;
mod ecf;
mod operetta;
mod simple;
mod wrr;

pub use blest::Blest;
pub use ecf::Ecf;
pub use operetta::Operetta;
pub use simple::{MinRtt, Redundant, RoundRobin, Super};
pub use wrr::WeightedRoundRobin;

/// Building the scheduler a [`SchedulerKind`] names (the kind itself, its names and wire
/// id are in `choices`).
impl SchedulerKind {
    /// A fresh scheduler configured by `cfg`.
    pub fn build_with(self, cfg: &crate::config::Config) -> Box<dyn Scheduler> {
        let mut s = self.build();
        s.configure(cfg);
        s
    }

    /// A fresh scheduler with default settings.
    pub fn build(self) -> Box<dyn Scheduler> {
        match self {
            SchedulerKind::MinRtt => Box::new(MinRtt),
            SchedulerKind::RoundRobin => Box::<RoundRobin>::default(),
            SchedulerKind::WeightedRoundRobin => Box::<WeightedRoundRobin>::default(),
            SchedulerKind::Ecf => Box::<Ecf>::default(),
            SchedulerKind::Blest => Box::<Blest>::default(),
            SchedulerKind::Super => Box::<Super>::default(),
            SchedulerKind::Operetta => Box::<Operetta>::default(),
            SchedulerKind::Redundant => Box::new(Redundant),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> SchedContext {
        SchedContext {
            pending_bytes: 1 << 20,
            send_window: 1 << 30,
            mss: 1472,
        }
    }

    pub(crate) fn info(id: PathId, srtt_ms: u64, ready: bool) -> PathInfo {
        PathInfo {
            id,
            state: PathState::Active,
            usable: true,
            potentially_failed: false,
            srtt: Duration::from_millis(srtt_ms),
            min_rtt: Duration::from_millis(srtt_ms),
            rttvar: Duration::ZERO,
            cwnd: 10_000,
            in_flight: 0,
            pacing_rate: 0,
            send_ready: ready,
            power_mw: None,
            rate_hint: None,
            delivery_rate: None,
            rate_cap: None,
            capacity: None,
        }
    }

    #[test]
    fn minrtt_prefers_fast_path_and_falls_back_when_full() {
        let mut s = MinRtt;
        let now = Instant(0);
        assert_eq!(
            s.select(now, &[info(0, 120, true), info(1, 20, true)], &ctx()),
            Some(1)
        );
        assert_eq!(
            s.select(now, &[info(0, 120, true), info(1, 20, false)], &ctx()),
            Some(0)
        );
        assert_eq!(
            s.select(now, &[info(0, 120, false), info(1, 20, false)], &ctx()),
            None
        );
    }

    #[test]
    fn standby_is_used_only_when_no_active_path_is_usable() {
        let mut s = MinRtt;
        let now = Instant(0);
        let mut standby = info(1, 10, true);
        standby.state = PathState::Standby;
        // The active path is merely full: wait rather than use the standby path.
        assert_eq!(s.select(now, &[info(0, 50, false), standby], &ctx()), None);
        let mut failed = info(0, 50, true);
        failed.potentially_failed = true;
        assert_eq!(s.select(now, &[failed, standby], &ctx()), Some(1));
    }

    #[test]
    fn round_robin_cycles_over_ready_paths() {
        let mut s = RoundRobin::default();
        let now = Instant(0);
        let ps = [info(0, 10, true), info(1, 10, true), info(2, 10, false)];
        let picks: Vec<_> = (0..4)
            .map(|_| s.select(now, &ps, &ctx()).unwrap())
            .collect();
        assert_eq!(picks, vec![0, 1, 0, 1]);
        assert_eq!("rr".parse::<SchedulerKind>(), Ok(SchedulerKind::RoundRobin));
        assert!("nope"
            .parse::<SchedulerKind>()
            .unwrap_err()
            .contains("minrtt"));
    }
}
