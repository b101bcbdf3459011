//! What every worker's endpoint must see alike, and nothing more: the replay guard, the
//! authorized keys, the count of live sessions for `max_sessions`, the settings and the
//! counters.
//!
//! Owns: [`Shared`] and [`SharedConfig`]. Locks: the replay guard's mutex, held for one
//! map lookup (a handshake's first check and its final check-and-record, a snapshot for
//! the state file), never through a Diffie-Hellman; the authorized list's read lock, held
//! while a worker reads one message 1. The session count is an atomic: a handshake
//! reserves its slot with a compare-and-swap before its Noise step and gives it back if the
//! step fails. The gate (rate limits, load meter, cookies, mac1) is per worker
//! ([`super::endpoint`]), so a handshake flood makes no two workers wait for each other.
//! Must not touch: sockets, clocks, sessions.

use super::{AuthorizedKeys, HandshakeCounters};
use braid_crypto::{ReplayGuard, StaticKeypair};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The settings of [`Shared`] (a subset of `ServerConfig`).
pub struct SharedConfig {
    /// The server's static key.
    pub key: Arc<StaticKeypair>,
    /// Told to agents in message 2, if set.
    pub unicast: Option<SocketAddr>,
    /// The packet ciphers accepted, the preferred first.
    pub ciphers: braid_crypto::Ciphers,
    /// Most sessions at once, all workers together.
    pub max_sessions: usize,
    /// Handshakes a second per address, and the burst (all workers together: each worker
    /// gets its share).
    pub rate: (u32, u32),
    /// Handshake packets a second above which cookies are demanded (all workers together:
    /// each worker gets its share).
    pub load_threshold: u64,
    /// For the log line of an unfinished session.
    pub first_exchange_timeout: Duration,
}

/// The settings and state shared by all workers' endpoints of one server.
pub struct Shared {
    pub(super) guard: Mutex<ReplayGuard>,
    /// The authorized keys as each worker starts from (it keeps its own copy of when the
    /// file was last looked at; the list itself is one).
    pub(super) authorized: AuthorizedKeys,
    /// Sessions in all workers' tables, and handshakes between their reservation and
    /// their acceptance.
    sessions: AtomicUsize,
    pub(super) key: Arc<StaticKeypair>,
    pub(super) unicast: Option<SocketAddr>,
    pub(super) ciphers: braid_crypto::Ciphers,
    pub(super) max_sessions: usize,
    pub(super) rate: (u32, u32),
    pub(super) load_threshold: u64,
    pub(super) first_exchange_timeout: Duration,
    pub(super) counters: Arc<HandshakeCounters>,
}

impl Shared {
    /// The shared state, with the replay guard `guard` and the authorized keys `authorized`.
    pub fn new(
        cfg: SharedConfig,
        guard: ReplayGuard,
        authorized: AuthorizedKeys,
        counters: Arc<HandshakeCounters>,
    ) -> Shared {
        Shared {
            guard: Mutex::new(guard),
            authorized,
            sessions: AtomicUsize::new(0),
            key: cfg.key,
            unicast: cfg.unicast,
            ciphers: cfg.ciphers,
            max_sessions: cfg.max_sessions,
            rate: cfg.rate,
            load_threshold: cfg.load_threshold,
            first_exchange_timeout: cfg.first_exchange_timeout,
            counters,
        }
    }

    /// Sessions live in all workers.
    pub fn sessions(&self) -> usize {
        self.sessions.load(Ordering::Relaxed)
    }

    /// Take one of the `max_sessions` slots; false when all are taken.
    pub(super) fn reserve_session(&self) -> bool {
        let max = self.max_sessions;
        self.sessions
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }

    /// Give a slot back (a handshake refused after its reservation, a session that ended).
    pub(super) fn release_session(&self) {
        let _ = self
            .sessions
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// Call `f` with the replay guard, under its lock (a snapshot for the state file).
    pub fn with_guard<R>(&self, f: impl FnOnce(&ReplayGuard) -> R) -> R {
        // A worker that panicked holding the lock left the map consistent (one insert).
        f(&self.guard.lock().unwrap_or_else(|p| p.into_inner()))
    }
}
