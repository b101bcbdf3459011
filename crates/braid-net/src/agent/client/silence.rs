//! The silence watch of the agent's session, sans-IO: a server that stopped answering is
//! probed with a new handshake on every path while the session goes on; an answer (a
//! restarted server, or another one reachable) replaces the session unless the old one
//! answers within [`confirm_wait`]; no answer (a blackout) keeps it and probes again with
//! backoff. A busy transfer that stops dead pings the server once; the server's "unknown
//! session" hint starts a probe at once.
//!
//! Owns: [`Watch`] and its decisions, taken from the session's packet counters once per
//! tick ([`Watch::tick`]) and from the probe's result. Must not touch: the probe handshake
//! itself, the session, tokio or clocks (the caller passes `now`, sends the pings, runs the
//! probes and switches sessions).

use std::time::{Duration, Instant};

/// The pause between probes that "unknown session" hints start.
pub(crate) const SUSPECT_AFTER: Duration = Duration::from_secs(2);

/// The pause after the first probe that got no answer, doubling after each further one up
/// to [`PROBE_WAIT_MAX`]. Each probe binds new sockets, so behind a load balancer that
/// still sends some source ports to a dead server (before its health check) the next probe
/// is balanced afresh: 0.5 s, not 4 s, lets it find a live server within about 3 s.
pub(crate) const PROBE_WAIT_FIRST: Duration = Duration::from_millis(500);
pub(crate) const PROBE_WAIT_MAX: Duration = Duration::from_secs(10);

/// The rounds of a probe's handshakes: one round (0.5 s), then, unanswered, a second
/// handshake of two rounds (the second with TCP too), each from new sockets. Behind a
/// balancer that still sends some source ports to a dead server (before its health check),
/// new ports are balanced afresh (issue 24).
pub(crate) const PROBE_ROUNDS: [u32; 2] = [1, 2];

/// The pause after the next unanswered probe, given this one's.
pub(crate) fn after_a_failed_probe(wait: Duration) -> Duration {
    (wait * 2).min(PROBE_WAIT_MAX)
}

/// How long packets may go unanswered before the agent probes the servers: eight smoothed
/// round trips of the slowest path, within these bounds. A probe costs a handshake and
/// nothing else (the session is replaced only if the probe is answered and the old session
/// then stays silent for [`confirm_wait`]), so a dead server is suspected early: 2 s made
/// its agents wait more than 3 s for another server (issue 24). Not below 1 s: at 600 ms,
/// sessions on a CPU-starved machine were probed, and replaced, while their server lived.
pub(crate) const SUSPECT_MIN: Duration = Duration::from_secs(1);
pub(crate) const SUSPECT_MAX: Duration = Duration::from_secs(2);

/// How long a busy session may receive nothing before the agent pings the server once.
pub(crate) const STALL: Duration = Duration::from_millis(600);

/// How long the old session gets to answer once a probe handshake was answered (at least;
/// three times the largest smoothed RTT if that is longer). It was pinged when the probe
/// was answered and has been silent for [`suspect_after`] already.
pub(crate) const CONFIRM: Duration = Duration::from_millis(300);

/// Unanswered for this long (the slowest path's smoothed RTT `srtt`): probe.
pub(crate) fn suspect_after(srtt: Duration) -> Duration {
    (srtt * 8).clamp(SUSPECT_MIN, SUSPECT_MAX)
}

/// A probe was answered: the old session must answer within this, or it is replaced.
pub(crate) fn confirm_wait(srtt: Duration) -> Duration {
    CONFIRM.max(srtt * 3)
}

/// Why a probe starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    /// The server said it does not know the session (unauthenticated: only a reason to try).
    Hinted,
    /// Packets went unanswered; nothing received for this long.
    Silent(Duration),
}

/// What the caller does after a tick.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tick {
    /// The old session answered while a probe's new session waited: drop the new one.
    pub keep: bool,
    /// Packets arrive again: stop the probe under way, if any.
    pub stop_probe: bool,
    /// Make the session ping the server on every path.
    pub poke: bool,
    /// Start a probe (then say [`Watch::probe_started`] if one started).
    pub probe: Option<Probe>,
}

