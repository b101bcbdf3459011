//! The shared address encoding `atyp u8 | addr | port u16 BE` and the parse error type.
//!
//! Owns: the SOCKS5-style address layout used by the stream-open header ([`crate::target`]),
//! the datagram payload ([`crate::datagram`]) and the SOCKS5 UDP header ([`crate::socks5`]);
//! [`ParseError`] and [`Invalid`]. Must not touch: sockets, timers, protocol state.
//!
//! Address types: `1` IPv4 (4 bytes), `3` domain (`len u8` then `len` bytes, validated by
//! [`crate::addr::validate_domain`]), `4` IPv6 (16 bytes).
//!
//! No-panic contract: [`parse_addr`] accepts any byte slice and returns `Err` on truncated or
//! malformed input; every index is bounds-checked.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use crate::addr::{validate_domain, AddrError, TargetAddr, TargetRef};
use crate::reply::ReplyCode;

/// Address type: IPv4.
pub const ATYP_IPV4: u8 = 1;
/// Address type: domain name.
pub const ATYP_DOMAIN: u8 = 3;
/// Address type: IPv6.
pub const ATYP_IPV6: u8 = 4;

/// The longest encoded address: atyp, length byte, 255-byte name, port.
pub const MAX_ADDR_LEN: usize = 1 + 1 + 255 + 2;

/// Why bytes could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The input ends in the middle of a field. On a stream: read more bytes and parse again
    /// from the same start. On a datagram: it was truncated; drop it.
    #[error("input ends in the middle of a field; read more bytes and parse again (a datagram this short is truncated and must be dropped)")]
    Incomplete,
    /// The bytes can never form a valid message, however many more arrive.
    #[error("invalid input: {0}")]
    Invalid(#[from] Invalid),
}

impl ParseError {
    /// The SOCKS5-style reply code to send back for this error.
    pub fn reply_code(&self) -> ReplyCode {
        match self {
            ParseError::Incomplete => ReplyCode::GeneralFailure,
            ParseError::Invalid(inv) => inv.reply_code(),
        }
    }
}

/// What exactly is wrong with a message that can never parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    /// The version byte is not the one this build speaks.
    #[error(
        "version byte is {got}, expected {expected}; both ends must run compatible braid versions"
    )]
    BadVersion {
        /// The version this build speaks.
        expected: u8,
        /// The version received.
        got: u8,
    },
    /// The command byte names no supported command.
    #[error("command {0} is not supported; only 1 (TCP connect) is")]
    UnsupportedCommand(u8),
    /// The address type byte is not 1, 3 or 4.
    #[error("address type {0} is not supported; use 1 (IPv4), 3 (domain) or 4 (IPv6)")]
    UnsupportedAddressType(u8),
    /// The domain name fails validation.
    #[error("bad domain name: {0}")]
    BadDomain(AddrError),
    /// A reply's status byte is not a known reply code (0..=8).
    #[error("reply status {0} is not a known reply code (0..=8)")]
    UnknownStatus(u8),
    /// A SOCKS5 UDP packet has FRAG != 0; fragmentation is not supported, drop it.
    #[error(
        "SOCKS5 UDP fragment number {0}: fragmented datagrams are not supported and are dropped"
    )]
    Fragmented(u8),
    /// A field of an inbound-port message is out of range (`crate::inbound`).
    #[error("malformed inbound-port message: {0}")]
    Malformed(&'static str),
}

impl Invalid {
    /// The SOCKS5-style reply code that best describes this error.
    pub fn reply_code(&self) -> ReplyCode {
        match self {
            Invalid::UnsupportedCommand(_) => ReplyCode::CommandNotSupported,
            Invalid::UnsupportedAddressType(_) => ReplyCode::AddressTypeNotSupported,
            _ => ReplyCode::GeneralFailure,
        }
    }
}

/// Bytes `buf[at..at + n]`, or `Incomplete`.
pub(crate) fn take(buf: &[u8], at: usize, n: usize) -> Result<&[u8], ParseError> {
    let end = at.checked_add(n).ok_or(ParseError::Incomplete)?;
    buf.get(at..end).ok_or(ParseError::Incomplete)
}

/// Byte `buf[at]`, or `Incomplete`.
pub(crate) fn byte(buf: &[u8], at: usize) -> Result<u8, ParseError> {
    buf.get(at).copied().ok_or(ParseError::Incomplete)
}

fn port_at(buf: &[u8], at: usize) -> Result<u16, ParseError> {
    let p = take(buf, at, 2)?;
    Ok(u16::from_be_bytes([p[0], p[1]]))
}

