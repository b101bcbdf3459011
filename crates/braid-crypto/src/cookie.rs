//! The cheap checks in front of the handshake's Diffie-Hellman: mac1, mac2 and cookies (as
//! WireGuard's, built from `ring`'s HMAC-SHA256 and ChaCha20-Poly1305).
//!
//! Owns: the 32-byte MAC trailer of handshake message 1 (`mac1 | mac2`), the server's
//! [`CookieChecker`] (checks mac1 and mac2, makes cookies bound to a source address from a
//! secret that changes every two minutes, and seals cookie replies), and the client's side
//! of it ([`Mac1Key`], [`open_cookie_reply`], [`mac2`]). Must not touch: the Noise
//! handshake (see [`crate::handshake`]), rate limits and load decisions (the server's),
//! sockets and clocks (the time is passed in).
//!
//! ```text
//! message 1:     header(type 1) | Noise IK message 1 (112-123 B) | mac1 (16) | mac2 (16)
//!   mac1 = HMAC-SHA256(SHA-256("braid mac1 v2" | server public key), header | Noise msg)[..16]
//!   mac2 = HMAC-SHA256(cookie, header | Noise msg | mac1)[..16], or 16 zero bytes
//! cookie reply:  header(type 2, session id and path id of message 1, pn 0) | nonce (12) |
//!                ChaCha20-Poly1305(key = SHA-256("braid cookie v2" | server public key),
//!                                  aad = mac1 of message 1, cookie (16)) (32 B)
//!   cookie = HMAC-SHA256(secret, source IP (16, v4 mapped) | source port (2 BE))[..16]
//! ```
//!
//! mac1 proves only that the sender knows the server's public key, so random datagrams and
//! port scans are dropped for the price of one HMAC, before any Diffie-Hellman. mac2
//! proves that the sender can receive at its source address: the server demands it only
//! when it is under load. The cookie reply (56 bytes) is smaller than message 1 (156-167 bytes),
//! so it cannot amplify a spoofed flood.
//!
//! No-panic contract: every function taking bytes from the network returns an error or
//! `false` for anything malformed.

use std::net::SocketAddr;

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::digest::{digest, SHA256};
use ring::hmac;

use crate::keys::{wipe, PublicKey};
use crate::random::{self, RandomError};
use braid_wire::{parse_header, write_header, PacketType};

/// Bytes of one MAC.
pub const MAC_LEN: usize = 16;
/// Bytes of the MAC trailer of message 1 (mac1 and mac2).
pub const MACS_LEN: usize = 2 * MAC_LEN;
/// Bytes of a cookie.
pub const COOKIE_LEN: usize = 16;
/// Bytes of a cookie reply packet: header (12), nonce (12), sealed cookie (16 + 16).
pub const COOKIE_REPLY_LEN: usize = 12 + NONCE_LEN + COOKIE_LEN + 16;
/// How long one cookie secret is used, in ms; cookies made with it and with the one before
/// are accepted, so a cookie lives two to four minutes.
pub const SECRET_LIFETIME_MS: u64 = 120_000;

/// Why a cookie reply was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CookieError {
    /// Not a cookie reply of the right size.
    #[error(
        "not a braid cookie reply: expected {COOKIE_REPLY_LEN} bytes of type 2, got {len} \
         bytes: drop it"
    )]
    Malformed {
        /// The packet's length.
        len: usize,
    },
    /// It names another session or path than the message 1 it should answer.
    #[error("cookie reply names another session or path than this handshake: drop it")]
    WrongSession,
    /// It does not decrypt: another server key, or not an answer to our message 1.
    #[error(
        "cookie reply failed authentication: it was not made by this server for our \
         message 1 (forged, or another server key): drop it"
    )]
    Authentication,
}

fn hmac16(key: &hmac::Key, parts: &[&[u8]]) -> [u8; MAC_LEN] {
    let mut ctx = hmac::Context::with_key(key);
    for p in parts {
        ctx.update(p);
    }
    let tag = ctx.sign();
    let mut out = [0u8; MAC_LEN];
    out.copy_from_slice(&tag.as_ref()[..MAC_LEN]);
    out
}

