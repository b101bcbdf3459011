//! The outcome of opening a target: [`ReplyCode`], numbered as SOCKS5's reply field
//! (RFC 1928 §6), shared by the stream-open reply ([`crate::target`]), the parse errors
//! ([`crate::wire`]), SOCKS5 and the HTTP proxy's status lines.
//!
//! Owns: the codes, their bytes, their text and the mapping from I/O errors. Must not touch:
//! any wire layout (the modules above put the byte where it belongs).

use std::fmt;
use std::io;

/// The outcome of opening a target, with the SOCKS5 reply code numbering (RFC 1928 §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ReplyCode {
    /// 0: the connection is open.
    Succeeded = 0,
    /// 1: general failure.
    GeneralFailure = 1,
    /// 2: connection not allowed by ruleset.
    NotAllowed = 2,
    /// 3: network unreachable.
    NetworkUnreachable = 3,
    /// 4: host unreachable (also: the name did not resolve).
    HostUnreachable = 4,
    /// 5: connection refused.
    ConnectionRefused = 5,
    /// 6: TTL expired; also used for "timed out".
    TtlExpired = 6,
    /// 7: command not supported.
    CommandNotSupported = 7,
    /// 8: address type not supported.
    AddressTypeNotSupported = 8,
}

impl ReplyCode {
    /// The code for byte `b`, or `None` when it is not 0..=8.
    pub fn from_u8(b: u8) -> Option<Self> {
        Some(match b {
            0 => ReplyCode::Succeeded,
            1 => ReplyCode::GeneralFailure,
            2 => ReplyCode::NotAllowed,
            3 => ReplyCode::NetworkUnreachable,
            4 => ReplyCode::HostUnreachable,
            5 => ReplyCode::ConnectionRefused,
            6 => ReplyCode::TtlExpired,
            7 => ReplyCode::CommandNotSupported,
            8 => ReplyCode::AddressTypeNotSupported,
            _ => return None,
        })
    }

    /// The byte on the wire.
    pub fn as_u8(self) -> u8 {
        self as u8
    }

    /// True for [`ReplyCode::Succeeded`].
    pub fn is_success(self) -> bool {
        self == ReplyCode::Succeeded
    }

    /// The code that describes a failed connect or resolve: refused -> 5, host unreachable
    /// -> 4, network unreachable -> 3, timed out -> 6, permission denied -> 2, anything else
    /// -> 1.
    pub fn from_io_error(err: &io::Error) -> ReplyCode {
        match err.kind() {
            io::ErrorKind::ConnectionRefused => ReplyCode::ConnectionRefused,
            io::ErrorKind::HostUnreachable => ReplyCode::HostUnreachable,
            io::ErrorKind::NetworkUnreachable => ReplyCode::NetworkUnreachable,
            io::ErrorKind::TimedOut => ReplyCode::TtlExpired,
            io::ErrorKind::PermissionDenied => ReplyCode::NotAllowed,
            _ => ReplyCode::GeneralFailure,
        }
    }
}

impl fmt::Display for ReplyCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReplyCode::Succeeded => "succeeded",
            ReplyCode::GeneralFailure => "general failure",
            ReplyCode::NotAllowed => "connection not allowed by ruleset",
            ReplyCode::NetworkUnreachable => "network unreachable",
            ReplyCode::HostUnreachable => "host unreachable",
            ReplyCode::ConnectionRefused => "connection refused",
            ReplyCode::TtlExpired => "TTL expired or timed out",
            ReplyCode::CommandNotSupported => "command not supported",
            ReplyCode::AddressTypeNotSupported => "address type not supported",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_error_mapping() {
        let m = |k| ReplyCode::from_io_error(&io::Error::from(k)).as_u8();
        assert_eq!(m(io::ErrorKind::ConnectionRefused), 5);
        assert_eq!(m(io::ErrorKind::HostUnreachable), 4);
        assert_eq!(m(io::ErrorKind::NetworkUnreachable), 3);
        assert_eq!(m(io::ErrorKind::TimedOut), 6);
        assert_eq!(m(io::ErrorKind::PermissionDenied), 2);
        assert_eq!(m(io::ErrorKind::Other), 1);
        assert_eq!(m(io::ErrorKind::BrokenPipe), 1);
    }
}
