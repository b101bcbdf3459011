//! Per-packet protection of transport packets with ChaCha20-Poly1305 (from `ring`).
//!
//! Owns: [`SessionKeys`] (one key per direction, from the Noise split) and [`PacketKey`]
//! (seal and open a packet in place). The header is the associated data, the frames the
//! plaintext, the last [`TAG_LEN`] bytes of the packet the tag.
//!
//! Must not touch: the header bytes (authenticated, never modified), frames (opaque bytes
//! here), replay state (see [`crate::replay`]) and the handshake.
//!
//! Nonce: `0 0 0 | path id (1) | packet number (8, BE)`. braid numbers packets per path and
//! per sender from 0 and never reuses a number on a path (a re-added path continues the
//! old incarnation's numbering), and each direction has its own key, so a (key, nonce) pair
//! is never used twice. Only transport packets (type 0) are sealed, so handshake packets
//! (which always carry packet number 0) cannot collide with them.
//!
//! No-panic contract: [`PacketKey::open_in_place`] accepts any bytes and any `header_len`;
//! a packet that is too short, malformed or forged gives an [`AeadError`].

use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};

use crate::header::{parse_header, HeaderError, HeaderInfo, PacketType};

/// Bytes of the AEAD tag at the end of every transport packet.
pub const TAG_LEN: usize = 16;

/// Why a packet could not be sealed or opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AeadError {
    /// The header does not parse.
    #[error("cannot protect packet: {0}")]
    Header(#[from] HeaderError),
    /// Only transport packets are protected with the session keys.
    #[error(
        "packet is a handshake packet (type 1); only transport packets (type 0) are \
         sealed or opened with session keys: pass handshake packets to the handshake"
    )]
    NotTransport,
    /// The caller's header length disagrees with the header in the packet.
    #[error(
        "header_len {given} does not match the packet's header of {actual} bytes; \
         pass the header length the header itself encodes"
    )]
    HeaderLenMismatch {
        /// What the caller passed.
        given: usize,
        /// What the header encodes.
        actual: usize,
    },
    /// The packet has no room for the tag after the header.
    #[error(
        "packet of {len} bytes is shorter than its {header_len}-byte header plus the \
         16-byte tag: drop it (receive) or reserve 16 tag bytes at the end (send)"
    )]
    TooShort {
        /// The packet's length.
        len: usize,
        /// The header's length.
        header_len: usize,
    },
    /// The tag did not verify: wrong key, tampered packet, or wrong session.
    #[error(
        "packet on path {path_id} number {packet_number} failed authentication \
         (forged, corrupted, or from another session): drop it"
    )]
    Authentication {
        /// The path named in the header.
        path_id: u8,
        /// The packet number in the header.
        packet_number: u64,
    },
    /// `ring` refused to encrypt (the packet is larger than ChaCha20-Poly1305 allows).
    #[error("packet of {len} bytes could not be encrypted; braid packets must fit a UDP datagram")]
    Seal {
        /// The packet's length.
        len: usize,
    },
}

/// One direction's packet key: ChaCha20-Poly1305 with a per-packet nonce.
pub struct PacketKey {
    key: LessSafeKey,
}

impl std::fmt::Debug for PacketKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PacketKey(ChaCha20-Poly1305, <redacted>)")
    }
}

/// The nonce of packet `pn` on path `path_id`: `0 0 0 | path id | pn (BE)`.
fn nonce(path_id: u8, packet_number: u64) -> Nonce {
    let mut n = [0u8; NONCE_LEN];
    n[3] = path_id;
    n[4..].copy_from_slice(&packet_number.to_be_bytes());
    Nonce::assume_unique_for_key(n)
}

impl PacketKey {
    /// A key from 32 raw bytes (one half of the Noise split).
    pub fn new(raw: &[u8; 32]) -> PacketKey {
        // ChaCha20-Poly1305 takes exactly 32 bytes, so this cannot fail.
        let unbound = match UnboundKey::new(&CHACHA20_POLY1305, raw) {
            Ok(k) => k,
            Err(_) => unreachable!("ChaCha20-Poly1305 accepts any 32-byte key"),
        };
        PacketKey {
            key: LessSafeKey::new(unbound),
        }
    }

