//! The Noise IK handshake (`Noise_IK_25519_ChaChaPoly_BLAKE2s`, prologue `braid v2`).
//!
//! Owns: building and checking the handshake packets, the client's proof of freshness (a
//! timestamp) and the server's refusal of unknown clients and replays (with a
//! [`ReplayGuard`]), the client's use of a cookie reply, and turning the finished handshake
//! into [`SessionKeys`].
//!
//! Must not touch: clocks (the caller passes unix time in milliseconds), sockets, key files
//! and transport packets. The Noise protocol itself is `snow`'s; the MACs and cookies are
//! [`crate::cookie`]'s.
//!
//! Packets (no AEAD tag is appended: Noise messages carry their own):
//!
//! ```text
//! message 1 (client -> server): header(type 1, session id, path id, pn 0) | Noise IK msg 1 (112 B)
//!                               | mac1 (16) | mac2 (16)
//!     its encrypted payload: timestamp (u64 BE, unix ms) | session id (u64 BE)
//! cookie reply (server -> client, only under load): see crate::cookie (56 B)
//! message 2 (server -> client): header(type 1, same session id and path id, pn 0) | Noise IK msg 2
//!     its payload: empty
//! ```
//!
//! The session id is repeated inside the encrypted payload so that the server only accepts
//! it together with the client's authentication (the header itself travels in the clear).
//!
//! Freshness: the server refuses a message 1 whose timestamp is more than `max_skew_ms` away
//! from its own clock, and the [`ReplayGuard`] refuses one whose timestamp is not newer
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

use crate::aead::{Role, SessionKeys};
use crate::cookie::{self, CookieError, Mac1Key, COOKIE_LEN, MACS_LEN, MAC_LEN};
use crate::guard::ReplayGuard;
use crate::header::{parse_header, write_header, HeaderError, PacketType};
use crate::keys::{wipe, PublicKey, StaticKeypair};

/// The Noise protocol name.
pub const NOISE_PARAMS: &str = "Noise_IK_25519_ChaChaPoly_BLAKE2s";

/// The Noise prologue: both ends must use the same one or the handshake fails.
pub const PROLOGUE: &[u8] = b"braid v2";

/// Bytes of message 1's payload: timestamp and session id.
const PAYLOAD_LEN: usize = 16;

