//! The braid packet header, as this crate needs it: a bounds-checked parser and a builder.
//!
//! ```text
//! version (1) | type (1) | session id (8, BE) | path id (1) | packet number (QUIC varint)
//! ```
//!
//! Type byte 3 is a transport packet sealed with the keys of an odd key epoch (key
//! rotation, see [`crate::rekey`]): it parses as [`PacketType::Transport`] with
//! [`HeaderInfo::key_phase`] 1. The core never sees it (the driver writes 0 back after
//! opening).
//!
//! Owns: reading the header fields that the AEAD nonce and the handshake need, and writing
//! the header of handshake packets. It is deliberately independent of `braid-core` (which
//! has its own parser) and must not touch frames, the tag or anything after the header.
//!
//! No-panic contract: [`parse_header`] accepts any byte slice and returns an error for
//! anything that is not a complete version-1 header; no index is taken unchecked.

/// The protocol version this crate speaks (byte 0 of every packet).
pub const VERSION: u8 = 1;

/// Largest packet number a QUIC varint can hold (2^62 - 1).
pub const MAX_PACKET_NUMBER: u64 = (1 << 62) - 1;

/// The type byte of a transport packet of an odd key epoch (key phase 1).
pub const TRANSPORT_ODD_PHASE: u8 = 3;

/// Longest possible header: 11 fixed bytes and an 8-byte packet number.
pub const MAX_HEADER_LEN: usize = 19;

/// What a packet carries (byte 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PacketType {
    /// Type 0: transport frames, protected by the AEAD.
    Transport,
    /// Type 1: a Noise handshake message.
    Handshake,
    /// Type 2: the server's cookie reply to a handshake message 1 (see [`crate::cookie`]).
    Cookie,
    /// Type 4: the server's "unknown session" hint (a bare 12-byte header, server to client
    /// only) in answer to a transport packet of a session it does not know. Not
    /// authenticated: a client takes it only as a reason to try a new handshake now.
    SessionUnknown,
    /// Type 5: the server's refusal of a handshake message 1 because it is at its session
    /// limit (a bare 12-byte header naming the message's session and path, server to client
    /// only). Not authenticated: a client reports it and retries later.
    SessionLimit,
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
    /// session) or 5 (session limit).
    #[error(
        "packet type byte is {0}, expected 0 or 3 (transport), 1 (handshake), 2 (cookie \
         reply), 4 (unknown session) or 5 (session limit): drop the packet"
    )]
    BadType(u8),
    /// A packet number above 2^62 - 1 cannot be written as a varint.
    #[error("packet number {0} exceeds the varint maximum 2^62 - 1 and cannot be written")]
    PacketNumberTooLarge(u64),
}

/// The parsed header of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HeaderInfo {
    /// Transport or handshake.
    pub ptype: PacketType,
    /// The session the packet belongs to.
    pub session_id: u64,
    /// The path it was sent on.
    pub path_id: u8,
    /// Per-path, per-sender packet number.
    pub packet_number: u64,
    /// Length of the header in bytes (12 to 19): the AEAD's associated data.
    pub header_len: usize,
    /// Key phase of a transport packet: 0 (type byte 0, even key epoch) or 1 (type byte 3,
    /// odd epoch); 0 for the other types.
    pub key_phase: u8,
}

/// Parse the header at the front of `packet`. Accepts any input; never panics.
pub fn parse_header(packet: &[u8]) -> Result<HeaderInfo, HeaderError> {
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
        TRANSPORT_ODD_PHASE => (PacketType::Transport, 1),
        other => return Err(HeaderError::BadType(other)),
    };
    let sid: [u8; 8] = packet
        .get(2..10)
        .and_then(|s| s.try_into().ok())
        .ok_or(truncated("session id"))?;
    let path_id = *packet.get(10).ok_or(truncated("path id"))?;
    let first = *packet.get(11).ok_or(truncated("packet number"))?;
    let pn_len = 1usize << (first >> 6);
    let pn_bytes = packet
        .get(11..11 + pn_len)
        .ok_or(truncated("packet number"))?;
    let packet_number = pn_bytes
        .iter()
        .skip(1)
        .fold(u64::from(first & 0x3f), |v, b| (v << 8) | u64::from(*b));
    Ok(HeaderInfo {
        ptype,
        session_id: u64::from_be_bytes(sid),
        path_id,
        packet_number,
        header_len: 11 + pn_len,
        key_phase,
    })
}

/// The "unknown session" hint answering a transport packet with header `h`: 12 bytes, the
/// session id and path id of that packet, packet number 0.
pub fn session_unknown_hint(h: &HeaderInfo) -> Vec<u8> {
    notice(PacketType::SessionUnknown, h)
}

/// The "session limit" refusal answering a handshake message 1 with header `h` (12 bytes).
pub fn session_limit_refusal(h: &HeaderInfo) -> Vec<u8> {
    notice(PacketType::SessionLimit, h)
}

fn notice(ptype: PacketType, h: &HeaderInfo) -> Vec<u8> {
    let mut out = Vec::with_capacity(12);
    // Packet number 0 always fits.
    let _ = write_header(&mut out, ptype, h.session_id, h.path_id, 0);
    out
}

/// Length of the shortest varint encoding of `pn`.
fn varint_len(pn: u64) -> usize {
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

/// Append a header to `out` (shortest packet-number encoding); returns its length.
pub fn write_header(
    out: &mut Vec<u8>,
    ptype: PacketType,
    session_id: u64,
    path_id: u8,
    packet_number: u64,
) -> Result<usize, HeaderError> {
    if packet_number > MAX_PACKET_NUMBER {
        return Err(HeaderError::PacketNumberTooLarge(packet_number));
    }
    let n = varint_len(packet_number);
    out.push(VERSION);
    out.push(ptype.code());
    out.extend_from_slice(&session_id.to_be_bytes());
    out.push(path_id);
    let tag: u8 = match n {
        1 => 0x00,
        2 => 0x40,
        4 => 0x80,
        _ => 0xc0,
    };
    let be = packet_number.to_be_bytes();
    let start = out.len();
    out.extend_from_slice(&be[8 - n..]);
    out[start] |= tag;
    Ok(11 + n)
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
            ] {
                let mut buf = Vec::new();
                let n = write_header(&mut buf, ptype, 0xdead_beef_0102_0304, 7, pn).unwrap();
                assert_eq!(n, buf.len());
                assert_eq!(n, 11 + varint_len(pn));
                buf.extend_from_slice(b"payload");
                let h = parse_header(&buf).unwrap();
                assert_eq!(
                    h,
                    HeaderInfo {
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
        buf[1] = 6;
        assert_eq!(parse_header(&buf), Err(HeaderError::BadType(6)));
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
}
