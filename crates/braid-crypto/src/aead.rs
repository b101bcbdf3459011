//! Per-packet protection of transport packets with AES-256-GCM or ChaCha20-Poly1305 (both
//! from `ring`; the handshake negotiates which, see [`Cipher`] and [`Ciphers`]).
//!
//! Owns: [`SessionKeys`] (one key per direction, from the Noise split), [`PacketKey`]
//! (seal and open a packet in place), the packet ciphers ([`Cipher`]) and the ordered list
//! of them an end accepts ([`Ciphers`], with the CPU-dependent default order). The header
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

use ring::aead::{
    Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_256_GCM, CHACHA20_POLY1305, NONCE_LEN,
};

use braid_wire::{parse_header, Header, HeaderError, PacketType};

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

/// A packet cipher. Its wire id (in the handshake payloads) is [`Cipher::id`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cipher {
    /// ChaCha20-Poly1305 (RFC 8439): fast everywhere in software; the cipher of peers
    /// that offer no list.
    ChaCha20Poly1305,
    /// AES-256-GCM: faster where the CPU has AES and carry-less multiply instructions.
    Aes256Gcm,
}

impl Cipher {
    /// Every cipher braid implements, in no particular order.
    pub const ALL: [Cipher; 2] = [Cipher::Aes256Gcm, Cipher::ChaCha20Poly1305];

    /// The byte that names the cipher in the handshake payloads.
    pub fn id(self) -> u8 {
        match self {
            Cipher::ChaCha20Poly1305 => 1,
            Cipher::Aes256Gcm => 2,
        }
    }

    /// The cipher a handshake byte names (None: one this version does not know).
    pub fn from_id(id: u8) -> Option<Cipher> {
        match id {
            1 => Some(Cipher::ChaCha20Poly1305),
            2 => Some(Cipher::Aes256Gcm),
            _ => None,
        }
    }

    /// The name used on the command line and in logs.
    pub fn name(self) -> &'static str {
        match self {
            Cipher::ChaCha20Poly1305 => "chacha20-poly1305",
            Cipher::Aes256Gcm => "aes-256-gcm",
        }
    }

    fn algorithm(self) -> &'static ring::aead::Algorithm {
        match self {
            Cipher::ChaCha20Poly1305 => &CHACHA20_POLY1305,
            Cipher::Aes256Gcm => &AES_256_GCM,
        }
    }
}

impl std::fmt::Display for Cipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether this CPU has the instructions that make AES-GCM fast and constant-time (AES and
/// carry-less multiplication). Read once per call from the CPU's feature flags.
pub fn cpu_has_aes() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("aes")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// The packet ciphers an end accepts, most preferred first (never empty). An agent offers
/// them in this order; a server picks the first of its own list that the agent offered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ciphers(Vec<Cipher>);

/// Why a cipher list was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CipherError {
    /// A name that is no cipher.
    #[error(
        "unknown cipher {0:?}: use aes-256-gcm, chacha20-poly1305 or auto (AES-256-GCM \
         first where the CPU has AES instructions, else ChaCha20-Poly1305)"
    )]
    Unknown(String),
}

impl Ciphers {
    /// Both ciphers, AES-256-GCM first if [`cpu_has_aes`], else ChaCha20-Poly1305 first.
    pub fn auto() -> Ciphers {
        Self::for_cpu(cpu_has_aes())
    }

    /// Both ciphers, in the order for a CPU with (`true`) or without AES instructions.
    pub fn for_cpu(has_aes: bool) -> Ciphers {
        if has_aes {
            Ciphers(vec![Cipher::Aes256Gcm, Cipher::ChaCha20Poly1305])
        } else {
            Ciphers(vec![Cipher::ChaCha20Poly1305, Cipher::Aes256Gcm])
        }
    }

    /// Only `c`.
    pub fn only(c: Cipher) -> Ciphers {
        Ciphers(vec![c])
    }

    /// These ciphers in this order (duplicates dropped); None if `list` is empty.
    pub fn new(list: &[Cipher]) -> Option<Ciphers> {
        let mut v: Vec<Cipher> = Vec::new();
        for &c in list {
            if !v.contains(&c) {
                v.push(c);
            }
        }
        (!v.is_empty()).then_some(Ciphers(v))
    }