/// Largest Noise message (the Noise specification's limit).
const MAX_NOISE_MSG: usize = 65_535;

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// The packet header does not parse.
    #[error("handshake packet: {0}")]
    Header(#[from] HeaderError),
    /// A transport packet where a handshake packet was expected.
    #[error(
        "expected a handshake packet (type 1) but got a transport packet (type 0); \
         transport packets go to `PacketKey::open_in_place`"
    )]
    NotHandshake,
    /// Message 1 without a valid mac1: not made for this server's public key.
    #[error(
        "handshake message 1 has no valid mac1: it was not made for this server's public \
         key (random bytes, a scan, another server key or an older braid version): drop it"
    )]
    Mac1,
    /// Handshake packets always carry packet number 0.
    #[error("handshake packet carries packet number {0}, but braid handshake packets always carry 0: drop it")]
    PacketNumber(u64),
    /// The reply names a different session than the one this client started.
    #[error("handshake reply is for session {got:#018x}, this handshake is for session {expected:#018x}: drop it")]
    WrongSession {
        /// The client's session id.
        expected: u64,
        /// The id in the reply.
        got: u64,
    },
    /// The reply came for a different path than message 1 was sent on.
    #[error("handshake reply is for path {got}, message 1 was sent on path {expected}: drop it")]
    WrongPath {
        /// The path message 1 went on.
        expected: u8,
        /// The path in the reply.
        got: u8,
    },
    /// Noise refused the message (wrong key, wrong prologue, corrupted or forged bytes).
    #[error(
        "Noise IK {stage} failed ({source}): the peer uses another server key, another \
         prologue or protocol version, or the packet was corrupted or forged"
    )]
    Noise {
        /// What was being done.
        stage: &'static str,
        /// snow's error.
        #[source]
        source: snow::Error,
    },
    /// The client authenticated with a key that is not authorized.
    #[error("client key {0} is not in the authorized keys; add it to the authorized file to let this client connect")]
    UnknownClient(PublicKey),
    /// The decrypted payload has the wrong size.
    #[error(
        "handshake message {message} carries a {len}-byte payload, expected {expected}: \
         the peer speaks another version of the braid handshake"
    )]
    BadPayload {
        /// 1 or 2.
        message: u8,
        /// What it carried.
        len: usize,
        /// What braid v2 sends.
        expected: usize,
    },
    /// The session id in the clear header differs from the authenticated one.
    #[error(
        "handshake header names session {header:#018x} but the authenticated payload names \
         {payload:#018x}: the header was altered in transit, drop the packet"
    )]
    SessionMismatch {
        /// The id in the header.
        header: u64,
        /// The id in the encrypted payload.
        payload: u64,
    },
    /// The client's clock and the server's differ by more than allowed.
    #[error(
        "handshake timestamp {timestamp_ms} ms is {} ms away from the server's clock \
         ({now_ms} ms), more than the allowed {max_skew_ms} ms: an old replayed \
         handshake, or a client or server clock that is off (check NTP)",
        timestamp_ms.abs_diff(*now_ms)
    )]
    ClockSkew {
        /// The client's timestamp.
        timestamp_ms: u64,
        /// The server's clock.
        now_ms: u64,
        /// The allowed difference.
        max_skew_ms: u64,
    },
    /// The timestamp is not newer than one already accepted from this client.
    #[error(
        "handshake from client {client} replayed or out of order: timestamp {timestamp_ms} \
         is not newer than {newest_ms} already accepted; the client must start a new \
         handshake with a fresh timestamp"
    )]
    Replayed {
        /// The client key.
        client: PublicKey,
        /// The timestamp in this handshake.
        timestamp_ms: u64,
        /// The newest accepted before.
        newest_ms: u64,
    },
    /// `finish` was called again after it succeeded.
    #[error("handshake already finished; the session keys were returned by the first successful `finish`")]
    AlreadyFinished,
}

fn noise(stage: &'static str) -> impl FnOnce(snow::Error) -> HandshakeError {
    move |source| HandshakeError::Noise { stage, source }
}

fn builder(prologue: &[u8]) -> Result<snow::Builder<'_>, HandshakeError> {
    let params = NOISE_PARAMS.parse().map_err(noise("setup"))?;
    snow::Builder::new(params)
        .prologue(prologue)
        .map_err(noise("setup"))
}

/// A handshake packet: header (type 1, pn 0) and the Noise message.
fn handshake_packet(session_id: u64, path_id: u8, msg: &[u8]) -> Result<Vec<u8>, HandshakeError> {
    let mut p = Vec::with_capacity(12 + msg.len());
    write_header(&mut p, PacketType::Handshake, session_id, path_id, 0)?;
    p.extend_from_slice(msg);
    Ok(p)
}

/// Check the header of a received handshake packet; returns (session id, path id, Noise
/// message).
fn split_handshake_packet(packet: &[u8]) -> Result<(u64, u8, &[u8]), HandshakeError> {
    let h = parse_header(packet)?;
    if h.ptype != PacketType::Handshake {
        return Err(HandshakeError::NotHandshake);
    }
    if h.packet_number != 0 {
        return Err(HandshakeError::PacketNumber(h.packet_number));
    }
    let msg = packet.get(h.header_len..).unwrap_or_default();
    Ok((h.session_id, h.path_id, msg))
}

/// Turn the finished handshake into session keys, wiping the raw split.
fn keys_from(state: &mut snow::HandshakeState, role: Role) -> SessionKeys {
    let mut split = state.dangerously_get_raw_split();
    let keys = SessionKeys::from_split(role, &split);
    wipe(&mut split.0);
    wipe(&mut split.1);
    keys
}

