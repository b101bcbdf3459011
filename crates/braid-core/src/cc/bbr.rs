//! A BBR-style model-based controller (after BBR v1): it estimates the bottleneck bandwidth
//! (windowed maximum of delivery-rate samples over ten round trips) and the propagation RTT
//! (windowed minimum over ten seconds), paces at a gain times the bandwidth and caps the data
//! in flight at a gain times the estimated bandwidth-delay product. Random loss does not
//! shrink the window: a loss changes nothing in the model.
//!
//! `bbrq` is the same model with a queue bound (`qbound.rs`): in ProbeBW the window gain
//! over the bandwidth-delay product follows the standing queue the path measures, so the
//! path's own data keeps at most a few milliseconds queued at the bottleneck instead of up
//! to one bandwidth-delay product.

use super::bbr_filters::{Aggregation, MinRtt};
use super::qbound::QueueBound;
use super::{AckEvent, CongestionController, LossEvent};
use crate::pacer::MIN_BURST_PACKETS;
use crate::rng::splitmix64;
use crate::rtt::RttEstimator;
use crate::time::{Instant, TIMER_GRANULARITY};
use std::collections::VecDeque;
use std::time::Duration;

const STARTUP_GAIN: f64 = 2.885;
const CYCLE: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
const BW_WINDOW_ROUNDS: u64 = 10;
const MIN_RTT_WINDOW: Duration = Duration::from_secs(10);
const PROBE_RTT_TIME: Duration = Duration::from_millis(200);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Startup,
    Drain,
    ProbeBw,
    ProbeRtt,
}

/// BBR state.
#[derive(Debug, Clone)]
pub struct Bbr {
    mss: u64,
    cwnd: u64,
    initial_cwnd: u64,
    mode: Mode,
    bw_samples: VecDeque<(u64, f64)>, // (round, bytes/s), decreasing bw
    btl_bw: f64,
    /// The propagation RTT (robust to one outlier, `bbr_filters.rs`).
    min_rtt: MinRtt,
    /// Data acknowledged in bursts above the bandwidth (`bbr_filters.rs`).
    aggregation: Aggregation,
    round: u64,
    /// Rounds that age the bandwidth filter: all but those spent in ProbeRTT.
    bw_round: u64,
    next_round_delivered: u64,
    full_bw: f64,
    full_bw_rounds: u32,
    filled_pipe: bool,
    pacing_gain: f64,
    cwnd_gain: f64,
    cycle_index: usize,
    cycle_stamp: Instant,
    probe_rtt_done: Option<Instant>,
    probe_rtt_round_done: bool,
    prior_cwnd: u64,
    /// `bbrq`: the queue bound that sets the window gain in ProbeBW.
    bound: Option<QueueBound>,
    /// Bytes declared lost in the current round, and bytes delivered when it began (the
    /// loss exit from startup).
    round_lost: u64,
    round_start_delivered: u64,
}

impl Bbr {
    /// A controller starting at `initial_window` bytes.
    pub fn new(mss: u64, initial_window: u64, now: Instant) -> Self {
        Bbr {
            mss,
            cwnd: initial_window,
            initial_cwnd: initial_window,
            mode: Mode::Startup,
            bw_samples: VecDeque::new(),
            btl_bw: 0.0,
            min_rtt: MinRtt::new(now),
            aggregation: Aggregation::default(),
            round: 0,
            bw_round: 0,
            next_round_delivered: 0,
            full_bw: 0.0,
            full_bw_rounds: 0,
            filled_pipe: false,
            pacing_gain: STARTUP_GAIN,
            cwnd_gain: STARTUP_GAIN,
            cycle_index: 0,
            cycle_stamp: now,
            probe_rtt_done: None,
            probe_rtt_round_done: false,
            prior_cwnd: initial_window,
            bound: None,
            round_lost: 0,
            round_start_delivered: 0,
        }
    }

    /// `bbrq`: the same controller whose window keeps the path's standing queue small.
    pub fn with_queue_bound(mss: u64, initial_window: u64, now: Instant) -> Self {
        Bbr {
            bound: Some(QueueBound::default()),
            ..Bbr::new(mss, initial_window, now)
        }
    }

    /// Startup also ends when a round lost more than 2 % of what it delivered (as in BBR v2):
    /// a sender whose rate samples are limited by the application (a bulk UDP flow arriving
    /// in bursts) never sees the bandwidth plateau, and without this stayed in startup at
    /// 2.9 times its estimate, losing a third of what it sent.
    fn check_startup_loss(&mut self, delivered: u64) {
        let in_round = delivered.saturating_sub(self.round_start_delivered);
        if self.mode == Mode::Startup
            && self.round_lost >= 8 * self.mss
            && self.round_lost * 50 > in_round
        {
            self.filled_pipe = true;
        }
        self.round_lost = 0;
        self.round_start_delivered = delivered;
    }

