//! braid-wire: the braid packet header, the one codec that the transport core
//! (`braid-core`) and the cryptography (`braid-crypto`) share.
//!
//! ```text
//! version (1) | type (1) | session id (8, BE) | path id (1) | packet number (QUIC varint)
//! ```
//!
//! The header is the AEAD's associated data; the frames follow it. Type byte 3 is a
//! transport packet sealed with the keys of an odd key epoch (key rotation, see
//! `braid_crypto::rekey`): it parses as [`PacketType::Transport`] with
//! [`Header::key_phase`] 1.
//!
//! The network driver parses a received header once (to find the session and the AEAD
//! nonce), and hands the same [`Header`] to the core, which does not parse it again.
//!
//! Owns: the byte layout of the header (`docs/protocol.md`, "Packet"), its parser and its
//! writers, and the two bare server notices (unknown session, session limit). Must not
//! touch: frames, the AEAD tag, keys, session state, sockets, clocks. It depends on nothing
//! of braid's.
//!
//! No-panic contract: [`parse_header`] accepts any byte slice and returns an error for
//! anything that is not a complete version-1 header; no index is taken unchecked. The
//! writers return `None` or an error instead of writing past their buffer. The fuzz target
//! `packet_header` exercises both.

/// The protocol version this build speaks (byte 0 of every packet).
pub const VERSION: u8 = 1;

/// Largest packet number a QUIC varint can hold (2^62 - 1).
pub const MAX_PACKET_NUMBER: u64 = (1 << 62) - 1;

/// The type byte of a transport packet of an odd key epoch (key phase 1).
pub const TRANSPORT_ODD_PHASE: u8 = 3;

/// Shortest possible header: 11 fixed bytes and a 1-byte packet number.
pub const MIN_HEADER_LEN: usize = 12;

/// Longest possible header: 11 fixed bytes and an 8-byte packet number.
pub const MAX_HEADER_LEN: usize = 19;

/// Bytes before the packet number.
const FIXED_LEN: usize = 11;

/// What a packet carries (byte 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PacketType {
    /// Type 0: transport frames, protected by the AEAD.
    Transport,
    /// Type 1: a Noise handshake message.
    Handshake,
    /// Type 2: the server's cookie reply to a handshake message 1 (`braid_crypto::cookie`).
    Cookie,
    /// Type 4: the server's "unknown session" hint (a bare 12-byte header, server to client
    /// only) in answer to a transport packet of a session it does not know. Not
    /// authenticated: a client takes it only as a reason to try a new handshake now.
    SessionUnknown,
    /// Type 5: the server's refusal of a handshake message 1 because it is at its session
    /// limit (a bare 12-byte header naming the message's session and path, server to client
    /// only). Not authenticated: a client reports it and retries later.
    SessionLimit,
    /// Type 6: the server's refusal of a handshake message 1 of an authorized client
    /// because none of the packet ciphers it offers is one the server accepts: a 12-byte
    /// header naming the message's session and path, then the server's cipher list
    /// (`braid_crypto::refusal`). Server to client only; not authenticated: a client
    /// reports it and retries later.
    CipherRefused,
    /// Type 7: the server's refusal of a fresh handshake message 1 whose client key is not
    /// authorized (a bare 12-byte header naming the message's session and path, server to
    /// client only; docs/protocol.md section 16). Not authenticated: a client reports it
    /// ("this agent's key is not accepted") and retries later.
    KeyRefused,
}

impl PacketType {
    /// The byte on the wire.
    pub fn code(self) -> u8 {
        match self {
            PacketType::Transport => 0,
            PacketType::Handshake => 1,
            PacketType::Cookie => 2,
            PacketType::SessionUnknown => 4,
            PacketType::SessionLimit => 5,
            PacketType::CipherRefused => 6,
            PacketType::KeyRefused => 7,
        }
    }
}

