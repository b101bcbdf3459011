//! Proxy target addresses: [`TargetAddr`] (owned) and [`TargetRef`] (borrowed from a buffer).
//!
//! Owns: the address types, domain-name validation and their `Display` form. Must not touch:
//! byte layouts on the wire (that is [`crate::wire`]), sockets, name resolution.
//!
//! A domain name is valid when it is 1 to 255 bytes long and every byte is printable ASCII
//! other than space (`0x21..=0x7e`); this rules out NUL, control bytes, whitespace and
//! non-ASCII. Validation never panics on any input.

use std::fmt;
use std::net::SocketAddr;

/// The longest domain name accepted, in bytes (the SOCKS5 length byte's limit).
pub const MAX_DOMAIN_LEN: usize = 255;

/// Why a domain name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddrError {
    /// The name has no bytes.
    #[error("domain name is empty; give a host name of 1 to 255 bytes")]
    EmptyDomain,
    /// The name is longer than [`MAX_DOMAIN_LEN`].
    #[error("domain name is {0} bytes long; the limit is 255 bytes")]
    DomainTooLong(usize),
    /// The name holds a byte outside printable ASCII.
    #[error(
        "domain name contains byte {0:#04x}; only printable ASCII without spaces \
         (0x21..=0x7e) is allowed"
    )]
    BadDomainByte(u8),
}

/// Checks that `name` is a valid domain name and returns it as `&str`.
///
/// No-panic contract: accepts any byte slice; returns `Err` for anything invalid.
pub fn validate_domain(name: &[u8]) -> Result<&str, AddrError> {
    if name.is_empty() {
        return Err(AddrError::EmptyDomain);
    }
    if name.len() > MAX_DOMAIN_LEN {
        return Err(AddrError::DomainTooLong(name.len()));
    }
    if let Some(&b) = name.iter().find(|b| !b.is_ascii_graphic()) {
        return Err(AddrError::BadDomainByte(b));
    }
    // Every byte is ASCII, so this cannot fail; map the impossible case to an error anyway.
    std::str::from_utf8(name).map_err(|_| AddrError::BadDomainByte(0x80))
}

/// Where a proxied connection or datagram goes: an IP socket address or a name and port.
///
/// The `Domain` variant's name is expected to satisfy [`validate_domain`]; build it with
/// [`TargetAddr::domain`] to have that checked. Every emitter re-checks and refuses an invalid
/// name instead of writing it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TargetAddr {
    /// An IPv4 or IPv6 address and port.
    Ip(SocketAddr),
    /// A domain name (1..=255 printable ASCII bytes) and port, resolved by the server.
    Domain(String, u16),
}

impl TargetAddr {
    /// A `Domain` target after validating `name`.
    pub fn domain(name: impl Into<String>, port: u16) -> Result<Self, AddrError> {
        let name = name.into();
        validate_domain(name.as_bytes())?;
        Ok(TargetAddr::Domain(name, port))
    }

    /// The port.
    pub fn port(&self) -> u16 {
        match self {
            TargetAddr::Ip(sa) => sa.port(),
            TargetAddr::Domain(_, port) => *port,
        }
    }

    /// A borrowed view of this address.
    pub fn view(&self) -> TargetRef<'_> {
        match self {
            TargetAddr::Ip(sa) => TargetRef::Ip(*sa),
            TargetAddr::Domain(name, port) => TargetRef::Domain(name, *port),
        }
    }
}

impl From<SocketAddr> for TargetAddr {
    fn from(sa: SocketAddr) -> Self {
        TargetAddr::Ip(sa)
    }
}

impl fmt::Display for TargetAddr {
    /// `192.0.2.1:80`, `[2001:db8::1]:443` or `example.com:443`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.view().fmt(f)
    }
}

/// A target address borrowed from a parsed buffer (zero-copy counterpart of [`TargetAddr`]).
///
/// A `Domain` produced by this crate's parsers has always passed [`validate_domain`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TargetRef<'a> {
    /// An IPv4 or IPv6 address and port.
    Ip(SocketAddr),
    /// A validated domain name and port.
    Domain(&'a str, u16),
}

impl TargetRef<'_> {
    /// The port.
    pub fn port(&self) -> u16 {
        match self {
            TargetRef::Ip(sa) => sa.port(),
            TargetRef::Domain(_, port) => *port,
        }
    }

    /// An owned copy.
    pub fn to_target_addr(self) -> TargetAddr {
        match self {
            TargetRef::Ip(sa) => TargetAddr::Ip(sa),
            TargetRef::Domain(name, port) => TargetAddr::Domain(name.to_owned(), port),
        }
    }
}

impl fmt::Display for TargetRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TargetRef::Ip(sa) => write!(f, "{sa}"),
            TargetRef::Domain(name, port) => write!(f, "{name}:{port}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_forms() {
        assert_eq!(
            TargetAddr::Ip("192.0.2.1:80".parse().unwrap()).to_string(),
            "192.0.2.1:80"
        );
        assert_eq!(
            TargetAddr::Ip("[2001:db8::1]:443".parse().unwrap()).to_string(),
            "[2001:db8::1]:443"
        );
        assert_eq!(
            TargetAddr::domain("example.com", 443).unwrap().to_string(),
            "example.com:443"
        );
    }

    #[test]
    fn domain_validation() {
        assert_eq!(validate_domain(b""), Err(AddrError::EmptyDomain));
        assert_eq!(
            validate_domain(&[b'a'; 256]),
            Err(AddrError::DomainTooLong(256))
        );
        assert!(validate_domain(&[b'a'; 255]).is_ok());
        assert_eq!(validate_domain(b"a\0b"), Err(AddrError::BadDomainByte(0)));
        assert_eq!(validate_domain(b"a b"), Err(AddrError::BadDomainByte(b' ')));
        assert_eq!(
            validate_domain("é".as_bytes()),
            Err(AddrError::BadDomainByte(0xc3))
        );
        assert!(TargetAddr::domain("exa\nmple", 1).is_err());
    }
}
