//! Blackout detection of one path, for super-aggregation's blackout freeze.
//!
//! Owns: the watch over one path's arrivals (passive: no packet for [`SILENCE`] while
//! packets were flowing; active: a probe that must be answered within the probe wait) and
//! the frozen flag with its re-probe schedule. Must not touch: packets, congestion state or
//! other paths; the session turns the watch's verdicts into actions (freezing the sender,
//! telling the peer over another path, moving data in flight).
//!
//! A path is watched while it is busy: at least [`MIN_RUN`] packets arrived less than
//! [`SILENCE`] apart (the peer is sending on it), or packets of ours that the peer must
//! acknowledge are in flight on it. Silence for [`SILENCE`] past the last arrival (or past
//! the moment an acknowledgement was due) sends a probe; nothing arriving within the probe
//! wait confirms the blackout and freezes the path. A frozen path is probed every
//! [`REPROBE`]; the first packet that arrives on it ends the freeze. An arrival that answers
//! a probe does not count towards a busy run, so an idle path is probed at most once.
//!
//! A freeze the peer reported (it stopped hearing us on the path) says that our direction
//! of the path is dark, not the peer's: packets still arriving on the path prove only the
//! peer's direction. Such a freeze ends on an acknowledgement of our packets sent on the
//! path (over any path), not on an arrival: a cellular uplink that stalls for seconds while
//! its downlink carries data would otherwise be unfrozen by every packet the peer sends
//! and frozen again by the next report, its downlink idle meanwhile.

use crate::time::Instant;
use std::time::Duration;

/// No arrival for this long on a busy path is suspicious (the paper's 200 ms).
pub const SILENCE: Duration = Duration::from_millis(200);
/// Arrivals less than [`SILENCE`] apart that make a path busy.
pub const MIN_RUN: u32 = 4;
/// Interval of probes on a frozen path.
pub const REPROBE: Duration = Duration::from_millis(100);

/// What the session must do after [`BlackoutWatch::on_timer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing yet.
    Wait,
    /// Send a probe on the path now.
    Probe,
    /// The blackout is confirmed: freeze the path, tell the peer, send a probe.
    Freeze,
}

/// The watch over one path.
#[derive(Debug, Clone, Default)]
pub(crate) struct BlackoutWatch {
    /// Arrivals in the current run (each less than `SILENCE` after the previous one).
    run: u32,
    /// A probe is out; the blackout is confirmed if nothing arrives by then.
    confirm_at: Option<Instant>,
    /// The path is frozen (confirmed here or by the peer).
    frozen: bool,
    /// When the last probe left.
    last_probe: Option<Instant>,
    /// A probe should be sent now.
    probe_due: bool,
    /// The freeze came from the peer's report: only an acknowledgement of ours ends it.
    reported: bool,
    /// Blackouts confirmed or reported, for statistics.
    pub freezes: u64,
}

impl BlackoutWatch {
    /// True while the path is frozen.
    pub fn frozen(&self) -> bool {
        self.frozen
    }

    /// A probe is waiting to be sent.
    pub fn probe_due(&self) -> bool {
        self.probe_due
    }

    /// The probe was sent.
    pub fn on_probe_sent(&mut self, now: Instant) {
        self.probe_due = false;
        self.last_probe = Some(now);
    }

    /// A packet arrived at `now`; `prev` is the previous arrival on the path. Returns true
    /// when this ends a freeze. A freeze the peer reported outlasts arrivals.
    pub fn on_packet(&mut self, now: Instant, prev: Instant) -> bool {
        if self.frozen && self.reported {
            return false;
        }
        self.on_alive(now, prev)
    }

    /// The peer acknowledged a packet of ours sent on the path: our direction works. Ends
    /// any freeze (returns true when it does).
    pub fn on_acked(&mut self, now: Instant, prev: Instant) -> bool {
        self.reported = false;
        self.on_alive(now, prev)
    }

    /// The peer reported a blackout of the path: freeze it until it acknowledges us.
    pub fn freeze_reported(&mut self, now: Instant) -> bool {
        self.reported = true;
        self.freeze(now)
    }

    fn on_alive(&mut self, now: Instant, prev: Instant) -> bool {
        if self.confirm_at.is_some() || self.frozen {
            // An answer to a probe, not traffic: do not start watching an idle path.
            self.run = 0;
        } else if now.saturating_since(prev) >= SILENCE {
            self.run = 1;
        } else {
            self.run = self.run.saturating_add(1);
        }
        self.confirm_at = None;
        self.probe_due = false;
        std::mem::replace(&mut self.frozen, false)
    }

    /// Freeze now (confirmed here, or reported by the peer). False if already frozen.
    pub fn freeze(&mut self, now: Instant) -> bool {
        self.confirm_at = None;
        if self.frozen {
            return false;
        }
        self.frozen = true;
        self.freezes += 1;
        self.probe_due = true;
        self.last_probe = Some(now);
        true
    }