/// What is wrong with a packet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The packet ends before the named header field is complete.
    #[error(
        "packet of {len} bytes ends inside the header field `{field}`; \
         a braid header is 12 to 19 bytes: drop the packet"
    )]
    Truncated {
        /// The field that is cut short.
        field: &'static str,
        /// The packet's length.
        len: usize,
    },
    /// Byte 0 is not a version this build speaks.
    #[error("packet version byte is {0}, this build speaks only version 1: drop the packet")]
    BadVersion(u8),
    /// Byte 1 is not 0 or 3 (transport), 1 (handshake), 2 (cookie reply), 4 (unknown
    /// session), 5 (session limit) or 6 (cipher refused).
    #[error(
        "packet type byte is {0}, expected 0 or 3 (transport), 1 (handshake), 2 (cookie \
         reply), 4 (unknown session), 5 (session limit) or 6 (cipher refused): drop the \
         packet"
    )]
    BadType(u8),
    /// A packet number above 2^62 - 1 cannot be written as a varint.
    #[error("packet number {0} exceeds the varint maximum 2^62 - 1 and cannot be written")]
    PacketNumberTooLarge(u64),
}

/// A packet header: what [`parse_header`] read, or what a sender is about to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Header {
    /// What the packet carries.
    pub ptype: PacketType,
    /// The session the packet belongs to.
    pub session_id: u64,
    /// The path it was sent on (as numbered by the client).
    pub path_id: u8,
    /// Per-path, per-sender packet number.
    pub packet_number: u64,
    /// Length of the header in bytes (12 to 19): the AEAD's associated data; the frames
    /// start here. A received header keeps the length it had on the wire, even when its
    /// packet number used a longer varint than needed.
    pub header_len: usize,
    /// Key phase of a transport packet: 0 (type byte 0, even key epoch) or 1 (type byte 3,
    /// odd epoch); 0 for the other types.
    pub key_phase: u8,
}

impl Header {
    /// A header with the shortest packet-number encoding and key phase 0.
    pub fn new(
        ptype: PacketType,
        session_id: u64,
        path_id: u8,
        packet_number: u64,
    ) -> Result<Header, HeaderError> {
        if packet_number > MAX_PACKET_NUMBER {
            return Err(HeaderError::PacketNumberTooLarge(packet_number));
        }
        Ok(Header {
            ptype,
            session_id,
            path_id,
            packet_number,
            header_len: FIXED_LEN + varint_len(packet_number),
            key_phase: 0,
        })
    }

    /// The type byte on the wire (3 for a transport packet of key phase 1).
    pub fn type_byte(&self) -> u8 {
        if self.ptype == PacketType::Transport && self.key_phase == 1 {
            TRANSPORT_ODD_PHASE
        } else {
            self.ptype.code()
        }
    }

    /// Write the header at the front of `out`: exactly `header_len` bytes, the packet
    /// number in `header_len - 11` of them. Returns the length written, or `None` (and
    /// writes nothing) when `out` is shorter, or when `header_len` cannot hold the packet
    /// number as a 1-, 2-, 4- or 8-byte varint. Re-writing a parsed header reproduces the
    /// bytes it was parsed from.
    pub fn write_into(&self, out: &mut [u8]) -> Option<usize> {
        let n = self.header_len.checked_sub(FIXED_LEN)?;
        let tag: u8 = match n {
            1 => 0x00,
            2 => 0x40,
            4 => 0x80,
            8 => 0xc0,
            _ => return None,
        };
        if (n < 8 && self.packet_number >> (8 * n - 2) != 0)
            || self.packet_number > MAX_PACKET_NUMBER
        {
            return None;
        }
        let out = out.get_mut(..self.header_len)?;
        out[0] = VERSION;
        out[1] = self.type_byte();
        out[2..10].copy_from_slice(&self.session_id.to_be_bytes());
        out[10] = self.path_id;
        out[FIXED_LEN..].copy_from_slice(&self.packet_number.to_be_bytes()[8 - n..]);
        out[FIXED_LEN] |= tag;
        Some(self.header_len)
    }
}

