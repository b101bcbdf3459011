//! The server's sans-IO endpoint: what to do with one received datagram.
//!
//! Owns: one worker's session table (session id -> the caller's per-session handle and the
//! handshake it answered), the handshake policy of docs/protocol.md section 16 in its
//! order, this worker's gate (mac1 key, per-address token buckets, load meter, cookie
//! checker, hint gate: [`Gate`]) and the drop log of this worker. What every worker must
//! see alike is [`Shared`]'s (the replay guard, the authorized keys, the session count).
//!
//! No lock on the per-packet path, and none through a Diffie-Hellman: the transport path
//! of a live session touches only this worker's table; a handshake is gated by this
//! worker's own state, reads message 1 with no shared state ([`Responder::read`]), and
//! takes the replay guard's lock only for its check-and-record. Each worker's gate has its
//! share of the server's budgets (`rate`, `burst`, `load_threshold` and the hint limits
//! divided by the number of workers, rounded up): the kernel spreads an address's
//! handshakes over the workers by session id, so together they get about the configured
//! budget, and a flood of one captured message 1 (one session id) reaches one worker and
//! gets its share only.
//!
//! A session whose handshake is done has no task yet: the endpoint keeps its keys until
//! its first transport packet arrives ([`Outcome::Start`]), and forgets it if none comes
//! within the first-exchange timeout ([`Endpoint::expire_due`]). A handshake that is never
//! followed by a packet (a flood of valid initiations, an agent that went away) thus costs
//! its Noise step and a table entry, not a session.
//!
//! Must not touch: sockets, tokio, spawning, clocks (the caller passes `now` and
//! `now_ms`), the session's protocol and the cryptography (braid-crypto's). The caller
//! does what an [`Outcome`] says: delivers, sends, creates the session and
//! [`Endpoint::insert`]s its handle, or hands the packet to the worker that owns it.
//!
//! A handshake packet (type 1) goes through, in order: mac1 (one HMAC, once; else dropped
//! silently) -> an existing session's retransmission (the cached reply, only to an address
//! of that session) or key rotation (section 16a) -> the address's token bucket -> under
//! load, mac2 (else a cookie reply) -> the session limit (a 12-byte refusal) -> message 1
//! read (an authorized client that offers no cipher the server accepts gets the cipher
//! refusal, type 6) -> the replay guard -> a new session.

use super::gate::{HintGate, LoadMeter, RateLimiter};
use super::logs::{bad_mac1, DropLog, Dropped};
pub use super::shared::{Shared, SharedConfig};
use super::steer::Steering;
use super::table::{Due, Entry, State};
pub use super::table::{NewSession, SessionHandle};
use super::{AuthorizedKeys, HandshakeCounters, MAX_SKEW_MS};
use braid_crypto::{
    parse_header, CookieChecker, HandshakeError, Header, Mac1Key, PacketType, PublicKey,
    RandomError, Responder, SessionKeys,
};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// One worker's gate in front of the handshake: its own state, no lock.
struct Gate {
    mac1: Mac1Key,
    checker: CookieChecker,
    authorized: AuthorizedKeys,
    limiter: RateLimiter,
    hints: HintGate,
    load: LoadMeter,
}

/// `total` shared by `n` workers: each one's part, rounded up.
fn share(total: u64, n: usize) -> u64 {
    total.div_ceil(n.max(1) as u64)
}