/// The client's side of a handshake in progress.
pub struct ClientHandshake {
    state: snow::HandshakeState,
    session_id: u64,
    path_id: u8,
    server_pub: PublicKey,
    /// Header and Noise message of message 1, then its mac1.
    body: Vec<u8>,
    mac1: [u8; MAC_LEN],
    /// The cookie of the server's last cookie reply, if any.
    cookie: Option<[u8; COOKIE_LEN]>,
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
    /// Returns the handshake state and message 1 as a complete handshake packet.
    pub fn new(
        client_key: &StaticKeypair,
        server_pub: &PublicKey,
        session_id: u64,
        path_id: u8,
        now_unix_ms: u64,
    ) -> Result<(ClientHandshake, Vec<u8>), HandshakeError> {
        Self::with_prologue(
            client_key,
            server_pub,
            session_id,
            path_id,
            now_unix_ms,
            PROLOGUE,
        )
    }

    fn with_prologue(
        client_key: &StaticKeypair,
        server_pub: &PublicKey,
        session_id: u64,
        path_id: u8,
        now_unix_ms: u64,
        prologue: &[u8],
    ) -> Result<(ClientHandshake, Vec<u8>), HandshakeError> {
        let mut state = builder(prologue)?
            .local_private_key(client_key.private_bytes())
            .and_then(|b| b.remote_public_key(&server_pub.0))
            .and_then(|b| b.build_initiator())
            .map_err(noise("setup"))?;
        let mut payload = [0u8; PAYLOAD_LEN];
        payload[..8].copy_from_slice(&now_unix_ms.to_be_bytes());
        payload[8..].copy_from_slice(&session_id.to_be_bytes());
        let mut msg = [0u8; 256];
        let n = state
            .write_message(&payload, &mut msg)
            .map_err(noise("writing message 1"))?;
        let body = handshake_packet(session_id, path_id, &msg[..n])?;
        let mac1 = Mac1Key::new(server_pub).mac1(&body);
        let hs = ClientHandshake {
            state,
            session_id,
            path_id,
            server_pub: *server_pub,
            body,
            mac1,
            cookie: None,
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
        if n != 0 {
            // The message authenticated, so the state moved on: this is a server of
            // another handshake version, not a forgery; the handshake cannot go on.
            return Err(HandshakeError::BadPayload {
                message: 2,
                len: n,
                expected: 0,
            });
        }
        if !self.state.is_handshake_finished() {
            return Err(HandshakeError::Noise {
                stage: "finishing",
                source: snow::Error::State(snow::error::StateProblem::HandshakeNotFinished),
            });
        }
        Ok(keys_from(&mut self.state, Role::Client))
    }
}

/// The server's side: one call per message 1 (the server keeps no handshake state).
#[derive(Debug, Clone, Copy)]
pub struct ServerHandshake;

impl ServerHandshake {
    /// Answer message 1 (`packet`, a complete handshake packet). Checks, in order: the
    /// header, mac1 (cheap: do any load or mac2 checks of [`crate::CookieChecker`] before
    /// calling this), the Noise message (server key and prologue; one X25519), that the
    /// client's key is in `authorized` (one more X25519), the payload, that the timestamp
    /// is within `max_skew_ms` of `now_unix_ms`, and that `guard` has seen no newer
    /// timestamp from this client; only then is message 2 built (two more X25519) and the
    /// guard updated. Returns the client's key, the session keys and message 2 as a
    /// complete handshake packet to send back on the same path.
    pub fn respond(
        server_key: &StaticKeypair,
        authorized: &[PublicKey],
        guard: &mut ReplayGuard,
        packet: &[u8],
        now_unix_ms: u64,
        max_skew_ms: u64,
    ) -> Result<(PublicKey, SessionKeys, Vec<u8>), HandshakeError> {
        let (session_id, path_id, msg) = split_handshake_packet(packet)?;
        if !Mac1Key::new(&server_key.public()).check(packet) {
            return Err(HandshakeError::Mac1);
        }
        let msg = msg
            .len()
            .checked_sub(MACS_LEN)
            .and_then(|n| msg.get(..n))
            .ok_or(HandshakeError::Mac1)?;
        let mut state = builder(PROLOGUE)?
            .local_private_key(server_key.private_bytes())
            .and_then(|b| b.build_responder())
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
        if !authorized.contains(&client) {
            return Err(HandshakeError::UnknownClient(client));
        }
        let payload: [u8; PAYLOAD_LEN] =
            payload
                .get(..n)
                .and_then(|p| p.try_into().ok())
                .ok_or(HandshakeError::BadPayload {
                    message: 1,
                    len: n,
                    expected: PAYLOAD_LEN,
                })?;
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&payload[..8]);
        let timestamp_ms = u64::from_be_bytes(ts);
        let mut sid = [0u8; 8];
        sid.copy_from_slice(&payload[8..]);
        let payload_sid = u64::from_be_bytes(sid);
        if payload_sid != session_id {
            return Err(HandshakeError::SessionMismatch {
                header: session_id,
                payload: payload_sid,
            });
        }
        if timestamp_ms.abs_diff(now_unix_ms) > max_skew_ms {
            return Err(HandshakeError::ClockSkew {
                timestamp_ms,
                now_ms: now_unix_ms,
                max_skew_ms,
            });
        }
        // A replay costs no more Diffie-Hellman than this.
        guard.check(&client, timestamp_ms)?;
        // Build the reply before recording the timestamp, so a failure leaves the guard as
        // it was.
        let mut reply = [0u8; 256];
        let m = state
            .write_message(&[], &mut reply)
            .map_err(noise("writing message 2"))?;
        let packet = handshake_packet(session_id, path_id, &reply[..m])?;
        guard.check_and_record(&client, timestamp_ms)?;
        let keys = keys_from(&mut state, Role::Server);
        Ok((client, keys, packet))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aead::TAG_LEN;

