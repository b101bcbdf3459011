//! The classic schedulers: minRTT (the Linux MPTCP default), round-robin, redundant (minRTT
//! for the first copy; the session copies each packet onto the other paths), and `super`:
//! minRTT data placement with every super-aggregation mechanism on.

use super::{candidate_state, PathId, PathInfo, SchedContext, Scheduler};
use crate::time::Instant;

/// Lowest smoothed RTT among paths with room (the Linux MPTCP default).
#[derive(Debug, Default)]
pub struct MinRtt;

impl Scheduler for MinRtt {
    fn name(&self) -> &'static str {
        "minrtt"
    }
    fn select(&mut self, _now: Instant, paths: &[PathInfo], _ctx: &SchedContext) -> Option<PathId> {
        let state = candidate_state(paths)?;
        paths
            .iter()
            .filter(|p| p.eligible(state) && p.send_ready)
            .min_by_key(|p| (p.srtt, p.id))
            .map(|p| p.id)
    }
}

/// Super-aggregation: data goes where minRTT puts it; what makes it "super" are the
/// session's mechanisms (ACK offload, blackout freeze, random-loss recovery), which a
/// session configured with this scheduler turns on (see `Config::with_scheduler`).
#[derive(Debug, Default)]
pub struct Super(MinRtt);

impl Scheduler for Super {
    fn name(&self) -> &'static str {
        "super"
    }
    fn select(&mut self, now: Instant, paths: &[PathInfo], ctx: &SchedContext) -> Option<PathId> {
        self.0.select(now, paths, ctx)
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
    fn select(&mut self, _now: Instant, paths: &[PathInfo], _ctx: &SchedContext) -> Option<PathId> {
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

/// Redundant: every stream packet on every usable path. The first copy goes where minRTT
/// would send it; the session (`session/redundant.rs`) then copies what other paths sent
/// onto each usable path with window room, so lossy paths cost no retransmission delay as
/// long as one copy arrives. Trades capacity for latency: useful for lossy links and
/// real-time flows, not for bulk throughput.
#[derive(Debug, Default)]
pub struct Redundant;

impl Scheduler for Redundant {
    fn name(&self) -> &'static str {
        "redundant"
    }
    fn select(&mut self, now: Instant, paths: &[PathInfo], ctx: &SchedContext) -> Option<PathId> {
        MinRtt.select(now, paths, ctx)
    }
}
