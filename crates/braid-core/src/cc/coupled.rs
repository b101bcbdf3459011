//! Coupled multipath congestion control: LIA (RFC 6356) and BALIA (Peng, Walid, Hwang and
//! Low, "Multipath TCP: Analysis, Design and Implementation", 2016).
//!
//! Owns: the window of one path, grown in congestion avoidance as a function of every
//! path's window and RTT (the [`Coupling`] the session hands in), so that the session as a
//! whole takes no more than one TCP would on the best of its paths and moves traffic away
//! from congested paths. Slow start, the recovery period and the minimum window are as in
//! NewReno. Must not touch: other paths' windows (it only reads the coupling summary).

use super::{cwnd_limited, AckEvent, CongestionController, Coupling, LossEvent, Recovery};

/// The part LIA, BALIA and OLIA share.
#[derive(Debug, Clone)]
pub(super) struct Base {
    pub(super) mss: u64,
    pub(super) cwnd: u64,
    pub(super) ssthresh: u64,
    pub(super) recovery: Recovery,
    frac: f64,
}

impl Base {
    pub(super) fn new(mss: u64, iw: u64) -> Self {
        Base {
            mss,
            cwnd: iw,
            ssthresh: u64::MAX,
            recovery: Recovery::default(),
            frac: 0.0,
        }
    }

    /// Common ACK handling; returns true when a congestion-avoidance increase is due.
    pub(super) fn ack(&mut self, ev: &AckEvent<'_>) -> bool {
        if self.recovery.on_ack(ev.largest_acked_sent)
            || !cwnd_limited(ev.prior_in_flight, self.cwnd, self.mss)
        {
            return false;
        }
        if self.cwnd < self.ssthresh {
            self.cwnd += ev.acked_bytes;
            return false;
        }
        true
    }

    fn grow(&mut self, bytes: f64) {
        self.adjust(bytes.max(0.0));
    }

    /// Change the window by `bytes` (may be negative), keeping fractions, never below two
    /// datagrams.
    pub(super) fn adjust(&mut self, bytes: f64) {
        self.frac += bytes;
        let whole = self.frac.floor();
        self.frac -= whole;
        let min = (2 * self.mss) as f64;
        self.cwnd = (self.cwnd as f64 + whole).max(min) as u64;
    }

    pub(super) fn cut(&mut self, ev: &LossEvent, new_cwnd: u64) {
        if ev.persistent {
            self.cwnd = 2 * self.mss;
            return;
        }
        self.cwnd = new_cwnd.max(2 * self.mss);
        self.ssthresh = self.cwnd;
        self.frac = 0.0;
    }
}

/// True when the coupling describes at least this path with usable numbers.
pub(super) fn usable(c: &Coupling) -> bool {
    c.paths > 0 && c.sum_rate > 0.0 && c.total_cwnd > 0
}

/// LIA, RFC 6356 §3, counting bytes: on each ACK of `b` bytes on path i, grow by
/// `min(alpha · b · mss / cwnd_total, b · mss / cwnd_i)` with
/// `alpha = cwnd_total · max(cwnd_k / rtt_k²) / (Σ cwnd_k / rtt_k)²`.
#[derive(Debug, Clone)]
pub struct Lia {
    b: Base,
}

impl Lia {
    /// A controller starting at `initial_window` bytes.
    pub fn new(mss: u64, initial_window: u64) -> Self {
        Lia {
            b: Base::new(mss, initial_window),
        }
    }
}

