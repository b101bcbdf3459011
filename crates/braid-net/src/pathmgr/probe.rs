//! UDP probes of paths that fell back to TCP (see the module docs of `pathmgr`): when a
//! validated TCP path tries UDP again, and what becomes of an unanswered try.
//!
//! Owns: the probe timers of one path (start, give up, back off). Must not touch: the
//! switch itself (`PathManager::handle_validated` makes a validated probe the path),
//! sockets or the session.

use super::{Action, Live, PROBE_WINDOW};
use braid_core::PathId;
use std::collections::VecDeque;
use std::time::Duration;

/// When a path that fell back to TCP tries UDP again: `first` after it validated over
/// TCP, then twice as long after each unanswered try, up to `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recheck {
    /// The first wait.
    pub first: Duration,
    /// The longest wait.
    pub max: Duration,
}

impl Default for Recheck {
    /// 30 s, doubling to 8 minutes.
    fn default() -> Recheck {
        Recheck {
            first: Duration::from_secs(30),
            max: Duration::from_secs(480),
        }
    }
}

impl Live {
    /// The slot's other id (`id + 8` or `id - 8`): a replacement's or a probe's.
    pub(super) fn other_id(&self) -> PathId {
        if (self.id as usize) < 8 {
            self.id + 8
        } else {
            self.id - 8
        }
    }

    /// Take the probe out (the path's link or address changed, or it went away).
    pub(super) fn cancel_probe(&mut self, slot: usize, actions: &mut VecDeque<Action>) {
        if let Some((id, _)) = self.probe.take() {
            actions.push_back(Action::DropProbe {
                slot,
                id,
                next: self.probe_wait,
            });
        }
        self.next_probe = None;
    }
}

/// A UDP probe may start on `l`: a validated TCP path with no replacement running.
pub(super) fn probe_allowed(l: &Live) -> bool {
    l.tcp && l.validated && l.old.is_none() && l.probe.is_none()
}

/// The UDP probe timers of path `l` (configured path `slot`): start one when due, drop
/// one that went unanswered for [`PROBE_WINDOW`] and double the wait before the next.
pub(super) fn probe_timers(
    slot: usize,
    l: &mut Live,
    now: Duration,
    r: Recheck,
    out: &mut VecDeque<Action>,
) {
    if let Some((id, since)) = l.probe {
        if now >= since + PROBE_WINDOW {
            l.probe = None;
            l.probe_wait = (l.probe_wait * 2).min(r.max).max(r.first);
            l.next_probe = Some(now + l.probe_wait);
            out.push_back(Action::DropProbe {
                slot,
                id,
                next: l.probe_wait,
            });
        }
    } else if probe_allowed(l) && l.next_probe.is_some_and(|t| now >= t) {
        let id = l.other_id();
        l.probe = Some((id, now));
        out.push_back(Action::Probe {
            slot,
            id,
            attach: l.attach,
        });
    }
}
