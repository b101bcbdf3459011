//! OLIA, the Opportunistic Linked-Increases Algorithm (Khalili, Gast, Popovic and Le Boudec,
//! "MPTCP is not Pareto-optimal: performance issues and a possible solution", CoNEXT 2012;
//! draft-khalili-mptcp-congestion-control).
//!
//! Owns: the window of one path and the path's loss-interval bookkeeping (bytes acknowledged
//! between congestion events, OLIA's l_r). In congestion avoidance, each ACK of `b` bytes on
//! path r changes its window by
//!
//! ```text
//! b · mss · ( (w_r / rtt_r²) / (Σ_p w_p / rtt_p)²  +  α_r / w_r )
//! ```
//!
//! The first term is a Reno-like, responsive coupled increase (one path alone: exactly
//! Reno). The second moves window between paths: with B the paths with the largest
//! `l / rtt²` (the best paths: TCP's rate grows as √l / rtt), M the paths with the largest
//! window, and C = B \ M the "collected" paths (good paths not yet carrying the most),
//!
//! - if C is empty, α_r = 0 for every path;
//! - else α_r = 1 / (|paths| · |C|) on paths of C, and −1 / (|paths| · |M|) on paths of M.
//!
//! So a best path with a small window gets a boost that is taken from the largest windows,
//! and the total increase stays that of the first term. A loss halves the path's window;
//! slow start, the recovery period and the two-datagram minimum are as in NewReno.
//!
//! Must not touch: other paths' windows. The session computes the sets (counts and this
//! path's membership in [`Coupling`]) from every path's [`CongestionController::loss_interval`],
//! window and RTT, and refreshes them on every timer update.

use super::coupled::{usable, Base};
use super::{AckEvent, CongestionController, Coupling, LossEvent};

/// OLIA congestion controller of one path.
#[derive(Debug, Clone)]
pub struct Olia {
    b: Base,
    rtt_s: f64,
    /// Bytes acknowledged on this path in total, at the congestion event before last, and
    /// at the last one (the draft's loss1, loss2 and loss3, counted in bytes).
    acked_total: u64,
    at_loss_prev: u64,
    at_loss_last: u64,
}

impl Olia {
    /// A controller starting at `initial_window` bytes.
    pub fn new(mss: u64, initial_window: u64) -> Self {
        Olia {
            b: Base::new(mss, initial_window),
            rtt_s: 0.1,
            acked_total: 0,
            at_loss_prev: 0,
            at_loss_last: 0,
        }
    }

    /// OLIA's α_r for this path from the session's sets.
    pub fn alpha(c: &Coupling) -> f64 {
        if c.collected_paths == 0 || c.paths == 0 {
            return 0.0;
        }
        let n = f64::from(c.paths);
        if c.is_best && !c.is_max_window {
            1.0 / (n * f64::from(c.collected_paths))
        } else if c.is_max_window {
            -1.0 / (n * f64::from(c.max_window_paths.max(1)))
        } else {
            0.0
        }
    }

    /// Window change in bytes for an ACK of `bytes` in congestion avoidance.
    fn increase(&self, bytes: f64, c: &Coupling) -> f64 {
        let (mss, cwnd) = (self.b.mss as f64, self.b.cwnd as f64);
        if !usable(c) {
            return bytes * mss / cwnd;
        }
        let own = cwnd / (self.rtt_s * self.rtt_s);
        bytes * mss * (own / (c.sum_rate * c.sum_rate) + Self::alpha(c) / cwnd)
    }
}