/// Compare without an early exit (the time must not tell how many bytes matched).
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn derive(label: &[u8], server_pub: &PublicKey) -> [u8; 32] {
    let mut input = Vec::with_capacity(label.len() + 32);
    input.extend_from_slice(label);
    input.extend_from_slice(&server_pub.0);
    let d = digest(&SHA256, &input);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

fn cookie_aead(server_pub: &PublicKey) -> LessSafeKey {
    let mut raw = derive(b"braid cookie v2", server_pub);
    let key = match UnboundKey::new(&CHACHA20_POLY1305, &raw) {
        Ok(k) => LessSafeKey::new(k),
        Err(_) => unreachable!("ChaCha20-Poly1305 accepts any 32-byte key"),
    };
    wipe(&mut raw);
    key
}

/// Split a message 1 into (header and Noise message, mac1, mac2); `None` when it is too
/// short to hold the trailer.
pub(crate) fn split_macs(packet: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let body_len = packet.len().checked_sub(MACS_LEN)?;
    let (body, macs) = packet.split_at(body_len);
    let (mac1, mac2) = macs.split_at(MAC_LEN);
    Some((body, mac1, mac2))
}

/// The key of mac1, derived from the server's public key (both ends know it).
#[derive(Clone)]
pub struct Mac1Key(hmac::Key);

impl std::fmt::Debug for Mac1Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Mac1Key(..)")
    }
}

impl Mac1Key {
    /// The mac1 key for the server whose public key is `server_pub`.
    pub fn new(server_pub: &PublicKey) -> Mac1Key {
        Mac1Key(hmac::Key::new(
            hmac::HMAC_SHA256,
            &derive(b"braid mac1 v2", server_pub),
        ))
    }

    /// mac1 of `body` (header and Noise message).
    pub fn mac1(&self, body: &[u8]) -> [u8; MAC_LEN] {
        hmac16(&self.0, &[body])
    }

    /// True when the message 1 `packet` carries a valid mac1.
    pub fn check(&self, packet: &[u8]) -> bool {
        split_macs(packet).is_some_and(|(body, mac1, _)| ct_eq(&self.mac1(body), mac1))
    }
}

/// mac2 of a message 1 whose header and Noise message are `body` and whose mac1 is `mac1`,
/// for `cookie`.
pub fn mac2(cookie: &[u8; COOKIE_LEN], body: &[u8], mac1: &[u8]) -> [u8; MAC_LEN] {
    let key = hmac::Key::new(hmac::HMAC_SHA256, cookie);
    hmac16(&key, &[body, mac1])
}

/// The client's reading of a cookie reply to its message 1 (`message1`, as sent): checks
/// the header against message 1 and decrypts the cookie.
pub fn open_cookie_reply(
    server_pub: &PublicKey,
    message1: &[u8],
    reply: &[u8],
) -> Result<[u8; COOKIE_LEN], CookieError> {
    let malformed = CookieError::Malformed { len: reply.len() };
    let h = parse_header(reply).map_err(|_| malformed.clone())?;
    if h.ptype != PacketType::Cookie
        || h.header_len != 12
        || h.packet_number != 0
        || reply.len() != COOKIE_REPLY_LEN
    {
        return Err(malformed);
    }
    let m = parse_header(message1).map_err(|_| CookieError::WrongSession)?;
    if (m.session_id, m.path_id) != (h.session_id, h.path_id) {
        return Err(CookieError::WrongSession);
    }
    let (_, mac1, _) = split_macs(message1).ok_or(CookieError::WrongSession)?;
    let mut nonce = [0u8; NONCE_LEN];
    nonce.copy_from_slice(&reply[12..12 + NONCE_LEN]);
    let mut sealed = reply[12 + NONCE_LEN..].to_vec();
    let plain = cookie_aead(server_pub)
        .open_in_place(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(mac1),
            &mut sealed,
        )
        .map_err(|_| CookieError::Authentication)?;
    let mut cookie = [0u8; COOKIE_LEN];
    cookie.copy_from_slice(plain);
    Ok(cookie)
}

/// The server's checks in front of the handshake: mac1, and under load mac2 with cookies
/// bound to the source address.
pub struct CookieChecker {
    mac1: Mac1Key,
    aead: LessSafeKey,
    /// The current cookie secret and when it was made (ms, the caller's clock).
    secret: hmac::Key,
    secret_born_ms: u64,
    /// The one before, still accepted.
    previous: Option<hmac::Key>,
}

