//! ECF, Earliest Completion First (Lim et al., CoNEXT 2017): when the fastest path has no
//! window left, send on a slower path only if that finishes the queued data sooner than
//! waiting for the fastest path would.
//!
//! With `k` bytes queued, the fastest path `f` needs about `1 + k / cwnd_f` of its round
//! trips to deliver them. If that is less than one round trip of the slower path `s` (with
//! a variance margin and a hysteresis factor), the bytes put on `s` would arrive after `f`
//! could have delivered everything: ECF waits, unless `s` could itself carry `k` within two
//! of `f`'s round trips (counting at least one round trip of `s`: see `select`).

use super::{candidate_state, PathId, PathInfo, SchedContext, Scheduler};
use crate::time::Instant;

/// Hysteresis factor β of the paper.
const BETA: f64 = 0.25;

/// ECF state: whether the last decision was to wait (the hysteresis).
#[derive(Debug, Default)]
pub struct Ecf {
    waiting: bool,
}

impl Scheduler for Ecf {
    fn name(&self) -> &'static str {
        "ecf"
    }

    fn select(&mut self, _now: Instant, paths: &[PathInfo], ctx: &SchedContext) -> Option<PathId> {
        let state = candidate_state(paths)?;
        let eligible = || paths.iter().filter(move |p| p.eligible(state));
        let fast = eligible().min_by_key(|p| (p.srtt, p.id))?;
        if fast.send_ready {
            self.waiting = false;
            return Some(fast.id);
        }
        let slow = eligible()
            .filter(|p| p.send_ready)
            .min_by_key(|p| (p.srtt, p.id))?;
        let rtt_f = fast.srtt.as_secs_f64();
        let rtt_s = slow.srtt.as_secs_f64();
        let delta = fast.rttvar.max(slow.rttvar).as_secs_f64();
        let k = ctx.pending_bytes.max(ctx.mss) as f64;
        let n = 1.0 + k / fast.cwnd.max(1) as f64;
        let hyst = if self.waiting { 1.0 + BETA } else { 1.0 };
        if n * rtt_f < hyst * (rtt_s + delta) {
            // Waiting for the fast path finishes sooner, unless the slow path alone can
            // carry everything within two fast round trips. The slow path needs at least
            // one of its round trips for anything (the paper's k/cwnd_s can be a small
            // fraction at the end of a transfer, which would send the last packets on the
            // slowest path): rounds are counted from one.
            if (k / slow.cwnd.max(1) as f64).max(1.0) * rtt_s >= 2.0 * rtt_f + delta {
                self.waiting = true;
                return None;
            }
            return Some(slow.id);
        }
        self.waiting = false;
        Some(slow.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::tests::info;

    fn ctx(pending: u64) -> SchedContext {
        SchedContext {
            pending_bytes: pending,
            send_window: 1 << 30,
            mss: 1472,
        }
    }

    #[test]
    fn waits_for_the_fast_path_when_little_data_is_left() {
        let mut s = Ecf::default();
        let (mut fast, slow) = (info(0, 20, false), info(1, 300, true));
        fast.cwnd = 200_000;
        // 100 kB fits in about one fast round trip: the slow path would only delay it.
        assert_eq!(s.select(Instant(0), &[fast, slow], &ctx(100_000)), None);
        // 50 MB queued: the fast path needs far longer than one slow round trip.
        assert_eq!(
            s.select(Instant(0), &[fast, slow], &ctx(50_000_000)),
            Some(1)
        );
        // The fast path has room: always it.
        fast.send_ready = true;
        assert_eq!(s.select(Instant(0), &[fast, slow], &ctx(100_000)), Some(0));
    }
}
