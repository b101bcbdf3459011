//! Per-packet protection of transport packets with AES-256-GCM or ChaCha20-Poly1305 (both
//! from `ring`; the handshake negotiates which, see [`Cipher`] and [`Ciphers`]).
//!
//! Owns: [`SessionKeys`] (one key per direction, from the Noise split) and [`PacketKey`]
//! (seal and open a packet in place); the packet ciphers ([`Cipher`]) and the ordered list
//! of them an end accepts ([`Ciphers`], with the CPU-dependent default order) are in
//! `cipher`. The header
//! is the associated data, the frames the plaintext, the last [`TAG_LEN`] bytes of the
//! packet the tag. Both ciphers take a 32-byte key, a 12-byte nonce and give a 16-byte tag.
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

use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, NONCE_LEN};

use braid_wire::{parse_header, Header, HeaderError, PacketType};

mod cipher;

pub use self::cipher::{cpu_has_aes, Cipher, CipherError, Ciphers};

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
    /// `ring` refused to encrypt (the packet is larger than the cipher allows).
    #[error("packet of {len} bytes could not be encrypted; braid packets must fit a UDP datagram")]
    Seal {
        /// The packet's length.
        len: usize,
    },
}

/// One direction's packet key: AES-256-GCM or ChaCha20-Poly1305 with a per-packet nonce.
pub struct PacketKey {
    key: LessSafeKey,
    cipher: Cipher,
}

impl std::fmt::Debug for PacketKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PacketKey({}, <redacted>)", self.cipher)
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
    /// A ChaCha20-Poly1305 key from 32 raw bytes (one half of the Noise split).
    pub fn new(raw: &[u8; 32]) -> PacketKey {
        Self::with_cipher(Cipher::ChaCha20Poly1305, raw)
    }

    /// A key of `cipher` from 32 raw bytes (one half of the Noise split).
    pub fn with_cipher(cipher: Cipher, raw: &[u8; 32]) -> PacketKey {
        // Both ciphers take exactly 32 bytes, so this cannot fail.
        let unbound = match UnboundKey::new(cipher.algorithm(), raw) {
            Ok(k) => k,
            Err(_) => unreachable!("AES-256-GCM and ChaCha20-Poly1305 accept any 32-byte key"),
        };
        PacketKey {
            key: LessSafeKey::new(unbound),
            cipher,
        }
    }

    /// The cipher of this key.
    pub fn cipher(&self) -> Cipher {
        self.cipher
    }

    /// Parse the header of `packet` and check it against `header_len` (the type and the tag
    /// space are `check_parsed`'s).
    fn check(packet: &[u8], header_len: usize) -> Result<Header, AeadError> {
        let h = parse_header(packet)?;
        if h.ptype == PacketType::Transport && h.header_len != header_len {
            return Err(AeadError::HeaderLenMismatch {
                given: header_len,
                actual: h.header_len,
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
        self.seal_parsed(packet, &h)
    }

    /// The length checks for a header the caller parsed already.
    fn check_parsed(packet: &[u8], h: &Header) -> Result<(), AeadError> {
        if h.ptype != PacketType::Transport {
            return Err(AeadError::NotTransport);
        }
        if packet.len() < h.header_len + TAG_LEN {
            return Err(AeadError::TooShort {
                len: packet.len(),
                header_len: h.header_len,
            });
        }
        Ok(())
    }

    /// [`PacketKey::seal_in_place`] with the header already parsed (`h` must be
    /// `parse_header(packet)`; the type byte's key phase may differ).
    pub(crate) fn seal_parsed(&self, packet: &mut [u8], h: &Header) -> Result<(), AeadError> {
        Self::check_parsed(packet, h)?;
        let len = packet.len();
        let (header, rest) = packet.split_at_mut(h.header_len);
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
        self.open_parsed(packet, &h)
    }

    /// [`PacketKey::open_in_place`] with the header already parsed (`h` must be
    /// `parse_header(packet)`).
    pub(crate) fn open_parsed(&self, packet: &mut [u8], h: &Header) -> Result<(), AeadError> {
        Self::check_parsed(packet, h)?;
        let (header, rest) = packet.split_at_mut(h.header_len);
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
    /// ChaCha20-Poly1305 keys from Noise's raw split `(client -> server, server ->
    /// client)`: the client sends with the first, the server with the second.
    pub fn from_split(role: Role, split: &([u8; 32], [u8; 32])) -> SessionKeys {
        Self::from_split_with(role, Cipher::ChaCha20Poly1305, split)
    }

    /// [`SessionKeys::from_split`] for `cipher`.
    pub fn from_split_with(
        role: Role,
        cipher: Cipher,
        split: &([u8; 32], [u8; 32]),
    ) -> SessionKeys {
        let c2s = PacketKey::with_cipher(cipher, &split.0);
        let s2c = PacketKey::with_cipher(cipher, &split.1);
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

    /// The cipher of these keys (both directions use the same).
    pub fn cipher(&self) -> Cipher {
        self.send.cipher()
    }
}

#[cfg(test)]
mod tests;