    /// `auto`, `aes-256-gcm` or `chacha20-poly1305` (the `--cipher` flag).
    pub fn parse(s: &str) -> Result<Ciphers, CipherError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Ciphers::auto()),
            "aes-256-gcm" | "aes256gcm" | "aes" => Ok(Ciphers::only(Cipher::Aes256Gcm)),
            "chacha20-poly1305" | "chacha20poly1305" | "chacha" => {
                Ok(Ciphers::only(Cipher::ChaCha20Poly1305))
            }
            _ => Err(CipherError::Unknown(s.to_string())),
        }
    }

    /// The ciphers, most preferred first.
    pub fn as_slice(&self) -> &[Cipher] {
        &self.0
    }

    /// The most preferred.
    pub fn first(&self) -> Cipher {
        self.0[0]
    }

    /// The server's choice: the first of `self` (the server's list) that `offered` (the
    /// agent's) contains.
    pub fn choose(&self, offered: &[Cipher]) -> Option<Cipher> {
        self.0.iter().copied().find(|c| offered.contains(c))
    }
}

impl Default for Ciphers {
    fn default() -> Self {
        Ciphers::auto()
    }
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
mod tests {
    use super::*;
    use braid_wire::write_header;

    fn pair() -> (SessionKeys, SessionKeys) {
        pair_with(Cipher::ChaCha20Poly1305)
    }

    fn pair_with(c: Cipher) -> (SessionKeys, SessionKeys) {
        let split = ([7u8; 32], [9u8; 32]);
        (
            SessionKeys::from_split_with(Role::Client, c, &split),
            SessionKeys::from_split_with(Role::Server, c, &split),
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
    fn round_trip_many_sizes_with_both_ciphers() {
        for c in Cipher::ALL {
            round_trip_many_sizes(c);
        }
    }

    fn round_trip_many_sizes(c: Cipher) {
        let (client, server) = pair_with(c);
        assert_eq!((client.cipher(), server.recv.cipher()), (c, c));
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
    fn tampering_any_byte_fails_with_both_ciphers() {
        for c in Cipher::ALL {
            tampering_any_byte_fails(c);
        }
    }

    fn tampering_any_byte_fails(c: Cipher) {
        let (client, server) = pair_with(c);
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
    fn the_ciphers_differ_and_do_not_open_each_other() {
        let (aes, _) = pair_with(Cipher::Aes256Gcm);
        let (_, chacha) = pair_with(Cipher::ChaCha20Poly1305);
        let (orig, hl) = packet(1, 77, &[0x42; 100]);
        let (mut a, mut b) = (orig.clone(), orig.clone());
        aes.send.seal_in_place(&mut a, hl).unwrap();
        pair_with(Cipher::ChaCha20Poly1305)
            .0
            .send
            .seal_in_place(&mut b, hl)
            .unwrap();
        assert_ne!(a, b, "same key bytes, different ciphers, different output");
        assert!(chacha.recv.open_in_place(&mut a, hl).is_err());
    }

    #[test]
    fn cipher_lists_parse_and_choose() {
        use Cipher::*;
        assert_eq!(
            Ciphers::for_cpu(true).as_slice(),
            [Aes256Gcm, ChaCha20Poly1305]
        );
        assert_eq!(
            Ciphers::for_cpu(false).as_slice(),
            [ChaCha20Poly1305, Aes256Gcm]
        );
        assert_eq!(Ciphers::parse("auto").unwrap(), Ciphers::auto());
        assert_eq!(
            Ciphers::parse("AES-256-GCM").unwrap(),
            Ciphers::only(Aes256Gcm)
        );
        assert_eq!(
            Ciphers::parse("chacha20-poly1305").unwrap(),
            Ciphers::only(ChaCha20Poly1305)
        );
        let e = Ciphers::parse("rot13").unwrap_err().to_string();
        assert!(e.contains("rot13") && e.contains("aes-256-gcm"), "{e}");
        assert_eq!(Ciphers::new(&[]), None);
        assert_eq!(
            Ciphers::new(&[Aes256Gcm, Aes256Gcm]).unwrap(),
            Ciphers::only(Aes256Gcm)
        );
        // The server's order wins; nothing in common: no choice.
        assert_eq!(
            Ciphers::for_cpu(false).choose(&[Aes256Gcm, ChaCha20Poly1305]),
            Some(ChaCha20Poly1305)
        );
        assert_eq!(Ciphers::only(Aes256Gcm).choose(&[ChaCha20Poly1305]), None);
        for c in Cipher::ALL {
            assert_eq!(Cipher::from_id(c.id()), Some(c));
        }
        assert_eq!(Cipher::from_id(0), None);
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
