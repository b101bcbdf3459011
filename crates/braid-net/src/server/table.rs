//! One entry of a worker's session table, from the accepted handshake on: the agent's key
//! and its newest message 1 and 2 (for a retransmission or a rotation), the handshake's
//! keys until the session's first transport packet ([`State::Pending`]), the task's
//! handle after it ([`State::Live`]); and the record of when its first exchange is due.
//!
//! Owns: what a table entry holds and how it goes from pending to started. Must not touch:
//! the handshake policy and the table itself (the endpoint's), sockets, tasks.

use braid_core::PathId;
use braid_crypto::{PublicKey, SessionKeys};
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

/// What the endpoint needs to know of the caller's per-session handle.
pub trait SessionHandle {
    /// Is `addr` the peer address of one of the session's paths?
    fn has_address(&self, addr: SocketAddr) -> bool;
}

/// A session to start (`Outcome::Start`): the caller creates its task with the keys,
/// calls `Endpoint::started` with its handle, then hands it the packet.
#[derive(Debug)]
pub struct NewSession {
    /// The session id (the agent chose it).
    pub id: u64,
    /// The path message 1 came on.
    pub path: PathId,
    /// Where message 1 came from (the first path's address).
    pub from: SocketAddr,
    /// The server address message 1 was sent to, where the socket said it.
    pub local: Option<IpAddr>,
    /// The agent's key.
    pub client: PublicKey,
}

/// A session of the table: its keys until its first packet, then its task's handle.
pub(super) enum State<H> {
    Pending(Box<SessionKeys>),
    /// Its task is being made (from `Outcome::Start` to `Endpoint::started`).
    Starting,
    Live(H),
}

pub(super) struct Entry<H> {
    pub state: State<H>,
    /// The path message 1 came on, and the server address it was sent to.
    pub path: PathId,
    pub local: Option<IpAddr>,
    /// Which first-exchange record is this entry's (an id may come back after its entry
    /// ended; its old record must not judge the new one).
    pub serial: u64,
    /// The agent key that opened the session: only it may rotate its keys.
    pub client: PublicKey,
    /// Where the agent's newest message 1 came from: only there (or from another of its
    /// path addresses)...
    pub from: SocketAddr,
    /// ...does a byte-for-byte copy of its header and Noise message (mac2 may differ)...
    pub request: Vec<u8>,
    /// ...get our cached reply (smaller than the request, so never an amplifier).
    pub reply: Vec<u8>,
}

impl<H: SessionHandle> Entry<H> {
    /// Is `addr` where the agent's newest message 1 came from, or a path address of its
    /// session?
    pub fn knows(&self, addr: SocketAddr) -> bool {
        self.from == addr || matches!(&self.state, State::Live(h) if h.has_address(addr))
    }

    /// The first transport packet of session `id`: when it is pending, what its task is
    /// made of (it is `Starting` from now on); `None` when it has a task (or one is being
    /// made).
    pub fn start(&mut self, id: u64) -> Option<(NewSession, SessionKeys)> {
        if !matches!(self.state, State::Pending(_)) {
            return None;
        }
        let State::Pending(keys) = std::mem::replace(&mut self.state, State::Starting) else {
            return None;
        };
        let session = NewSession {
            id,
            path: self.path,
            from: self.from,
            local: self.local,
            client: self.client,
        };
        Some((session, *keys))
    }
}

/// When a new session's first exchange is due (every session has the same timeout, so the
/// records are in the order they are due).
pub(super) struct Due {
    pub at: Instant,
    pub id: u64,
    pub serial: u64,
}
