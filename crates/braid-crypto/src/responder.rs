//! The server's side of the Noise IK handshake, in two steps so that a server with several
//! threads serializes only the replay guard's check-and-record.
//!
//! Owns: reading and checking message 1 ([`Responder::read`], giving a [`Message1`]: the
//! client's key, its timestamp, the cipher chosen) and answering it ([`Message1::answer`]:
//! the replay guard, message 2 and the session keys), and the one-call form
//! ([`Responder::respond`], [`ServerHandshake::respond`]). Must not touch: clocks (unix
//! time in ms is passed in), sockets, rate limits and cookies (mac1 and mac2 are
//! [`crate::cookie`]'s; the caller checks mac1 once before [`Responder::read`]).
//!
//! The X25519 operations of a responder: reading message 1 does two (`es`, `ss`), so a
//! replay, an unknown key or a stale timestamp costs no more; answering generates the
//! ephemeral key and does two more (`ee`, `se`). snow also derives the static public key
//! from the private one when each handshake state is built (one fixed-base
//! multiplication).
//!
//! Order of the replay checks in [`Message1::answer`]: the guard is asked first (changing
//! nothing; a replay ends here, before the ephemeral key), message 2 is built without the
//! guard, and only then is the timestamp checked again and recorded in one step: of two
//! copies of one message 1 answered at once on two threads, exactly one is accepted.

use crate::aead::{Cipher, Ciphers, Role, SessionKeys};
use crate::cookie::{Mac1Key, MACS_LEN};
use crate::guard::ReplayGuard;
use crate::keys::{PublicKey, StaticKeypair};
use crate::noise::{
    handshake_packet, keyed_builder, keys_from, names, noise, HandshakeError, CIPHER_ITEM,
    MAX_NOISE_MSG, MAX_OFFER, PAYLOAD_LEN, PROLOGUE,
};
use braid_wire::{parse_header, Header, PacketType};
use std::net::SocketAddr;
use std::sync::Mutex;

/// The server's side: one call per message 1 (the server keeps no handshake state).
#[derive(Debug, Clone, Copy)]
pub struct ServerHandshake;

impl ServerHandshake {
    /// Answer message 1 (`packet`, a complete handshake packet). Checks, in order: the
    /// header, mac1 (cheap: do any load or mac2 checks of [`crate::CookieChecker`] before
    /// calling this), the Noise message (server key and prologue; the `es` X25519), that
    /// the client's key is in `authorized` (after the `ss` X25519), the payload, that the
    /// timestamp is within `max_skew_ms` of `now_unix_ms`, and that `guard` has seen no
    /// newer timestamp from this client; only then is message 2 built (the ephemeral key
    /// and two more X25519) and the guard updated. Returns the client's key, the session
    /// keys and message 2 as a complete handshake packet to send back on the same path.
    /// Accepts [`Ciphers::auto`].
    pub fn respond(
        server_key: &StaticKeypair,
        authorized: &[PublicKey],
        guard: &mut ReplayGuard,
        packet: &[u8],
        now_unix_ms: u64,
        max_skew_ms: u64,
    ) -> Result<(PublicKey, SessionKeys, Vec<u8>), HandshakeError> {
        let (k, g, p) = (server_key, guard, packet);
        Self::respond_with_address(k, authorized, g, p, now_unix_ms, max_skew_ms, None)
    }

    /// [`ServerHandshake::respond`], with the server's own unicast address in message 2
    /// (when `unicast` is given) for the client to send the whole session to.
    pub fn respond_with_address(
        server_key: &StaticKeypair,
        authorized: &[PublicKey],
        guard: &mut ReplayGuard,
        packet: &[u8],
        now_unix_ms: u64,
        max_skew_ms: u64,
        unicast: Option<SocketAddr>,
    ) -> Result<(PublicKey, SessionKeys, Vec<u8>), HandshakeError> {
        let r = Responder {
            key: server_key,
            authorized,
            max_skew_ms,
            unicast,
            ciphers: &Ciphers::auto(),
        };
        r.respond(guard, packet, now_unix_ms)
    }
}

/// The server's settings for answering message 1: [`ServerHandshake::respond`] with
/// every option.
#[derive(Debug, Clone, Copy)]
pub struct Responder<'a> {
    /// The server's static key.
    pub key: &'a StaticKeypair,
    /// The client keys allowed in.
    pub authorized: &'a [PublicKey],
    /// Largest accepted difference between the client's timestamp and `now_unix_ms`.
    pub max_skew_ms: u64,
    /// The server's own unicast address, named in message 2 when given.
    pub unicast: Option<SocketAddr>,
    /// The packet ciphers the server accepts, its preferred first.
    pub ciphers: &'a Ciphers,
}

