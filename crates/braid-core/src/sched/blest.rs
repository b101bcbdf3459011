//! BLEST, BLocking ESTimation (Ferlin et al., IFIP Networking 2016): before sending on a
//! slower path, estimate how much the fastest path will send during one slow round trip;
//! if that would not fit in the peer's flow-control window next to what the slow path
//! holds, the slow packet would block the receive window (head-of-line): wait instead.

use super::{candidate_state, PathId, PathInfo, SchedContext, Scheduler};
use crate::time::Instant;

/// Scaling factor λ of the estimate (the paper adapts it; 1.0 is its starting point).
const LAMBDA: f64 = 1.0;

/// BLEST is stateless here.
#[derive(Debug, Default)]
pub struct Blest;

impl Scheduler for Blest {
    fn name(&self) -> &'static str {
        "blest"
    }

    fn select(&mut self, _now: Instant, paths: &[PathInfo], ctx: &SchedContext) -> Option<PathId> {
        let state = candidate_state(paths)?;
        let eligible = || paths.iter().filter(move |p| p.eligible(state));
        let fast = eligible().min_by_key(|p| (p.srtt, p.id))?;
        if fast.send_ready {
            return Some(fast.id);
        }
        let slow = eligible()
            .filter(|p| p.send_ready)
            .min_by_key(|p| (p.srtt, p.id))?;
        let mss = ctx.mss.max(1) as f64;
        let ratio = slow.srtt.as_secs_f64() / fast.srtt.as_secs_f64().max(1e-6);
        let cwnd_f = fast.cwnd as f64 / mss;
        // Bytes the fast path sends during one slow round trip, its window growing by
        // about one packet per round trip.
        let x = mss * (cwnd_f + (ratio - 1.0) / 2.0) * ratio;
        let room = ctx.send_window as f64 - slow.cwnd as f64;
        if x * LAMBDA > room {
            return None;
        }
        Some(slow.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::tests::info;

    #[test]
    fn skips_the_slow_path_when_the_window_would_block() {
        let mut s = Blest;
        let (mut fast, slow) = (info(0, 20, false), info(1, 300, true));
        fast.cwnd = 100_000;
        let small = SchedContext {
            pending_bytes: 1 << 20,
            send_window: 500_000,
            mss: 1472,
        };
        // In one slow round trip the fast path sends ~1.5 MB: far beyond the window.
        assert_eq!(s.select(Instant(0), &[fast, slow], &small), None);
        let big = SchedContext {
            send_window: 64 << 20,
            ..small
        };
        assert_eq!(s.select(Instant(0), &[fast, slow], &big), Some(1));
    }
}
