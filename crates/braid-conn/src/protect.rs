//! Packet protection with the session keys of the Noise handshake: the negotiated AEAD
//! (AES-256-GCM or ChaCha20-Poly1305) on every transport packet (header as associated data), a per-path replay window, and key
//! rotation (docs/protocol.md section 16a).
//!
//! Owns: the [`PacketProtection`] interface a [`crate::Connection`] (and braid-net's
//! session task) seals and opens through; turning braid-crypto's keys into it ([`Aead`]);
//! the key epochs of one session ([`KeyRing`]); at the agent, the rotation handshake inside
//! the session (message 1 sent on the path that last delivered an authenticated packet,
//! resent with backoff, its answer and cookie replies taken from the session's own
//! packets); at the server, installing the keys of a rotation that the listener accepted
//! ([`RekeyInbox`]). Must not touch: the session, sockets (handshake packets go out as
//! [`Control::Send`]) or the server's handshake policy.

use braid_core::wire::Header;
use braid_core::{Instant, PathId};
use braid_crypto::{
    Ciphers, ClientHandshake, KeyRing, PacketType, PublicKey, RekeyPolicy, ReplayWindow,
    SessionKeys, StaticKeypair,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{debug, info, warn};

/// Seals outgoing and opens incoming packets (the AEAD of the networking layer), and
/// manages its keys (rotation) through [`PacketProtection::poll_control`].
pub trait PacketProtection: Send + 'static {
    /// Encrypt `packet` in place (its last `tag_len` bytes are the tag space).
    fn seal(&mut self, packet: &mut [u8]) -> bool;
    /// Verify and decrypt in place, returning the header it parsed to do so, as a transport
    /// header of key phase 0 (the session takes it as it is: the header is parsed once per
    /// packet); `None`: drop the packet (or it was a key-management packet the protection
    /// consumed).
    fn open(&mut self, packet: &mut [u8]) -> Option<Header> {
        let h = braid_core::wire::parse_header(packet).ok()?;
        self.open_parsed(packet, h)
    }
    /// [`PacketProtection::open`] for a packet whose header the receiver parsed already
    /// (`header` is `parse_header(packet)`): each header is parsed once per packet.
    fn open_parsed(&mut self, packet: &mut [u8], header: Header) -> Option<Header>;
    /// Called on every turn of the session loop with the time: what key management needs
    /// done now (nothing by default).
    fn poll_control(&mut self, _now: Instant) -> Option<Control> {
        None
    }
    /// When [`Self::poll_control`] wants to be called again at the latest.
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
}

/// Protection chosen at run time (the simulator: [`Plain`] or [`Aead`] per scenario).
impl<P: PacketProtection + ?Sized> PacketProtection for Box<P> {
    fn seal(&mut self, packet: &mut [u8]) -> bool {
        (**self).seal(packet)
    }
    fn open(&mut self, packet: &mut [u8]) -> Option<Header> {
        (**self).open(packet)
    }
    fn open_parsed(&mut self, packet: &mut [u8], header: Header) -> Option<Header> {
        (**self).open_parsed(packet, header)
    }
    fn poll_control(&mut self, now: Instant) -> Option<Control> {
        (**self).poll_control(now)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        (**self).poll_timeout()
    }
}

/// What packet protection asks the session's owner to do.
#[derive(Debug)]
pub enum Control {
    /// Send this handshake packet on this path (a key rotation's message 1).
    Send(PathId, Vec<u8>),
    /// New keys are in use: make the session speak on its paths so the peer confirms them.
    Rotated,
    /// The keys outlived their lifetime without a rotation: close the session.
    Expired,
}

/// Counters of packet protection, shared by the sessions of an agent or a server.
#[derive(Debug, Default)]
pub struct KeyStats {
    /// Transport packets that failed to open (forged, corrupted, or under a retired key).
    pub unopened: AtomicU64,
    /// Rotations completed (agent: message 2 accepted; server: new epoch confirmed).
    pub rotations: AtomicU64,
    /// The newest key epoch any session reached.
    pub max_epoch: AtomicU64,
    /// Sessions ended because their keys were not replaced within the lifetime.
    pub expired: AtomicU64,
    /// The agent's newest session id (0: none yet).
    pub session_id: AtomicU64,
    /// "Unknown session" hints received for the agent's session (not authenticated: the
    /// agent answers one with a new handshake, and keeps its session unless that succeeds
    /// and the session stays silent).
    pub hints: AtomicU64,
}

/// Where the server's listener leaves the keys of a rotation it accepted for a session.
#[derive(Debug, Default)]
pub struct RekeyInbox {
    ready: AtomicBool,
    keys: Mutex<Option<SessionKeys>>,
}

impl RekeyInbox {
    /// Hand over new keys (before message 2 is sent, so that they are in place when the
    /// agent's first packet under them arrives).
    pub fn put(&self, keys: SessionKeys) {
        if let Ok(mut k) = self.keys.lock() {
            *k = Some(keys);
            self.ready.store(true, Ordering::Release);
        }
    }