    const NOW: u64 = 1_700_000_000_000;
    const SKEW: u64 = 30_000;

    struct World {
        server: StaticKeypair,
        client: StaticKeypair,
        authorized: Vec<PublicKey>,
        guard: ReplayGuard,
    }

    fn world() -> World {
        let server = StaticKeypair::generate().unwrap();
        let client = StaticKeypair::generate().unwrap();
        let other = StaticKeypair::generate().unwrap();
        let authorized = vec![other.public(), client.public()];
        World {
            server,
            client,
            authorized,
            guard: ReplayGuard::new(),
        }
    }

    impl World {
        fn respond(
            &mut self,
            packet: &[u8],
            now: u64,
        ) -> Result<(PublicKey, SessionKeys, Vec<u8>), HandshakeError> {
            ServerHandshake::respond(
                &self.server,
                &self.authorized,
                &mut self.guard,
                packet,
                now,
                SKEW,
            )
        }
    }

    /// `packet` with its mac1 made again for `server` (an attacker who altered the header
    /// can do this: mac1 is keyed by the public key).
    fn remac(server: &PublicKey, packet: &[u8]) -> Vec<u8> {
        let mut p = packet.to_vec();
        let at = p.len() - 32;
        let mac = Mac1Key::new(server).mac1(&p[..at]);
        p[at..at + 16].copy_from_slice(&mac);
        p
    }

    /// Keys match when what one end seals the other opens, both ways.
    fn assert_keys_match(a: &SessionKeys, b: &SessionKeys) {
        for (from, to) in [(a, b), (b, a)] {
            let mut p = Vec::new();
            let hl = write_header(&mut p, PacketType::Transport, 42, 1, 9).unwrap();
            p.extend_from_slice(b"stream frames here");
            p.extend_from_slice(&[0; TAG_LEN]);
            let orig = p.clone();
            from.send.seal_in_place(&mut p, hl).unwrap();
            to.recv.open_in_place(&mut p, hl).unwrap();
            assert_eq!(p[..p.len() - TAG_LEN], orig[..orig.len() - TAG_LEN]);
            // And not with the key of the wrong direction.
            let mut q = orig.clone();
            from.send.seal_in_place(&mut q, hl).unwrap();
            assert!(from.recv.open_in_place(&mut q, hl).is_err());
        }
    }

