//! A session's datagram counters as shown (`braid status`, the `/metrics` families
//! `braid_datagrams_*`; docs/status.md): real-time datagrams and their copies (auto mode,
//! the `--udp` default), copies refused by the budget, duplicates dropped on arrival.
//!
//! Owns: [`DatagramReport`] and its mapping from `braid_core::SessionStats`. Must not touch:
//! the session (its caller reads the stats).

use serde::{Deserialize, Serialize};

/// What a session did with datagrams.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DatagramReport {
    /// Datagrams of real-time flows sent (first copies).
    pub realtime_sent: u64,
    /// Second copies of real-time datagrams sent.
    pub duplicates_sent: u64,
    /// Payload bytes of those copies.
    pub duplicate_bytes: u64,
    /// Copies the budget refused.
    pub duplicates_refused: u64,
    /// Copies that arrived second and were dropped.
    pub duplicates_received: u64,
    /// Datagrams dropped: too large, queue full, or waited too long.
    pub dropped: u64,
}

impl From<braid_core::SessionStats> for DatagramReport {
    fn from(s: braid_core::SessionStats) -> Self {
        Self {
            realtime_sent: s.realtime_datagrams,
            duplicates_sent: s.duplicates_sent,
            duplicate_bytes: s.duplicate_bytes,
            duplicates_refused: s.duplicates_refused,
            duplicates_received: s.datagram_copies,
            dropped: s.datagrams_dropped,
        }
    }
}