    /// ProbeRTT's window: 4 packets (BBR v1); with the queue bound half a bandwidth-delay
    /// product, as BBR v2 does: the bound keeps the queue short already, so ProbeRTT only
    /// needs to drain what is left, not starve the path for 200 ms.
    fn probe_rtt_cwnd(&self) -> u64 {
        if self.bound.is_some() {
            self.bdp(0.5).max(self.min_cwnd())
        } else {
            4 * self.mss
        }
    }

    /// The smallest window: 4 packets (BBR v1); with the queue bound 2. Pacing at the
    /// measured bottleneck rate already keeps the queue short, and on a slow link with a
    /// short RTT (an uplink of 4-8 Mbit/s at home, a packet taking 1.5-3 ms to send) four
    /// packets were a standing queue of 6-12 ms that every call's packet waited behind.
    fn min_cwnd(&self) -> u64 {
        if self.bound.is_some() {
            2 * self.mss
        } else {
            4 * self.mss
        }
    }

    /// The window gain and headroom in force: the queue bound's gain in ProbeBW (at least
    /// the pacing gain, so a probe for more bandwidth has room) with one packet of headroom,
    /// else the mode's gain.
    ///
    /// Queues that are not this path's (the return direction's, which its acknowledgements
    /// cross; while the bound is released, another sender's on the way out) are part of the
    /// pipe it must fill: the headroom adds the bandwidth times them, without the gain (at
    /// gain 2 the window would otherwise queue as much again of our own).
    fn window_gain(&self, now: Instant) -> (f64, u64) {
        match &self.bound {
            Some(b) if self.mode == Mode::ProbeBw => {
                let gain = b.gain(now).max(self.pacing_gain);
                let foreign = b.foreign_queue(now).as_secs_f64() * self.btl_bw;
                (gain, self.mss + foreign as u64)
            }
            _ => (self.cwnd_gain, 3 * self.mss),
        }
    }

    /// What the window holds beyond the bandwidth-delay product so that the path never
    /// idles for the way its data and acknowledgements move in bursts:
    /// - what the pacer lets out at once when a timer of the driver fires late: two timer
    ///   granularities at the pacing rate, less the pacer's smallest burst, which it lets
    ///   out at any rate and the window never had to cover (Linux BBR's quantization budget
    ///   plays this part for TSO bursts). Nothing below about 60 Mbit/s; at gigabit rates
    ///   2 ms of data, without which one stream on loopback ran at 1.3 Gbit/s where CUBIC
    ///   ran at 5.5. (Less only two packets, the term put 1-2 packets more in the window of
    ///   a 16 Mbit/s home link, and a call beside two downloads waited 30-60 ms at p99
    ///   instead of 4: `responsive_*` in the testbed);
    /// - plain BBR only: the acknowledgements' aggregation (`bbr_filters.rs`). `bbrq` leaves
    ///   it out: covering it, even capped at the bound's standing-queue target, kept that
    ///   much more queued on every path whose acknowledgements bunch (an upload beside the
    ///   download: the call +1.3 ms; an 85 Mbit/s datagram flow over two paths: loss 1.1 %
    ///   to 2.3 %) for 6 % more on the Mahimahi LTE traces (docs/results.md).
    fn burst_allowance(&self) -> u64 {
        let quantum = self.pacing_gain * self.btl_bw * 2.0 * TIMER_GRANULARITY.as_secs_f64();
        let quantum = (quantum as u64).saturating_sub(MIN_BURST_PACKETS * self.mss);
        let aggregation = if self.bound.is_some() {
            0
        } else {
            self.aggregation.extra()
        };
        aggregation + quantum
    }

    fn bdp(&self, gain: f64) -> u64 {
        match self.min_rtt.get() {
            Some(rtt) if self.btl_bw > 0.0 => (gain * self.btl_bw * rtt.as_secs_f64()) as u64,
            _ => (gain * self.initial_cwnd as f64) as u64,
        }
    }

