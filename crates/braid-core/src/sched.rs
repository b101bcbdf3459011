//! Packet schedulers: which path carries the next packet.
//!
//! Owns: the choice of path for data packets and for acknowledgements, from a read-only view
//! of every path. Must not touch: path state (schedulers only read `PathInfo`), packets or
//! streams. New schedulers implement [`Scheduler`] and are listed in [`SchedulerKind`].

use crate::time::Instant;
use crate::wire::PathState;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Path identifier, chosen by the client, carried in every packet header.
pub type PathId = u8;

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
}

impl PathInfo {
    /// Usable, not suspected down and in the given state.
    pub fn eligible(&self, state: PathState) -> bool {
        self.usable && !self.potentially_failed && self.state == state
    }
}

/// A scheduler decides, packet by packet, which path sends.
pub trait Scheduler: fmt::Debug + Send {
    /// Name as used in scenarios.
    fn name(&self) -> &'static str;

    /// The path for the next data packet, or `None` to wait (for window or pacing).
    fn select(&mut self, now: Instant, paths: &[PathInfo]) -> Option<PathId>;

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
fn candidate_state(paths: &[PathInfo]) -> Option<PathState> {
    if paths.iter().any(|p| p.eligible(PathState::Active)) {
        Some(PathState::Active)
    } else if paths.iter().any(|p| p.eligible(PathState::Standby)) {
        Some(PathState::Standby)
    } else {
        None
    }
}

/// Lowest smoothed RTT among paths with room (the Linux MPTCP default).
#[derive(Debug, Default)]
pub struct MinRtt;

impl Scheduler for MinRtt {
    fn name(&self) -> &'static str {
        "minrtt"
    }
    fn select(&mut self, _now: Instant, paths: &[PathInfo]) -> Option<PathId> {
        let state = candidate_state(paths)?;
        paths
            .iter()
            .filter(|p| p.eligible(state) && p.send_ready)
            .min_by_key(|p| (p.srtt, p.id))
            .map(|p| p.id)
    }
}

/// Each path with room in turn.
#[derive(Debug, Default)]
pub struct RoundRobin {
    last: Option<PathId>,
}

impl Scheduler for RoundRobin {
    fn name(&self) -> &'static str {
        "rr"
    }
    fn select(&mut self, _now: Instant, paths: &[PathInfo]) -> Option<PathId> {
        let state = candidate_state(paths)?;
        let ready = |p: &&PathInfo| p.eligible(state) && p.send_ready;
        let after = self.last.map_or(0, |l| l as u16 + 1);
        let pick = paths
            .iter()
            .filter(ready)
            .filter(|p| p.id as u16 >= after)
            .min_by_key(|p| p.id)
            .or_else(|| paths.iter().filter(ready).min_by_key(|p| p.id))?;
        self.last = Some(pick.id);
        Some(pick.id)
    }
}

/// The schedulers this build offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SchedulerKind {
    /// [`MinRtt`].
    MinRtt,
    /// [`RoundRobin`].
    RoundRobin,
}

impl SchedulerKind {
    /// Every scheduler and its name.
    pub const ALL: &'static [(&'static str, SchedulerKind)] = &[
        ("minrtt", SchedulerKind::MinRtt),
        ("rr", SchedulerKind::RoundRobin),
    ];

    /// A fresh scheduler.
    pub fn build(self) -> Box<dyn Scheduler> {
        match self {
            SchedulerKind::MinRtt => Box::new(MinRtt),
            SchedulerKind::RoundRobin => Box::<RoundRobin>::default(),
        }
    }
}

impl FromStr for SchedulerKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        SchedulerKind::ALL
            .iter()
            .find(|(n, _)| *n == s)
            .map(|(_, k)| *k)
            .ok_or_else(|| {
                let names: Vec<_> = SchedulerKind::ALL.iter().map(|(n, _)| *n).collect();
                format!(
                    "unknown scheduler {s:?}; expected one of {}",
                    names.join(", ")
                )
            })
    }
}

impl fmt::Display for SchedulerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = SchedulerKind::ALL
            .iter()
            .find(|(_, k)| k == self)
            .map_or("?", |(n, _)| n);
        f.write_str(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(id: PathId, srtt_ms: u64, ready: bool) -> PathInfo {
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
        }
    }

    #[test]
    fn minrtt_prefers_fast_path_and_falls_back_when_full() {
        let mut s = MinRtt;
        let now = Instant(0);
        assert_eq!(
            s.select(now, &[info(0, 120, true), info(1, 20, true)]),
            Some(1)
        );
        assert_eq!(
            s.select(now, &[info(0, 120, true), info(1, 20, false)]),
            Some(0)
        );
        assert_eq!(
            s.select(now, &[info(0, 120, false), info(1, 20, false)]),
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
        assert_eq!(s.select(now, &[info(0, 50, false), standby]), None);
        let mut failed = info(0, 50, true);
        failed.potentially_failed = true;
        assert_eq!(s.select(now, &[failed, standby]), Some(1));
    }

    #[test]
    fn round_robin_cycles_over_ready_paths() {
        let mut s = RoundRobin::default();
        let now = Instant(0);
        let ps = [info(0, 10, true), info(1, 10, true), info(2, 10, false)];
        let picks: Vec<_> = (0..4).map(|_| s.select(now, &ps).unwrap()).collect();
        assert_eq!(picks, vec![0, 1, 0, 1]);
        assert_eq!("rr".parse::<SchedulerKind>(), Ok(SchedulerKind::RoundRobin));
        assert!("nope"
            .parse::<SchedulerKind>()
            .unwrap_err()
            .contains("minrtt"));
    }
}
