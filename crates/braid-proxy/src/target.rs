//! The stream-open header the agent writes first on each new session stream, the server's
//! one-byte-status reply, and [`ReplyCode`].
//!
//! Owns: the byte layout of both messages and the mapping from I/O errors to reply codes.
//! Must not touch: sockets, session streams, timers (the caller buffers bytes and calls the
//! parsers; `Incomplete` means "read more").
//!
//! ```text
//! request = version u8 (=1) | command u8 (1 = TCP connect) | atyp u8 | addr | port u16 BE
//!           atyp 1: 4 bytes, atyp 3: len u8 + name, atyp 4: 16 bytes
//! reply   = version u8 (=1) | status u8 (a ReplyCode, 0..=8)
//! ```
//!
//! No-panic contract: [`parse_request`] and [`parse_reply`] accept any byte slice; they return
//! `Err(ParseError::Incomplete)` when the slice ends before the message does (parse again
//! with more bytes) and `Err(ParseError::Invalid(_))` when no continuation could make it valid.
//! Trailing bytes after the message are left alone (the consumed length is returned).

use std::fmt;
use std::io;

use crate::addr::{AddrError, TargetAddr, TargetRef};
use crate::wire::{byte, emit_addr, parse_addr, Invalid, ParseError};

/// The header version this build speaks.
pub const VERSION: u8 = 1;
/// The longest request: version, command, then the longest address.
pub const MAX_REQUEST_LEN: usize = 2 + crate::wire::MAX_ADDR_LEN;
/// The reply's length.
pub const REPLY_LEN: usize = 2;

/// What the stream should do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Command {
    /// Open a TCP connection to the target and relay the stream over it.
    Connect = 1,
}

/// A parsed stream-open request, borrowing the domain name from the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenRequest<'a> {
    /// The command (only TCP connect exists).
    pub command: Command,
    /// Where to connect.
    pub target: TargetRef<'a>,
}

/// Parses a stream-open request at the start of `buf`; returns it and the bytes consumed.
///
/// No-panic contract: see the module docs. Invalid version, command, address type or domain
/// name give `Invalid`; [`ParseError::reply_code`] says which status to answer with.
pub fn parse_request(buf: &[u8]) -> Result<(OpenRequest<'_>, usize), ParseError> {
    let version = byte(buf, 0)?;
    if version != VERSION {
        return Err(Invalid::BadVersion {
            expected: VERSION,
            got: version,
        }
        .into());
    }
    let command = match byte(buf, 1)? {
        1 => Command::Connect,
        other => return Err(Invalid::UnsupportedCommand(other).into()),
    };
    let rest = buf.get(2..).unwrap_or_default();
    let (target, used) = parse_addr(rest)?;
    Ok((OpenRequest { command, target }, 2 + used))
}

/// Appends a TCP-connect request for `target` to `out`.
///
/// Refuses (appending nothing) when a domain name fails validation.
pub fn emit_request(target: &TargetAddr, out: &mut Vec<u8>) -> Result<(), AddrError> {
    let start = out.len();
    out.push(VERSION);
    out.push(Command::Connect as u8);
    if let Err(e) = emit_addr(target, out) {
        out.truncate(start);
        return Err(e);
    }
    Ok(())
}

/// Parses the server's reply at the start of `buf`; returns the status and bytes consumed (2).
///
/// No-panic contract: see the module docs. A status byte above 8 is `Invalid(UnknownStatus)`.
pub fn parse_reply(buf: &[u8]) -> Result<(ReplyCode, usize), ParseError> {
    let version = byte(buf, 0)?;
    if version != VERSION {
        return Err(Invalid::BadVersion {
            expected: VERSION,
            got: version,
        }
        .into());
    }
    let status = byte(buf, 1)?;
    let code = ReplyCode::from_u8(status).ok_or(Invalid::UnknownStatus(status))?;
    Ok((code, REPLY_LEN))
}

/// Appends the reply `code` to `out`.
pub fn emit_reply(code: ReplyCode, out: &mut Vec<u8>) {
    out.push(VERSION);
    out.push(code.as_u8());
}

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

    #[test]
    fn reply_codes_round_trip() {
        for b in 0..=255u8 {
            match ReplyCode::from_u8(b) {
                Some(c) => assert_eq!(c.as_u8(), b),
                None => assert!(b > 8),
            }
        }
    }
}
