//! The 802.11 medium of a `wifi` path: the glue between the path's two directions (queues,
//! frames on the air) and their DCF contention (`crate::wifi`).
//!
//! Owns: when a queued frame goes on the air on a `wifi` path, collisions' effect on the
//! queues, and the medium's energy intervals. Must not touch: the contention rules and
//! timing (`wifi.rs`) or what happens to a frame after its airtime (`DirState::complete`).

use super::{Nanos, PathModel};

impl<P: Clone> PathModel<P> {
    /// The earliest time a station with a queued frame would start sending, when nothing
    /// is on the air (`None` on other paths).
    pub(super) fn next_access(&self) -> Option<Nanos> {
        let dcf = self.dcf.as_ref()?;
        if self.dirs.iter().any(|s| s.on_air.is_some()) {
            return None;
        }
        (0..2)
            .filter(|&d| !self.dirs[d].queue.is_empty())
            .map(|d| dcf.access_time(d))
            .min()
    }

    /// Offers a frame to station `d` of a `wifi` path.
    pub(super) fn send_dcf(&mut self, now: Nanos, d: usize, wire: u32, payload: P) {
        let busy = self.dirs.iter().any(|s| s.on_air.is_some());
        let bytes = wire as u64;
        let s = &mut self.dirs[d];
        s.stats.offered_packets += 1;
        s.stats.offered_bytes += bytes;
        if s.blackouts.contains(now) {
            s.stats.blackout_drops += 1;
            s.stats.blackout_drop_bytes += bytes;
            return;
        }
        let first = s.queue.is_empty() && s.on_air.is_none();
        if !first && s.queued_bytes + bytes > s.queue_limit {
            s.stats.queue_drops += 1;
            s.stats.queue_drop_bytes += bytes;
            return;
        }
        s.queue.push_back((wire, payload));
        s.queued_bytes += bytes;
        if first {
            if let Some(dcf) = self.dcf.as_mut() {
                dcf.frame_ready(d, now, busy);
            }
        }
        self.run_dcf(now);
    }

    /// Completes exchanges and starts (or collides) accesses up to `now`, in time order.
    pub(super) fn run_dcf(&mut self, now: Nanos) {
        loop {
            if let Some(d) = (0..2).find(|&d| self.dirs[d].air_end().is_some_and(|e| e <= now)) {
                let span = self.dirs[d].on_air.as_ref().map(|f| (f.start, f.end));
                self.dirs[d].complete();
                if let (Some((at, end)), Some(dcf)) = (span, self.dcf.as_mut()) {
                    dcf.success(d, at, end);
                }
                continue;
            }
            let Some(at) = self.next_access().filter(|&t| t <= now) else {
                return;
            };
            let Some(dcf) = self.dcf.as_mut() else { return };
            let who: Vec<usize> = (0..2)
                .filter(|&d| !self.dirs[d].queue.is_empty() && dcf.access_time(d) == at)
                .collect();
            let head = |d: usize| self.dirs[d].queue.front().map_or(0, |f| f.0 as u64);
            let c = if who.len() == 2 {
                dcf.collide(at, [head(0), head(1)])
            } else if dcf.corrupted(who[0]) {
                dcf.corrupt(who[0], at, head(who[0]))
            } else {
                let d = who[0];
                let airtime = |w: u64| dcf.exchange(d, w);
                match self.dirs[d].start(at, Some(&airtime)) {
                    Some((s, e)) if self.meter_on => self.energy.record(s, e),
                    _ => {}
                }
                continue;
            };
            if self.meter_on {
                self.energy.record(at, c.busy_until);
            }
            for &d in &who {
                let s = &mut self.dirs[d];
                if who.len() == 2 {
                    s.stats.collisions += 1;
                } else {
                    s.stats.frame_errors += 1;
                }
                s.stats.rate_drops = dcf.rate_drops(d);
                if c.drop[d] {
                    if let Some((w, _)) = s.queue.pop_front() {
                        s.queued_bytes -= w as u64;
                        s.stats.retry_drops += 1;
                    }
                }
            }
        }
    }
}
