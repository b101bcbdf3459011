//! Auto Rate Fallback (ARF): an 802.11 station's PHY rate chosen from the outcomes of its
//! own transmissions, as the WaveLAN-II cards did (A. Kamerman, L. Monteban, "WaveLAN-II: a
//! high-performance wireless LAN for the unlicensed band", Bell Labs Technical Journal,
//! 1997), the scheme the cards of paper 000's era derive from.
//!
//! Owns: one station's rate index and its success and failure counts. Must not touch: the
//! medium, timing or randomness (`wifi.rs` tells it how each transmission ended).
//!
//! The rules (Kamerman & Monteban, as restated by Lacage, Manshaei and Turletti, "IEEE
//! 802.11 rate adaptation: a practical approach", MSWiM 2004, section 3.1):
//! - after [`FAILURE_THRESHOLD`] (2) consecutive failed transmissions (no link-layer ACK,
//!   whatever the cause: a collision is a failure like a corrupted frame) the station
//!   drops to the next lower rate; the retry goes at the lower rate;
//! - after [`SUCCESS_THRESHOLD`] (10) consecutive successes it tries the next higher rate;
//! - if the first transmission at the higher rate (the probe) fails, it falls back at once.
//!
//! The rate never rises above the one the scenario configures (the path's `rate`, the
//! highest its channel carries). Not modelled: ARF's timer (a rise after a timeout without
//! ten successes); a saturated station reaches ten successes first.

/// Consecutive failures that drop the rate one step.
pub const FAILURE_THRESHOLD: u32 = 2;
/// Consecutive successes that raise it one step.
pub const SUCCESS_THRESHOLD: u32 = 10;

/// One station's ARF state.
#[derive(Debug, Clone, Copy)]
pub struct Arf {
    rates: &'static [u64],
    /// Index of the configured (highest allowed) rate in `rates`.
    top: usize,
    idx: usize,
    successes: u32,
    failures: u32,
    /// The last rate change was a rise and nothing has been sent at the new rate yet.
    probing: bool,
    /// Rate drops so far.
    pub drops: u64,
}

impl Arf {
    /// A station starting at `top`, the highest of `rates` (ascending) it may use; a `top`
    /// not in `rates` is the highest rate below it (the lowest if none).
    pub fn new(rates: &'static [u64], top: u64) -> Arf {
        let top = rates.iter().rposition(|&r| r <= top).unwrap_or(0);
        Arf {
            rates,
            top,
            idx: top,
            successes: 0,
            failures: 0,
            probing: false,
            drops: 0,
        }
    }

    /// The rate of the station's next transmission.
    pub fn rate(&self) -> u64 {
        self.rates[self.idx]
    }

    /// True at the configured rate.
    pub fn at_top(&self) -> bool {
        self.idx == self.top
    }

    /// A transmission got its link-layer ACK.
    pub fn on_success(&mut self) {
        self.failures = 0;
        self.probing = false;
        self.successes += 1;
        if self.successes >= SUCCESS_THRESHOLD && self.idx < self.top {
            self.idx += 1;
            self.successes = 0;
            self.probing = true;
        }
    }

    /// A transmission got no link-layer ACK (collision or corruption).
    pub fn on_failure(&mut self) {
        self.successes = 0;
        self.failures += 1;
        if (self.probing || self.failures >= FAILURE_THRESHOLD) && self.idx > 0 {
            self.idx -= 1;
            self.failures = 0;
            self.drops += 1;
        }
        self.probing = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: &[u64] = &[1_000_000, 2_000_000, 5_500_000, 11_000_000];

    #[test]
    fn two_consecutive_failures_drop_one_rate_and_one_does_not() {
        let mut a = Arf::new(B, 11_000_000);
        a.on_failure();
        assert_eq!(a.rate(), 11_000_000, "one failure keeps the rate");
        a.on_success();
        a.on_failure();
        assert_eq!(a.rate(), 11_000_000, "failures separated by a success");
        a.on_failure();
        assert_eq!(a.rate(), 5_500_000);
        a.on_failure();
        a.on_failure();
        assert_eq!(a.rate(), 2_000_000);
        for _ in 0..10 {
            a.on_failure();
        }
        assert_eq!(a.rate(), 1_000_000, "never below the lowest rate");
        assert_eq!(a.drops, 3);
    }

    #[test]
    fn ten_successes_raise_and_a_failed_probe_falls_back_at_once() {
        let mut a = Arf::new(B, 11_000_000);
        a.on_failure();
        a.on_failure();
        for _ in 0..9 {
            a.on_success();
        }
        assert_eq!(a.rate(), 5_500_000, "nine successes are not enough");
        a.on_success();
        assert_eq!(a.rate(), 11_000_000);
        a.on_failure();
        assert_eq!(a.rate(), 5_500_000, "the probe failed: back at once");
        for _ in 0..10 {
            a.on_success();
        }
        a.on_success();
        a.on_failure();
        assert_eq!(
            a.rate(),
            11_000_000,
            "one failure after a good probe keeps the rate"
        );
    }

    #[test]
    fn the_configured_rate_is_the_ceiling() {
        let mut a = Arf::new(B, 5_500_000);
        for _ in 0..100 {
            a.on_success();
        }
        assert_eq!(a.rate(), 5_500_000);
        assert!(a.at_top());
    }
}