impl Gate {
    fn new(shared: &Shared, workers: usize, now_ms: u64) -> Result<Gate, RandomError> {
        let public = shared.key.public();
        let (rate, burst) = shared.rate;
        let part = |x: u32| share(u64::from(x), workers) as u32;
        Ok(Gate {
            mac1: Mac1Key::new(&public),
            checker: CookieChecker::new(&public, now_ms)?,
            authorized: shared.authorized.clone(),
            limiter: RateLimiter::new(part(rate), part(burst)),
            hints: HintGate::with_share(workers),
            load: LoadMeter::new(share(shared.load_threshold, workers)),
        })
    }
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
    /// A handshake accepted: send `reply` to `to`. The endpoint keeps the keys; the
    /// session starts with its first transport packet ([`Outcome::Start`]). The replay
    /// guard changed.
    Accepted {
        /// The session id.
        id: u64,
        /// The agent's key.
        client: PublicKey,
        /// Its packets' cipher.
        cipher: braid_crypto::Cipher,
        /// Message 2.
        reply: &'a [u8],
        /// Where message 1 came from.
        to: SocketAddr,
    },
    /// The first transport packet of an accepted session: create its task with `keys`,
    /// give its handle to [`Endpoint::started`], then hand it this packet.
    Start {
        /// Everything but the keys.
        session: NewSession,
        /// The session's packet keys.
        keys: SessionKeys,
    },
    /// A key rotation: give `keys` to the session's task (`None`: the session has no task
    /// yet, and the endpoint keeps the new keys for it), then send `reply` to `to`. The
    /// replay guard changed.
    Rotate {
        /// The session's handle and its new keys.
        session: Option<(&'a H, SessionKeys)>,
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

/// A transport packet of no session of ours. Perhaps a session of ours before a restart:
/// tell the agent, so that it shakes hands again now rather than after a silence (it only
/// takes this as a hint). Never more bytes than the packet had.
fn unknown_session<'a, H>(
    log: &mut DropLog,
    hints: &mut HintGate,
    counters: &HandshakeCounters,
    (now, from): (Instant, SocketAddr),
    pkt: &[u8],
    h: &Header,
) -> Outcome<'a, H> {
    let sid = h.session_id;
    log.count(Dropped::UnknownSession, Some(from), || {
        format!("session {sid:016x}")
    });
    if pkt.len() >= h.header_len + braid_crypto::TAG_LEN && hints.allow(from.ip(), now) {
        HandshakeCounters::bump(&counters.hints);
        let bytes = braid_crypto::session_unknown_hint(h);
        return Outcome::Send { to: from, bytes };
    }
    Outcome::Drop(Dropped::UnknownSession)
}

/// One worker's endpoint.
pub struct Endpoint<H> {
    sessions: HashMap<u64, Entry<H>>,
    first: VecDeque<Due>,
    serial: u64,
    shared: Arc<Shared>,
    gate: Gate,
    steering: Steering,
    worker: usize,
    log: DropLog,
}

impl<H: SessionHandle> Endpoint<H> {
    /// The endpoint of worker `worker` (packets whose session `steering` gives another
    /// worker are forwarded there); its first cookie secret is born at `now_ms`.
    pub fn new(
        shared: Arc<Shared>,
        steering: Steering,
        worker: usize,
        now_ms: u64,
    ) -> Result<Endpoint<H>, RandomError> {
        Ok(Endpoint {
            sessions: HashMap::new(),
            first: VecDeque::new(),
            serial: 0,
            gate: Gate::new(&shared, steering.workers(), now_ms)?,
            steering,
            worker,
            log: DropLog::new().counting_into(shared.counters.clone()),
            shared,
        })
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
        let header = parse_header(packet).ok();
        self.handle_parsed(now, now_ms, (from, None), packet, header)
    }

    /// [`Endpoint::handle`] for a packet whose header the caller parsed already:
    /// `header` must be `parse_header(packet).ok()` (the receive path parses each header
    /// once and carries it to the session). `local` is the server address it was sent to,
    /// where the socket says it.
    pub fn handle_parsed(
        &mut self,
        now: Instant,
        now_ms: u64,
        (from, local): (SocketAddr, Option<IpAddr>),
        pkt: &[u8],
        header: Option<Header>,
    ) -> Outcome<'_, H> {
        let Some(h) = header else {
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
        match h.ptype {
            PacketType::Transport => {
                if let Some(e) = self.sessions.get_mut(&h.session_id) {
                    if let Some((session, keys)) = e.start(h.session_id) {
                        self.shared.counters.waiting.fetch_sub(1, Ordering::Relaxed);
                        return Outcome::Start { session, keys };
                    }
                    return match &e.state {
                        State::Live(handle) => Outcome::Deliver(handle),
                        _ => Outcome::Drop(Dropped::UnknownSession),
                    };
                }
                let c = &self.shared.counters;
                unknown_session(&mut self.log, &mut self.gate.hints, c, (now, from), pkt, &h)
            }
            PacketType::Cookie
            | PacketType::SessionUnknown
            | PacketType::SessionLimit
            | PacketType::CipherRefused
            | PacketType::KeyRefused => {
                self.log.count(Dropped::NotBraid, Some(from), || {
                    "a server-to-client packet sent to the server".into()
                });
                Outcome::Drop(Dropped::NotBraid)
            }
            PacketType::Handshake => self.handshake(now, now_ms, (from, local), pkt, &h),
        }
    }

