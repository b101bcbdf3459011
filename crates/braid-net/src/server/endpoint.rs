//! The server's sans-IO endpoint: what to do with one received datagram.
//!
//! Owns: one worker's session table (session id -> the caller's per-session handle and the
//! handshake it answered), the handshake policy of docs/protocol.md section 16 in its
//! order, and the drop log of this worker. [`Shared`] owns what every worker's endpoint
//! must see alike: the replay guard, the cookie checker, the authorized keys, the
//! per-address rate limit, the load meter, the hint gate and the total session count for
//! `max_sessions` (behind one mutex, taken by handshakes and unknown-session hints only;
//! the transport path of a live session takes no lock).
//!
//! Must not touch: sockets, tokio, spawning, clocks (the caller passes `now` and
//! `now_ms`), the session's protocol and the cryptography (braid-crypto's). The caller
//! does what an [`Outcome`] says: delivers, sends, creates the session and
//! [`Endpoint::insert`]s its handle, or hands the packet to the worker that owns it.
//!
//! A handshake packet (type 1) goes through, in order: mac1 (one HMAC, no lock; else
//! dropped silently) -> an existing session's retransmission (the cached reply, only to an
//! address of that session) or key rotation (section 16a) -> the address's token bucket ->
//! under load, mac2 (else a cookie reply) -> the session limit (a 12-byte refusal) -> the
//! Noise handshake with the replay guard (an authorized client that offers no cipher the
//! server accepts gets the cipher refusal, type 6) -> a new session.

use super::gate::{HintGate, LoadMeter, RateLimiter};
use super::logs::{DropLog, Dropped};
use super::steer::Steering;
use super::{AuthorizedKeys, HandshakeCounters, MAX_SKEW_MS};
use braid_core::PathId;
use braid_crypto::{
    parse_header, CookieChecker, HandshakeError, Mac1Key, PacketType, PublicKey, RandomError,
    ReplayGuard, Responder, SessionKeys, StaticKeypair,
};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What the endpoint needs to know of the caller's per-session handle.
pub trait SessionHandle {
    /// Is `addr` the peer address of one of the session's paths?
    fn has_address(&self, addr: SocketAddr) -> bool;
}

/// The handshake state every worker shares (handshakes are rare: one mutex).
struct Gate {
    guard: ReplayGuard,
    checker: CookieChecker,
    authorized: AuthorizedKeys,
    limiter: RateLimiter,
    hints: HintGate,
    load: LoadMeter,
}

/// The settings and state shared by all workers' endpoints of one server.
pub struct Shared {
    gate: Mutex<Gate>,
    /// Sessions in all workers' tables (only grows under the gate's lock).
    sessions: AtomicUsize,
    key: Arc<StaticKeypair>,
    unicast: Option<SocketAddr>,
    ciphers: braid_crypto::Ciphers,
    max_sessions: usize,
    rate: (u32, u32),
    first_exchange_timeout: Duration,
    counters: Arc<HandshakeCounters>,
}

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
    /// Handshakes a second per address, and the burst.
    pub rate: (u32, u32),
    /// Handshake packets a second above which cookies are demanded.
    pub load_threshold: u64,
    /// For the log line of an unfinished session.
    pub first_exchange_timeout: Duration,
}

impl Shared {
    /// The shared state, with the replay guard `guard` and the authorized keys `authorized`.
    pub fn new(
        cfg: SharedConfig,
        guard: ReplayGuard,
        authorized: AuthorizedKeys,
        counters: Arc<HandshakeCounters>,
        now_ms: u64,
    ) -> Result<Shared, RandomError> {
        let checker = CookieChecker::new(&cfg.key.public(), now_ms)?;
        Ok(Shared {
            gate: Mutex::new(Gate {
                guard,
                checker,
                authorized,
                limiter: RateLimiter::new(cfg.rate.0, cfg.rate.1),
                hints: HintGate::new(),
                load: LoadMeter::new(cfg.load_threshold),
            }),
            sessions: AtomicUsize::new(0),
            key: cfg.key,
            unicast: cfg.unicast,
            ciphers: cfg.ciphers,
            max_sessions: cfg.max_sessions,
            rate: cfg.rate,
            first_exchange_timeout: cfg.first_exchange_timeout,
            counters,
        })
    }