/// Parse the header at the front of `packet`. Accepts any input; never panics.
pub fn parse_header(packet: &[u8]) -> Result<Header, HeaderError> {
    let len = packet.len();
    let truncated = |field| HeaderError::Truncated { field, len };
    let version = *packet.first().ok_or(truncated("version"))?;
    if version != VERSION {
        return Err(HeaderError::BadVersion(version));
    }
    let (ptype, key_phase) = match *packet.get(1).ok_or(truncated("type"))? {
        0 => (PacketType::Transport, 0),
        1 => (PacketType::Handshake, 0),
        2 => (PacketType::Cookie, 0),
        4 => (PacketType::SessionUnknown, 0),
        5 => (PacketType::SessionLimit, 0),
        6 => (PacketType::CipherRefused, 0),
        7 => (PacketType::KeyRefused, 0),
        TRANSPORT_ODD_PHASE => (PacketType::Transport, 1),
        other => return Err(HeaderError::BadType(other)),
    };
    let sid: [u8; 8] = packet
        .get(2..10)
        .and_then(|s| s.try_into().ok())
        .ok_or(truncated("session id"))?;
    let path_id = *packet.get(10).ok_or(truncated("path id"))?;
    let first = *packet.get(FIXED_LEN).ok_or(truncated("packet number"))?;
    let pn_len = 1usize << (first >> 6);
    let pn_bytes = packet
        .get(FIXED_LEN..FIXED_LEN + pn_len)
        .ok_or(truncated("packet number"))?;
    let packet_number = pn_bytes
        .iter()
        .skip(1)
        .fold(u64::from(first & 0x3f), |v, b| (v << 8) | u64::from(*b));
    Ok(Header {
        ptype,
        session_id: u64::from_be_bytes(sid),
        path_id,
        packet_number,
        header_len: FIXED_LEN + pn_len,
        key_phase,
    })
}

/// The "unknown session" hint answering a transport packet with header `h`: 12 bytes, the
/// session id and path id of that packet, packet number 0.
pub fn session_unknown_hint(h: &Header) -> Vec<u8> {
    notice(PacketType::SessionUnknown, h)
}

/// The "session limit" refusal answering a handshake message 1 with header `h` (12 bytes).
pub fn session_limit_refusal(h: &Header) -> Vec<u8> {
    notice(PacketType::SessionLimit, h)
}

/// The "key not accepted" refusal answering a handshake message 1 with header `h` (12
/// bytes).
pub fn key_refusal(h: &Header) -> Vec<u8> {
    notice(PacketType::KeyRefused, h)
}

fn notice(ptype: PacketType, h: &Header) -> Vec<u8> {
    let mut out = Vec::with_capacity(MIN_HEADER_LEN);
    // Packet number 0 always fits.
    let _ = write_header(&mut out, ptype, h.session_id, h.path_id, 0);
    out
}

/// Length of the shortest varint encoding of `pn` (1, 2, 4 or 8 bytes).
pub fn varint_len(pn: u64) -> usize {
    if pn < 1 << 6 {
        1
    } else if pn < 1 << 14 {
        2
    } else if pn < 1 << 30 {
        4
    } else {
        8
    }
}