    fn handshake(
        &mut self,
        now: Instant,
        now_ms: u64,
        (from, local): (SocketAddr, Option<IpAddr>),
        pkt: &[u8],
        h: &Header,
    ) -> Outcome<'_, H> {
        let sid = h.session_id;
        let shared = self.shared.clone();
        let c = &shared.counters;
        if !self.gate.mac1.check(pkt) {
            HandshakeCounters::bump(&c.bad_mac1);
            let n = pkt.len();
            let key = &shared.key;
            (self.log).count(Dropped::BadMac1, Some(from), || bad_mac1(n, key));
            return Outcome::Drop(Dropped::BadMac1);
        }
        self.gate.load.record(now);
        let body = &pkt[..pkt.len() - braid_crypto::cookie::MAC_LEN];
        if let Some(e) = self.sessions.get(&sid) {
            let known = e.knows(from);
            if known && e.request == body {
                // Our reply was lost and the agent sent its message 1 again: the same
                // reply, to one of its addresses only, within its address's budget.
                if self.gate.limiter.allow(from.ip(), now) {
                    HandshakeCounters::bump(&c.replies);
                    let bytes = e.reply.clone();
                    return Outcome::Send { to: from, bytes };
                }
                return Outcome::Drop(Dropped::RateLimited);
            } else if known {
                return self.rotate(now, now_ms, from, pkt, h);
            }
            self.log.count(Dropped::ExistingSession, Some(from), || {
                format!("session {sid:016x}")
            });
            return Outcome::Drop(Dropped::ExistingSession);
        }
        // One token of the address's budget pays for whatever comes next: a cookie reply
        // or the Diffie-Hellman. A flood from one address costs one HMAC and one lookup
        // per packet beyond it.
        if let Some(out) = self.admit(now, now_ms, from, pkt, "") {
            return out;
        }
        if !shared.reserve_session() {
            // A clear refusal (12 bytes, paid from the address's budget, after the cookie
            // under load), so that the agent can say why instead of timing out.
            HandshakeCounters::bump(&c.full);
            let max = shared.max_sessions;
            self.log
                .count(Dropped::SessionLimit, Some(from), || format!("limit {max}"));
            let bytes = braid_crypto::session_limit_refusal(h);
            return Outcome::Send { to: from, bytes };
        }
        self.new_session(now, now_ms, (from, local), pkt, h)
    }

