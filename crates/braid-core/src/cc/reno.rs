//! NewReno congestion control (RFC 9002 §7), counting bytes.

use super::hystart::HyStart;
use super::{loss_based_ack, AckEvent, CongestionController, LossEvent, Recovery};

/// NewReno state.
#[derive(Debug, Clone)]
pub struct Reno {
    mss: u64,
    cwnd: u64,
    ssthresh: u64,
    recovery: Recovery,
    hystart: HyStart,
    acked_in_ca: u64,
    /// Window and threshold before the last cut, while it may still be undone.
    undo: Option<(u64, u64)>,
}

impl Reno {
    /// A controller starting at `initial_window` bytes.
    pub fn new(mss: u64, initial_window: u64) -> Self {
        Reno {
            mss,
            cwnd: initial_window,
            ssthresh: u64::MAX,
            recovery: Recovery::default(),
            hystart: HyStart::default(),
            acked_in_ca: 0,
            undo: None,
        }
    }
}

impl CongestionController for Reno {
    fn name(&self) -> &'static str {
        "reno"
    }
    fn on_ack(&mut self, ev: &AckEvent<'_>) {
        let (rec, hs) = (&mut self.recovery, &mut self.hystart);
        if !loss_based_ack(rec, hs, ev, &mut self.cwnd, &mut self.ssthresh, self.mss) {
            return;
        }
        self.acked_in_ca += ev.acked_bytes;
        while self.acked_in_ca >= self.cwnd {
            self.acked_in_ca -= self.cwnd;
            self.cwnd += self.mss;
        }
    }
    fn on_loss(&mut self, ev: &LossEvent) {
        if !self.recovery.on_loss(ev) {
            return;
        }
        self.hystart.reset();
        if ev.persistent {
            self.cwnd = 2 * self.mss;
            self.undo = None;
            return;
        }
        self.undo = Some((self.cwnd, self.ssthresh));
        self.cwnd = (self.cwnd / 2).max(2 * self.mss);
        self.ssthresh = self.cwnd;
        self.acked_in_ca = 0;
    }
    fn undo_loss(&mut self) {
        if let Some((cwnd, ssthresh)) = self.undo.take() {
            self.cwnd = self.cwnd.max(cwnd);
            self.ssthresh = ssthresh;
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
