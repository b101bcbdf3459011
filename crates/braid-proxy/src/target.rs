//! The stream-open header the agent writes first on each new session stream, the server's
//! one-byte-status reply, and [`ReplyCode`].
//!
//! Owns: the byte layout of both messages (the codes themselves live in `reply`).
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

use crate::addr::{AddrError, TargetAddr, TargetRef};
pub use crate::reply::ReplyCode;
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

#[cfg(test)]
mod tests {
    use super::*;

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
