//! CUBIC congestion control (RFC 9438), counting bytes, with the Reno-friendly region and
//! fast convergence.

use super::hystart::HyStart;
use super::{loss_based_ack, AckEvent, CongestionController, LossEvent, Recovery};
use crate::time::Instant;

const C: f64 = 0.4;
const BETA: f64 = 0.7;

/// CUBIC state.
#[derive(Debug, Clone)]
pub struct Cubic {
    mss: u64,
    cwnd: u64,
    ssthresh: u64,
    recovery: Recovery,
    hystart: HyStart,
    epoch_start: Option<Instant>,
    w_max: f64, // segments
    k: f64,     // seconds
    w_est: f64, // segments
    cwnd_frac: f64,
    /// The state before the last cut, while it may still be undone.
    undo: Option<Undo>,
}

/// What a window cut changes, kept to undo it.
#[derive(Debug, Clone, Copy)]
struct Undo {
    cwnd: u64,
    ssthresh: u64,
    epoch_start: Option<Instant>,
    w_max: f64,
    k: f64,
    w_est: f64,
}

impl Cubic {
    /// A controller starting at `initial_window` bytes.
    pub fn new(mss: u64, initial_window: u64) -> Self {
        Cubic {
            mss,
            cwnd: initial_window,
            ssthresh: u64::MAX,
            recovery: Recovery::default(),
            hystart: HyStart::default(),
            epoch_start: None,
            w_max: 0.0,
            k: 0.0,
            w_est: 0.0,
            cwnd_frac: 0.0,
            undo: None,
        }
    }

    fn segs(&self) -> f64 {
        self.cwnd as f64 / self.mss as f64
    }
}

impl CongestionController for Cubic {
    fn name(&self) -> &'static str {
        "cubic"
    }

    fn on_ack(&mut self, ev: &AckEvent<'_>) {
        let (rec, hs) = (&mut self.recovery, &mut self.hystart);
        if !loss_based_ack(rec, hs, ev, &mut self.cwnd, &mut self.ssthresh, self.mss) {
            return;
        }
        let epoch = match self.epoch_start {
            Some(e) => e,
            None => {
                // Congestion avoidance begins without a prior loss (or after slow start).
                self.epoch_start = Some(ev.now);
                self.w_max = self.w_max.max(self.segs());
                self.k = ((self.w_max - self.segs()).max(0.0) / C).cbrt();
                self.w_est = self.segs();
                ev.now
            }
        };
        let t = (ev.now - epoch).as_secs_f64() + ev.rtt.smoothed().as_secs_f64();
        let w_cubic = C * (t - self.k).powi(3) + self.w_max;
        let segs = self.segs();
        let acked_segs = ev.acked_bytes as f64 / self.mss as f64;
        self.w_est += (3.0 * (1.0 - BETA) / (1.0 + BETA)) * acked_segs / segs;
        let increase = if w_cubic < self.w_est {
            // Reno-friendly region.
            (self.w_est - segs).max(0.0)
        } else {
            let target = w_cubic.clamp(segs, 1.5 * segs);
            (target - segs) * acked_segs / segs
        };
        self.cwnd_frac += increase * self.mss as f64;
        if self.cwnd_frac >= 1.0 {
            let whole = self.cwnd_frac.floor();
            self.cwnd += whole as u64;
            self.cwnd_frac -= whole;
        }
    }

    fn on_loss(&mut self, ev: &LossEvent) {
        if !self.recovery.on_loss(ev) {
            return;
        }
        self.hystart.reset();
        if ev.persistent {
            self.cwnd = 2 * self.mss;
            self.epoch_start = None;
            self.undo = None;
            return;
        }
        self.undo = Some(Undo {
            cwnd: self.cwnd,
            ssthresh: self.ssthresh,
            epoch_start: self.epoch_start,
            w_max: self.w_max,
            k: self.k,
            w_est: self.w_est,
        });
        let segs = self.segs();
        // Fast convergence: release bandwidth when the window shrank since the last loss.
        self.w_max = if segs < self.w_max {
            segs * (1.0 + BETA) / 2.0
        } else {
            segs
        };
        self.cwnd = ((self.cwnd as f64 * BETA) as u64).max(2 * self.mss);
        self.ssthresh = self.cwnd;
        self.k = ((self.w_max - self.segs()).max(0.0) / C).cbrt();
        self.w_est = self.segs();
        self.epoch_start = Some(ev.now);
        self.cwnd_frac = 0.0;
    }

    fn undo_loss(&mut self) {
        if let Some(u) = self.undo.take() {
            self.cwnd = self.cwnd.max(u.cwnd);
            self.ssthresh = u.ssthresh;
            self.epoch_start = u.epoch_start;
            self.w_max = u.w_max;
            self.k = u.k;
            self.w_est = u.w_est;
            self.recovery.clear();
        }
    }

    fn window(&self) -> u64 {
        self.cwnd
    }
    fn in_slow_start(&self) -> bool {
        self.cwnd < self.ssthresh
    }
    fn ssthresh(&self) -> u64 {
        self.ssthresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::RateSample;
    use crate::rtt::RttEstimator;
    use std::time::Duration;

    fn ack(c: &mut Cubic, now: Instant, bytes: u64, rtt: &RttEstimator) {
        let inflight = c.window();
        c.on_ack(&AckEvent {
            now,
            acked_bytes: bytes,
            largest_acked_sent: now - Duration::from_millis(1),
            prior_in_flight: inflight,
            in_flight: inflight - bytes.min(inflight),
            rtt,
            rtt_sample: None,
            fwd_queue: None,
            rate: RateSample::default(),
            coupling: Default::default(),
        });
    }

    #[test]
    fn slow_start_doubles_then_loss_cuts_to_beta_then_regrows_to_w_max() {
        let mss = 1000;
        let mut c = Cubic::new(mss, 10 * mss);
        let rtt = RttEstimator::new(Duration::from_millis(100));
        let mut now = Instant(1_000_000_000);
        ack(&mut c, now, 10 * mss, &rtt);
        assert_eq!(c.window(), 20 * mss);
        c.on_loss(&LossEvent {
            now,
            lost_bytes: mss,
            largest_lost_sent: now,
            persistent: false,
            in_flight: 0,
            coupling: Default::default(),
        });
        assert_eq!(c.window(), 14 * mss);
        assert!(!c.in_slow_start());
        // A second loss from the same flight does not cut again.
        c.on_loss(&LossEvent {
            now,
            lost_bytes: mss,
            largest_lost_sent: now - Duration::from_millis(5),
            persistent: false,
            in_flight: 0,
            coupling: Default::default(),
        });
        assert_eq!(c.window(), 14 * mss);
        // After about K seconds the window is back near w_max = 20 segments.
        for _ in 0..400 {
            now += Duration::from_millis(10);
            let w = c.window();
            ack(&mut c, now, w / 10, &rtt);
        }
        assert!(c.window() >= 20 * mss, "window {}", c.window());
    }
}