    fn gate(&self) -> MutexGuard<'_, Gate> {
        // A worker that panicked while holding the lock left consistent enough state
        // (every field is updated in one step): go on with it.
        self.gate.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sessions live in all workers.
    pub fn sessions(&self) -> usize {
        self.sessions.load(Ordering::Relaxed)
    }

    /// Call `f` with the replay guard, under the lock (so that snapshots for the state
    /// file are taken in the order the guard changed).
    pub fn with_guard<R>(&self, f: impl FnOnce(&ReplayGuard) -> R) -> R {
        f(&self.gate().guard)
    }

    /// Forget quiet addresses (call now and then).
    pub fn gc(&self, now: Instant) {
        let mut g = self.gate();
        g.limiter.gc(now);
        g.hints.gc(now);
    }
}

/// A new session: the caller creates it with the keys, sends `reply` to `from` and then
/// calls [`Endpoint::insert`] with it and its handle.
#[derive(Debug)]
pub struct Accepted {
    /// The session id (the agent chose it).
    pub id: u64,
    /// The path message 1 came on.
    pub path: PathId,
    /// Where message 1 came from (the first path's address).
    pub from: SocketAddr,
    /// The agent's key.
    pub client: PublicKey,
    /// Message 2, to send to `from`.
    pub reply: Vec<u8>,
    /// Message 1 without mac2, to recognise a retransmission.
    request: Vec<u8>,
}

/// What to do with a datagram.
pub enum Outcome<'a, H> {
    /// A transport packet of a live session: hand it to the session.
    Deliver(&'a H),
    /// Send `bytes` to `to` (a cached reply, a cookie reply, the session-limit refusal or
    /// an unknown-session hint; each smaller than what came in).
    Send {
        /// Destination.
        to: SocketAddr,
        /// The packet.
        bytes: Vec<u8>,
    },
    /// A handshake accepted: create the session with `keys`, send `session.reply`, then
    /// [`Endpoint::insert`] it.
    Accept {
        /// Everything but the keys.
        session: Accepted,
        /// The session's packet keys.
        keys: SessionKeys,
    },
    /// A key rotation of a live session: give `keys` to `session`, then send `reply` to
    /// `to`.
    Rotate {
        /// The session's handle.
        session: &'a H,
        /// Its new keys.
        keys: SessionKeys,
        /// Message 2.
        reply: Vec<u8>,
        /// Where message 1 came from.
        to: SocketAddr,
    },
    /// The session id belongs to another worker: hand the packet to worker `n`.
    Forward(usize),
    /// Dropped (counted and logged by the endpoint).
    Drop(Dropped),
}

struct Entry<H> {
    handle: H,
    /// The agent key that opened the session: only it may rotate its keys.
    client: PublicKey,
    /// Where the agent's newest message 1 came from: only there (or from another of its
    /// path addresses)...
    from: SocketAddr,
    /// ...does a byte-for-byte copy of its header and Noise message (mac2 may differ)...
    request: Vec<u8>,
    /// ...get our cached reply (smaller than the request, so never an amplifier).
    reply: Vec<u8>,
}

/// One worker's endpoint.
pub struct Endpoint<H> {
    sessions: HashMap<u64, Entry<H>>,
    shared: Arc<Shared>,
    mac1: Mac1Key,
    steering: Steering,
    worker: usize,
    log: DropLog,
}

