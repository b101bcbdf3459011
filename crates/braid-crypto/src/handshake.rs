//! The Noise IK handshake (`Noise_IK_25519_ChaChaPoly_BLAKE2s`, prologue `braid v2`).
//!
//! Owns: the client's side (its proof of freshness, a timestamp, and its use of a cookie
//! reply) and reading message 2 into [`SessionKeys`]. What both sides share (the
//! handshake's errors, packet framing, the `snow` builder, the payload constants) is
//! [`crate::noise`]'s. The server's side (refusing
//! unknown clients and replays with a [`crate::ReplayGuard`]) is [`crate::responder`]'s.
//!
//! Must not touch: clocks (the caller passes unix time in milliseconds), sockets, key files
//! and transport packets. The Noise protocol itself is `snow`'s; the MACs and cookies are
//! [`crate::cookie`]'s.
//!
//! Packets (no AEAD tag is appended: Noise messages carry their own):
//!
//! ```text
//! message 1 (client -> server): header(type 1, session id, path id, pn 0) | Noise IK msg 1
//!                               | mac1 (16) | mac2 (16)
//!     its encrypted payload: timestamp (u64 BE, unix ms) | session id (u64 BE)
//!                            [ | n (1..=8) | n cipher ids, most preferred first ]
//! cookie reply (server -> client, only under load): see crate::cookie (56 B)
//! message 2 (server -> client): header(type 1, same session id and path id, pn 0) | Noise IK msg 2
//!     its payload (encrypted, authenticated), a sequence of items, each at most once:
//!     'C' (0x43) | cipher id                  the packet cipher (when message 1 offered a list)
//!     4 | IPv4 (4) | port (u16 BE)   or   6 | IPv6 (16) | port (u16 BE)   the server's own
//!                                             unicast address, if it has one
//! ```
//!
//! Cipher negotiation: cipher ids are 1 (ChaCha20-Poly1305) and 2 (AES-256-GCM). The client
//! offers its [`Ciphers`] in order; the server picks the first of its own list that was
//! offered (ids it does not know are skipped) and names it in message 2; both ends make the
//! packet keys of the Noise split with it (rotations included: each rotation is a handshake
//! and negotiates again). A message 1 without the list (16-byte payload: braid before
//! negotiation, or a client that offers ChaCha20-Poly1305 only, which sends it so as to
//! reach older servers) means ChaCha20-Poly1305, and its message 2 has no cipher item. The
//! offer and the choice are inside the Noise payloads, so a man in the middle cannot
//! change either (the messages would not authenticate); a client refuses a message 2 whose
//! cipher it did not offer or that names none when it offered a list.
//!
//! The session id is repeated inside the encrypted payload so that the server only accepts
//! it together with the client's authentication (the header itself travels in the clear).
//!
//! Freshness: the server refuses a message 1 whose timestamp is more than `max_skew_ms` away
//! from its own clock, and the [`crate::ReplayGuard`] refuses one whose timestamp is not newer
//! than the newest already accepted from the same client key (checked before the server
//! spends its second and third Diffie-Hellman on message 2). Two handshakes of one client
//! key therefore need distinct milliseconds (use e.g. `max(now, last + 1)`).
//!
//! Cookies: a server under load answers message 1 with a cookie reply instead of message 2;
//! the client passes it to [`ClientHandshake::handle_cookie_reply`] and resends
//! [`ClientHandshake::message1`], which now carries mac2. The Noise part of message 1 does
//! not change, so the server sees the same timestamp.
//!
//! No-panic contract: [`ServerHandshake::respond`], [`ClientHandshake::finish`] and
//! [`ClientHandshake::handle_cookie_reply`] accept any bytes and return an error for
//! anything malformed or forged.

use crate::aead::{Cipher, Ciphers, Role, SessionKeys};
use crate::cookie::{self, CookieError, Mac1Key, COOKIE_LEN, MACS_LEN, MAC_LEN};
use crate::keys::{PublicKey, StaticKeypair};
use crate::noise::{
    handshake_packet, keyed_builder, keys_from, names, noise, split_handshake_packet, CIPHER_ITEM,
    MAX_NOISE_MSG, MAX_OFFER, PAYLOAD_LEN,
};

/// The Noise protocol name ([`crate::keys`]' own, here too for older paths).
pub use crate::keys::NOISE_PARAMS;
/// The error type and prologue ([`crate::noise`]'s, shared with the server's side).
pub use crate::noise::{HandshakeError, PROLOGUE};

/// The server's side, [`crate::responder`]'s (here too for the tests and older paths).
pub use crate::responder::{Message1, Responder, ServerHandshake};