    #[test]
    fn full_handshake_gives_matching_keys() {
        let mut w = world();
        let (mut ch, m1) =
            ClientHandshake::new(&w.client, &w.server.public(), 0xabcd, 3, NOW).unwrap();
        let h1 = parse_header(&m1).unwrap();
        assert_eq!(
            (
                h1.ptype,
                h1.session_id,
                h1.path_id,
                h1.packet_number,
                h1.header_len
            ),
            (PacketType::Handshake, 0xabcd, 3, 0, 12)
        );
        let (client_pub, server_keys, m2) = w.respond(&m1, NOW + 5).unwrap();
        assert_eq!(client_pub, w.client.public());
        let h2 = parse_header(&m2).unwrap();
        assert_eq!((h2.session_id, h2.path_id), (0xabcd, 3));
        let client_keys = ch.finish(&m2).unwrap();
        assert_keys_match(&client_keys, &server_keys);
        assert!(matches!(
            ch.finish(&m2),
            Err(HandshakeError::AlreadyFinished)
        ));
        assert_eq!(w.guard.newest(&client_pub), Some(NOW));
    }

    #[test]
    fn two_handshakes_give_different_keys() {
        let mut w = world();
        let (mut c1, m1) = ClientHandshake::new(&w.client, &w.server.public(), 1, 0, NOW).unwrap();
        let (_, s1, r1) = w.respond(&m1, NOW).unwrap();
        let k1 = c1.finish(&r1).unwrap();
        let (mut c2, m2) =
            ClientHandshake::new(&w.client, &w.server.public(), 1, 0, NOW + 1).unwrap();
        let (_, s2, r2) = w.respond(&m2, NOW).unwrap();
        let k2 = c2.finish(&r2).unwrap();
        assert_keys_match(&k1, &s1);
        assert_keys_match(&k2, &s2);
        let mut p = Vec::new();
        let hl = write_header(&mut p, PacketType::Transport, 1, 0, 0).unwrap();
        p.extend_from_slice(&[0; 20 + TAG_LEN]);
        k1.send.seal_in_place(&mut p, hl).unwrap();
        assert!(s2.recv.open_in_place(&mut p, hl).is_err());
    }

    #[test]
    fn unknown_client_refused() {
        let mut w = world();
        let stranger = StaticKeypair::generate().unwrap();
        let (_, m1) = ClientHandshake::new(&stranger, &w.server.public(), 7, 0, NOW).unwrap();
        match w.respond(&m1, NOW) {
            Err(HandshakeError::UnknownClient(k)) => {
                assert_eq!(k, stranger.public());
                let msg = HandshakeError::UnknownClient(k).to_string();
                assert!(
                    msg.contains(&k.to_base64()) && msg.contains("authorized"),
                    "{msg}"
                );
            }
            other => panic!("expected UnknownClient, got {other:?}"),
        }
        assert_eq!(w.guard.newest(&stranger.public()), None);
    }

