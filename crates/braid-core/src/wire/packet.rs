//! The packet header (see `docs/protocol.md`, "Packet"):
//!
//! ```text
//! version (1) | type (1) | session id (8) | path id (1) | packet number (varint) | frames ... | tag
//! ```
//!
//! The header is the AEAD's associated data; the frames are the plaintext; the tag is
//! `tag_len` bytes that the network driver fills (the simulator leaves them zero but counts
//! them on the wire).

use super::{Reader, WireError, Writer};

/// The protocol version this build speaks.
pub const VERSION: u8 = 1;

/// Longest possible header: 11 fixed bytes and an 8-byte packet number.
pub const MAX_HEADER_LEN: usize = 19;

/// What a packet carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketType {
    /// Transport frames, parsed by the core.
    Transport,
    /// A handshake message of the network driver (the core does not parse these).
    Handshake,
}

impl PacketType {
    fn code(self) -> u8 {
        match self {
            PacketType::Transport => 0,
            PacketType::Handshake => 1,
        }
    }
}

/// A parsed packet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketHeader {
    /// Handshake or transport.
    pub ptype: PacketType,
    /// Identifies the session at the server.
    pub session_id: u64,
    /// The path the packet was sent on (as numbered by the client).
    pub path_id: u8,
    /// Per-path packet number.
    pub packet_number: u64,
}

impl PacketHeader {
    /// Parse the header at the front of `buf`; returns it and its length.
    pub fn parse(buf: &[u8]) -> Result<(PacketHeader, usize), WireError> {
        let mut r = Reader::new(buf);
        let version = r.u8()?;
        if version != VERSION {
            return Err(WireError::BadVersion(version));
        }
        let ptype = match r.u8()? {
            0 => PacketType::Transport,
            1 => PacketType::Handshake,
            _ => return Err(WireError::Invalid("packet type")),
        };
        let session_id = r.u64()?;
        let path_id = r.u8()?;
        let packet_number = r.varint()?;
        Ok((
            PacketHeader {
                ptype,
                session_id,
                path_id,
                packet_number,
            },
            r.pos(),
        ))
    }

    /// Encoded length.
    pub fn len(&self) -> usize {
        11 + super::varint::len(self.packet_number)
    }

    /// Always false; a header has at least 12 bytes.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Write the header; `None` if `w` is too small.
    pub fn emit(&self, w: &mut Writer<'_>) -> Option<()> {
        w.u8(VERSION)?;
        w.u8(self.ptype.code())?;
        w.u64(self.session_id)?;
        w.u8(self.path_id)?;
        w.varint(self.packet_number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let h = PacketHeader {
            ptype: PacketType::Transport,
            session_id: 0xdead_beef_0102_0304,
            path_id: 3,
            packet_number: 70_000,
        };
        let mut buf = [0u8; 32];
        let mut w = Writer::new(&mut buf);
        h.emit(&mut w).unwrap();
        let n = w.pos();
        assert_eq!(n, h.len());
        assert_eq!(PacketHeader::parse(&buf[..n]).unwrap(), (h, n));
        for cut in 0..n {
            assert!(PacketHeader::parse(&buf[..cut]).is_err());
        }
        buf[0] = 9;
        assert_eq!(PacketHeader::parse(&buf), Err(WireError::BadVersion(9)));
    }
}