/// The client's side of a handshake in progress.
pub struct ClientHandshake {
    state: snow::HandshakeState,
    /// The ciphers offered; `legacy`: without a list in message 1 (ChaCha20-Poly1305 only).
    offered: Vec<Cipher>,
    legacy: bool,
    session_id: u64,
    path_id: u8,
    server_pub: PublicKey,
    /// Header and Noise message of message 1, then its mac1.
    body: Vec<u8>,
    mac1: [u8; MAC_LEN],
    /// The cookie of the server's last cookie reply, if any.
    cookie: Option<[u8; COOKIE_LEN]>,
    server_address: Option<std::net::SocketAddr>,
}

impl std::fmt::Debug for ClientHandshake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientHandshake")
            .field("session_id", &self.session_id)
            .field("path_id", &self.path_id)
            .finish_non_exhaustive()
    }
}

impl ClientHandshake {
    /// Start a handshake with the server whose public key is `server_pub`, for session
    /// `session_id`, sent on path `path_id`. `now_unix_ms` is the client's clock (unix time
    /// in ms); it must be newer than that of any earlier handshake of this client key.
    /// Returns the handshake state and message 1 as a complete handshake packet. Offers
    /// [`Ciphers::auto`].
    pub fn new(
        client_key: &StaticKeypair,
        server_pub: &PublicKey,
        session_id: u64,
        path_id: u8,
        now_unix_ms: u64,
    ) -> Result<(ClientHandshake, Vec<u8>), HandshakeError> {
        let (k, p, auto) = (client_key, server_pub, Ciphers::auto());
        Self::offering(k, p, session_id, path_id, now_unix_ms, &auto)
    }

    /// [`ClientHandshake::new`] offering `ciphers` for the packet keys.
    pub fn offering(
        client_key: &StaticKeypair,
        server_pub: &PublicKey,
        session_id: u64,
        path_id: u8,
        now_unix_ms: u64,
        ciphers: &Ciphers,
    ) -> Result<(ClientHandshake, Vec<u8>), HandshakeError> {
        let (k, p) = (client_key, server_pub);
        Self::with_prologue(k, p, session_id, path_id, now_unix_ms, PROLOGUE, ciphers)
    }

    fn with_prologue(
        client_key: &StaticKeypair,
        server_pub: &PublicKey,
        session_id: u64,
        path_id: u8,
        now_unix_ms: u64,
        prologue: &[u8],
        ciphers: &Ciphers,
    ) -> Result<(ClientHandshake, Vec<u8>), HandshakeError> {
        let mut state = keyed_builder(prologue, client_key)?
            .remote_public_key(&server_pub.0)
            .and_then(|b| b.build_initiator())
            .map_err(noise("setup"))?;
        let mut payload = Vec::with_capacity(PAYLOAD_LEN + 1 + MAX_OFFER);
        payload.extend_from_slice(&now_unix_ms.to_be_bytes());
        payload.extend_from_slice(&session_id.to_be_bytes());
        let offered: Vec<Cipher> = ciphers.as_slice().iter().take(MAX_OFFER).copied().collect();
        // ChaCha20-Poly1305 alone is what a message 1 without a list means: sent that way
        // it reaches servers that predate the negotiation.
        let legacy = offered == [Cipher::ChaCha20Poly1305];
        if !legacy {
            payload.push(offered.len() as u8);
            payload.extend(offered.iter().map(|c| c.id()));
        }
        let mut msg = [0u8; 256];
        let n = state
            .write_message(&payload, &mut msg)
            .map_err(noise("writing message 1"))?;
        let body = handshake_packet(session_id, path_id, &msg[..n])?;
        let mac1 = Mac1Key::new(server_pub).mac1(&body);
        let hs = ClientHandshake {
            state,
            offered,
            legacy,
            session_id,
            path_id,
            server_pub: *server_pub,
            body,
            mac1,
            cookie: None,
            server_address: None,
        };
        let packet = hs.message1();
        Ok((hs, packet))
    }

    /// Message 1 as a complete packet: header, Noise message, mac1, and mac2 (made with the
    /// cookie of the last accepted cookie reply, or zeros before any). Resend this, not the
    /// packet [`ClientHandshake::new`] returned, after a cookie reply.
    pub fn message1(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(self.body.len() + MACS_LEN);
        p.extend_from_slice(&self.body);
        p.extend_from_slice(&self.mac1);
        match &self.cookie {
            Some(c) => p.extend_from_slice(&cookie::mac2(c, &self.body, &self.mac1)),
            None => p.extend_from_slice(&[0; MAC_LEN]),
        }
        p
    }