impl std::fmt::Debug for CookieChecker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CookieChecker")
            .field("secret_born_ms", &self.secret_born_ms)
            .finish_non_exhaustive()
    }
}

fn fresh_secret() -> Result<hmac::Key, RandomError> {
    let mut raw = [0u8; 32];
    random::fill(&mut raw)?;
    let key = hmac::Key::new(hmac::HMAC_SHA256, &raw);
    wipe(&mut raw);
    Ok(key)
}

fn address_bytes(from: SocketAddr) -> [u8; 18] {
    let ip = match from {
        SocketAddr::V4(a) => a.ip().to_ipv6_mapped(),
        SocketAddr::V6(a) => *a.ip(),
    };
    let mut b = [0u8; 18];
    b[..16].copy_from_slice(&ip.octets());
    b[16..].copy_from_slice(&from.port().to_be_bytes());
    b
}

impl CookieChecker {
    /// The checker of the server whose public key is `server_pub`; the first cookie secret
    /// (from the system CSPRNG) is born at `now_ms`.
    pub fn new(server_pub: &PublicKey, now_ms: u64) -> Result<CookieChecker, RandomError> {
        Ok(CookieChecker {
            mac1: Mac1Key::new(server_pub),
            aead: cookie_aead(server_pub),
            secret: fresh_secret()?,
            secret_born_ms: now_ms,
            previous: None,
        })
    }

    /// True when the message 1 `packet` carries a valid mac1 (one HMAC; do this first).
    pub fn check_mac1(&self, packet: &[u8]) -> bool {
        self.mac1.check(packet)
    }

    /// Replace the secret when it is older than [`SECRET_LIFETIME_MS`].
    fn rotate(&mut self, now_ms: u64) -> Result<(), RandomError> {
        if now_ms.saturating_sub(self.secret_born_ms) >= SECRET_LIFETIME_MS {
            let next = fresh_secret()?;
            let old = std::mem::replace(&mut self.secret, next);
            // A secret two lifetimes old is dropped with the one before it.
            self.previous = (now_ms.saturating_sub(self.secret_born_ms) < 2 * SECRET_LIFETIME_MS)
                .then_some(old);
            self.secret_born_ms = now_ms;
        }
        Ok(())
    }

    /// The cookie of source address `from` under the current secret.
    fn cookie(&self, key: &hmac::Key, from: SocketAddr) -> [u8; COOKIE_LEN] {
        hmac16(key, &[&address_bytes(from)])
    }

    /// True when the message 1 `packet` from `from` carries a mac2 made with a cookie this
    /// server gave `from` in the last two secret lifetimes. Check mac1 first.
    pub fn check_mac2(&mut self, packet: &[u8], from: SocketAddr, now_ms: u64) -> bool {
        if self.rotate(now_ms).is_err() {
            return false;
        }
        let Some((body, mac1, got)) = split_macs(packet) else {
            return false;
        };
        let mut ok = false;
        for key in std::iter::once(&self.secret).chain(self.previous.as_ref()) {
            ok |= ct_eq(&mac2(&self.cookie(key, from), body, mac1), got);
        }
        ok
    }

