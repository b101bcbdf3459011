//! Congestion control of one path behind a small trait.
//!
//! Owns: the congestion window and pacing rate of a path, and the algorithms that move them
//! (`reno`, `cubic`, `bbr`, `bbrq`, and the coupled `lia`, `balia`, `olia`). Must not touch: packet bookkeeping, loss detection or
//! scheduling; a controller only reacts to the events the path hands it.

mod bbr;
mod bbr_filters;
#[cfg(test)]
mod bbr_tests;
mod coupled;
mod cubic;
mod hystart;
mod olia;
mod qbound;
mod reno;

pub use bbr::Bbr;
pub use coupled::{Balia, Lia};
pub use cubic::Cubic;
pub use olia::Olia;
pub use reno::Reno;

use crate::rtt::RttEstimator;
use crate::time::Instant;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A delivery-rate sample (draft-cheng-iccrg-delivery-rate-estimation), per ACK frame.
#[derive(Debug, Clone, Copy, Default)]
pub struct RateSample {
    /// Bytes per second delivered over the sampled interval (0 if no valid sample).
    pub delivery_rate: f64,
    /// True when the sender was application-limited while the sampled packets were sent.
    pub is_app_limited: bool,
    /// Total bytes delivered on the path when the newest acknowledged packet was sent.
    pub prior_delivered: u64,
    /// Total bytes delivered on the path now.
    pub delivered: u64,
}

/// What coupled multipath controllers (LIA, BALIA, OLIA) need to know about all the
/// session's usable paths, this one included: windows in bytes, rates in bytes per second.
/// The last two fields describe the receiving path itself (the session fills them per path).
#[derive(Debug, Clone, Copy, Default)]
pub struct Coupling {
    /// Usable paths.
    pub paths: u32,
    /// Sum of their congestion windows.
    pub total_cwnd: u64,
    /// Sum of cwnd / srtt.
    pub sum_rate: f64,
    /// Largest cwnd / srtt.
    pub max_rate: f64,
    /// Largest cwnd / srtt².
    pub max_cwnd_rtt2: f64,
    /// OLIA's "best" paths: those with the largest l / srtt², where l is the path's bytes
    /// delivered between losses ([`CongestionController::loss_interval`]).
    pub best_paths: u32,
    /// Paths with the largest congestion window.
    pub max_window_paths: u32,
    /// Best paths that do not have the largest window (OLIA's "collected" paths).
    pub collected_paths: u32,
    /// This path is one of the best paths.
    pub is_best: bool,
    /// This path has the largest window.
    pub is_max_window: bool,
}

/// What a controller learns from one ACK frame.
#[derive(Debug, Clone, Copy)]
pub struct AckEvent<'a> {
    /// Arrival time of the ACK.
    pub now: Instant,
    /// Bytes newly acknowledged by this frame.
    pub acked_bytes: u64,
    /// Send time of the newest packet this frame acknowledged.
    pub largest_acked_sent: Instant,
    /// Bytes in flight before these acknowledgements.
    pub prior_in_flight: u64,
    /// Bytes in flight after them.
    pub in_flight: u64,
    /// The path's RTT estimates, already updated with this frame's sample.
    pub rtt: &'a RttEstimator,
    /// RTT sample of this frame, if it produced one.
    pub rtt_sample: Option<Duration>,
    /// With the RTT sample, when the peer timestamps its ACKs: how long the acknowledged
    /// packet waited in queues on its way out (one-way delay above its floor), unlike the
    /// RTT unaffected by what the acknowledgement waited on its way back.
    pub fwd_queue: Option<Duration>,
    /// Delivery-rate sample.
    pub rate: RateSample,
    /// The session's paths, for coupled controllers.
    pub coupling: Coupling,
}

/// What a controller learns when loss detection declares packets lost.
#[derive(Debug, Clone, Copy)]
pub struct LossEvent {
    /// When the loss was detected.
    pub now: Instant,
    /// Bytes declared lost.
    pub lost_bytes: u64,
    /// Send time of the newest lost packet.
    pub largest_lost_sent: Instant,
    /// The losses span more than the persistent-congestion period (RFC 9002 §7.6).
    pub persistent: bool,
    /// Bytes in flight after removing the lost packets.
    pub in_flight: u64,
    /// The session's paths, for coupled controllers.
    pub coupling: Coupling,
}

