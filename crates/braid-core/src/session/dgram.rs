//! Datagrams on their way out — which path carries each and when — and duplicates dropped on
//! the way in.
//!
//! **Auto** (the default): each datagram names its flow; `crate::flows` says whether the
//! flow is real-time (sparse and steady) or bulk. Real-time datagrams go to their own queue
//! (`realtime.rs`): at once on the lowest-delay path, with a copy on the second-lowest when
//! the duplicate budget (`budget.rs`) allows. Bulk datagrams are spread as below.
//!
//! **Spread**: one queue, paths ordered by one-way delay (half the smoothed
//! RTT). While the fastest path keeps up, it carries every datagram at once. When the oldest
//! datagram has waited longer than the next path's extra delay (it would have arrived sooner
//! there: the earliest-delivery-path-first rule), that path joins the set; a path leaves it
//! when the datagram rate fits the faster paths' rates again. Within the set every datagram
//! is meant to arrive one *target* delay (the slowest member's) after it was queued: a path
//! of one-way delay `d` takes datagrams that have waited `target - d`, so a fast path holds
//! its datagrams back by the difference and a slow path takes the newest. Arrival order then
//! follows queue order — a real-time flow sees one steady delay instead of the slow path's
//! RTT as jitter — and the rate is the set's sum. Datagrams that wait `max_wait` beyond
//! their planned wait are dropped (counted): an application sending above capacity loses
//! its excess, it does not build a standing queue.
//!
//! **Redundant**: each datagram goes on the two fastest paths, with a sequence number
//! (DATAGRAM_SEQ); the receiver drops the copy that arrives second (`Dedup`).
//!
//! Owns: the outgoing datagram queue, the spread set, sequence numbers, the receive-side
//! duplicate window (for both redundant and auto mode's copies). Must not touch: packets, paths or timers (the session gives it path
//! views and asks which datagram a path may carry now).

mod budget;
mod realtime;

pub(super) use budget::{DupBudget, MIN_CAP as DUPLICATE_BUDGET_MIN_CAP};
pub(super) use realtime::{Role, RtQueue};

use crate::ids::PathId;
use crate::time::Instant;
use bytes::Bytes;
use std::collections::VecDeque;
use std::time::Duration;

pub use crate::choices::DatagramMode;

impl DatagramMode {
    /// The plan of the shared queue: auto mode spreads its bulk datagrams.
    pub(super) fn bulk(self) -> DatagramMode {
        match self {
            DatagramMode::Auto => DatagramMode::Spread,
            m => m,
        }
    }
}

/// What the queue needs to know of one path that may carry datagrams.
#[derive(Debug, Clone, Copy)]
pub(super) struct View {
    pub id: PathId,
    /// One-way delay estimate (half the smoothed RTT).
    pub owd: Duration,
}

/// Slack in the arrival plan: clocks are estimates.
const TOLERANCE: Duration = Duration::from_millis(1);
/// How long the spread set stays as it is before it tries one path fewer, at first; it
/// doubles each time the smaller set proves too small, up to `MAX_SHRINK_PERIOD`.
const SHRINK_PERIOD: Duration = Duration::from_millis(250);
const MAX_SHRINK_PERIOD: Duration = Duration::from_secs(32);

#[derive(Debug)]
struct Queued {
    data: Bytes,
    at: Instant,
    seq: u64,
    /// Redundant mode: the path that carried the first copy.
    sent_on: Option<PathId>,
}

/// Datagrams waiting to be sent.
#[derive(Debug)]
pub(super) struct Outbox {
    queue: VecDeque<Queued>,
    capacity: usize,
    next_seq: u64,
    /// Spread: how many paths beyond the fastest are in the set.
    level: usize,
    /// Spread: when the set last changed, when it last shrank, and how long it stays
    /// before it tries one path fewer.
    level_since: Instant,
    shrunk_at: Option<Instant>,
    shrink_after: Duration,
}

/// One datagram a path may carry now (its index in the queue).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Pick(usize);

