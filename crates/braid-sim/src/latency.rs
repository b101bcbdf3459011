//! What a sparse flow waited: the latency probe's samples summarised as percentiles.
//!
//! Owns: the probe's shape (RRUL-like: 50 packets a second of about 160 bytes) and the
//! summary every result record carries (idle and loaded percentiles, loss). Must not touch:
//! how the probe is sent (the simulator's runner and the testbed's traffic code do that).

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Packets a second the probe sends in each direction.
pub const PROBE_RATE_PER_S: u32 = 50;
/// The probe's payload in bytes (a voice frame with its headers).
pub const PROBE_PAYLOAD: usize = 160;
/// How long the probe runs on an idle session before the transfer starts.
pub const IDLE_PROBE: Duration = Duration::from_secs(1);

/// A probe not answered within this long is lost.
pub const PROBE_LOSS_AFTER: Duration = Duration::from_secs(2);

/// The interval between two probe packets.
pub fn probe_interval() -> Duration {
    Duration::from_secs(1) / PROBE_RATE_PER_S
}

/// The probe's round-trip times and losses while idle and while loaded.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    /// Median round trip of the probe before the transfer (nothing else on the session).
    pub latency_idle_p50_ms: Option<f64>,
    /// Median round trip while the transfer ran.
    pub latency_load_p50_ms: Option<f64>,
    /// 95th percentile while loaded.
    pub latency_load_p95_ms: Option<f64>,
    /// 99th percentile while loaded.
    pub latency_load_p99_ms: Option<f64>,
    /// Probes sent while loaded that never came back (a fraction, 0 to 1).
    pub probe_loss: Option<f64>,
    /// Responsiveness under load (round trips per minute, the IETF RPM draft's method;
    /// testbed only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpm: Option<f64>,
}

impl Latency {
    /// Summarise the probe: round trips (seconds) while idle and while loaded, and how many
    /// probes were sent while loaded. Probes lost count as sent and not answered.
    pub fn from_samples(idle: &[f64], loaded: &[f64], loaded_sent: usize) -> Latency {
        let ms = |v: Option<f64>| v.map(|s| s * 1e3);
        let mut idle = idle.to_vec();
        let mut loaded = loaded.to_vec();
        idle.sort_by(f64::total_cmp);
        loaded.sort_by(f64::total_cmp);
        Latency {
            latency_idle_p50_ms: ms(percentile(&idle, 0.50)),
            latency_load_p50_ms: ms(percentile(&loaded, 0.50)),
            latency_load_p95_ms: ms(percentile(&loaded, 0.95)),
            latency_load_p99_ms: ms(percentile(&loaded, 0.99)),
            probe_loss: (loaded_sent > 0)
                .then(|| 1.0 - (loaded.len().min(loaded_sent) as f64 / loaded_sent as f64)),
            rpm: None,
        }
    }

    /// Loaded minus idle median: the delay the transfer added to the sparse flow.
    pub fn added_p50_ms(&self) -> Option<f64> {
        Some(self.latency_load_p50_ms? - self.latency_idle_p50_ms?)
    }

    /// Loaded 95th percentile minus the idle median.
    pub fn added_p95_ms(&self) -> Option<f64> {
        Some(self.latency_load_p95_ms? - self.latency_idle_p50_ms?)
    }
}

/// The nearest-rank percentile of sorted values (`q` in 0..=1); `None` when empty.
pub fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), Some(50.0));
        assert_eq!(percentile(&v, 0.95), Some(95.0));
        assert_eq!(percentile(&v, 0.99), Some(99.0));
        assert_eq!(percentile(&v, 1.0), Some(100.0));
        assert_eq!(percentile(&[], 0.5), None);
        assert_eq!(percentile(&[7.0], 0.01), Some(7.0));
    }

    #[test]
    fn summary_in_milliseconds_with_loss() {
        let idle = [0.010, 0.011, 0.012];
        let loaded: Vec<f64> = (0..90).map(|i| 0.020 + f64::from(i) * 1e-4).collect();
        let l = Latency::from_samples(&idle, &loaded, 100);
        assert!((l.latency_idle_p50_ms.unwrap() - 11.0).abs() < 1e-9);
        assert!((l.probe_loss.unwrap() - 0.1).abs() < 1e-12);
        assert!(l.latency_load_p95_ms.unwrap() > l.latency_load_p50_ms.unwrap());
        assert!(l.added_p50_ms().unwrap() > 0.0);
        let none = Latency::from_samples(&[], &[], 0);
        assert_eq!(none.probe_loss, None);
        assert_eq!(none.added_p50_ms(), None);
    }
}