impl CongestionController for Olia {
    fn name(&self) -> &'static str {
        "olia"
    }
    fn on_ack(&mut self, ev: &AckEvent<'_>) {
        self.rtt_s = ev.rtt.smoothed().as_secs_f64().max(1e-6);
        self.acked_total += ev.acked_bytes;
        if !self.b.ack(ev) {
            return;
        }
        let inc = self.increase(ev.acked_bytes as f64, &ev.coupling);
        self.b.adjust(inc);
    }
    fn on_loss(&mut self, ev: &LossEvent) {
        if self.b.recovery.on_loss(ev) {
            self.at_loss_prev = self.at_loss_last;
            self.at_loss_last = self.acked_total;
            let half = self.b.cwnd / 2;
            self.b.cut(ev, half);
        }
    }
    fn window(&self) -> u64 {
        self.b.cwnd
    }
    fn in_slow_start(&self) -> bool {
        self.b.cwnd < self.b.ssthresh
    }
    fn ssthresh(&self) -> u64 {
        self.b.ssthresh
    }
    fn loss_interval(&self) -> Option<u64> {
        let since = self.acked_total - self.at_loss_last;
        let between = self.at_loss_last - self.at_loss_prev;
        Some(since.max(between))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::{RateSample, Reno};
    use crate::rtt::RttEstimator;
    use crate::time::Instant;
    use std::time::Duration;

    fn loss(cc: &mut dyn CongestionController, at: u64, coupling: Coupling) {
        cc.on_loss(&LossEvent {
            now: Instant(at),
            lost_bytes: 1000,
            largest_lost_sent: Instant(at - 1),
            persistent: false,
            in_flight: 0,
            coupling,
        });
    }

    /// Leave slow start, then 100 ACKs of 1000 bytes each; returns the window change.
    fn grow(cc: &mut dyn CongestionController, c: Coupling, rtt: &RttEstimator) -> i64 {
        grow_with(cc, |_| c, rtt)
    }

    /// As [`grow`], with the coupling recomputed from the window before each ACK.
    fn grow_with(
        cc: &mut dyn CongestionController,
        coupling: impl Fn(u64) -> Coupling,
        rtt: &RttEstimator,
    ) -> i64 {
        let first = coupling(cc.window());
        loss(cc, 1, first);
        let before = cc.window() as i64;
        for i in 0..100 {
            let w = cc.window();
            let c = coupling(w);
            cc.on_ack(&AckEvent {
                now: Instant(1_000_000 + i),
                acked_bytes: 1000,
                largest_acked_sent: Instant(10 + i),
                prior_in_flight: w,
                in_flight: w.saturating_sub(1000),
                rtt,
                rtt_sample: None,
                fwd_queue: None,
                rate: RateSample::default(),
                coupling: c,
            });
        }
        cc.window() as i64 - before
    }

    /// Two paths of 100 ms; this one has window `own`, the other `other` (windows after the
    /// first loss halves them, as the test helper does).
    fn two(own: u64, other: u64) -> Coupling {
        Coupling {
            paths: 2,
            total_cwnd: own + other,
            sum_rate: (own + other) as f64 / 0.1,
            max_rate: own.max(other) as f64 / 0.1,
            max_cwnd_rtt2: own.max(other) as f64 / 0.01,
            ..Coupling::default()
        }
    }

    #[test]
    fn alpha_follows_the_sets() {
        let mut c = two(10_000, 40_000);
        // No collected path: nobody gets or gives.
        c.best_paths = 1;
        c.max_window_paths = 1;
        c.is_best = true;
        c.is_max_window = true;
        assert_eq!(Olia::alpha(&c), 0.0);
        // This path is best but small: +1/(2·1); the largest path gives −1/(2·1).
        c.collected_paths = 1;
        c.is_max_window = false;
        assert!((Olia::alpha(&c) - 0.5).abs() < 1e-12);
        c.is_best = false;
        c.is_max_window = true;
        assert!((Olia::alpha(&c) + 0.5).abs() < 1e-12);
        // Neither best nor largest: 0.
        c.is_max_window = false;
        assert_eq!(Olia::alpha(&c), 0.0);
        // Three paths, two collected: +1/6 each.
        c.paths = 3;
        c.collected_paths = 2;
        c.is_best = true;
        assert!((Olia::alpha(&c) - 1.0 / 6.0).abs() < 1e-12);
    }

    #[test]
    fn one_path_is_reno() {
        let rtt = RttEstimator::new(Duration::from_millis(100));
        let one = |w: u64| Coupling {
            paths: 1,
            total_cwnd: w,
            sum_rate: w as f64 / 0.1,
            max_rate: w as f64 / 0.1,
            max_cwnd_rtt2: w as f64 / 0.01,
            best_paths: 1,
            max_window_paths: 1,
            is_best: true,
            is_max_window: true,
            ..Coupling::default()
        };
        let g_olia = grow_with(&mut Olia::new(1000, 50_000), one, &rtt);
        let g_reno = grow_with(&mut Reno::new(1000, 50_000), one, &rtt);
        assert!(g_olia > 0);
        assert!(
            (g_olia - g_reno).abs() <= 1000,
            "olia {g_olia} reno {g_reno}"
        );
    }

    #[test]
    fn small_best_path_gets_the_boost_and_the_largest_path_pays() {
        let rtt = RttEstimator::new(Duration::from_millis(100));
        // This path: window 10 kB after the first cut; the other 40 kB.
        let base = two(10_000, 40_000);
        // Case 1: this path is the best and not the largest: collected, alpha > 0.
        let collected = Coupling {
            best_paths: 1,
            max_window_paths: 1,
            collected_paths: 1,
            is_best: true,
            is_max_window: false,
            ..base
        };
        let plain = Coupling {
            best_paths: 1,
            max_window_paths: 1,
            collected_paths: 0,
            is_best: false,
            is_max_window: false,
            ..base
        };
        let boosted = grow(&mut Olia::new(1000, 20_000), collected, &rtt);
        let coupled_only = grow(&mut Olia::new(1000, 20_000), plain, &rtt);
        assert!(
            boosted > coupled_only + 1000,
            "collected path {boosted} vs no alpha {coupled_only}"
        );
        // Case 2: the largest path while a better one is collected: alpha < 0, it shrinks
        // (its coupled term is smaller than the boost it pays for).
        let big = two(40_000, 10_000);
        let payer = Coupling {
            best_paths: 1,
            max_window_paths: 1,
            collected_paths: 1,
            is_best: false,
            is_max_window: true,
            ..big
        };
        let paying = grow(&mut Olia::new(1000, 80_000), payer, &rtt);
        let free = grow(
            &mut Olia::new(1000, 80_000),
            Coupling {
                collected_paths: 0,
                ..payer
            },
            &rtt,
        );
        assert!(paying < free, "payer {paying} vs no alpha {free}");
    }

    #[test]
    fn loss_interval_is_the_larger_of_the_last_two() {
        let rtt = RttEstimator::new(Duration::from_millis(100));
        let mut o = Olia::new(1000, 50_000);
        let c = Coupling::default();
        assert_eq!(o.loss_interval(), Some(0));
        grow(&mut o, c, &rtt); // loss at t=1, then 100 000 bytes acked
        assert_eq!(o.loss_interval(), Some(100_000));
        loss(&mut o, 2_000_000, c); // a new congestion event
        assert_eq!(o.loss_interval(), Some(100_000));
        let w = o.window();
        for i in 0..10 {
            o.on_ack(&AckEvent {
                now: Instant(3_000_000 + i),
                acked_bytes: 1000,
                largest_acked_sent: Instant(2_500_000 + i),
                prior_in_flight: w,
                in_flight: w - 1000,
                rtt: &rtt,
                rtt_sample: None,
                fwd_queue: None,
                rate: RateSample::default(),
                coupling: c,
            });
        }
        // 10 000 since the last loss, 100 000 between the last two: the larger.
        assert_eq!(o.loss_interval(), Some(100_000));
    }
}
