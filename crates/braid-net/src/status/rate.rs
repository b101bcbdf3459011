//! Each path's current rate both ways, for status: the bytes its counters grew by over the
//! last second or so, per second. A path's delivery-rate sample says what the path carried of
//! this side's own data; on an agent that downloads it measures acknowledgements and is near
//! zero, so the board shows these rates beside it (issue 24: `DELIVERY 0.0 Mbit/s` during a
//! 38 Mbit/s download).
//!
//! Owns: the recent samples of one path's cumulative byte counters and the rates over them.
//! Must not touch: clocks (callers pass `now`), the counters themselves.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The rates are taken over at least this much of the newest samples.
pub const RATE_WINDOW: Duration = Duration::from_secs(1);

/// Samples older than this are dropped (one older than [`RATE_WINDOW`] is kept, if it is
/// not older than this).
const KEEP: Duration = Duration::from_secs(3);

/// Recent samples of one path's cumulative (sent, received) byte counts.
#[derive(Debug, Clone, Default)]
pub struct RateMeter {
    samples: VecDeque<(Instant, u64, u64)>,
}

impl RateMeter {
    /// A meter without samples.
    pub fn new() -> RateMeter {
        RateMeter::default()
    }

    /// Take the path's cumulative byte counts at `now`. Counts that went down (a new
    /// session's counters) start the meter over.
    pub fn update(&mut self, now: Instant, sent: u64, received: u64) {
        // A newest sample older than KEEP (the server's last snapshot, a minute ago) would
        // average over all that time: start over.
        if self.samples.back().is_some_and(|&(t, s, r)| {
            sent < s || received < r || now < t || now.duration_since(t) > KEEP
        }) {
            self.samples.clear();
        }
        self.samples.push_back((now, sent, received));
        // Keep the newest sample at least RATE_WINDOW old, and nothing older than KEEP.
        while self.samples.len() > 2 {
            let second = self.samples[1].0;
            let too_old = now.saturating_duration_since(self.samples[0].0) > KEEP;
            if now.saturating_duration_since(second) >= RATE_WINDOW || too_old {
                self.samples.pop_front();
            } else {
                break;
            }
        }
    }

    /// (sent, received) in bits per second over the samples kept; `None` before two
    /// samples a tenth of a second apart.
    pub fn rates_bps(&self) -> Option<(u64, u64)> {
        let (&(t0, s0, r0), &(t1, s1, r1)) = (self.samples.front()?, self.samples.back()?);
        let secs = t1.saturating_duration_since(t0).as_secs_f64();
        if secs < 0.1 {
            return None;
        }
        let bps = |a: u64, b: u64| (b.saturating_sub(a) as f64 * 8.0 / secs) as u64;
        Some((bps(s0, s1), bps(r0, r1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    /// Issue 24: a 38 Mbit/s download showed `DELIVERY 0.0 Mbit/s` on both paths. The
    /// received rate of a path that receives 4.75 MB a second is 38 Mbit/s.
    #[test]
    fn a_download_shows_its_received_rate_and_the_acks_sent() {
        let t0 = Instant::now();
        let mut m = RateMeter::new();
        // Every 200 ms (the agent's tick): 950 kB received, 20 kB of acknowledgements sent.
        for i in 0..=10u64 {
            m.update(at(t0, i * 200), i * 20_000, i * 950_000);
        }
        let (tx, rx) = m.rates_bps().unwrap();
        assert_eq!(rx, 38_000_000);
        assert_eq!(tx, 800_000);
    }

    #[test]
    fn the_rate_follows_the_last_second_not_the_whole_history() {
        let t0 = Instant::now();
        let mut m = RateMeter::new();
        let mut rx = 0;
        for i in 0..=50u64 {
            // 10 s at 8 Mbit/s, then nothing.
            if i <= 25 {
                rx = i * 200_000;
            }
            m.update(at(t0, i * 200), 0, rx);
        }
        assert_eq!(m.rates_bps(), Some((0, 0)), "idle for the last 5 s");
        let mut m = RateMeter::new();
        for i in 0..=50u64 {
            m.update(at(t0, i * 200), 0, i.saturating_sub(45) * 200_000);
        }
        assert_eq!(
            m.rates_bps(),
            Some((0, 8_000_000)),
            "busy for the last second"
        );
    }

    #[test]
    fn counters_that_restart_start_the_meter_over() {
        let t0 = Instant::now();
        let mut m = RateMeter::new();
        m.update(t0, 1_000_000, 5_000_000);
        m.update(at(t0, 1000), 0, 0);
        assert_eq!(m.rates_bps(), None);
        m.update(at(t0, 2000), 125_000, 250_000);
        assert_eq!(m.rates_bps(), Some((1_000_000, 2_000_000)));
    }

    /// Regression (issue 38 item 11): the server measures between snapshots, and a
    /// `braid status` a minute after the last one averaged over that minute. A sample older
    /// than [`KEEP`] is not a rate's start.
    #[test]
    fn a_sample_older_than_keep_starts_the_meter_over() {
        let t0 = Instant::now();
        let mut m = RateMeter::new();
        m.update(t0, 0, 0);
        m.update(at(t0, 60_000), 0, 7_500_000);
        assert_eq!(m.rates_bps(), None, "not 1 Mbit/s over the last minute");
        m.update(at(t0, 60_500), 0, 8_750_000);
        assert_eq!(m.rates_bps(), Some((0, 20_000_000)));
    }

    #[test]
    fn one_sample_or_samples_too_close_give_no_rate() {
        let t0 = Instant::now();
        let mut m = RateMeter::new();
        assert_eq!(m.rates_bps(), None);
        m.update(t0, 0, 0);
        m.update(at(t0, 50), 1_000_000, 1_000_000);
        assert_eq!(m.rates_bps(), None);
    }
}