    /// The next time the watch needs [`BlackoutWatch::on_timer`]. `last_recv` is the last
    /// arrival on the path; `ack_expected` is when an acknowledgement of our oldest packet
    /// in flight on it was due (`None` when nothing of ours is in flight).
    pub fn deadline(&self, last_recv: Instant, ack_expected: Option<Instant>) -> Option<Instant> {
        if self.probe_due {
            return None;
        }
        if self.frozen {
            return Some(self.last_probe.map_or(last_recv, |t| t + REPROBE));
        }
        if let Some(t) = self.confirm_at {
            return Some(t);
        }
        let from = match ack_expected {
            Some(t) => Some(t.max(last_recv)),
            None if self.run >= MIN_RUN => Some(last_recv),
            None => None,
        };
        from.map(|t| t + SILENCE)
    }

    /// The deadline passed. `probe_wait` is how long a probe's answer may take.
    pub fn on_timer(
        &mut self,
        now: Instant,
        last_recv: Instant,
        ack_expected: Option<Instant>,
        probe_wait: Duration,
    ) -> Verdict {
        match self.deadline(last_recv, ack_expected) {
            Some(t) if t <= now => {}
            _ => return Verdict::Wait,
        }
        if self.frozen {
            self.probe_due = true;
            return Verdict::Probe;
        }
        if self.confirm_at.is_some() {
            // The session freezes the path (`Path::freeze`), which calls `freeze`.
            self.confirm_at = None;
            return Verdict::Freeze;
        }
        self.probe_due = true;
        self.confirm_at = Some(now + probe_wait);
        Verdict::Probe
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Instant {
        Instant(n * 1_000_000)
    }

    const WAIT: Duration = Duration::from_millis(80);

    fn busy() -> BlackoutWatch {
        let mut w = BlackoutWatch::default();
        for i in 1..=MIN_RUN as u64 {
            w.on_packet(ms(i * 10), ms((i - 1) * 10));
        }
        w
    }

    #[test]
    fn silence_on_a_busy_path_probes_then_freezes_then_reprobes() {
        let mut w = busy();
        let last = ms(40);
        assert_eq!(w.deadline(last, None), Some(ms(240)));
        assert_eq!(w.on_timer(ms(239), last, None, WAIT), Verdict::Wait);
        assert_eq!(w.on_timer(ms(240), last, None, WAIT), Verdict::Probe);
        assert!(w.probe_due());
        assert_eq!(w.deadline(last, None), None, "the probe goes first");
        w.on_probe_sent(ms(240));
        assert_eq!(w.deadline(last, None), Some(ms(320)));
        assert_eq!(w.on_timer(ms(320), last, None, WAIT), Verdict::Freeze);
        assert!(w.freeze(ms(320)));
        assert!(w.frozen() && w.probe_due());
        w.on_probe_sent(ms(320));
        assert_eq!(w.deadline(last, None), Some(ms(420)));
        assert_eq!(w.on_timer(ms(420), last, None, WAIT), Verdict::Probe);
        // The path answers: the freeze ends, and the answer does not make it busy again.
        w.on_probe_sent(ms(420));
        assert!(w.on_packet(ms(500), last));
        assert!(!w.frozen());
        assert_eq!(w.deadline(ms(500), None), None);
        assert_eq!(w.freezes, 1);
    }

    #[test]
    fn an_answered_probe_ends_the_suspicion_without_freezing() {
        let mut w = busy();
        assert_eq!(w.on_timer(ms(240), ms(40), None, WAIT), Verdict::Probe);
        w.on_probe_sent(ms(240));
        assert!(!w.on_packet(ms(260), ms(40)));
        assert!(!w.frozen());
        assert_eq!(
            w.deadline(ms(260), None),
            None,
            "an idle path is probed once"
        );
    }

    #[test]
    fn an_idle_path_is_not_watched_but_data_in_flight_is() {
        let w = BlackoutWatch::default();
        assert_eq!(w.deadline(ms(0), None), None);
        // An ACK was due at 1 s: silence counts from then, not from the old arrival.
        assert_eq!(w.deadline(ms(0), Some(ms(1000))), Some(ms(1200)));
    }

    #[test]
    fn a_reported_blackout_freezes_once() {
        let mut w = BlackoutWatch::default();
        assert!(w.freeze(ms(5)));
        assert!(!w.freeze(ms(6)));
        assert_eq!(w.freezes, 1);
    }

    #[test]
    fn a_reported_freeze_outlasts_arrivals_and_ends_on_an_acknowledgement() {
        let mut w = busy();
        assert!(w.freeze_reported(ms(50)));
        w.on_probe_sent(ms(50));
        // The peer's packets still arrive: its direction works, ours is what it reported.
        assert!(!w.on_packet(ms(60), ms(40)));
        assert!(w.frozen());
        // Probes go on meanwhile.
        assert_eq!(w.on_timer(ms(150), ms(60), None, WAIT), Verdict::Probe);
        assert!(w.on_acked(ms(170), ms(60)));
        assert!(!w.frozen());
        // The next freeze is an ordinary one again: the first arrival ends it.
        assert!(w.freeze(ms(400)));
        assert!(w.on_packet(ms(410), ms(170)));
    }
}