impl<H: SessionHandle> Endpoint<H> {
    /// The endpoint of worker `worker` (packets whose session `steering` gives another
    /// worker are forwarded there).
    pub fn new(shared: Arc<Shared>, steering: Steering, worker: usize) -> Endpoint<H> {
        Endpoint {
            sessions: HashMap::new(),
            mac1: Mac1Key::new(&shared.key.public()),
            steering,
            worker,
            log: DropLog::new().counting_into(shared.counters.clone()),
            shared,
        }
    }

    /// Sessions in this worker's table.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// True when this worker has no session.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// The drop log (counts per kind).
    pub fn log(&self) -> &DropLog {
        &self.log
    }

    /// Decide what to do with `packet` from `from`. `now` drives the rate limits, `now_ms`
    /// (unix time) the handshake's clock check and the cookies.
    pub fn handle(
        &mut self,
        now: Instant,
        now_ms: u64,
        from: SocketAddr,
        packet: &[u8],
    ) -> Outcome<'_, H> {
        self.decide(now, now_ms, from, packet)
    }

    fn decide(
        &mut self,
        now: Instant,
        now_ms: u64,
        from: SocketAddr,
        pkt: &[u8],
    ) -> Outcome<'_, H> {
        let Ok(h) = parse_header(pkt) else {
            let n = pkt.len();
            self.log
                .count(Dropped::NotBraid, Some(from), || format!("{n} bytes"));
            return Outcome::Drop(Dropped::NotBraid);
        };
        if matches!(h.ptype, PacketType::Transport | PacketType::Handshake) {
            let owner = self.steering.worker_of(h.session_id);
            if owner != self.worker {
                return Outcome::Forward(owner);
            }
        }
        let c = &self.shared.counters;
        match h.ptype {
            PacketType::Transport => {
                if let Some(e) = self.sessions.get(&h.session_id) {
                    return Outcome::Deliver(&e.handle);
                }
                let sid = h.session_id;
                self.log.count(Dropped::UnknownSession, Some(from), || {
                    format!("session {sid:016x}")
                });
                // Perhaps a session of ours before a restart: tell the agent, so that it
                // shakes hands again now rather than after a silence (it only takes this
                // as a hint). Never more bytes than the packet had.
                if pkt.len() >= h.header_len + braid_crypto::TAG_LEN
                    && self.shared.gate().hints.allow(from.ip(), now)
                {
                    HandshakeCounters::bump(&c.hints);
                    let bytes = braid_crypto::session_unknown_hint(&h);
                    return Outcome::Send { to: from, bytes };
                }
                Outcome::Drop(Dropped::UnknownSession)
            }
            PacketType::Cookie
            | PacketType::SessionUnknown
            | PacketType::SessionLimit
            | PacketType::CipherRefused => {
                self.log.count(Dropped::NotBraid, Some(from), || {
                    "a server-to-client packet sent to the server".into()
                });
                Outcome::Drop(Dropped::NotBraid)
            }
            PacketType::Handshake => self.handshake(now, now_ms, from, pkt, &h),
        }
    }

    fn handshake(
        &mut self,
        now: Instant,
        now_ms: u64,
        from: SocketAddr,
        pkt: &[u8],
        h: &braid_crypto::Header,
    ) -> Outcome<'_, H> {
        let (sid, path) = (h.session_id, h.path_id);
        let shared = self.shared.clone();
        let c = &shared.counters;
        if !self.mac1.check(pkt) {
            HandshakeCounters::bump(&c.bad_mac1);
            let n = pkt.len();
            self.log
                .count(Dropped::BadMac1, Some(from), || format!("{n} bytes"));
            return Outcome::Drop(Dropped::BadMac1);
        }
        let mut g = shared.gate();
        g.load.record(now);
        let body = &pkt[..pkt.len() - braid_crypto::cookie::MAC_LEN];
        if let Some(e) = self.sessions.get(&sid) {
            let known = e.from == from || e.handle.has_address(from);
            if known && e.request == body {
                // Our reply was lost and the agent sent its message 1 again: the same
                // reply, to one of its addresses only, within its address's budget.
                if g.limiter.allow(from.ip(), now) {
                    HandshakeCounters::bump(&c.replies);
                    let bytes = e.reply.clone();
                    return Outcome::Send { to: from, bytes };
                }
                return Outcome::Drop(Dropped::RateLimited);
            } else if known {
                drop(g);
                return self.rotate(now, now_ms, from, pkt, sid);
            }
            self.log.count(Dropped::ExistingSession, Some(from), || {
                format!("session {sid:016x}")
            });
            return Outcome::Drop(Dropped::ExistingSession);
        }
        // One token of the address's budget pays for whatever comes next: a cookie reply
        // or the Diffie-Hellman. A flood from one address costs one HMAC and one lookup
        // per packet beyond it.
        if !g.limiter.allow(from.ip(), now) {
            HandshakeCounters::bump(&c.rate_limited);
            let (rate, burst) = shared.rate;
            self.log.count(Dropped::RateLimited, Some(from), || {
                format!("more than {rate} a second (burst {burst})")
            });
            return Outcome::Drop(Dropped::RateLimited);
        }
        if let Some(out) = self.cookie(&mut g, now, now_ms, from, pkt) {
            return out;
        }
        if shared.sessions() >= shared.max_sessions {
            // A clear refusal (12 bytes, paid from the address's budget, after the cookie
            // under load), so that the agent can say why instead of timing out.
            HandshakeCounters::bump(&c.full);
            let max = shared.max_sessions;
            self.log
                .count(Dropped::SessionLimit, Some(from), || format!("limit {max}"));
            let bytes = braid_crypto::session_limit_refusal(h);
            return Outcome::Send { to: from, bytes };
        }
        // One list: what SIGHUP reloaded or the file re-read last.
        let allowed = g.authorized.get(now);
        let g = &mut *g;
        let responder = Responder {
            key: &shared.key,
            authorized: &allowed,
            max_skew_ms: MAX_SKEW_MS,
            unicast: shared.unicast,
            ciphers: &shared.ciphers,
        };
        match responder.respond(&mut g.guard, pkt, now_ms) {
            Ok((client, keys, reply)) => {
                HandshakeCounters::bump(&c.accepted);
                HandshakeCounters::bump(&c.replies);
                // Counted under the lock: the limit check above cannot race another worker.
                shared.sessions.fetch_add(1, Ordering::Relaxed);
                let session = Accepted {
                    id: sid,
                    path,
                    from,
                    client,
                    reply,
                    request: body.to_vec(),
                };
                Outcome::Accept { session, keys }
            }
            Err(e) => {
                HandshakeCounters::bump(&c.refused);
                self.log
                    .count(Dropped::Refused, Some(from), || e.to_string());
                if matches!(e, HandshakeError::NoCommonCipher { .. }) {
                    // An authorized client that offers no cipher we accept: tell it which
                    // we do (a few bytes, less than its message 1), so that its operator
                    // learns what to change instead of watching it time out.
                    let bytes = braid_crypto::cipher_refusal(h, &shared.ciphers);
                    return Outcome::Send { to: from, bytes };
                }
                Outcome::Drop(Dropped::Refused)
            }
        }
    }

    /// Under load, a handshake without a valid mac2 gets a cookie reply instead of work.
    fn cookie<'a>(
        &mut self,
        g: &mut Gate,
        now: Instant,
        now_ms: u64,
        from: SocketAddr,
        pkt: &[u8],
    ) -> Option<Outcome<'a, H>> {
        if !g.load.under_load(now) || g.checker.check_mac2(pkt, from, now_ms) {
            return None;
        }
        self.log
            .count(Dropped::CookieDemanded, Some(from), String::new);
        match g.checker.cookie_reply(pkt, from, now_ms) {
            Ok(bytes) if !bytes.is_empty() => {
                HandshakeCounters::bump(&self.shared.counters.cookies);
                Some(Outcome::Send { to: from, bytes })
            }
            _ => Some(Outcome::Drop(Dropped::CookieDemanded)),
        }
    }

    /// A new handshake for live session `sid` from one of its addresses: a key rotation.
    /// It pays like a first handshake (the address's budget, a cookie under load, the
    /// replay guard) and must come from the agent key that opened the session, still
    /// authorized; then the new keys go to the session and message 2 goes back. A refused
    /// rotation changes nothing: the session keeps its keys until they expire.
    fn rotate(
        &mut self,
        now: Instant,
        now_ms: u64,
        from: SocketAddr,
        pkt: &[u8],
        sid: u64,
    ) -> Outcome<'_, H> {
        let shared = self.shared.clone();
        let c = &shared.counters;
        let mut g = shared.gate();
        if !g.limiter.allow(from.ip(), now) {
            HandshakeCounters::bump(&c.rate_limited);
            self.log.count(Dropped::RateLimited, Some(from), || {
                format!("a key rotation of session {sid:016x}")
            });
            return Outcome::Drop(Dropped::RateLimited);
        }
        if let Some(out) = self.cookie(&mut g, now, now_ms, from, pkt) {
            return out;
        }
        let allowed = g.authorized.get(now);
        let g = &mut *g;
        let Some(e) = self.sessions.get_mut(&sid) else {
            return Outcome::Drop(Dropped::ExistingSession);
        };
        let responder = Responder {
            key: &shared.key,
            authorized: &allowed,
            max_skew_ms: MAX_SKEW_MS,
            unicast: None,
            ciphers: &shared.ciphers,
        };
        let refused = match responder.respond(&mut g.guard, pkt, now_ms) {
            Ok((client, keys, reply)) if client == e.client => {
                HandshakeCounters::bump(&c.replies);
                HandshakeCounters::bump(&c.rotations);
                e.from = from;
                e.request = pkt[..pkt.len() - braid_crypto::cookie::MAC_LEN].to_vec();
                e.reply = reply.clone();
                return Outcome::Rotate {
                    session: &e.handle,
                    keys,
                    reply,
                    to: from,
                };
            }
            Ok((client, _, _)) => format!(
                "session {sid:016x} belongs to another agent key than {}",
                client.to_base64()
            ),
            Err(e) => format!("session {sid:016x}: {e}"),
        };
        HandshakeCounters::bump(&c.rotations_refused);
        self.log
            .count(Dropped::RotationRefused, Some(from), || refused);
        Outcome::Drop(Dropped::RotationRefused)
    }

    /// Add the session an [`Outcome::Accept`] asked for, with its handle.
    pub fn insert(&mut self, s: Accepted, handle: H) {
        let e = Entry {
            handle,
            client: s.client,
            from: s.from,
            request: s.request,
            reply: s.reply,
        };
        if self.sessions.insert(s.id, e).is_some() {
            // Cannot happen (a handshake for a live id is a retransmission or rotation),
            // but keep the count right if it does.
            self.shared.sessions.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The session's task ended: forget it. True when it was in the table.
    pub fn session_ended(&mut self, id: u64) -> bool {
        let known = self.sessions.remove(&id).is_some();
        if known {
            self.shared.sessions.fetch_sub(1, Ordering::Relaxed);
        }
        known
    }

    /// The session did not complete its first exchange in time: forget it (counted and
    /// logged). True when it was in the table.
    pub fn session_expired(&mut self, id: u64) -> bool {
        if !self.session_ended(id) {
            return false;
        }
        HandshakeCounters::bump(&self.shared.counters.unfinished);
        let t = self.shared.first_exchange_timeout;
        self.log.count(Dropped::Unfinished, None, || {
            format!("session {id:016x} sent no authenticated packet within {t:?} of its handshake")
        });
        true
    }

    /// Every [`DropLog::PERIOD`]: write the drop counts, forget quiet addresses.
    pub fn tick(&mut self, now: Instant) {
        self.log.flush(now);
        self.shared.gc(now);
    }
}

#[cfg(test)]
#[path = "endpoint_tests.rs"]
mod tests;