    /// `bbrq`: the queue bound's samples and rounds; in startup, its judgement of whether
    /// a round stood above the target, which ends startup.
    fn update_bound(&mut self, ev: &AckEvent<'_>, round_start: bool) {
        let min_cwnd = self.min_cwnd();
        if let Some(b) = &mut self.bound {
            if let Some(s) = ev.rtt_sample {
                b.on_rtt_sample(s, ev.fwd_queue);
            }
            if let (true, true, Some(m)) = (round_start, self.filled_pipe, self.min_rtt.get()) {
                let own_floor = if self.btl_bw > 0.0 {
                    Duration::from_secs_f64(min_cwnd as f64 / self.btl_bw)
                } else {
                    Duration::ZERO
                };
                b.on_round_start(ev.now, m, own_floor);
            }
            if let (true, Mode::Startup, Some(m)) = (round_start, self.mode, self.min_rtt.get()) {
                if b.startup_round_ends_startup(m) {
                    self.filled_pipe = true;
                }
            }
        }
    }

    fn update_bw(&mut self, ev: &AckEvent<'_>, round_start: bool) {
        let rate = ev.rate.delivery_rate;
        if rate <= 0.0 {
            return;
        }
        if round_start && self.mode != Mode::ProbeRtt {
            self.bw_round += 1;
        }
        // ProbeRTT's small window limits what it delivers, as an idle application would:
        // its samples may raise the estimate, never age out a higher one. (Ten rounds of
        // 20 ms fit in ProbeRTT's 200 ms: they would replace the estimate with ProbeRTT's
        // own trickle, and the path would creep back over seconds.)
        let limited = ev.rate.is_app_limited || self.mode == Mode::ProbeRtt;
        if limited && rate < self.btl_bw {
            return;
        }
        // Monotonic deque: keep decreasing bandwidths, drop samples older than the window.
        while matches!(self.bw_samples.back(), Some(&(_, b)) if b <= rate) {
            self.bw_samples.pop_back();
        }
        self.bw_samples.push_back((self.bw_round, rate));
        while matches!(self.bw_samples.front(), Some(&(r, _)) if r + BW_WINDOW_ROUNDS <= self.bw_round)
        {
            self.bw_samples.pop_front();
        }
        self.btl_bw = self.bw_samples.front().map_or(0.0, |&(_, b)| b);
        if !self.filled_pipe && round_start && !ev.rate.is_app_limited {
            if self.btl_bw >= self.full_bw * 1.25 {
                self.full_bw = self.btl_bw;
                self.full_bw_rounds = 0;
            } else {
                self.full_bw_rounds += 1;
                if self.full_bw_rounds >= 3 {
                    self.filled_pipe = true;
                }
            }
        }
    }

    fn enter_probe_bw(&mut self, now: Instant) {
        self.mode = Mode::ProbeBw;
        self.cwnd_gain = 2.0;
        // Start anywhere but the draining phase, chosen deterministically.
        let i = (splitmix64(now.as_nanos()) % 7) as usize;
        self.cycle_index = if i == 0 { 0 } else { i + 1 };
        self.pacing_gain = CYCLE[self.cycle_index];
        self.cycle_stamp = now;
    }

    fn update_cycle(&mut self, ev: &AckEvent<'_>) {
        let Some(min_rtt) = self.min_rtt.get() else {
            return;
        };
        let elapsed = ev.now - self.cycle_stamp > min_rtt;
        let advance = match self.pacing_gain {
            g if g > 1.0 => elapsed && ev.prior_in_flight >= self.bdp(g),
            g if g < 1.0 => elapsed || ev.in_flight <= self.bdp(1.0),
            _ => elapsed,
        };
        if advance {
            self.cycle_index = (self.cycle_index + 1) % CYCLE.len();
            self.pacing_gain = CYCLE[self.cycle_index];
            self.cycle_stamp = ev.now;
        }
    }
}