    fn take(&self) -> Option<SessionKeys> {
        if !self.ready.swap(false, Ordering::Acquire) {
            return None;
        }
        self.keys.lock().ok().and_then(|mut k| k.take())
    }
}

/// The agent's rotation handshake in progress.
struct Pending {
    hs: ClientHandshake,
    msg1: Vec<u8>,
    next_send: Duration,
    wait: Duration,
}

/// What the agent needs to start rotations.
struct Rotator {
    key: Arc<StaticKeypair>,
    server_pub: PublicKey,
    session_id: u64,
    last_timestamp: u64,
    pending: Option<Pending>,
    /// The packet ciphers a rotation offers (as the first handshake did).
    ciphers: Ciphers,
}

/// Longest wait between two copies of a rotation's message 1.
const MAX_RESEND: Duration = Duration::from_secs(2);

/// AEAD protection of one session.
pub struct Aead {
    ring: KeyRing,
    windows: HashMap<u8, ReplayWindow>,
    /// The time of the last `poll_control` (the driver calls it every turn of its loop).
    now: Duration,
    /// The path of the newest authenticated packet: where the agent's rotation goes.
    last_path: PathId,
    rotator: Option<Rotator>,
    /// Unix ms at the session's time zero (the agent's rotation timestamps).
    wall_start_ms: u64,
    inbox: Option<Arc<RekeyInbox>>,
    stats: Arc<KeyStats>,
    rotated: bool,
    expiry_said: bool,
    epoch_seen: u64,
}

fn dur(t: Instant) -> Duration {
    Duration::from_nanos(t.as_nanos())
}