    /// Parse and check the header of `packet` against `header_len` and the tag space.
    fn check(packet: &[u8], header_len: usize) -> Result<HeaderInfo, AeadError> {
        let h = parse_header(packet)?;
        if h.ptype != PacketType::Transport {
            return Err(AeadError::NotTransport);
        }
        if h.header_len != header_len {
            return Err(AeadError::HeaderLenMismatch {
                given: header_len,
                actual: h.header_len,
            });
        }
        if packet.len() < header_len + TAG_LEN {
            return Err(AeadError::TooShort {
                len: packet.len(),
                header_len,
            });
        }
        Ok(h)
    }

    /// Encrypt a transport packet in place. `packet` is header | frames | 16 tag bytes (their
    /// content is ignored); `packet[header_len..len - 16]` is encrypted with the header as
    /// associated data and the tag written into the last 16 bytes. The nonce comes from the
    /// path id and packet number in the header; never seal two packets with the same
    /// (path, packet number) under one key.
    pub fn seal_in_place(&self, packet: &mut [u8], header_len: usize) -> Result<(), AeadError> {
        let h = Self::check(packet, header_len)?;
        let len = packet.len();
        let (header, rest) = packet.split_at_mut(header_len);
        let (body, tag_space) = rest.split_at_mut(rest.len() - TAG_LEN);
        let tag = self
            .key
            .seal_in_place_separate_tag(
                nonce(h.path_id, h.packet_number),
                Aad::from(&*header),
                body,
            )
            .map_err(|_| AeadError::Seal { len })?;
        tag_space.copy_from_slice(tag.as_ref());
        Ok(())
    }

    /// Verify and decrypt a transport packet in place. On success the frames between the
    /// header and the last 16 bytes are plaintext (the header and the tag bytes are
    /// unchanged; the caller hands the whole packet to the core, which ignores the tag). On
    /// failure the body's content is unspecified and the packet must be dropped.
    pub fn open_in_place(&self, packet: &mut [u8], header_len: usize) -> Result<(), AeadError> {
        let h = Self::check(packet, header_len)?;
        let (header, rest) = packet.split_at_mut(header_len);
        let (body, tag_bytes) = rest.split_at_mut(rest.len() - TAG_LEN);
        let mut tag_arr = [0u8; TAG_LEN];
        tag_arr.copy_from_slice(tag_bytes);
        self.key
            .open_in_place_separate_tag(
                nonce(h.path_id, h.packet_number),
                Aad::from(&*header),
                Tag::from(tag_arr),
                body,
                0..,
            )
            .map_err(|_| AeadError::Authentication {
                path_id: h.path_id,
                packet_number: h.packet_number,
            })?;
        Ok(())
    }
}

/// Which end of the handshake the keys are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The initiator (sends with the first key of the split).
    Client,
    /// The responder (sends with the second key of the split).
    Server,
}

/// The keys of one session: `send` protects what this end sends, `recv` opens what the
/// peer sends.
#[derive(Debug)]
pub struct SessionKeys {
    /// Seals outgoing transport packets.
    pub send: PacketKey,
    /// Opens incoming transport packets.
    pub recv: PacketKey,
}