impl Outbox {
    pub fn new(capacity: usize) -> Outbox {
        Outbox {
            queue: VecDeque::new(),
            capacity: capacity.max(1),
            next_seq: 0,
            level: 0,
            level_since: Instant::ZERO,
            shrunk_at: None,
            shrink_after: SHRINK_PERIOD,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Paths in the spread set beyond the fastest.
    #[cfg(test)]
    pub fn spread_level(&self) -> usize {
        self.level
    }

    /// The next sequence number, for a datagram of another queue (auto mode's real-time
    /// queue): one numbering per session and direction.
    pub fn take_seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq - 1
    }

    /// Queues a datagram; returns true when the oldest had to be dropped for room.
    pub fn push(&mut self, now: Instant, data: Bytes) -> bool {
        let full = self.queue.len() >= self.capacity;
        if full {
            self.queue.pop_front();
        }
        self.queue.push_back(Queued {
            data,
            at: now,
            seq: self.next_seq,
            sent_on: None,
        });
        self.next_seq += 1;
        full
    }

    /// The spread set: the fastest paths, `level` beyond the first.
    fn set<'a>(&self, views: &'a [View]) -> &'a [View] {
        &views[..(self.level + 1).min(views.len())]
    }

    /// How long a datagram is meant to wait before `path` carries it (spread mode).
    fn planned_wait(&self, views: &[View], path: PathId) -> Option<Duration> {
        let set = self.set(views);
        let target = set.last()?.owd;
        let me = set.iter().find(|v| v.id == path)?;
        Some(target.saturating_sub(me.owd))
    }

    /// Drops what waited too long, adjusts the spread set. `views` are sorted by `owd`.
    /// Returns the number of datagrams dropped.
    pub fn maintain(
        &mut self,
        now: Instant,
        mode: DatagramMode,
        views: &[View],
        max_wait: Duration,
    ) -> u64 {
        if views.is_empty() {
            return 0;
        }
        let mut dropped = 0;
        // Longest planned wait (the fastest path's) plus the allowance.
        let limit = match mode {
            DatagramMode::Spread | DatagramMode::Auto => {
                let set = self.set(views);
                set.last()
                    .map_or(Duration::ZERO, |l| l.owd.saturating_sub(set[0].owd))
            }
            DatagramMode::Redundant => Duration::ZERO,
        } + max_wait;
        while let Some(f) = self.queue.front() {
            if now.saturating_since(f.at) <= limit {
                break;
            }
            self.queue.pop_front();
            dropped += 1;
        }
        if mode != DatagramMode::Redundant {
            self.adjust_set(now, views);
        }
        dropped
    }

    fn adjust_set(&mut self, now: Instant, views: &[View]) {
        self.level = self.level.min(views.len() - 1);
        let set = self.set(views);
        let fastest = set[0];
        let target = set[set.len() - 1].owd;
        // Grow: the oldest datagram waited past its plan by more than the next path's
        // extra delay (it would have arrived sooner over that path).
        if let (Some(f), Some(next)) = (self.queue.front(), views.get(self.level + 1)) {
            let waited = now.saturating_since(f.at);
            let planned = target.saturating_sub(fastest.owd);
            let extra = next.owd.saturating_sub(target);
            if waited > planned + extra + TOLERANCE {
                // Grown back soon after a shrink: the smaller set was too small; wait longer
                // before the next try.
                let soon = self
                    .shrunk_at
                    .is_some_and(|t| now.saturating_since(t) < 2 * self.shrink_after);
                self.shrink_after = if soon {
                    (self.shrink_after * 2).min(MAX_SHRINK_PERIOD)
                } else {
                    SHRINK_PERIOD
                };
                self.level += 1;
                self.level_since = now;
                return;
            }
        }
        // Shrink: try one path fewer. Whether the faster paths carry the flow alone shows
        // within milliseconds (a backlog longer than the delay difference grows the set
        // again), so trying costs little; nothing else measures it (a path that never
        // saturated has no capacity estimate).
        if self.level > 0 && now.saturating_since(self.level_since) >= self.shrink_after {
            self.level -= 1;
            self.level_since = now;
            self.shrunk_at = Some(now);
        }
    }

    /// The datagram `path` may carry now, if any. `views` are sorted by `owd`.
    pub fn pick(
        &self,
        now: Instant,
        mode: DatagramMode,
        views: &[View],
        path: PathId,
    ) -> Option<Pick> {
        match mode {
            DatagramMode::Redundant => {
                if !views.iter().take(2).any(|v| v.id == path) {
                    return None;
                }
                self.queue
                    .iter()
                    .position(|q| q.sent_on != Some(path))
                    .map(Pick)
            }
            DatagramMode::Spread | DatagramMode::Auto => {
                let wait = self.planned_wait(views, path)?;
                let due = |q: &Queued| now.saturating_since(q.at) >= wait;
                let front_wait = now.saturating_since(self.queue.front()?.at);
                if front_wait < wait {
                    return None;
                }
                let fastest = views[0].id == path;
                if fastest || front_wait <= wait + TOLERANCE {
                    Some(Pick(0))
                } else {
                    // The oldest is late for this slower path (it would arrive after
                    // datagrams the faster paths carry next): take the newest due one and
                    // leave the late ones to the faster paths. The queue is oldest first,
                    // so the due datagrams are a prefix (found in log n: a long queue of
                    // small datagrams must not cost a scan per datagram).
                    let k = self.queue.partition_point(due);
                    Some(Pick(k - 1))
                }
            }
        }
    }

    /// When the next datagram becomes due on some path of the set (spread mode), to wake
    /// a path that holds datagrams back.
    pub fn next_due(&self, mode: DatagramMode, views: &[View]) -> Option<Instant> {
        if mode == DatagramMode::Redundant {
            return None;
        }
        let front = self.queue.front()?;
        let set = self.set(views);
        let target = set.last()?.owd;
        set.iter()
            .map(|v| front.at + target.saturating_sub(v.owd))
            .min()
    }

    /// The datagram of `pick` and its sequence number.
    pub fn data(&self, pick: Pick) -> (&Bytes, u64) {
        let q = &self.queue[pick.0];
        (&q.data, q.seq)
    }

    /// `path` carried the datagram of `pick`.
    pub fn sent(&mut self, mode: DatagramMode, views: &[View], pick: Pick, path: PathId) {
        let second = views.iter().take(2).filter(|v| v.id != path).count() > 0;
        match mode {
            DatagramMode::Redundant if second && self.queue[pick.0].sent_on.is_none() => {
                self.queue[pick.0].sent_on = Some(path);
            }
            _ => {
                self.queue.remove(pick.0);
            }
        }
    }
}