/// Unix time in milliseconds (read once, when an agent's protection is made: rotation
/// timestamps are that plus the session's own clock, so nothing reads a clock per packet).
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Aead {
    fn with(keys: SessionKeys, policy: RekeyPolicy, stats: Arc<KeyStats>) -> Self {
        Aead {
            ring: KeyRing::new(keys, policy, Duration::ZERO),
            windows: HashMap::new(),
            now: Duration::ZERO,
            last_path: 0,
            rotator: None,
            wall_start_ms: 0,
            inbox: None,
            stats,
            rotated: false,
            expiry_said: false,
            epoch_seen: 0,
        }
    }

    /// Protection with these keys for the whole session: no rotation, no expiry (tests and
    /// benchmarks of the transport).
    pub fn new(keys: SessionKeys) -> Self {
        let forever = Duration::from_secs(100 * 365 * 86_400);
        let policy = RekeyPolicy {
            interval: forever,
            max_packets: u64::MAX,
            lifetime: forever,
            overlap: RekeyPolicy::default().overlap,
        };
        Self::with(keys, policy, Arc::default())
    }

    /// The agent's protection: it starts a rotation handshake with `server_pub` as
    /// `policy` says (the session's clock starts at zero with the keys of its first
    /// handshake, made at `first_timestamp` unix ms), and ends the session when the keys
    /// outlive their lifetime.
    pub fn client(
        keys: SessionKeys,
        policy: RekeyPolicy,
        key: Arc<StaticKeypair>,
        server_pub: PublicKey,
        session_id: u64,
        first_path: PathId,
        stats: Arc<KeyStats>,
    ) -> Self {
        stats.session_id.store(session_id, Ordering::Relaxed);
        let mut a = Self::with(keys, policy, stats);
        a.last_path = first_path;
        a.wall_start_ms = unix_ms();
        a.rotator = Some(Rotator {
            key,
            server_pub,
            session_id,
            last_timestamp: 0,
            pending: None,
            ciphers: Ciphers::auto(),
        });
        a
    }

    /// The agent's rotations offer `ciphers` (those of its first handshake; default
    /// [`Ciphers::auto`]).
    pub fn offering(mut self, ciphers: Ciphers) -> Self {
        if let Some(r) = self.rotator.as_mut() {
            r.ciphers = ciphers;
        }
        self
    }

    /// The server's protection: new keys arrive through `inbox` when the listener accepted
    /// a rotation; keys older than `policy.lifetime` end the session.
    pub fn server(
        keys: SessionKeys,
        policy: RekeyPolicy,
        inbox: Arc<RekeyInbox>,
        stats: Arc<KeyStats>,
    ) -> Self {
        let mut a = Self::with(keys, policy, stats);
        a.inbox = Some(inbox);
        a
    }

    /// The epoch that seals now.
    pub fn epoch(&self) -> u64 {
        self.ring.epoch()
    }

    fn check_inbox(&mut self) {
        if let Some(keys) = self.inbox.as_ref().and_then(|i| i.take()) {
            self.ring.install_pending(keys, self.now);
        }
    }

    fn note_epoch(&mut self) {
        let e = self.ring.epoch();
        if e > self.epoch_seen {
            self.epoch_seen = e;
            self.stats.rotations.fetch_add(1, Ordering::Relaxed);
            self.stats.max_epoch.fetch_max(e, Ordering::Relaxed);
        }
    }

    /// A handshake answer (type 1) or cookie reply (type 2) for the agent's rotation, or
    /// an "unknown session" hint (type 4).
    fn handshake_packet(&mut self, packet: &[u8], ptype: PacketType, session_id: u64) {
        let Some(r) = self.rotator.as_mut() else {
            return;
        };
        if ptype == PacketType::SessionUnknown {
            if session_id == r.session_id && packet.len() == 12 {
                self.stats.hints.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        let Some(p) = r.pending.as_mut() else {
            return;
        };
        if ptype == PacketType::Cookie {
            match p.hs.handle_cookie_reply(packet) {
                Ok(()) => {
                    p.msg1 = p.hs.message1();
                    p.next_send = self.now;
                }
                Err(e) => debug!("ignored a bad cookie reply to a rotation: {e}"),
            }
            return;
        }
        match p.hs.finish(packet) {
            Ok(keys) => {
                r.pending = None;
                self.ring.install(keys, self.now);
                self.rotated = true;
                self.note_epoch();
                debug!(epoch = self.ring.epoch(), "session keys rotated");
            }
            Err(e) => debug!("ignored a bad rotation reply: {e}"),
        }
    }
}

impl PacketProtection for Aead {
    fn seal(&mut self, packet: &mut [u8]) -> bool {
        self.ring.seal(packet).is_ok()
    }

    fn open_parsed(&mut self, packet: &mut [u8], h: Header) -> Option<Header> {
        if h.ptype != PacketType::Transport {
            self.handshake_packet(packet, h.ptype, h.session_id);
            return None;
        }
        self.check_inbox();
        if self.ring.open_parsed(packet, &h, self.now).is_err() {
            self.stats.unopened.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        self.note_epoch();
        // At most 8 paths are live, but ids are up to 255: bound the map anyway.
        if self.windows.len() > 256 {
            self.windows.clear();
        }
        let fresh = self
            .windows
            .entry(h.path_id)
            .or_default()
            .check_and_set(h.packet_number);
        if !fresh {
            return None;
        }
        self.last_path = h.path_id;
        // The header as the session reads it (the type byte is transport once opened,
        // whatever the key phase was).
        Some(Header { key_phase: 0, ..h })
    }

    fn poll_control(&mut self, now: Instant) -> Option<Control> {
        self.now = dur(now);
        self.check_inbox();
        self.ring.retire(self.now);
        if std::mem::take(&mut self.rotated) {
            return Some(Control::Rotated);
        }
        if self.ring.expired(self.now) {
            if !std::mem::replace(&mut self.expiry_said, true) {
                self.stats.expired.fetch_add(1, Ordering::Relaxed);
                warn!(
                    epoch = self.ring.epoch(),
                    "the session keys were not replaced within {:?}: ending the session",
                    self.ring.policy().lifetime
                );
                return Some(Control::Expired);
            }
            return None;
        }
        let r = self.rotator.as_mut()?;
        if r.pending.is_none() && self.ring.rekey_due(self.now) {
            let wall = self.wall_start_ms + self.now.as_millis() as u64;
            let ts = wall.max(r.last_timestamp + 1);
            let (sid, path) = (r.session_id, self.last_path);
            match ClientHandshake::offering(&r.key, &r.server_pub, sid, path, ts, &r.ciphers) {
                Ok((hs, msg1)) => {
                    r.last_timestamp = ts;
                    info!(
                        epoch = self.ring.epoch() + 1,
                        path = self.last_path,
                        "rotating the session keys"
                    );
                    r.pending = Some(Pending {
                        hs,
                        msg1,
                        next_send: self.now,
                        wait: Duration::from_millis(500),
                    });
                }
                Err(e) => warn!("cannot start a key rotation: {e}"),
            }
        }
        let p = r.pending.as_mut()?;
        if self.now < p.next_send {
            return None;
        }
        p.next_send = self.now + p.wait;
        p.wait = (p.wait * 2).min(MAX_RESEND);
        Some(Control::Send(self.last_path, p.msg1.clone()))
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let pending = self.rotator.as_ref().and_then(|r| r.pending.as_ref());
        let rotation = self.rotator.is_some() && pending.is_none();
        let mut t = self.ring.next_timeout(rotation, !self.expiry_said);
        if let Some(p) = pending {
            t = Some(t.map_or(p.next_send, |t| t.min(p.next_send)));
        }
        t.map(|t| Instant(u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)))
    }
}

/// No protection (tests and benchmarks of the transport alone).
#[derive(Debug, Default)]
pub struct Plain;

impl PacketProtection for Plain {
    fn seal(&mut self, _: &mut [u8]) -> bool {
        true
    }
    fn open_parsed(&mut self, _: &mut [u8], h: Header) -> Option<Header> {
        Some(h)
    }
}

#[cfg(test)]
mod tests;