    #[test]
    fn wrong_server_key_refused() {
        let mut w = world();
        let impostor = StaticKeypair::generate().unwrap();
        // The client believes the server's key is `impostor`: mac1 is wrong for the real
        // server, and with a mac1 made right the Noise message still does not open.
        let (_, m1) = ClientHandshake::new(&w.client, &impostor.public(), 7, 0, NOW).unwrap();
        assert!(matches!(w.respond(&m1, NOW), Err(HandshakeError::Mac1)));
        assert!(matches!(
            w.respond(&remac(&w.server.public(), &m1), NOW),
            Err(HandshakeError::Noise { .. })
        ));
        // A server answering with another key than the client expects: the client refuses.
        let (mut ch, m1) =
            ClientHandshake::new(&w.client, &impostor.public(), 8, 0, NOW + 1).unwrap();
        let mut imp = World {
            server: impostor,
            client: StaticKeypair::generate().unwrap(),
            authorized: w.authorized.clone(),
            guard: ReplayGuard::new(),
        };
        let (_, _, good_reply) = imp.respond(&m1, NOW).unwrap();
        // Message 2 produced by the real server for another message 1 does not finish it.
        let (_, m1b) = ClientHandshake::new(&w.client, &w.server.public(), 8, 0, NOW + 2).unwrap();
        let (_, _, other_reply) = w.respond(&m1b, NOW).unwrap();
        assert!(matches!(
            ch.finish(&other_reply),
            Err(HandshakeError::Noise { .. })
        ));
        // The failure did not spoil the handshake: the right reply still works.
        ch.finish(&good_reply).unwrap();
    }

    #[test]
    fn wrong_prologue_refused() {
        let mut w = world();
        let (_, m1) =
            ClientHandshake::with_prologue(&w.client, &w.server.public(), 7, 0, NOW, b"braid v1")
                .unwrap();
        let e = w.respond(&m1, NOW).unwrap_err();
        assert!(matches!(e, HandshakeError::Noise { .. }), "{e:?}");
        assert!(e.to_string().contains("prologue"), "{e}");
    }

    #[test]
    fn replayed_handshake_refused() {
        let mut w = world();
        let (_, m1) = ClientHandshake::new(&w.client, &w.server.public(), 7, 0, NOW).unwrap();
        w.respond(&m1, NOW).unwrap();
        let e = w.respond(&m1, NOW + 10).unwrap_err();
        assert!(
            matches!(
                e,
                HandshakeError::Replayed {
                    timestamp_ms: NOW,
                    newest_ms: NOW,
                    ..
                }
            ),
            "{e:?}"
        );
        // An older (but within skew) fresh handshake is refused too; a newer one is fine.
        let (_, old) = ClientHandshake::new(&w.client, &w.server.public(), 8, 0, NOW - 1).unwrap();
        assert!(matches!(
            w.respond(&old, NOW),
            Err(HandshakeError::Replayed { .. })
        ));
        let (_, new) = ClientHandshake::new(&w.client, &w.server.public(), 8, 0, NOW + 1).unwrap();
        w.respond(&new, NOW).unwrap();
        assert_eq!(w.guard.newest(&w.client.public()), Some(NOW + 1));
    }

    #[test]
    fn clock_skew_refused_and_guard_untouched() {
        let mut w = world();
        for ts in [NOW - SKEW - 1, NOW + SKEW + 1] {
            let (_, m1) = ClientHandshake::new(&w.client, &w.server.public(), 7, 0, ts).unwrap();
            let e = w.respond(&m1, NOW).unwrap_err();
            assert!(matches!(e, HandshakeError::ClockSkew { .. }), "{e:?}");
            assert!(e.to_string().contains("NTP"), "{e}");
        }
        assert_eq!(w.guard.newest(&w.client.public()), None);
        for ts in [NOW - SKEW, NOW + SKEW] {
            let (_, m1) = ClientHandshake::new(&w.client, &w.server.public(), 7, 0, ts).unwrap();
            w.respond(&m1, NOW).unwrap();
        }
    }