/// Sequence numbers of datagrams seen lately: the second copy of a redundant datagram is
/// dropped. A window of the last `WINDOW` numbers; anything older is dropped too (it is
/// far out of date for the real-time traffic redundancy is for).
#[derive(Debug)]
pub(super) struct Dedup {
    highest: Option<u64>,
    seen: [u64; WINDOW as usize / 64],
}

const WINDOW: u64 = 4096;

impl Default for Dedup {
    fn default() -> Self {
        Dedup {
            highest: None,
            seen: [0; WINDOW as usize / 64],
        }
    }
}

impl Dedup {
    /// True the first time `seq` is seen (deliver it), false for a copy or a far-late one.
    pub fn first(&mut self, seq: u64) -> bool {
        let bit = |s: u64| ((s % WINDOW) / 64) as usize;
        let mask = |s: u64| 1u64 << (s % 64);
        match self.highest {
            Some(h) if seq <= h => {
                if h - seq >= WINDOW {
                    return false;
                }
                let (w, m) = (bit(seq), mask(seq));
                let fresh = self.seen[w] & m == 0;
                self.seen[w] |= m;
                fresh
            }
            _ => {
                // Clear the slots between the old highest and `seq`.
                let from = self.highest.map_or(seq, |h| h + 1);
                if seq - from >= WINDOW {
                    self.seen = [0; WINDOW as usize / 64];
                } else {
                    for s in from..seq {
                        self.seen[bit(s)] &= !mask(s);
                    }
                }
                self.seen[bit(seq)] |= mask(seq);
                self.highest = Some(seq);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests;
