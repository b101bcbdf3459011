//! A session's datagrams through its [`SendGate`]: sent at once while the gate is open and
//! nothing waits, else queued (up to [`QUEUE_BYTES`], beyond which they are dropped, as at
//! a full bottleneck queue) and sent as the gate opens. The session's congestion control
//! sees an ordinary slower link with a queue.
//!
//! Owns: the queue. Must not touch: the rate (the gate's), the session.

use super::{PathSender, SendGate};
use braid_core::PathId;
use std::collections::VecDeque;
use tracing::debug;

/// Most bytes of datagrams waiting for the gate (100 ms at 10 Mbit/s).
pub const QUEUE_BYTES: usize = 128 * 1024;

/// The queue in front of one session's gate.
pub(crate) struct Shaper {
    gate: Box<dyn SendGate>,
    /// Batches waiting: path, datagrams back to back, segment size.
    queue: VecDeque<(PathId, Vec<u8>, usize)>,
    bytes: usize,
    dropped: u64,
}

impl Shaper {
    pub fn new(gate: Box<dyn SendGate>) -> Shaper {
        Shaper {
            gate,
            queue: VecDeque::new(),
            bytes: 0,
            dropped: 0,
        }
    }

    /// Send `packets` (datagrams of `seg` bytes, the last maybe shorter) on `path` now if
    /// the gate is open and nothing waits; else queue them, or drop them if the queue is
    /// full.
    pub fn offer<S: PathSender>(&mut self, out: &mut S, path: PathId, packets: &[u8], seg: usize) {
        if self.queue.is_empty() && self.gate.wait_until().is_none() {
            out.send_batch(path, packets, seg);
            self.gate.sent(packets.len());
        } else if self.bytes + packets.len() <= QUEUE_BYTES {
            self.bytes += packets.len();
            self.queue.push_back((path, packets.to_vec(), seg));
        } else {
            self.dropped += 1;
            debug!(
                path,
                dropped = self.dropped,
                "shaper queue full: batch dropped"
            );
        }
    }

    /// Send what waits while the gate is open: when it opens again for the rest (`None`:
    /// nothing waits).
    pub fn flush<S: PathSender>(&mut self, out: &mut S) -> Option<tokio::time::Instant> {
        while !self.queue.is_empty() {
            if let Some(t) = self.gate.wait_until() {
                return Some(t);
            }
            let Some((path, packets, seg)) = self.queue.pop_front() else {
                break;
            };
            self.bytes -= packets.len();
            out.send_batch(path, &packets, seg);
            self.gate.sent(packets.len());
        }
        self.queue = VecDeque::new();
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A gate that holds once its budget (shared with the test) is spent.
    struct Budget(Arc<Mutex<usize>>);
    impl SendGate for Budget {
        fn wait_until(&mut self) -> Option<tokio::time::Instant> {
            let left = *self.0.lock().unwrap();
            (left == 0).then(|| tokio::time::Instant::now() + std::time::Duration::from_secs(1))
        }
        fn sent(&mut self, bytes: usize) {
            let mut left = self.0.lock().unwrap();
            *left = left.saturating_sub(bytes);
        }
    }

    #[derive(Default)]
    struct Wire(Vec<usize>);
    impl PathSender for Wire {
        fn send(&mut self, _: PathId, packet: &[u8]) {
            self.0.push(packet.len());
        }
    }

    #[test]
    fn held_datagrams_wait_in_a_bounded_queue_and_go_in_order() {
        let budget = Arc::new(Mutex::new(1000));
        let mut s = Shaper::new(Box::new(Budget(budget.clone())));
        let mut w = Wire::default();
        s.offer(&mut w, 0, &[1; 1000], 1000);
        assert_eq!(w.0, [1000], "open: sent at once");
        for _ in 0..200 {
            s.offer(&mut w, 0, &[2; 1200], 1200);
        }
        assert_eq!(w.0.len(), 1, "held");
        assert_eq!(s.bytes, QUEUE_BYTES / 1200 * 1200, "queued up to the bound");
        assert!(s.dropped > 0);
        assert!(s.flush(&mut w).is_some(), "still held");
        *budget.lock().unwrap() = usize::MAX;
        assert_eq!(s.flush(&mut w), None, "open again: everything went");
        assert_eq!(w.0.len(), 1 + QUEUE_BYTES / 1200);
        assert_eq!(s.bytes, 0);
    }
}
