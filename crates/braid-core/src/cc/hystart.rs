//! HyStart++ (RFC 9406): leave slow start when the round-trip time starts to rise, before
//! the queue overflows, through a short "conservative slow start" that grows four times
//! slower and returns to slow start if the rise was a false alarm.
//!
//! Owns: the decision of when a loss-based controller's slow start should end. Must not
//! touch: the window itself (the controller applies the growth this module reports).

use super::AckEvent;
use std::time::Duration;

const MIN_RTT_THRESH: Duration = Duration::from_millis(4);
const MAX_RTT_THRESH: Duration = Duration::from_millis(16);
const N_RTT_SAMPLE: u32 = 8;
const CSS_GROWTH_DIVISOR: u64 = 4;
const CSS_ROUNDS: u32 = 5;

/// How slow start should grow the window for this acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Growth {
    /// Ordinary slow start: grow by the bytes acknowledged.
    Full,
    /// Conservative slow start: grow by a quarter of them.
    Conservative(u64),
    /// Slow start is over: set ssthresh to the current window.
    Exit,
}

/// HyStart++ state.
#[derive(Debug, Clone, Default)]
pub struct HyStart {
    next_round_delivered: u64,
    last_round_min: Option<Duration>,
    current_round_min: Option<Duration>,
    samples: u32,
    css_baseline: Option<Duration>,
    css_rounds: u32,
}

impl HyStart {
    /// Process an acknowledgement received in slow start.
    pub fn on_ack(&mut self, ev: &AckEvent<'_>) -> Growth {
        if ev.rate.prior_delivered >= self.next_round_delivered {
            // A new round begins.
            self.next_round_delivered = ev.rate.delivered;
            self.last_round_min = self.current_round_min;
            self.current_round_min = None;
            self.samples = 0;
            if self.css_baseline.is_some() {
                self.css_rounds += 1;
                if self.css_rounds >= CSS_ROUNDS {
                    *self = HyStart::default();
                    return Growth::Exit;
                }
            }
        }
        if let Some(rtt) = ev.rtt_sample {
            self.current_round_min = Some(self.current_round_min.map_or(rtt, |m| m.min(rtt)));
            self.samples += 1;
        }
        match self.css_baseline {
            None => {
                if let (Some(cur), Some(last)) = (self.current_round_min, self.last_round_min) {
                    if self.samples >= N_RTT_SAMPLE {
                        let thresh = (last / 8).clamp(MIN_RTT_THRESH, MAX_RTT_THRESH);
                        if cur >= last + thresh {
                            self.css_baseline = Some(cur);
                            self.css_rounds = 0;
                            return Growth::Conservative(ev.acked_bytes / CSS_GROWTH_DIVISOR);
                        }
                    }
                }
                Growth::Full
            }
            Some(base) => {
                if self.current_round_min.is_some_and(|cur| cur < base)
                    && self.samples >= N_RTT_SAMPLE
                {
                    // The RTT came back down: the rise was not the queue filling.
                    self.css_baseline = None;
                    return Growth::Full;
                }
                Growth::Conservative(ev.acked_bytes / CSS_GROWTH_DIVISOR)
            }
        }
    }

    /// A congestion event ends slow start for good.
    pub fn reset(&mut self) {
        *self = HyStart::default();
    }
}