impl SessionKeys {
    /// Keys from Noise's raw split `(client -> server, server -> client)`: the client sends
    /// with the first, the server with the second.
    pub fn from_split(role: Role, split: &([u8; 32], [u8; 32])) -> SessionKeys {
        let (c2s, s2c) = (PacketKey::new(&split.0), PacketKey::new(&split.1));
        match role {
            Role::Client => SessionKeys {
                send: c2s,
                recv: s2c,
            },
            Role::Server => SessionKeys {
                send: s2c,
                recv: c2s,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::write_header;

    fn pair() -> (SessionKeys, SessionKeys) {
        let split = ([7u8; 32], [9u8; 32]);
        (
            SessionKeys::from_split(Role::Client, &split),
            SessionKeys::from_split(Role::Server, &split),
        )
    }

    /// A transport packet as the core writes it: header | body | 16 zero bytes.
    fn packet(path: u8, pn: u64, body: &[u8]) -> (Vec<u8>, usize) {
        let mut p = Vec::new();
        let hl = write_header(
            &mut p,
            PacketType::Transport,
            0x1122_3344_5566_7788,
            path,
            pn,
        )
        .unwrap();
        p.extend_from_slice(body);
        p.extend_from_slice(&[0; TAG_LEN]);
        (p, hl)
    }

    #[test]
    fn round_trip_many_sizes() {
        let (client, server) = pair();
        let pns = [0u64, 1, 63, 64, 16_383, 16_384, 1 << 30, (1 << 62) - 1];
        for size in (0..1500).step_by(7).chain([1452, 1453, 1500]) {
            let body: Vec<u8> = (0..size).map(|i| (i * 31 + size) as u8).collect();
            let pn = pns[size % pns.len()];
            let path = (size % 8) as u8;
            let (orig, hl) = packet(path, pn, &body);
            let mut p = orig.clone();
            client.send.seal_in_place(&mut p, hl).unwrap();
            assert_eq!(p.len(), orig.len());
            assert_eq!(&p[..hl], &orig[..hl], "header untouched");
            if size >= 16 {
                assert_ne!(&p[hl..hl + size], &body[..], "body encrypted");
            }
            server.recv.open_in_place(&mut p, hl).unwrap();
            assert_eq!(&p[..hl + size], &orig[..hl + size]);
            // And the other direction.
            let mut q = orig.clone();
            server.send.seal_in_place(&mut q, hl).unwrap();
            client.recv.open_in_place(&mut q, hl).unwrap();
            assert_eq!(&q[..hl + size], &orig[..hl + size]);
        }
    }

    #[test]
    fn directions_use_different_keys() {
        let (client, _server) = pair();
        let (mut p, hl) = packet(0, 3, b"hello frames");
        client.send.seal_in_place(&mut p, hl).unwrap();
        assert!(matches!(
            client.recv.open_in_place(&mut p, hl),
            Err(AeadError::Authentication {
                path_id: 0,
                packet_number: 3
            })
        ));
    }

    #[test]
    fn tampering_any_byte_fails() {
        let (client, server) = pair();
        let (mut sealed, hl) = packet(2, 70_000, b"some frames, some more frames");
        client.send.seal_in_place(&mut sealed, hl).unwrap();
        for i in 0..sealed.len() {
            for flip in [0x01u8, 0x80] {
                let mut p = sealed.clone();
                p[i] ^= flip;
                // A flipped header byte may also change the header's length or validity:
                // whatever happens, opening must fail.
                let hl2 = parse_header(&p).map(|h| h.header_len).unwrap_or(hl);
                assert!(
                    server.recv.open_in_place(&mut p, hl2).is_err(),
                    "byte {i} ^ {flip:#x} went unnoticed"
                );
            }
        }
        let mut p = sealed.clone();
        server.recv.open_in_place(&mut p, hl).unwrap();
    }

    #[test]
    fn same_body_different_path_or_pn_differs() {
        let (client, _) = pair();
        let (mut a, hl) = packet(0, 5, &[0xaa; 40]);
        let (mut b, _) = packet(1, 5, &[0xaa; 40]);
        let (mut c, _) = packet(0, 6, &[0xaa; 40]);
        client.send.seal_in_place(&mut a, hl).unwrap();
        client.send.seal_in_place(&mut b, hl).unwrap();
        client.send.seal_in_place(&mut c, hl).unwrap();
        assert_ne!(a[hl..], b[hl..]);
        assert_ne!(a[hl..], c[hl..]);
    }

    #[test]
    fn refuses_bad_lengths_and_types() {
        let (client, server) = pair();
        let (mut p, hl) = packet(0, 1, b"abc");
        assert_eq!(
            client.send.seal_in_place(&mut p, hl + 1),
            Err(AeadError::HeaderLenMismatch {
                given: hl + 1,
                actual: hl
            })
        );
        let mut short = p[..hl + 15].to_vec();
        assert_eq!(
            server.recv.open_in_place(&mut short, hl),
            Err(AeadError::TooShort {
                len: hl + 15,
                header_len: hl
            })
        );
        let mut hs = p.clone();
        hs[1] = 1;
        assert_eq!(
            client.send.seal_in_place(&mut hs, hl),
            Err(AeadError::NotTransport)
        );
        assert!(matches!(
            server.recv.open_in_place(&mut [], 0),
            Err(AeadError::Header(_))
        ));
        // Header and tag only (no frames) is a valid AEAD message.
        let (mut empty, hl) = packet(0, 2, b"");
        client.send.seal_in_place(&mut empty, hl).unwrap();
        server.recv.open_in_place(&mut empty, hl).unwrap();
    }

    #[test]
    fn error_messages_say_what_to_do() {
        let e = AeadError::Authentication {
            path_id: 3,
            packet_number: 9,
        };
        assert!(e.to_string().contains("path 3 number 9"), "{e}");
        assert!(e.to_string().contains("drop it"), "{e}");
    }
}