    /// The Noise step for a new session whose slot is reserved: accepted, or refused (the
    /// slot given back; an agent with no common cipher is told the server's list).
    fn new_session(
        &mut self,
        now: Instant,
        now_ms: u64,
        (from, local): (SocketAddr, Option<IpAddr>),
        pkt: &[u8],
        h: &Header,
    ) -> Outcome<'_, H> {
        let shared = self.shared.clone();
        let c = &shared.counters;
        match self.noise(now, now_ms, pkt, h, shared.unicast) {
            Ok((client, keys, reply)) => {
                HandshakeCounters::bump(&c.accepted);
                HandshakeCounters::bump(&c.replies);
                HandshakeCounters::bump(&c.waiting);
                self.serial += 1;
                let (id, serial) = (h.session_id, self.serial);
                let at = now + shared.first_exchange_timeout;
                self.first.push_back(Due { at, id, serial });
                let cipher = keys.cipher();
                let e = Entry {
                    state: State::Pending(Box::new(keys)),
                    path: h.path_id,
                    local,
                    serial,
                    client,
                    from,
                    request: pkt[..pkt.len() - braid_crypto::cookie::MAC_LEN].to_vec(),
                    reply,
                };
                let e = match self.sessions.entry(id) {
                    std::collections::hash_map::Entry::Occupied(mut o) => {
                        // Cannot happen (a handshake for a live id is a retransmission or
                        // a rotation), but keep the count right if it does.
                        shared.release_session();
                        o.insert(e);
                        o.into_mut()
                    }
                    std::collections::hash_map::Entry::Vacant(v) => v.insert(e),
                };
                Outcome::Accepted {
                    id,
                    client,
                    cipher,
                    reply: &e.reply,
                    to: from,
                }
            }
            Err(e) => {
                shared.release_session();
                HandshakeCounters::bump(&c.refused);
                self.log
                    .count(Dropped::Refused, Some(from), || e.to_string());
                // Told in fewer bytes than message 1, so that the operator learns what to
                // change instead of watching the agent time out: an authorized client that
                // offers no cipher we accept gets our list; a fresh message 1 of a key that
                // is not authorized, a key refusal (issue 38 item 4; what it tells whom:
                // docs/protocol.md section 16).
                let bytes = match e {
                    HandshakeError::NoCommonCipher { .. } => {
                        braid_crypto::cipher_refusal(h, &shared.ciphers)
                    }
                    HandshakeError::UnknownClient(_) => braid_crypto::key_refusal(h),
                    _ => return Outcome::Drop(Dropped::Refused),
                };
                Outcome::Send { to: from, bytes }
            }
        }
    }

    /// The Noise step: message 1 read with this worker's view of the authorized keys (no
    /// shared lock but the list's read lock), then answered with the shared replay guard
    /// (its lock held for its check-and-record only).
    fn noise(
        &mut self,
        now: Instant,
        now_ms: u64,
        pkt: &[u8],
        h: &Header,
        unicast: Option<SocketAddr>,
    ) -> Result<(PublicKey, SessionKeys, Vec<u8>), HandshakeError> {
        let shared = &self.shared;
        let message1 = {
            let allowed = self.gate.authorized.read(now);
            let responder = Responder {
                key: &shared.key,
                authorized: &allowed,
                max_skew_ms: MAX_SKEW_MS,
                unicast,
                ciphers: &shared.ciphers,
            };
            responder.read(h, pkt, now_ms)?
        };
        message1.answer_shared(&shared.guard)
    }

    /// The address's token bucket, then under load mac2 (else a cookie reply instead of
    /// work): `Some` when the packet goes no further. `what` names a rotation in the log.
    fn admit<'a>(
        &mut self,
        now: Instant,
        now_ms: u64,
        from: SocketAddr,
        pkt: &[u8],
        what: &str,
    ) -> Option<Outcome<'a, H>> {
        let c = &self.shared.counters;
        if !self.gate.limiter.allow(from.ip(), now) {
            HandshakeCounters::bump(&c.rate_limited);
            let (rate, burst) = self.shared.rate;
            self.log.count(Dropped::RateLimited, Some(from), || {
                format!("{what}more than {rate} a second (burst {burst})")
            });
            return Some(Outcome::Drop(Dropped::RateLimited));
        }
        let g = &mut self.gate;
        if !g.load.under_load(now) || g.checker.check_mac2(pkt, from, now_ms) {
            return None;
        }
        self.log
            .count(Dropped::CookieDemanded, Some(from), String::new);
        match g.checker.cookie_reply(pkt, from, now_ms) {
            Ok(bytes) if !bytes.is_empty() => {
                HandshakeCounters::bump(&c.cookies);
                Some(Outcome::Send { to: from, bytes })
            }
            _ => Some(Outcome::Drop(Dropped::CookieDemanded)),
        }
    }

    /// A new handshake for live session `h.session_id` from one of its addresses: a key
    /// rotation. It pays like a first handshake (the address's budget, a cookie under
    /// load, the replay guard) and must come from the agent key that opened the session,
    /// still authorized; then the new keys go to the session and message 2 goes back. A
    /// refused rotation changes nothing: the session keeps its keys until they expire.
    fn rotate(
        &mut self,
        now: Instant,
        now_ms: u64,
        from: SocketAddr,
        pkt: &[u8],
        h: &Header,
    ) -> Outcome<'_, H> {
        let sid = h.session_id;
        let what = format!("a key rotation of session {sid:016x}: ");
        if let Some(out) = self.admit(now, now_ms, from, pkt, &what) {
            return out;
        }
        let c = self.shared.counters.clone();
        let refused = match self.noise(now, now_ms, pkt, h, None) {
            Ok((client, keys, reply)) => {
                let Some(e) = self.sessions.get_mut(&sid) else {
                    return Outcome::Drop(Dropped::ExistingSession);
                };
                if client == e.client {
                    HandshakeCounters::bump(&c.replies);
                    HandshakeCounters::bump(&c.rotations);
                    e.from = from;
                    e.request = pkt[..pkt.len() - braid_crypto::cookie::MAC_LEN].to_vec();
                    e.reply = reply.clone();
                    let session = match &mut e.state {
                        State::Live(handle) => Some((&*handle, keys)),
                        State::Pending(k) => {
                            **k = keys;
                            None
                        }
                        State::Starting => None,
                    };
                    return Outcome::Rotate {
                        session,
                        reply,
                        to: from,
                    };
                }
                format!(
                    "session {sid:016x} belongs to another agent key than {}",
                    client.to_base64()
                )
            }
            Err(e) => format!("session {sid:016x}: {e}"),
        };
        HandshakeCounters::bump(&c.rotations_refused);
        self.log
            .count(Dropped::RotationRefused, Some(from), || refused);
        Outcome::Drop(Dropped::RotationRefused)
    }

    /// The task of the session an [`Outcome::Start`] asked for runs: its packets go to
    /// `handle` from now on.
    pub fn started(&mut self, id: u64, handle: H) {
        if let Some(e) = self.sessions.get_mut(&id) {
            e.state = State::Live(handle);
        }
    }

    /// When the earliest first exchange is due ([`Endpoint::expire_due`]).
    pub fn next_due(&self) -> Option<Instant> {
        self.first.front().map(|d| d.at)
    }

    /// Every first exchange due at `now`: a session that never sent a packet is forgotten
    /// (counted and logged, its slot given back); a started one goes to `check`, whose
    /// task knows whether its core completed its handshake (and calls
    /// [`Endpoint::session_expired`] if not).
    pub fn expire_due(&mut self, now: Instant, mut check: impl FnMut(u64, &H)) {
        while self.first.front().is_some_and(|d| d.at <= now) {
            let Some(d) = self.first.pop_front() else {
                break;
            };
            match self.sessions.get(&d.id) {
                Some(e) if e.serial == d.serial => match &e.state {
                    State::Live(h) => check(d.id, h),
                    State::Pending(_) => {
                        self.shared.counters.waiting.fetch_sub(1, Ordering::Relaxed);
                        self.session_expired(d.id);
                    }
                    State::Starting => {
                        self.session_expired(d.id);
                    }
                },
                _ => {}
            }
        }
    }

    /// The session's task ended: forget it. True when it was in the table.
    pub fn session_ended(&mut self, id: u64) -> bool {
        let known = self.sessions.remove(&id).is_some();
        if known {
            self.shared.release_session();
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
        self.gate.limiter.gc(now);
        self.gate.hints.gc(now);
    }

    /// The shared state (tests).
    #[cfg(test)]
    pub(super) fn shared(&self) -> &Shared {
        &self.shared
    }
}

#[cfg(test)]
#[path = "endpoint_tests.rs"]
mod tests;