/// A message 1 that passed every check but the replay guard's: the client is authorized,
/// its session id authenticated, its timestamp within the allowed skew and a cipher
/// chosen. [`Message1::answer`] finishes the handshake.
pub struct Message1 {
    state: snow::HandshakeState,
    client: PublicKey,
    timestamp_ms: u64,
    cipher: Cipher,
    /// Message 1 had no cipher list (message 2 then names no cipher).
    legacy: bool,
    session_id: u64,
    path_id: u8,
    unicast: Option<SocketAddr>,
}

impl std::fmt::Debug for Message1 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Message1")
            .field("client", &self.client.to_base64())
            .field("timestamp_ms", &self.timestamp_ms)
            .field("cipher", &self.cipher)
            .field("session_id", &self.session_id)
            .finish_non_exhaustive()
    }
}

impl Responder<'_> {
    /// Answer message 1 as [`ServerHandshake::respond`] does; the packet cipher is the
    /// first of `self.ciphers` that the client offered.
    pub fn respond(
        &self,
        guard: &mut ReplayGuard,
        packet: &[u8],
        now_unix_ms: u64,
    ) -> Result<(PublicKey, SessionKeys, Vec<u8>), HandshakeError> {
        let h = parse_header(packet)?;
        check_header(&h)?;
        if !Mac1Key::new(&self.key.public()).check(packet) {
            return Err(HandshakeError::Mac1);
        }
        self.read(&h, packet, now_unix_ms)?.answer(guard)
    }

    /// Read message 1: `packet` is the complete handshake packet, `h` its header as the
    /// caller parsed it (`parse_header(packet)`), and the caller has checked its mac1
    /// ([`Mac1Key::check`]: this does not again). Checks the header's type and packet
    /// number, the Noise message (two X25519), the payload, the timestamp's skew, that the
    /// client is authorized, and the cipher offer; the replay guard is
    /// [`Message1::answer`]'s.
    pub fn read(
        &self,
        h: &Header,
        packet: &[u8],
        now_unix_ms: u64,
    ) -> Result<Message1, HandshakeError> {
        check_header(h)?;
        let msg = packet
            .len()
            .checked_sub(MACS_LEN)
            .and_then(|end| packet.get(h.header_len..end))
            .ok_or(HandshakeError::Mac1)?;
        let mut state = keyed_builder(PROLOGUE, self.key)?
            .build_responder()
            .map_err(noise("setup"))?;
        let mut payload = vec![0u8; msg.len().min(MAX_NOISE_MSG)];
        let n = state
            .read_message(msg, &mut payload)
            .map_err(noise("reading message 1"))?;
        let client: [u8; 32] = state
            .get_remote_static()
            .and_then(|s| s.try_into().ok())
            .ok_or(HandshakeError::Noise {
                stage: "reading the client key",
                source: snow::Error::Input,
            })?;
        let client = PublicKey(client);
        let (fixed, offer) = decode_message1(&payload[..n]).ok_or(HandshakeError::BadPayload {
            message: 1,
            len: n,
            expected: PAYLOAD_LEN,
        })?;
        let legacy = offer.is_none();
        let offered = offer.unwrap_or_else(|| vec![Cipher::ChaCha20Poly1305]);
        let word = |b: &[u8]| u64::from_be_bytes(b.try_into().unwrap_or([0; 8]));
        let (timestamp_ms, payload_sid) = (word(&fixed[..8]), word(&fixed[8..]));
        if payload_sid != h.session_id {
            return Err(HandshakeError::SessionMismatch {
                header: h.session_id,
                payload: payload_sid,
            });
        }
        if timestamp_ms.abs_diff(now_unix_ms) > self.max_skew_ms {
            return Err(HandshakeError::ClockSkew {
                timestamp_ms,
                now_ms: now_unix_ms,
                max_skew_ms: self.max_skew_ms,
            });
        }
        // After the skew: `UnknownClient` (which a server answers with a key refusal) means
        // a fresh message 1 from the holder of that key, never an old one replayed. Before
        // the ciphers: only an authorized client learns which the server accepts.
        if !self.authorized.contains(&client) {
            return Err(HandshakeError::UnknownClient(client));
        }
        let cipher =
            self.ciphers
                .choose(&offered)
                .ok_or_else(|| HandshakeError::NoCommonCipher {
                    offered: names(&offered),
                    accepted: names(self.ciphers.as_slice()),
                })?;
        Ok(Message1 {
            state,
            client,
            timestamp_ms,
            cipher,
            legacy,
            session_id: h.session_id,
            path_id: h.path_id,
            unicast: self.unicast,
        })
    }
}