/// Parses `atyp | addr | port` at the start of `buf`; returns the address and bytes consumed.
///
/// No-panic contract: any input gives `Ok` or `Err`. `Incomplete` when `buf` ends early,
/// `Invalid(UnsupportedAddressType)` for an unknown atyp, `Invalid(BadDomain)` for a bad name.
pub fn parse_addr(buf: &[u8]) -> Result<(TargetRef<'_>, usize), ParseError> {
    let atyp = byte(buf, 0)?;
    match atyp {
        ATYP_IPV4 => {
            let a = take(buf, 1, 4)?;
            let ip = Ipv4Addr::new(a[0], a[1], a[2], a[3]);
            let port = port_at(buf, 5)?;
            Ok((
                TargetRef::Ip(SocketAddr::V4(SocketAddrV4::new(ip, port))),
                7,
            ))
        }
        ATYP_IPV6 => {
            let a = take(buf, 1, 16)?;
            let mut octets = [0u8; 16];
            octets.copy_from_slice(a);
            let port = port_at(buf, 17)?;
            let sa = SocketAddrV6::new(Ipv6Addr::from(octets), port, 0, 0);
            Ok((TargetRef::Ip(SocketAddr::V6(sa)), 19))
        }
        ATYP_DOMAIN => {
            let len = usize::from(byte(buf, 1)?);
            let name = take(buf, 2, len)?;
            let port = port_at(buf, 2 + len)?;
            let name = validate_domain(name).map_err(Invalid::BadDomain)?;
            Ok((TargetRef::Domain(name, port), 2 + len + 2))
        }
        other => Err(Invalid::UnsupportedAddressType(other).into()),
    }
}

/// Appends `atyp | addr | port` for `addr` to `out`.
///
/// Refuses (and appends nothing) when a domain name fails [`validate_domain`].
pub fn emit_addr(addr: &TargetAddr, out: &mut Vec<u8>) -> Result<(), AddrError> {
    emit_addr_ref(addr.view(), out)
}

/// [`emit_addr`] for a borrowed address.
pub fn emit_addr_ref(addr: TargetRef<'_>, out: &mut Vec<u8>) -> Result<(), AddrError> {
    match addr {
        TargetRef::Ip(SocketAddr::V4(sa)) => {
            out.push(ATYP_IPV4);
            out.extend_from_slice(&sa.ip().octets());
            out.extend_from_slice(&sa.port().to_be_bytes());
        }
        TargetRef::Ip(SocketAddr::V6(sa)) => {
            out.push(ATYP_IPV6);
            out.extend_from_slice(&sa.ip().octets());
            out.extend_from_slice(&sa.port().to_be_bytes());
        }
        TargetRef::Domain(name, port) => {
            let name = validate_domain(name.as_bytes())?;
            // validate_domain guarantees 1..=255 bytes.
            let len = u8::try_from(name.len()).map_err(|_| AddrError::DomainTooLong(name.len()))?;
            out.push(ATYP_DOMAIN);
            out.push(len);
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&port.to_be_bytes());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(a: TargetAddr) {
        let mut out = Vec::new();
        emit_addr(&a, &mut out).unwrap();
        let (got, used) = parse_addr(&out).unwrap();
        assert_eq!(used, out.len());
        assert_eq!(got.to_target_addr(), a);
        for cut in 0..out.len() {
            assert_eq!(parse_addr(&out[..cut]), Err(ParseError::Incomplete));
        }
    }

    #[test]
    fn round_trips() {
        round_trip(TargetAddr::Ip("192.0.2.7:8080".parse().unwrap()));
        round_trip(TargetAddr::Ip("[2001:db8::5]:443".parse().unwrap()));
        round_trip(TargetAddr::domain("example.org", 80).unwrap());
        round_trip(TargetAddr::domain("a".repeat(255), 1).unwrap());
    }

    #[test]
    fn rejects() {
        assert_eq!(
            parse_addr(&[2, 0, 0]),
            Err(ParseError::Invalid(Invalid::UnsupportedAddressType(2)))
        );
        assert!(matches!(
            parse_addr(&[3, 0, 0, 80]),
            Err(ParseError::Invalid(Invalid::BadDomain(
                AddrError::EmptyDomain
            )))
        ));
        let mut out = Vec::new();
        let bad = TargetAddr::Domain("bad\0name".into(), 1);
        assert!(emit_addr(&bad, &mut out).is_err());
        assert!(out.is_empty());
    }
}