/// The silence watch of one session.
#[derive(Debug)]
pub(crate) struct Watch {
    rx: u64,
    tx: u64,
    last_rx: Instant,
    unanswered_since: Option<Instant>,
    /// A probe is under way.
    probing: bool,
    /// A probe's new session waits until then for the old one to answer.
    pending_until: Option<Instant>,
    next_probe: Instant,
    probe_wait: Duration,
    /// The largest smoothed RTT of the session's paths.
    srtt: Duration,
    /// Data was flowing when packets last arrived...
    busy: bool,
    /// ...and the server was pinged once since they stopped.
    poked: bool,
    /// "Unknown session" hints seen so far.
    hints: u64,
}

impl Watch {
    /// A watch for a session that starts at `now`; `hints` counted so far.
    pub(crate) fn new(now: Instant, hints: u64) -> Watch {
        Watch {
            rx: 0,
            tx: 0,
            last_rx: now,
            unanswered_since: None,
            probing: false,
            pending_until: None,
            next_probe: now,
            probe_wait: PROBE_WAIT_FIRST,
            srtt: Duration::ZERO,
            busy: false,
            poked: false,
            hints,
        }
    }

    /// Once per tick: the session's packets received and sent so far (all paths), the
    /// largest smoothed RTT of its paths, and the "unknown session" hints counted so far.
    pub(crate) fn tick(
        &mut self,
        now: Instant,
        rx: u64,
        tx: u64,
        srtt: Duration,
        hints: u64,
    ) -> Tick {
        let mut t = Tick::default();
        self.srtt = srtt;
        if rx != self.rx {
            // Several packets in one tick: data is flowing, so a sudden silence is news.
            self.busy = rx.saturating_sub(self.rx) >= 3;
            self.poked = false;
            self.last_rx = now;
            self.unanswered_since = None;
            self.probe_wait = PROBE_WAIT_FIRST;
            t.keep = self.pending_until.take().is_some();
            t.stop_probe = std::mem::take(&mut self.probing);
        } else if tx != self.tx && self.unanswered_since.is_none() {
            self.unanswered_since = Some(now);
        }
        (self.rx, self.tx) = (rx, tx);
        // A transfer that stops dead (a download waits; the agent has nothing to send):
        // ask the server once, so that silence (or a restarted server's hint) shows soon.
        if self.busy && !self.poked && now.duration_since(self.last_rx) >= STALL {
            self.poked = true;
            t.poke = true;
        }
        let hinted = hints != self.hints;
        self.hints = hints;
        let idle = !self.probing && self.pending_until.is_none() && now >= self.next_probe;
        if hinted && idle {
            self.next_probe = now + SUSPECT_AFTER;
            t.probe = Some(Probe::Hinted);
            return t;
        }
        let suspect = (self.unanswered_since)
            .is_some_and(|s| now.duration_since(s) >= suspect_after(self.srtt));
        if suspect && idle {
            t.probe = Some(Probe::Silent(now.duration_since(self.last_rx)));
        }
        t
    }

    /// The caller started the probe a tick asked for.
    pub(crate) fn probe_started(&mut self) {
        self.probing = true;
    }

    /// The probe was answered: the caller pings the old session now; it must answer by the
    /// instant returned (then [`Watch::poll_timeout`]) or the probe's session replaces it.
    pub(crate) fn probe_answered(&mut self, now: Instant) -> Instant {
        self.probing = false;
        let until = now + confirm_wait(self.srtt);
        self.pending_until = Some(until);
        until
    }

    /// The probe got no answer: the next one waits, twice as long as the last up to
    /// [`PROBE_WAIT_MAX`].
    pub(crate) fn probe_failed(&mut self, now: Instant) {
        self.probing = false;
        self.next_probe = now + self.probe_wait;
        self.probe_wait = after_a_failed_probe(self.probe_wait);
    }

    /// The probe ended without a result (it was stopped).
    pub(crate) fn probe_gone(&mut self) {
        self.probing = false;
    }

    /// Is a probe under way?
    #[cfg(test)]
    pub(crate) fn is_probing(&self) -> bool {
        self.probing
    }

    /// When the probe's new session replaces the old one, unless it answers first.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.pending_until
    }

    /// Time passed: `Some(how long the old session has been silent)` when the probe's new
    /// session replaces it now.
    pub(crate) fn handle_timeout(&mut self, now: Instant) -> Option<Duration> {
        self.pending_until.filter(|u| now >= *u)?;
        self.pending_until = None;
        Some(now.duration_since(self.last_rx))
    }
}

#[cfg(test)]
#[path = "silence_tests.rs"]
mod tests;