    #[test]
    fn altered_header_refused() {
        let mut w = world();
        let (mut ch, m1) = ClientHandshake::new(&w.client, &w.server.public(), 7, 2, NOW).unwrap();
        // Session id changed in the clear header: mac1 fails; with mac1 made again for the
        // altered header, the authenticated payload disagrees.
        let mut bad = m1.clone();
        bad[9] ^= 1;
        assert!(matches!(w.respond(&bad, NOW), Err(HandshakeError::Mac1)));
        assert!(matches!(
            w.respond(&remac(&w.server.public(), &bad), NOW),
            Err(HandshakeError::SessionMismatch { .. })
        ));
        let mut bad = m1.clone();
        bad[1] = 0;
        assert!(matches!(
            w.respond(&bad, NOW),
            Err(HandshakeError::NotHandshake)
        ));
        let (_, _, m2) = w.respond(&m1, NOW).unwrap();
        let mut bad = m2.clone();
        bad[9] ^= 1;
        assert!(matches!(
            ch.finish(&bad),
            Err(HandshakeError::WrongSession { .. })
        ));
        let mut bad = m2.clone();
        bad[10] = 5;
        assert!(matches!(
            ch.finish(&bad),
            Err(HandshakeError::WrongPath {
                expected: 2,
                got: 5
            })
        ));
        ch.finish(&m2).unwrap();
    }

    #[test]
    fn any_corrupted_byte_of_message_1_refused() {
        let mut w = world();
        let (_, m1) = ClientHandshake::new(&w.client, &w.server.public(), 7, 0, NOW).unwrap();
        // Every byte but mac2 (the server's load check, which `respond` ignores).
        for i in 0..m1.len() - 16 {
            let mut bad = m1.clone();
            bad[i] ^= 0x20;
            assert!(w.respond(&bad, NOW).is_err(), "byte {i}");
        }
        for cut in 0..m1.len() {
            assert!(w.respond(&m1[..cut], NOW).is_err(), "cut {cut}");
        }
        w.respond(&m1, NOW).unwrap();
    }

    #[test]
    fn message_1_without_valid_mac1_refused_before_noise() {
        let mut w = world();
        let (_, m1) = ClientHandshake::new(&w.client, &w.server.public(), 7, 0, NOW).unwrap();
        let at = m1.len() - 32;
        for i in at..at + 16 {
            let mut bad = m1.clone();
            bad[i] ^= 1;
            assert!(
                matches!(w.respond(&bad, NOW), Err(HandshakeError::Mac1)),
                "mac1 byte {}",
                i - at
            );
        }
        // mac1 covers the clear header too (the path id the reply echoes).
        let mut bad = m1.clone();
        bad[10] ^= 1;
        assert!(matches!(w.respond(&bad, NOW), Err(HandshakeError::Mac1)));
        assert_eq!(w.guard.newest(&w.client.public()), None);
        w.respond(&m1, NOW).unwrap();
    }

    #[test]
    fn cookie_reply_gives_message_1_a_mac2_and_keeps_the_noise_part() {
        let mut w = world();
        let (mut ch, m1) = ClientHandshake::new(&w.client, &w.server.public(), 7, 1, NOW).unwrap();
        assert_eq!(m1.len(), 12 + 112 + 32);
        assert_eq!(ch.message1(), m1);
        assert_eq!(&m1[m1.len() - 16..], &[0u8; 16], "no mac2 before a cookie");
        let from: std::net::SocketAddr = "198.51.100.1:5000".parse().unwrap();
        let mut checker = crate::cookie::CookieChecker::new(&w.server.public(), 0).unwrap();
        assert!(checker.check_mac1(&m1));
        assert!(!checker.check_mac2(&m1, from, 0));
        let reply = checker.cookie_reply(&m1, from, 0).unwrap();
        // A forged cookie reply changes nothing.
        let mut forged = reply.clone();
        forged[30] ^= 1;
        assert!(ch.handle_cookie_reply(&forged).is_err());
        assert_eq!(ch.message1(), m1);
        ch.handle_cookie_reply(&reply).unwrap();
        let m1c = ch.message1();
        assert_eq!(m1c[..m1c.len() - 16], m1[..m1.len() - 16]);
        assert!(checker.check_mac1(&m1c) && checker.check_mac2(&m1c, from, 1));
        let (_, server_keys, m2) = w.respond(&m1c, NOW).unwrap();
        let client_keys = ch.finish(&m2).unwrap();
        assert_keys_match(&client_keys, &server_keys);
    }
}