    /// Take the server's cookie reply (a type 2 packet) to this handshake's message 1; on
    /// success [`ClientHandshake::message1`] carries mac2 from now on. A reply that fails
    /// changes nothing.
    pub fn handle_cookie_reply(&mut self, packet: &[u8]) -> Result<(), CookieError> {
        let mut m1 = self.body.clone();
        m1.extend_from_slice(&self.mac1);
        m1.extend_from_slice(&[0; MAC_LEN]);
        self.cookie = Some(cookie::open_cookie_reply(&self.server_pub, &m1, packet)?);
        Ok(())
    }

    /// The session this handshake is for.
    pub fn session_id(&self) -> u64 {
        self.session_id
    }

    /// The server's own unicast address, if its message 2 named one (a server behind a
    /// shared name, anycast address or load balancer): every path of the session goes
    /// there.
    pub fn server_address(&self) -> Option<std::net::SocketAddr> {
        self.server_address
    }

    /// The path message 1 is sent on.
    pub fn path_id(&self) -> u8 {
        self.path_id
    }

    /// Process the server's reply (message 2, a complete handshake packet) and return the
    /// session keys. A reply that fails leaves the handshake as it was, so a forged packet
    /// cannot abort it: the real reply can still be passed afterwards.
    pub fn finish(&mut self, packet: &[u8]) -> Result<SessionKeys, HandshakeError> {
        if self.state.is_handshake_finished() {
            return Err(HandshakeError::AlreadyFinished);
        }
        let (session_id, path_id, msg) = split_handshake_packet(packet)?;
        if session_id != self.session_id {
            return Err(HandshakeError::WrongSession {
                expected: self.session_id,
                got: session_id,
            });
        }
        if path_id != self.path_id {
            return Err(HandshakeError::WrongPath {
                expected: self.path_id,
                got: path_id,
            });
        }
        let mut payload = vec![0u8; msg.len().min(MAX_NOISE_MSG)];
        let n = self
            .state
            .read_message(msg, &mut payload)
            .map_err(noise("reading message 2"))?;
        // The message authenticated, so the state moved on: a payload that does not parse
        // is a server of another handshake version, not a forgery; it cannot go on.
        let (cipher, address) =
            decode_message2(&payload[..n]).ok_or(HandshakeError::BadPayload {
                message: 2,
                len: n,
                expected: if self.legacy { 0 } else { 2 },
            })?;
        let cipher = match (cipher, self.legacy) {
            (None, true) => Cipher::ChaCha20Poly1305,
            (Some(c), false) if self.offered.contains(&c) => c,
            (got, _) => {
                return Err(HandshakeError::CipherNotOffered {
                    got: got.map_or("none".into(), |c| c.name().into()),
                    offered: names(&self.offered),
                })
            }
        };
        self.server_address = address;
        if !self.state.is_handshake_finished() {
            return Err(HandshakeError::Noise {
                stage: "finishing",
                source: snow::Error::State(snow::error::StateProblem::HandshakeNotFinished),
            });
        }
        Ok(keys_from(&mut self.state, Role::Client, cipher))
    }

    /// The ciphers this handshake offers, most preferred first.
    pub fn offered(&self) -> &[Cipher] {
        &self.offered
    }
}

/// Message 2's payload: (the cipher item, the address item), each optional; None if the
/// items do not parse, repeat, or a cipher id is unknown.
fn decode_message2(mut b: &[u8]) -> Option<(Option<Cipher>, Option<std::net::SocketAddr>)> {
    let (mut cipher, mut address) = (None, None);
    while let Some(&tag) = b.first() {
        let len = match tag {
            CIPHER_ITEM => 2,
            4 => 7,
            6 => 19,
            _ => return None,
        };
        let item = b.get(..len)?;
        if tag == CIPHER_ITEM {
            if cipher.replace(Cipher::from_id(item[1])?).is_some() {
                return None;
            }
        } else if address.replace(decode_address(item)?).is_some() {
            return None;
        }
        b = &b[len..];
    }
    Some((cipher, address))
}

fn decode_address(b: &[u8]) -> Option<std::net::SocketAddr> {
    let port = |p: &[u8]| u16::from_be_bytes([p[0], p[1]]);
    match (b.first()?, b.len()) {
        (4, 7) => Some((<[u8; 4]>::try_from(&b[1..5]).ok()?, port(&b[5..])).into()),
        (6, 19) => Some((<[u8; 16]>::try_from(&b[1..17]).ok()?, port(&b[17..])).into()),
        _ => None,
    }
}

#[cfg(test)]
#[path = "handshake_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "handshake_cipher_tests.rs"]
mod cipher_tests;