    /// The cookie reply to the message 1 `packet` (mac1 already checked) from `from`.
    pub fn cookie_reply(
        &mut self,
        packet: &[u8],
        from: SocketAddr,
        now_ms: u64,
    ) -> Result<Vec<u8>, RandomError> {
        self.rotate(now_ms)?;
        let mut out = Vec::with_capacity(COOKIE_REPLY_LEN);
        let (Ok(h), Some((_, mac1, _))) = (parse_header(packet), split_macs(packet)) else {
            return Ok(out);
        };
        if write_header(&mut out, PacketType::Cookie, h.session_id, h.path_id, 0).is_err() {
            return Ok(Vec::new());
        }
        let mut nonce = [0u8; NONCE_LEN];
        random::fill(&mut nonce)?;
        out.extend_from_slice(&nonce);
        let mut sealed = self.cookie(&self.secret, from).to_vec();
        match self.aead.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(mac1),
            &mut sealed,
        ) {
            Ok(()) => out.extend_from_slice(&sealed),
            Err(_) => return Ok(Vec::new()),
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::StaticKeypair;

    /// A message 1 shaped packet: header, 112 bytes standing for the Noise message, mac1
    /// for `server`, and mac2 for `cookie` (or zeros).
    fn message1(server: &PublicKey, cookie: Option<[u8; 16]>) -> Vec<u8> {
        let mut p = Vec::new();
        write_header(&mut p, PacketType::Handshake, 0x1234, 2, 0).unwrap();
        p.extend_from_slice(&[7u8; 112]);
        let m1 = Mac1Key::new(server).mac1(&p);
        let m2 = cookie.map_or([0; 16], |c| mac2(&c, &p, &m1));
        p.extend_from_slice(&m1);
        p.extend_from_slice(&m2);
        p
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn mac1_needs_the_server_public_key() {
        let server = StaticKeypair::generate().unwrap().public();
        let other = StaticKeypair::generate().unwrap().public();
        let c = CookieChecker::new(&server, 0).unwrap();
        assert!(c.check_mac1(&message1(&server, None)));
        assert!(!c.check_mac1(&message1(&other, None)));
        let good = message1(&server, None);
        for i in 0..good.len() - MAC_LEN {
            let mut bad = good.clone();
            bad[i] ^= 1;
            assert!(!c.check_mac1(&bad), "byte {i}");
        }
        for cut in 0..good.len() {
            assert!(!c.check_mac1(&good[..cut]), "cut {cut}");
        }
    }

    #[test]
    fn cookie_round_trip_binds_the_source_address() {
        let server = StaticKeypair::generate().unwrap().public();
        let mut c = CookieChecker::new(&server, 1_000).unwrap();
        let from = addr("192.0.2.7:4000");
        let m = message1(&server, None);
        assert!(!c.check_mac2(&m, from, 1_000), "no cookie yet");
        let reply = c.cookie_reply(&m, from, 1_000).unwrap();
        assert_eq!(reply.len(), COOKIE_REPLY_LEN);
        assert!(reply.len() < m.len(), "a cookie reply must not amplify");
        let h = parse_header(&reply).unwrap();
        assert_eq!(
            (h.ptype, h.session_id, h.path_id),
            (PacketType::Cookie, 0x1234, 2)
        );
        let cookie = open_cookie_reply(&server, &m, &reply).unwrap();
        let with = message1(&server, Some(cookie));
        assert!(c.check_mac1(&with));
        assert!(c.check_mac2(&with, from, 2_000));
        // Another port or address: the cookie is not theirs.
        assert!(!c.check_mac2(&with, addr("192.0.2.7:4001"), 2_000));
        assert!(!c.check_mac2(&with, addr("192.0.2.8:4000"), 2_000));
        assert!(!c.check_mac2(&with, addr("[::1]:4000"), 2_000));
        // Still good after one rotation, not after two.
        assert!(c.check_mac2(&with, from, 1_000 + SECRET_LIFETIME_MS));
        assert!(!c.check_mac2(&with, from, 1_000 + 2 * SECRET_LIFETIME_MS));
    }

    #[test]
    fn forged_or_foreign_cookie_replies_are_refused() {
        let server = StaticKeypair::generate().unwrap().public();
        let other = StaticKeypair::generate().unwrap().public();
        let mut c = CookieChecker::new(&server, 0).unwrap();
        let from = addr("127.0.0.1:9");
        let m = message1(&server, None);
        let reply = c.cookie_reply(&m, from, 0).unwrap();
        assert_eq!(
            open_cookie_reply(&other, &m, &reply),
            Err(CookieError::Authentication)
        );
        // A reply to another message 1 (another mac1) does not open for ours.
        let mut m_other = m.clone();
        m_other[20] ^= 1;
        let mac = Mac1Key::new(&server).mac1(&m_other[..m_other.len() - MACS_LEN]);
        let at = m_other.len() - MACS_LEN;
        m_other[at..at + MAC_LEN].copy_from_slice(&mac);
        let r2 = c.cookie_reply(&m_other, from, 0).unwrap();
        assert_eq!(
            open_cookie_reply(&server, &m, &r2),
            Err(CookieError::Authentication)
        );
        for i in 0..reply.len() {
            let mut bad = reply.clone();
            bad[i] ^= 0x10;
            assert!(open_cookie_reply(&server, &m, &bad).is_err(), "byte {i}");
        }
        for cut in 0..reply.len() {
            assert!(open_cookie_reply(&server, &m, &reply[..cut]).is_err());
        }
        assert!(open_cookie_reply(&server, &m, &reply).is_ok());
    }
}
