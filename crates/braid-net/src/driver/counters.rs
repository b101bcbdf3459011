//! Process-wide counters of the session tasks, by side: how often a session task woke up
//! and how many datagrams it sent. `braid bench` reads them to report wake-ups per GB and
//! the packets the receiving end sent per data packet (its acknowledgements).
//!
//! Owns: the counters (relaxed atomics, one increment per wake-up and per batch sent).
//! Must not touch: anything else; nothing in braid decides on them.

use braid_core::Side;
use std::sync::atomic::{AtomicU64, Ordering};

/// What the session tasks of one side did, as counted since the process started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SideCounts {
    /// Turns of the session loop that a packet, a command or a timer started.
    pub wakeups: u64,
    /// Datagrams handed to the sockets.
    pub datagrams: u64,
}

impl SideCounts {
    /// What was counted between `earlier` and `self`.
    pub fn since(&self, earlier: &SideCounts) -> SideCounts {
        SideCounts {
            wakeups: self.wakeups.saturating_sub(earlier.wakeups),
            datagrams: self.datagrams.saturating_sub(earlier.datagrams),
        }
    }
}

static WAKEUPS: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];
static DATAGRAMS: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

fn index(side: Side) -> usize {
    match side {
        Side::Client => 0,
        Side::Server => 1,
    }
}

pub(crate) fn wakeup(side: Side) {
    WAKEUPS[index(side)].fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn sent(side: Side, datagrams: usize) {
    DATAGRAMS[index(side)].fetch_add(datagrams as u64, Ordering::Relaxed);
}

/// The counts of one side's session tasks (all sessions of this process).
pub fn counts(side: Side) -> SideCounts {
    let i = index(side);
    SideCounts {
        wakeups: WAKEUPS[i].load(Ordering::Relaxed),
        datagrams: DATAGRAMS[i].load(Ordering::Relaxed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_grow_by_side_and_since_subtracts() {
        let c0 = counts(Side::Server);
        wakeup(Side::Server);
        sent(Side::Server, 3);
        let d = counts(Side::Server).since(&c0);
        // Other tests of this binary may count too, but never fewer than ours.
        assert!(d.wakeups >= 1 && d.datagrams >= 3, "{d:?}");
    }
}