/// A per-path congestion controller.
pub trait CongestionController: fmt::Debug + Send {
    /// Algorithm name as used in scenarios.
    fn name(&self) -> &'static str;
    /// A packet of `bytes` was sent; `in_flight` includes it.
    fn on_sent(&mut self, _now: Instant, _bytes: u64, _in_flight: u64) {}
    /// An ACK frame acknowledged packets of this path.
    fn on_ack(&mut self, ev: &AckEvent<'_>);
    /// Loss detection declared packets lost.
    fn on_loss(&mut self, ev: &LossEvent);
    /// The congestion window in bytes.
    fn window(&self) -> u64;
    /// Pacing rate in bytes per second.
    fn pacing_rate(&self, rtt: &RttEstimator) -> u64 {
        default_pacing(self.window(), rtt, self.in_slow_start())
    }
    /// True while in slow start.
    fn in_slow_start(&self) -> bool;
    /// The controller holds its window below the path's pipe on purpose now (BBR's
    /// ProbeRTT and drain): delivery-rate samples taken now say nothing of the capacity
    /// (`path/capacity.rs`).
    fn holding_back(&self) -> bool {
        false
    }
    /// Slow-start threshold in bytes (`u64::MAX` before the first congestion event).
    fn ssthresh(&self) -> u64;
    /// Bytes delivered between the path's last two congestion events, or since the last one
    /// if that is more (OLIA's l_r); `None` for controllers that do not track it.
    fn loss_interval(&self) -> Option<u64> {
        None
    }
    /// Every loss behind the last window cut was acknowledged after all (reordering, not
    /// congestion): return to the state from before that cut. Controllers that do not cut
    /// on loss leave the default.
    fn undo_loss(&mut self) {}
}

/// Pacing at 2× (slow start) or 1.25× the window per smoothed RTT.
pub fn default_pacing(cwnd: u64, rtt: &RttEstimator, slow_start: bool) -> u64 {
    let srtt = rtt.smoothed().as_secs_f64().max(1e-6);
    let gain = if slow_start { 2.0 } else { 1.25 };
    (cwnd as f64 * gain / srtt) as u64
}

/// The congestion-control algorithms this build offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CcAlgorithm {
    /// NewReno (RFC 9002 §7).
    Reno,
    /// CUBIC (RFC 9438).
    Cubic,
    /// A BBR-style model-based controller (does not treat random loss as congestion).
    Bbr,
    /// Linked Increases (RFC 6356): coupled, no more aggressive than one TCP on the best path.
    Lia,
    /// Balanced Linked Adaptation (Peng et al.): coupled, between LIA's friendliness and
    /// uncoupled responsiveness.
    Balia,
    /// Opportunistic Linked Increases (Khalili et al. 2012): coupled, Pareto-optimal; shifts
    /// window from the largest-window paths to the paths with the best loss intervals.
    Olia,
    /// BBR with a queue bound: the window follows the standing queue the path measures,
    /// so a bulk flow leaves the bottleneck's queue nearly empty for everything else.
    Bbrq,
}

