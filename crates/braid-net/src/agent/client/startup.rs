//! The agent's start-up wait, sans-IO: where a new connection goes while the agent starts.
//! Until the first handshake has had its chance, a connection with no session to use
//! waits for one instead of going straight to its destination (direct mode), since a
//! direct connection stays direct (single-path, not carried by the server) for as long as
//! it lasts. The chance is [`START_WAIT`] from the moment the first handshake's message 1
//! goes out: its first round (0.5 s) and the start of the second, which repeats message 1
//! over UDP and tries TCP too. A session that comes up ends the wait at once; a handshake
//! that fails, or a start with no path to shake hands on, ends it too. After the start-up,
//! a connection made while no session is up goes direct at once, as before.
//!
//! Owns: that decision ([`Startup::place`]). Must not touch: sockets, tokio, clocks (the
//! caller passes `now`), the session, the handshake itself (`client::handshake`).

use std::time::{Duration, Instant};

/// How long, from the first handshake's first message, new connections wait for a session
/// before they go direct (documented in docs/deployment.md, "Direct mode").
pub const START_WAIT: Duration = Duration::from_millis(1000);

/// Where the agent is in its start-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Startup {
    /// No handshake has gone out yet (the paths are being looked at).
    Before,
    /// The first handshake went out; connections wait up to `until`.
    Trying { until: Instant },
    /// The start-up is over: with no session, a connection goes direct at once.
    Over,
}

/// Where a new connection goes now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// Through the session that is up.
    Session,
    /// Wait for the session: until the instant given, or (`None`) until the start-up moves on.
    Wait(Option<Instant>),
    /// Straight to its destination (direct mode).
    Direct,
}

impl Startup {
    /// The start of an agent with servers to shake hands with (`false`: direct mode
    /// only, no start-up to wait for).
    pub(crate) fn new(servers: bool) -> Startup {
        if servers {
            Startup::Before
        } else {
            Startup::Over
        }
    }

    /// A handshake's first message goes out at `now`: the first one starts the wait.
    /// Returns whether this changed anything.
    pub(crate) fn handshake_sent(&mut self, now: Instant) -> bool {
        if *self != Startup::Before {
            return false;
        }
        *self = Startup::Trying {
            until: now + START_WAIT,
        };
        true
    }

    /// The start-up is over: a session came up, the first handshake failed, or no path is
    /// there to shake hands on.
    pub(crate) fn over(&mut self) {
        *self = Startup::Over;
    }

    /// Where a new connection goes at `now`, with a session up or not.
    pub(crate) fn place(&self, now: Instant, session_up: bool) -> Place {
        if session_up {
            return Place::Session;
        }
        match *self {
            Startup::Before => Place::Wait(None),
            Startup::Trying { until } if now < until => Place::Wait(Some(until)),
            _ => Place::Direct,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_wait_for_the_first_handshake_then_go_direct_after_the_stated_wait() {
        let t0 = Instant::now();
        let mut s = Startup::new(true);
        assert_eq!(
            s.place(t0, false),
            Place::Wait(None),
            "before any handshake"
        );
        let sent = t0 + Duration::from_millis(5);
        assert!(s.handshake_sent(sent));
        let until = sent + START_WAIT;
        assert_eq!(s.place(sent, false), Place::Wait(Some(until)));
        // A later handshake (a retry) does not push the wait back.
        assert!(!s.handshake_sent(sent + Duration::from_millis(500)));
        let just_before = until - Duration::from_millis(1);
        assert_eq!(s.place(just_before, false), Place::Wait(Some(until)));
        assert_eq!(s.place(until, false), Place::Direct);
        assert_eq!(
            s.place(sent, true),
            Place::Session,
            "a session is used at once"
        );
    }

    #[test]
    fn the_wait_ends_at_once_when_the_start_up_is_over() {
        let t0 = Instant::now();
        let mut s = Startup::new(true);
        s.handshake_sent(t0);
        s.over();
        assert_eq!(s.place(t0, false), Place::Direct);
        // A later handshake (reconnecting) never makes connections wait again.
        s.handshake_sent(t0);
        assert_eq!(s.place(t0, false), Place::Direct);
        assert_eq!(s.place(t0, true), Place::Session);
    }

    #[test]
    fn an_agent_without_servers_never_waits() {
        let s = Startup::new(false);
        assert_eq!(s.place(Instant::now(), false), Place::Direct);
    }
}
