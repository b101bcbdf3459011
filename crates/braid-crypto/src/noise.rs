//! What both sides of the Noise IK handshake share: the prologue, the payload layout's
//! constants, [`HandshakeError`], the `snow` builder, handshake packet framing and turning
//! a finished handshake into session keys.
//!
//! Owns: those shared pieces, so that the client's side ([`crate::handshake`]) and the
//! server's ([`crate::responder`], [`crate::guard`]) import them from here rather than from
//! each other. Must not touch: either side's state machine, clocks, sockets or key files;
//! the Noise protocol name is [`crate::keys`]' (beside the keys it generates).

use crate::aead::{Cipher, Role, SessionKeys};
use crate::dh;
use crate::keys::{wipe, PublicKey, StaticKeypair, NOISE_PARAMS};
use braid_wire::{parse_header, write_header, HeaderError, PacketType};

/// The Noise prologue: both ends must use the same one or the handshake fails.
pub const PROLOGUE: &[u8] = b"braid v2";

/// Bytes of message 1's payload before the cipher list: timestamp and session id.
pub(crate) const PAYLOAD_LEN: usize = 16;

/// Most cipher ids in message 1's list.
pub(crate) const MAX_OFFER: usize = 8;

/// The tag of message 2's cipher item.
pub(crate) const CIPHER_ITEM: u8 = b'C';

/// Largest Noise message (the Noise specification's limit).
pub(crate) const MAX_NOISE_MSG: usize = 65_535;

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
    #[error("client key {0} is not in the authorized keys: if it is your agent's, add that line to the server's authorized file (agents.txt; /etc/braid/agents.txt in the package); the agent is told its key is not accepted")]
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
    /// The client offered no cipher the server accepts.
    #[error(
        "the agent offers the packet ciphers [{offered}] but this server accepts only \
         [{accepted}]: give both the same --cipher, or auto"
    )]
    NoCommonCipher {
        /// What the client offered (names, comma-separated).
        offered: String,
        /// What the server accepts.
        accepted: String,
    },
    /// The server chose a cipher the client did not offer, or none.
    #[error(
        "the server's message 2 names packet cipher {got}, but this agent offered only \
         [{offered}]: a server of another braid version or a broken server; the session \
         cannot start"
    )]
    CipherNotOffered {
        /// What the server named ("none" when message 2 had no cipher item).
        got: String,
        /// What the client offered.
        offered: String,
    },
    /// `finish` was called again after it succeeded.
    #[error("handshake already finished; the session keys were returned by the first successful `finish`")]
    AlreadyFinished,
}

pub(crate) fn noise(stage: &'static str) -> impl FnOnce(snow::Error) -> HandshakeError {
    move |source| HandshakeError::Noise { stage, source }
}

/// A snow builder for braid's Noise protocol with `prologue` and snow's own X25519
/// (curve25519-dalek), as braid's handshake was built before [`crate::dh`]: the tests make
/// an older peer with it (so they also check that the two backends interoperate).
#[cfg(test)]
pub(crate) fn builder(prologue: &[u8]) -> Result<snow::Builder<'_>, HandshakeError> {
    let params = NOISE_PARAMS.parse().map_err(noise("setup"))?;
    snow::Builder::new(params)
        .prologue(prologue)
        .map_err(noise("setup"))
}

/// [`builder`] with `key` as the local static key, its prepared X25519 form reused (snow
/// does not derive the public key again).
pub(crate) fn keyed_builder<'a>(
    prologue: &'a [u8],
    key: &'a StaticKeypair,
) -> Result<snow::Builder<'a>, HandshakeError> {
    snow::Builder::with_resolver(params()?, dh::resolver(key.prepared()))
        .prologue(prologue)
        .and_then(|b| b.local_private_key(key.private_bytes()))
        .map_err(noise("setup"))
}

/// [`NOISE_PARAMS`] parsed, once per process rather than once per handshake.
fn params() -> Result<snow::params::NoiseParams, HandshakeError> {
    static PARAMS: std::sync::OnceLock<snow::params::NoiseParams> = std::sync::OnceLock::new();
    if let Some(p) = PARAMS.get() {
        return Ok(p.clone());
    }
    let p: snow::params::NoiseParams = NOISE_PARAMS.parse().map_err(noise("setup"))?;
    Ok(PARAMS.get_or_init(|| p).clone())
}

/// A handshake packet: header (type 1, pn 0) and the Noise message.
pub(crate) fn handshake_packet(
    session_id: u64,
    path_id: u8,
    msg: &[u8],
) -> Result<Vec<u8>, HandshakeError> {
    let mut p = Vec::with_capacity(12 + msg.len());
    write_header(&mut p, PacketType::Handshake, session_id, path_id, 0)?;
    p.extend_from_slice(msg);
    Ok(p)
}

/// Check the header of a received handshake packet; returns (session id, path id, Noise
/// message).
pub(crate) fn split_handshake_packet(packet: &[u8]) -> Result<(u64, u8, &[u8]), HandshakeError> {
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

/// Turn the finished handshake into session keys of `cipher`, wiping the raw split.
pub(crate) fn keys_from(
    state: &mut snow::HandshakeState,
    role: Role,
    cipher: Cipher,
) -> SessionKeys {
    let mut split = state.dangerously_get_raw_split();
    let keys = SessionKeys::from_split_with(role, cipher, &split);
    wipe(&mut split.0);
    wipe(&mut split.1);
    keys
}

pub(crate) fn names(list: &[Cipher]) -> String {
    list.iter().map(|c| c.name()).collect::<Vec<_>>().join(", ")
}
