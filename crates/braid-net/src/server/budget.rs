//! A session's budget for UDP traffic waiting between sockets and the wire: each datagram
//! holds its share of the budget until the last copy of its bytes is dropped.
//!
//! Owns: [`UdpBudget`] and the counting. Must not touch: sockets, the session, flow tables
//! (`relay` and `inbound` use it for their return and inbound traffic).

use bytes::Bytes;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// The share of a session's UDP return budget one datagram holds until it is dropped.
struct Budgeted {
    data: Vec<u8>,
    budget: Arc<AtomicUsize>,
}

impl AsRef<[u8]> for Budgeted {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

impl Drop for Budgeted {
    fn drop(&mut self) {
        self.budget.fetch_sub(self.data.len(), Ordering::Relaxed);
    }
}

/// A session's budget for UDP return traffic.
#[derive(Debug, Clone)]
pub struct UdpBudget {
    in_flight: Arc<AtomicUsize>,
    limit: usize,
    dropped: Arc<AtomicU64>,
}

impl UdpBudget {
    /// At most `limit` bytes in flight.
    pub fn new(limit: usize) -> UdpBudget {
        UdpBudget {
            in_flight: Arc::new(AtomicUsize::new(0)),
            limit,
            dropped: Arc::new(AtomicU64::new(0)),
        }
    }

    /// `data` as bytes that hold their share of the budget until dropped; `None` (and the
    /// datagram counted as dropped) when it does not fit.
    pub fn admit(&self, data: Vec<u8>) -> Option<Bytes> {
        let len = data.len();
        let before = self.in_flight.fetch_add(len, Ordering::Relaxed);
        if before + len > self.limit {
            self.in_flight.fetch_sub(len, Ordering::Relaxed);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(Bytes::from_owner(Budgeted {
            data,
            budget: self.in_flight.clone(),
        }))
    }

    /// Bytes in flight now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Datagrams dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_return_budget_drops_when_full_and_frees_on_drop() {
        let b = UdpBudget::new(10_000);
        let held: Vec<Bytes> = (0..10).map(|_| b.admit(vec![7; 1000]).unwrap()).collect();
        assert_eq!(b.in_flight(), 10_000);
        assert!(b.admit(vec![7; 1]).is_none(), "over the budget");
        assert_eq!(b.dropped(), 1);
        // A slice (what a queue may keep) still holds the share.
        let part = held[0].slice(10..20);
        drop(held);
        assert_eq!(b.in_flight(), 1000);
        drop(part);
        assert_eq!(b.in_flight(), 0);
        assert!(b.admit(vec![7; 10_000]).is_some());
    }
}
