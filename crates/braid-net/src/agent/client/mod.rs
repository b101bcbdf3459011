//! The agent's sans-IO client, the counterpart of the server's `Endpoint`: the protocol
//! decisions of keeping a session to the servers, as plain structs fed with explicit
//! instants and answering with what to send and when to wake up.
//!
//! - [`handshake`]: one handshake over every (path, server) pair: rounds, cookie replies,
//!   TCP from the second round, the winner (the first valid answer: the server with the
//!   lowest RTT) and the refusals;
//! - [`silence`]: the silence watch of a running session: when to ping the server, when to
//!   probe with a new handshake, and whether a probe's new session replaces the old one;
//! - [`startup`]: where a new connection goes while the agent starts (it waits for the
//!   first session, up to a stated time, before direct mode takes it);
//! - [`Client`] (here): the reconnection backoff between failed handshakes, the current
//!   session's silence watch, and the path manager ([`PathManager`]: the paths' link
//!   decisions in a running session, among them the TCP fallback: a path whose UDP goes
//!   unanswered is tried over TCP, a TCP path tries UDP again), set up from the paths'
//!   settings ([`PathSetting`]);
//!
//! Owns: those decisions. Must not touch: sockets, TCP connections, tokio, clocks or the
//! system's random number generator (the caller passes `now`, the unix time and the session
//! id; only the Noise ephemeral keys are drawn inside braid-crypto's `ClientHandshake`), the
//! session itself (the core's), and how the path manager decides (`pathmgr`).
//! The tokio code in `agent::handshake` and `agent::run` only moves bytes and timers.

pub(crate) mod handshake;
pub(crate) mod silence;
pub(crate) mod startup;

use crate::pathmgr::captive::CaptiveWatch;
use crate::pathmgr::{PathManager, Recheck};
use crate::udp::PathBind;
use std::time::{Duration, Instant};

/// The pause after the first failed handshake; it doubles after each further one.
pub(crate) const BACKOFF_FIRST: Duration = Duration::from_millis(500);
/// The longest pause between handshakes, and the one with direct mode on (connections do
/// not wait for the session then: a server that appears is used within a few seconds).
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(10);
pub(crate) const BACKOFF_MAX_DIRECT: Duration = Duration::from_secs(1);
/// The pause after a session ended before shaking hands again.
pub(crate) const RECONNECT_PAUSE: Duration = Duration::from_millis(200);

/// How a configured path is set up in the path manager.
#[derive(Debug, Clone)]
pub(crate) struct PathSetting {
    pub bind: PathBind,
    /// Sent through a relay (tests' link emulators): never over TCP around it.
    pub relayed: bool,
    /// When the path, fallen back to TCP, tries UDP again (`None`: the default).
    pub udp_recheck: Option<Recheck>,
}

/// The agent's session-keeping decisions.
pub(crate) struct Client {
    /// Direct mode is on: handshakes are short and retried often.
    direct: bool,
    backoff: Duration,
    /// The current session's silence watch.
    pub(crate) silence: silence::Watch,
    /// The paths' link decisions (with the TCP fallback and the UDP rechecks).
    pub(crate) paths: PathManager,
    /// The captive-portal checks of paths that do not validate.
    pub(crate) captive: CaptiveWatch,
}

impl Client {
    /// A client with direct mode on or off, at `now`, for these paths towards servers of
    /// one family (`both`: the servers are also reachable over the other).
    pub(crate) fn new(
        direct: bool,
        paths: &[PathSetting],
        (server_is_ipv4, both): (bool, bool),
        now: Instant,
    ) -> Client {
        let binds = paths.iter().map(|p| p.bind.clone()).collect();
        let mut mgr = PathManager::new(binds, server_is_ipv4);
        if both {
            mgr.set_both_families();
        }
        for (slot, p) in paths.iter().enumerate() {
            if p.relayed {
                mgr.set_udp_only(slot);
            }
            if let Some(r) = p.udp_recheck {
                mgr.set_recheck(slot, r);
            }
        }
        Client {
            captive: CaptiveWatch::new(paths.len()),
            paths: mgr,
            direct,
            backoff: BACKOFF_FIRST,
            silence: silence::Watch::new(now, 0),
        }
    }

    /// How many rounds a handshake for a new session gets: with direct mode on three
    /// (0.5, 1 and 2 s apart), else six.
    pub(crate) fn rounds(&self) -> u32 {
        if self.direct {
            3
        } else {
            6
        }
    }

    /// A handshake failed: how long to wait before the next (or until a path appears).
    pub(crate) fn handshake_failed(&mut self) -> Duration {
        let wait = self.backoff;
        let most = if self.direct {
            BACKOFF_MAX_DIRECT
        } else {
            BACKOFF_MAX
        };
        self.backoff = (self.backoff * 2).min(most);
        wait
    }

    /// A session was established: the next failure waits [`BACKOFF_FIRST`] again.
    pub(crate) fn established(&mut self) {
        self.backoff = BACKOFF_FIRST;
    }

    /// A session starts at `now` (with `hints` "unknown session" hints counted so far): a
    /// new silence watch.
    pub(crate) fn session_started(&mut self, now: Instant, hints: u64) {
        self.silence = silence::Watch::new(now, hints);
    }

    /// The session ended: the pause before the next handshake (none when a probe's new
    /// session replaces it).
    pub(crate) fn session_ended(&mut self, replaced: bool) -> Option<Duration> {
        (!replaced).then_some(RECONNECT_PAUSE)
    }
}

#[cfg(test)]
#[path = "paths_tests.rs"]
mod paths_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn client(direct: bool) -> Client {
        Client::new(direct, &[], (true, false), Instant::now())
    }

    fn waits(c: &mut Client, n: usize) -> Vec<u128> {
        (0..n).map(|_| c.handshake_failed().as_millis()).collect()
    }

    #[test]
    fn unanswered_handshakes_back_off_doubling_to_10_s_and_a_session_resets_it() {
        let mut c = client(false);
        assert_eq!(c.rounds(), 6);
        assert_eq!(
            waits(&mut c, 7),
            [500, 1000, 2000, 4000, 8000, 10_000, 10_000]
        );
        c.established();
        assert_eq!(waits(&mut c, 2), [500, 1000]);
    }

    #[test]
    fn with_direct_mode_on_handshakes_are_shorter_and_retried_within_1_s() {
        let mut c = client(true);
        assert_eq!(c.rounds(), 3);
        assert_eq!(waits(&mut c, 3), [500, 1000, 1000]);
    }

    #[test]
    fn a_session_that_ends_is_followed_by_a_pause_unless_a_new_one_replaces_it() {
        let mut c = client(false);
        assert_eq!(c.session_ended(false), Some(RECONNECT_PAUSE));
        assert_eq!(c.session_ended(true), None);
    }
}