impl CongestionController for Bbr {
    fn name(&self) -> &'static str {
        if self.bound.is_some() {
            "bbrq"
        } else {
            "bbr"
        }
    }

    fn on_ack(&mut self, ev: &AckEvent<'_>) {
        let mut round_start = false;
        if ev.rate.prior_delivered >= self.next_round_delivered {
            self.next_round_delivered = ev.rate.delivered;
            self.round += 1;
            round_start = true;
        }
        if round_start {
            self.check_startup_loss(ev.rate.delivered);
        }
        self.update_bw(ev, round_start);
        self.update_bound(ev, round_start);

        // Propagation RTT.
        let expired = ev.now > self.min_rtt.stamp() + MIN_RTT_WINDOW;
        if let Some(s) = ev.rtt_sample {
            let replace = expired && self.mode != Mode::ProbeRtt;
            self.min_rtt.on_sample(ev.now, self.round, s, replace);
        }
        // Only plain BBR's window covers ACK aggregation (`burst_allowance`).
        if self.bound.is_none() {
            let cwnd = self.cwnd;
            self.aggregation
                .on_ack(ev.now, ev.acked_bytes, self.btl_bw, self.round, cwnd);
        }

        match self.mode {
            Mode::Startup if self.filled_pipe => {
                self.mode = Mode::Drain;
                self.pacing_gain = 1.0 / STARTUP_GAIN;
                self.cwnd_gain = STARTUP_GAIN;
            }
            Mode::Drain if ev.in_flight <= self.bdp(1.0) => self.enter_probe_bw(ev.now),
            Mode::ProbeBw => self.update_cycle(ev),
            _ => {}
        }
        if self.mode == Mode::Drain && ev.in_flight <= self.bdp(1.0) {
            self.enter_probe_bw(ev.now);
        }

        // ProbeRTT: drain the queue briefly every ten seconds to refresh the minimum RTT.
        if self.mode != Mode::ProbeRtt && expired && self.min_rtt.get().is_some() {
            self.mode = Mode::ProbeRtt;
            self.pacing_gain = 1.0;
            self.prior_cwnd = self.cwnd;
            self.probe_rtt_done = None;
        }
        if self.mode == Mode::ProbeRtt {
            match self.probe_rtt_done {
                None if ev.in_flight <= self.probe_rtt_cwnd() => {
                    self.probe_rtt_done = Some(ev.now + PROBE_RTT_TIME);
                    self.probe_rtt_round_done = false;
                    self.next_round_delivered = ev.rate.delivered;
                }
                Some(done) => {
                    if round_start {
                        self.probe_rtt_round_done = true;
                    }
                    if self.probe_rtt_round_done && ev.now >= done {
                        self.min_rtt.touch(ev.now);
                        self.cwnd = self.cwnd.max(self.prior_cwnd);
                        if self.filled_pipe {
                            self.enter_probe_bw(ev.now);
                        } else {
                            self.mode = Mode::Startup;
                            self.pacing_gain = STARTUP_GAIN;
                            self.cwnd_gain = STARTUP_GAIN;
                        }
                    }
                }
                None => {}
            }
        }

        // Window.
        let (gain, headroom) = self.window_gain(ev.now);
        let target = self.bdp(gain) + headroom + self.burst_allowance();
        if self.filled_pipe {
            self.cwnd = (self.cwnd + ev.acked_bytes).min(target);
        } else if self.cwnd < target || ev.rate.delivered < self.initial_cwnd {
            self.cwnd += ev.acked_bytes;
        }
        self.cwnd = self.cwnd.max(self.min_cwnd());
        if self.mode == Mode::ProbeRtt {
            self.cwnd = self.cwnd.min(self.probe_rtt_cwnd());
        }
    }

    fn on_loss(&mut self, ev: &LossEvent) {
        self.round_lost += ev.lost_bytes;
        if ev.persistent {
            // Nothing came back for a long time (an outage, a blackout not yet frozen):
            // start again from a small window, as Linux BBR does after a timeout, but keep
            // the model. Each ACK then grows the window by what it acknowledged up to the
            // model's target, so a path that returns as it was is full again within a few
            // round trips; a path that returns slower shows it in the next ten rounds of
            // bandwidth samples. (Clearing the model made the first samples after the outage,
            // taken while the window was still small, look like a full pipe, and the path
            // then crept back over seconds.)
            self.cwnd = 4 * self.mss;
        }
    }

    fn window(&self) -> u64 {
        self.cwnd
    }

    fn pacing_rate(&self, rtt: &RttEstimator) -> u64 {
        if self.btl_bw > 0.0 {
            (self.pacing_gain * self.btl_bw) as u64
        } else {
            let srtt = rtt.smoothed().as_secs_f64().max(1e-6);
            (STARTUP_GAIN * self.cwnd as f64 / srtt) as u64
        }
    }

    fn in_slow_start(&self) -> bool {
        self.mode == Mode::Startup
    }

    /// ProbeRTT's small window, and every phase that paces below the bandwidth estimate
    /// (drain, ProbeBW's 0.75 phase): the path may carry more than these samples show.
    fn holding_back(&self) -> bool {
        self.mode == Mode::ProbeRtt || self.pacing_gain < 1.0
    }

    fn ssthresh(&self) -> u64 {
        if self.filled_pipe {
            self.bdp(1.0)
        } else {
            u64::MAX
        }
    }
}