impl CcAlgorithm {
    /// Every algorithm and its name.
    pub const ALL: &'static [(&'static str, CcAlgorithm)] = &[
        ("reno", CcAlgorithm::Reno),
        ("cubic", CcAlgorithm::Cubic),
        ("bbr", CcAlgorithm::Bbr),
        ("lia", CcAlgorithm::Lia),
        ("balia", CcAlgorithm::Balia),
        ("olia", CcAlgorithm::Olia),
        ("bbrq", CcAlgorithm::Bbrq),
    ];

    /// The controller's id in HELLO (`HelloParams::cc`). Part of the protocol: a new
    /// controller takes a new number, an existing one never changes (pinned by
    /// `tests/wire_golden.rs`).
    pub const fn wire_id(self) -> u64 {
        match self {
            CcAlgorithm::Reno => 0,
            CcAlgorithm::Cubic => 1,
            CcAlgorithm::Bbr => 2,
            CcAlgorithm::Lia => 3,
            CcAlgorithm::Balia => 4,
            CcAlgorithm::Olia => 5,
            CcAlgorithm::Bbrq => 6,
        }
    }

    /// The controller whose HELLO id is `id`, if this build has one.
    pub fn from_wire_id(id: u64) -> Option<CcAlgorithm> {
        CcAlgorithm::ALL
            .iter()
            .map(|(_, a)| *a)
            .find(|a| a.wire_id() == id)
    }

    /// Build a controller for a path with this maximum datagram size.
    pub fn build(
        self,
        mss: u64,
        initial_window: u64,
        now: Instant,
    ) -> Box<dyn CongestionController> {
        match self {
            CcAlgorithm::Reno => Box::new(Reno::new(mss, initial_window)),
            CcAlgorithm::Cubic => Box::new(Cubic::new(mss, initial_window)),
            CcAlgorithm::Bbr => Box::new(Bbr::new(mss, initial_window, now)),
            CcAlgorithm::Lia => Box::new(Lia::new(mss, initial_window)),
            CcAlgorithm::Balia => Box::new(Balia::new(mss, initial_window)),
            CcAlgorithm::Olia => Box::new(Olia::new(mss, initial_window)),
            CcAlgorithm::Bbrq => Box::new(Bbr::with_queue_bound(mss, initial_window, now)),
        }
    }
}

impl FromStr for CcAlgorithm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        CcAlgorithm::ALL
            .iter()
            .find(|(n, _)| *n == s)
            .map(|(_, a)| *a)
            .ok_or_else(|| {
                let names: Vec<_> = CcAlgorithm::ALL.iter().map(|(n, _)| *n).collect();
                format!(
                    "unknown congestion controller {s:?}; expected one of {}",
                    names.join(", ")
                )
            })
    }
}

impl fmt::Display for CcAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = CcAlgorithm::ALL
            .iter()
            .find(|(_, a)| a == self)
            .map_or("?", |(n, _)| n);
        f.write_str(n)
    }
}

/// The recovery period of loss-based controllers (RFC 9002 §7.3.2): one window cut per
/// round of losses; no growth until a packet sent after the cut is acknowledged.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Recovery {
    start: Option<Instant>,
}

impl Recovery {
    /// An ACK arrived: true while still in recovery (do not grow). Leaves recovery once a
    /// packet sent after its start is acknowledged.
    pub(crate) fn on_ack(&mut self, largest_acked_sent: Instant) -> bool {
        if matches!(self.start, Some(t) if largest_acked_sent <= t) {
            return true;
        }
        self.start = None;
        false
    }

    /// Packets were declared lost: true when this starts a new congestion event (cut the
    /// window), false when the losses belong to the current one.
    /// Forget the recovery period (its losses proved spurious).
    pub(crate) fn clear(&mut self) {
        self.start = None;
    }

    pub(crate) fn on_loss(&mut self, ev: &LossEvent) -> bool {
        if !ev.persistent && matches!(self.start, Some(t) if ev.largest_lost_sent <= t) {
            return false;
        }
        self.start = Some(ev.now);
        true
    }
}

/// The ACK handling Reno and CUBIC share: the recovery period, growth only when the window
/// was in use, and slow start with HyStart++. Returns true when the controller's own
/// congestion-avoidance growth applies.
pub(crate) fn loss_based_ack(
    recovery: &mut Recovery,
    hystart: &mut hystart::HyStart,
    ev: &AckEvent<'_>,
    cwnd: &mut u64,
    ssthresh: &mut u64,
    mss: u64,
) -> bool {
    if recovery.on_ack(ev.largest_acked_sent) || !cwnd_limited(ev.prior_in_flight, *cwnd, mss) {
        return false;
    }
    if *cwnd >= *ssthresh {
        return true;
    }
    match hystart.on_ack(ev) {
        hystart::Growth::Full => *cwnd += ev.acked_bytes,
        hystart::Growth::Conservative(b) => *cwnd += b,
        hystart::Growth::Exit => *ssthresh = *cwnd,
    }
    false
}

/// Growth is allowed only when the window was actually in use (RFC 9002 §7.8).
pub(crate) fn cwnd_limited(prior_in_flight: u64, cwnd: u64, mss: u64) -> bool {
    prior_in_flight + 3 * mss >= cwnd || prior_in_flight >= cwnd / 2 + cwnd / 4
}
