//! Real-time datagrams in auto mode: each leaves at once on the lowest-delay path and, when
//! the session grants a copy, once more on the second-lowest-delay path, both in
//! DATAGRAM_SEQ frames with one sequence number (the receiver keeps the first to arrive).
//! Nothing is striped or held back for arrival order: a real-time flow sees the fastest
//! path's delay, and a path that silently stops carrying costs it nothing while the copy
//! arrives. Only when the fastest path cannot send for longer than the delay difference may
//! the second path carry the first copy (it would arrive no later).
//!
//! Owns: the queue of real-time datagrams waiting for their first or second copy. Must not
//! touch: packets, paths, the budget (the session says at the first copy whether a second
//! is wanted).

use super::View;
use crate::ids::PathId;
use crate::time::Instant;
use bytes::Bytes;
use std::collections::VecDeque;
use std::time::Duration;

#[derive(Debug)]
struct Entry {
    data: Bytes,
    at: Instant,
    seq: u64,
    /// The path that carried the first copy (the entry then waits for its second).
    first_on: Option<PathId>,
}

/// What a path is to carry of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::session) enum Role {
    /// The first copy.
    First,
    /// The second copy, on another path than the first.
    Copy,
}

/// One entry a path may carry now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::session) struct RtPick {
    idx: usize,
    pub role: Role,
}

/// Real-time datagrams waiting to be sent.
#[derive(Debug)]
pub(in crate::session) struct RtQueue {
    queue: VecDeque<Entry>,
    capacity: usize,
}

/// How much longer the second-lowest-delay path takes than the lowest (zero with one path).
fn delay_gap(views: &[View]) -> Duration {
    match views {
        [a, b, ..] => b.owd.saturating_sub(a.owd),
        _ => Duration::ZERO,
    }
}

impl RtQueue {
    pub fn new(capacity: usize) -> RtQueue {
        RtQueue {
            queue: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Queues a datagram numbered `seq`; true when the oldest had to be dropped for room.
    pub fn push(&mut self, now: Instant, data: Bytes, seq: u64) -> bool {
        let full = self.queue.len() >= self.capacity;
        if full {
            self.queue.pop_front();
        }
        self.queue.push_back(Entry {
            data,
            at: now,
            seq,
            first_on: None,
        });
        full
    }

    /// Forgets what waited longer than `max_wait` beyond the delay difference of the two
    /// fastest paths. Returns the datagrams dropped unsent (copies given up are not
    /// counted: their first copy left).
    pub fn maintain(&mut self, now: Instant, views: &[View], max_wait: Duration) -> u64 {
        let limit = max_wait + delay_gap(views);
        let mut dropped = 0;
        self.queue.retain(|e| {
            let keep = now.saturating_since(e.at) <= limit;
            if !keep && e.first_on.is_none() {
                dropped += 1;
            }
            keep
        });
        dropped
    }

    /// The oldest entry `path` may carry now. `views` are sorted by delay.
    pub fn pick(&self, now: Instant, views: &[View], path: PathId) -> Option<RtPick> {
        let pos = views.iter().take(2).position(|v| v.id == path)?;
        let gap = delay_gap(views);
        self.queue.iter().enumerate().find_map(|(idx, e)| {
            let role = match e.first_on {
                None if pos == 0 || now.saturating_since(e.at) >= gap => Role::First,
                Some(p) if p != path => Role::Copy,
                _ => return None,
            };
            Some(RtPick { idx, role })
        })
    }

    /// The datagram of `pick` and its sequence number.
    pub fn data(&self, pick: RtPick) -> (&Bytes, u64) {
        let e = &self.queue[pick.idx];
        (&e.data, e.seq)
    }

    /// `path` carried `pick`; `copy`: a second copy is wanted (first copies only).
    pub fn sent(&mut self, pick: RtPick, path: PathId, copy: bool) {
        if pick.role == Role::First && copy {
            self.queue[pick.idx].first_on = Some(path);
        } else {
            self.queue.remove(pick.idx);
        }
    }

    /// When the second path may take a first copy the fastest did not send (to wake the
    /// session; copies and first copies on the fastest path are due at once).
    pub fn next_due(&self, views: &[View]) -> Option<Instant> {
        if views.len() < 2 {
            return None;
        }
        let e = self.queue.iter().find(|e| e.first_on.is_none())?;
        Some(e.at + delay_gap(views))
    }
}

#[cfg(test)]
mod tests;