impl Message1 {
    /// The authenticated client key.
    pub fn client(&self) -> PublicKey {
        self.client
    }

    /// The client's timestamp (unix ms).
    pub fn timestamp_ms(&self) -> u64 {
        self.timestamp_ms
    }

    /// The packet cipher chosen.
    pub fn cipher(&self) -> Cipher {
        self.cipher
    }

    /// Finish the handshake with `guard`: refused if the guard has seen this client's
    /// timestamp or a newer one (before any more X25519), else message 2 is built and the
    /// timestamp recorded. Returns the client's key, the session keys and message 2.
    pub fn answer(
        self,
        guard: &mut ReplayGuard,
    ) -> Result<(PublicKey, SessionKeys, Vec<u8>), HandshakeError> {
        self.answer_with(&mut |record, c, t| match record {
            false => guard.check(c, t),
            true => guard.check_and_record(c, t),
        })
    }

    /// [`Message1::answer`] with a guard that several threads share: its lock is held for
    /// the first check and for the final check-and-record, each a map lookup, never while
    /// message 2 is built.
    pub fn answer_shared(
        self,
        guard: &Mutex<ReplayGuard>,
    ) -> Result<(PublicKey, SessionKeys, Vec<u8>), HandshakeError> {
        self.answer_with(&mut |record, c, t| {
            // A thread that panicked holding the lock left the map consistent (each
            // change is one insert).
            let mut g = guard.lock().unwrap_or_else(|p| p.into_inner());
            match record {
                false => g.check(c, t),
                true => g.check_and_record(c, t),
            }
        })
    }

    /// `guard(record, client, timestamp)`: check only (false) or check and record (true).
    fn answer_with(
        mut self,
        guard: &mut dyn FnMut(bool, &PublicKey, u64) -> Result<(), HandshakeError>,
    ) -> Result<(PublicKey, SessionKeys, Vec<u8>), HandshakeError> {
        // A replay costs no more X25519 than reading message 1 did.
        guard(false, &self.client, self.timestamp_ms)?;
        let mut reply = [0u8; 256];
        let mut payload2 = Vec::new();
        if !self.legacy {
            payload2.extend_from_slice(&[CIPHER_ITEM, self.cipher.id()]);
        }
        payload2.extend(self.unicast.map(encode_address).unwrap_or_default());
        let m = self
            .state
            .write_message(&payload2, &mut reply)
            .map_err(noise("writing message 2"))?;
        let packet = handshake_packet(self.session_id, self.path_id, &reply[..m])?;
        // Recorded only now, so that a failure above leaves the guard as it was.
        guard(true, &self.client, self.timestamp_ms)?;
        let keys = keys_from(&mut self.state, Role::Server, self.cipher);
        Ok((self.client, keys, packet))
    }
}

/// A handshake packet's header: type 1, packet number 0.
fn check_header(h: &Header) -> Result<(), HandshakeError> {
    if h.ptype != PacketType::Handshake {
        return Err(HandshakeError::NotHandshake);
    }
    if h.packet_number != 0 {
        return Err(HandshakeError::PacketNumber(h.packet_number));
    }
    Ok(())
}

/// Message 1's payload: the fixed part and the offered ciphers (None: no list, a client
/// before negotiation). Ids this version does not know are skipped; a list of none that
/// it knows is an empty offer.
fn decode_message1(b: &[u8]) -> Option<([u8; PAYLOAD_LEN], Option<Vec<Cipher>>)> {
    let fixed: [u8; PAYLOAD_LEN] = b.get(..PAYLOAD_LEN)?.try_into().ok()?;
    let rest = &b[PAYLOAD_LEN..];
    let Some((&n, ids)) = rest.split_first() else {
        return Some((fixed, None));
    };
    if n == 0 || n as usize > MAX_OFFER || ids.len() != n as usize {
        return None;
    }
    let offer = ids.iter().filter_map(|&i| Cipher::from_id(i)).collect();
    Some((fixed, Some(offer)))
}

/// Message 2's optional payload: a socket address.
pub(crate) fn encode_address(a: SocketAddr) -> Vec<u8> {
    let mut v = match a.ip() {
        std::net::IpAddr::V4(ip) => [&[4u8][..], &ip.octets()].concat(),
        std::net::IpAddr::V6(ip) => [&[6u8][..], &ip.octets()].concat(),
    };
    v.extend_from_slice(&a.port().to_be_bytes());
    v
}

#[cfg(test)]
#[path = "responder_tests.rs"]
mod tests;