impl CongestionController for Lia {
    fn name(&self) -> &'static str {
        "lia"
    }
    fn on_ack(&mut self, ev: &AckEvent<'_>) {
        if !self.b.ack(ev) {
            return;
        }
        let (mss, cwnd) = (self.b.mss as f64, self.b.cwnd as f64);
        let bytes = ev.acked_bytes as f64;
        let uncoupled = bytes * mss / cwnd;
        let c = &ev.coupling;
        let inc = if usable(c) {
            let total = c.total_cwnd as f64;
            let alpha = total * c.max_cwnd_rtt2 / (c.sum_rate * c.sum_rate);
            (alpha * bytes * mss / total).min(uncoupled)
        } else {
            uncoupled
        };
        self.b.grow(inc);
    }
    fn on_loss(&mut self, ev: &LossEvent) {
        if self.b.recovery.on_loss(ev) {
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
}

/// BALIA: with `x_k = cwnd_k / rtt_k` and `α_r = max_k x_k / x_r`, each ACK of `b` bytes on
/// path r grows its window by `b · mss · x_r / (rtt_r · (Σ x_k)²) · (1 + α_r)/2 · (4 + α_r)/5`,
/// and a loss shrinks it by `cwnd_r / 2 · min(α_r, 1.5)`.
#[derive(Debug, Clone)]
pub struct Balia {
    b: Base,
    rtt_s: f64,
}

impl Balia {
    /// A controller starting at `initial_window` bytes.
    pub fn new(mss: u64, initial_window: u64) -> Self {
        Balia {
            b: Base::new(mss, initial_window),
            rtt_s: 0.1,
        }
    }

    fn alpha(&self, c: &Coupling) -> f64 {
        let x = self.b.cwnd as f64 / self.rtt_s.max(1e-6);
        if usable(c) && x > 0.0 {
            (c.max_rate / x).max(1.0)
        } else {
            1.0
        }
    }
}

impl CongestionController for Balia {
    fn name(&self) -> &'static str {
        "balia"
    }
    fn on_ack(&mut self, ev: &AckEvent<'_>) {
        self.rtt_s = ev.rtt.smoothed().as_secs_f64().max(1e-6);
        if !self.b.ack(ev) {
            return;
        }
        let (mss, cwnd) = (self.b.mss as f64, self.b.cwnd as f64);
        let bytes = ev.acked_bytes as f64;
        let c = &ev.coupling;
        let inc = if usable(c) {
            let x = cwnd / self.rtt_s;
            let a = self.alpha(c);
            bytes * mss * x / (self.rtt_s * c.sum_rate * c.sum_rate) * (1.0 + a) / 2.0 * (4.0 + a)
                / 5.0
        } else {
            bytes * mss / cwnd
        };
        self.b.grow(inc);
    }
    fn on_loss(&mut self, ev: &LossEvent) {
        if self.b.recovery.on_loss(ev) {
            let a = self.alpha(&ev.coupling).min(1.5);
            let cwnd = self.b.cwnd as f64;
            self.b.cut(ev, (cwnd - cwnd / 2.0 * a) as u64);
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::RateSample;
    use crate::rtt::RttEstimator;
    use crate::time::Instant;
    use std::time::Duration;

    fn ack_in_ca(cc: &mut dyn CongestionController, coupling: Coupling, rtt: &RttEstimator) -> u64 {
        // Leave slow start first.
        cc.on_loss(&LossEvent {
            now: Instant(1),
            lost_bytes: 1000,
            largest_lost_sent: Instant(0),
            persistent: false,
            in_flight: 0,
            coupling,
        });
        let before = cc.window();
        for i in 0..100 {
            let w = cc.window();
            cc.on_ack(&AckEvent {
                now: Instant(1_000_000 + i),
                acked_bytes: 1000,
                largest_acked_sent: Instant(10 + i),
                prior_in_flight: w,
                in_flight: w - 1000,
                rtt,
                rtt_sample: None,
                fwd_queue: None,
                rate: RateSample::default(),
                coupling,
            });
        }
        cc.window() - before
    }

    #[test]
    fn one_path_behaves_like_reno_and_two_equal_paths_take_half_each() {
        let rtt = RttEstimator::new(Duration::from_millis(100));
        let w = 50_000.0;
        let one = Coupling {
            paths: 1,
            total_cwnd: 25_000,
            sum_rate: 25_000.0 / 0.1,
            max_rate: 25_000.0 / 0.1,
            max_cwnd_rtt2: 25_000.0 / 0.01,
            ..Coupling::default()
        };
        let mut lia = Lia::new(1000, w as u64);
        let g1 = ack_in_ca(&mut lia, one, &rtt);
        let mut reno = crate::cc::Reno::new(1000, w as u64);
        let g_reno = ack_in_ca(&mut reno, one, &rtt);
        assert!(
            (g1 as i64 - g_reno as i64).abs() <= 1000,
            "lia {g1} reno {g_reno}"
        );
        // Two equal paths: LIA's alpha is 1/2 of one path's increase per path.
        let two = Coupling {
            paths: 2,
            total_cwnd: 50_000,
            sum_rate: 2.0 * 25_000.0 / 0.1,
            max_rate: 25_000.0 / 0.1,
            max_cwnd_rtt2: 25_000.0 / 0.01,
            ..Coupling::default()
        };
        let mut lia2 = Lia::new(1000, w as u64);
        let g2 = ack_in_ca(&mut lia2, two, &rtt);
        assert!(g2 * 2 <= g1 + 1000, "coupled {g2} vs single {g1}");
        let mut balia = Balia::new(1000, w as u64);
        let gb = ack_in_ca(&mut balia, two, &rtt);
        assert!(gb < g1, "balia {gb} vs single {g1}");
    }
}