/// Append a header to `out` (shortest packet-number encoding, key phase 0); returns its
/// length.
pub fn write_header(
    out: &mut Vec<u8>,
    ptype: PacketType,
    session_id: u64,
    path_id: u8,
    packet_number: u64,
) -> Result<usize, HeaderError> {
    let h = Header::new(ptype, session_id, path_id, packet_number)?;
    let start = out.len();
    out.resize(start + h.header_len, 0);
    // `new` gave a consistent length and the space is there.
    Ok(h.write_into(&mut out[start..]).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        for pn in [
            0,
            63,
            64,
            16_383,
            16_384,
            (1 << 30) - 1,
            1 << 30,
            MAX_PACKET_NUMBER,
        ] {
            for ptype in [
                PacketType::Transport,
                PacketType::Handshake,
                PacketType::Cookie,
                PacketType::SessionUnknown,
                PacketType::SessionLimit,
                PacketType::CipherRefused,
                PacketType::KeyRefused,
            ] {
                let mut buf = Vec::new();
                let n = write_header(&mut buf, ptype, 0xdead_beef_0102_0304, 7, pn).unwrap();
                assert_eq!(n, buf.len());
                assert_eq!(n, 11 + varint_len(pn));
                buf.extend_from_slice(b"payload");
                let h = parse_header(&buf).unwrap();
                assert_eq!(
                    h,
                    Header {
                        ptype,
                        session_id: 0xdead_beef_0102_0304,
                        path_id: 7,
                        packet_number: pn,
                        header_len: n,
                        key_phase: 0,
                    }
                );
                for cut in 0..n {
                    assert!(matches!(
                        parse_header(&buf[..cut]),
                        Err(HeaderError::Truncated { .. })
                    ));
                }
            }
        }
    }

    #[test]
    fn rejects_bad_version_type_and_large_pn() {
        let mut buf = Vec::new();
        write_header(&mut buf, PacketType::Transport, 1, 0, 5).unwrap();
        buf[0] = 2;
        assert_eq!(parse_header(&buf), Err(HeaderError::BadVersion(2)));
        buf[0] = 1;
        for t in [8, 9, 0x80, 0xff] {
            buf[1] = t;
            assert_eq!(parse_header(&buf), Err(HeaderError::BadType(t)));
        }
        buf[1] = 3;
        let h = parse_header(&buf).unwrap();
        assert_eq!((h.ptype, h.key_phase), (PacketType::Transport, 1));
        assert_eq!(
            write_header(&mut Vec::new(), PacketType::Transport, 1, 0, u64::MAX),
            Err(HeaderError::PacketNumberTooLarge(u64::MAX))
        );
    }

    #[test]
    fn non_minimal_varint_is_read() {
        // pn 5 as a 2-byte varint: readers accept any length.
        let buf = [1, 0, 0, 0, 0, 0, 0, 0, 0, 9, 3, 0x40, 5];
        let h = parse_header(&buf).unwrap();
        assert_eq!((h.packet_number, h.header_len, h.path_id), (5, 13, 3));
    }

    #[test]
    fn write_into_refuses_short_buffers_and_inconsistent_lengths() {
        let h = Header::new(PacketType::Transport, 9, 1, 300).unwrap();
        assert_eq!(h.header_len, 13);
        let mut buf = [0xaau8; 19];
        assert_eq!(h.write_into(&mut buf[..12]), None);
        assert_eq!(buf, [0xaa; 19], "a refused write writes nothing");
        for bad_len in [0, 11, 12, 14, 16, 20] {
            let h = Header {
                header_len: bad_len,
                ..h
            };
            assert_eq!(h.write_into(&mut buf), None, "header_len {bad_len}");
        }
        // A longer encoding than needed is allowed (a received header keeps its own).
        let long = Header {
            header_len: 15,
            ..h
        };
        assert_eq!(long.write_into(&mut buf), Some(15));
        assert_eq!(parse_header(&buf[..15]), Ok(long));
        let odd = Header { key_phase: 1, ..h };
        assert_eq!(odd.write_into(&mut buf), Some(13));
        assert_eq!(buf[1], TRANSPORT_ODD_PHASE);
        assert_eq!(parse_header(&buf[..13]), Ok(odd));
    }

    proptest::proptest! {
        /// Any bytes: a header the parser accepts is re-written to exactly the bytes it
        /// came from, and every shorter prefix is refused.
        #[test]
        fn parsed_headers_rewrite_to_their_bytes(bytes in proptest::collection::vec(
            proptest::prelude::any::<u8>(), 0..24), version_ok: bool, type_byte in 0u8..8) {
            let mut bytes = bytes;
            if version_ok && bytes.len() >= 2 {
                bytes[0] = VERSION;
                bytes[1] = type_byte;
            }
            if let Ok(h) = parse_header(&bytes) {
                let mut out = [0u8; MAX_HEADER_LEN];
                proptest::prop_assert_eq!(h.write_into(&mut out), Some(h.header_len));
                proptest::prop_assert_eq!(&out[..h.header_len], &bytes[..h.header_len]);
                for cut in 0..h.header_len {
                    proptest::prop_assert!(parse_header(&bytes[..cut]).is_err());
                }
            }
        }

        /// Any fields: the written header parses back to the same fields.
        #[test]
        fn written_headers_parse_back(sid: u64, path: u8, pn in 0..=MAX_PACKET_NUMBER,
                                      odd: bool) {
            let mut h = Header::new(PacketType::Transport, sid, path, pn).unwrap();
            h.key_phase = u8::from(odd);
            let mut out = [0u8; MAX_HEADER_LEN + 3];
            let n = h.write_into(&mut out).unwrap();
            proptest::prop_assert_eq!(n, 11 + varint_len(pn));
            proptest::prop_assert_eq!(parse_header(&out), Ok(h));
            // Too small a buffer: nothing written, never a panic.
            for room in 0..n {
                let mut small = vec![0x5au8; room];
                proptest::prop_assert_eq!(h.write_into(&mut small), None);
                proptest::prop_assert!(small.iter().all(|b| *b == 0x5a));
            }
        }
    }
}
