//! The PROXY protocol version 2 header (HAProxy's "PROXY protocol" specification, section
//! 2.2), which an agent may put in front of an inbound connection so that the service
//! behind it (nginx, HAProxy, ...) sees the real client's address instead of the agent's.
//!
//! ```text
//! signature (12: \r\n\r\n\0\r\nQUIT\n) | ver_cmd (1: 0x21, version 2, PROXY)
//! | family (1: 0x11 TCP/IPv4, 0x21 TCP/IPv6) | length (2, big-endian: 12 or 36)
//! | source address | destination address | source port | destination port
//! ```
//!
//! Owns: the header's bytes (encoding, and decoding for services and tests). Must not
//! touch: connections, which connections get one (the agent's `[forward]` entries decide).
//!
//! No-panic contract: [`parse`] accepts any bytes and returns an error for anything that is
//! not a complete, well-formed TCP header of version 2.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// The 12 bytes every version 2 header starts with.
pub const SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// Version 2, command PROXY.
const VER_PROXY: u8 = 0x21;
/// TCP over IPv4, TCP over IPv6.
const TCP4: u8 = 0x11;
const TCP6: u8 = 0x21;

/// What [`parse`] found wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProxyHeaderError {
    /// Fewer bytes than the header needs (read more).
    #[error("PROXY v2 header incomplete: {0} bytes so far")]
    Incomplete(usize),
    /// Not a PROXY v2 header, or one this parser does not take (not TCP, not PROXY).
    #[error("not a PROXY v2 TCP header: {0}")]
    Bad(&'static str),
}

/// The header telling the service that `client` connected to `dest` over TCP. Both are
/// given in one family: IPv4 when both are IPv4, else IPv6 (an IPv4 address as
/// `::ffff:a.b.c.d`).
pub fn encode(client: SocketAddr, dest: SocketAddr) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + 36);
    out.extend_from_slice(&SIGNATURE);
    out.push(VER_PROXY);
    match (client.ip(), dest.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            out.push(TCP4);
            out.extend_from_slice(&12u16.to_be_bytes());
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
        }
        (s, d) => {
            out.push(TCP6);
            out.extend_from_slice(&36u16.to_be_bytes());
            out.extend_from_slice(&v6(s).octets());
            out.extend_from_slice(&v6(d).octets());
        }
    }
    out.extend_from_slice(&client.port().to_be_bytes());
    out.extend_from_slice(&dest.port().to_be_bytes());
    out
}

fn v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

/// A header at the start of `bytes`: (client, destination, the header's length). TLVs
/// after the addresses (which the length covers) are skipped.
pub fn parse(bytes: &[u8]) -> Result<(SocketAddr, SocketAddr, usize), ProxyHeaderError> {
    let have = bytes.len();
    let fixed = bytes.get(..16).ok_or(ProxyHeaderError::Incomplete(have))?;
    if fixed[..12] != SIGNATURE {
        return Err(ProxyHeaderError::Bad("no signature"));
    }
    if fixed[12] != VER_PROXY {
        return Err(ProxyHeaderError::Bad("not version 2 with command PROXY"));
    }
    let len = usize::from(u16::from_be_bytes([fixed[14], fixed[15]]));
    let body = (bytes.get(16..16 + len)).ok_or(ProxyHeaderError::Incomplete(have))?;
    let word = |at: usize| u16::from_be_bytes([body[at], body[at + 1]]);
    let (src, dst, ports): (IpAddr, IpAddr, usize) = match fixed[13] {
        TCP4 if len >= 12 => {
            let a =
                |at: usize| IpAddr::from(<[u8; 4]>::try_from(&body[at..at + 4]).unwrap_or([0; 4]));
            (a(0), a(4), 8)
        }
        TCP6 if len >= 36 => {
            let a = |at: usize| {
                IpAddr::from(<[u8; 16]>::try_from(&body[at..at + 16]).unwrap_or([0; 16]))
            };
            (a(0), a(16), 32)
        }
        TCP4 | TCP6 => return Err(ProxyHeaderError::Bad("addresses longer than the length")),
        _ => return Err(ProxyHeaderError::Bad("not TCP over IPv4 or IPv6")),
    };
    Ok((
        SocketAddr::new(src, word(ports)),
        SocketAddr::new(dst, word(ports + 2)),
        16 + len,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// The bytes of the specification's layout, written out by hand: a client
    /// 192.0.2.7:51234 that connected to 203.0.113.5:8080.
    #[test]
    fn an_ipv4_header_has_the_specifications_bytes() {
        let h = encode(a("192.0.2.7:51234"), a("203.0.113.5:8080"));
        let mut want = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
        want.extend_from_slice(&[0x21, 0x11, 0, 12]);
        want.extend_from_slice(&[192, 0, 2, 7, 203, 0, 113, 5]);
        want.extend_from_slice(&[0xc8, 0x22, 0x1f, 0x90]);
        assert_eq!(h, want);
        assert_eq!(h.len(), 28);
    }

    #[test]
    fn headers_read_back_and_mixed_families_go_as_ipv6() {
        for (c, d) in [
            ("192.0.2.7:51234", "203.0.113.5:8080"),
            ("[2001:db8::7]:40000", "[2001:db8::5]:443"),
        ] {
            let mut h = encode(a(c), a(d));
            let n = h.len();
            h.extend_from_slice(b"GET / HTTP/1.1\r\n");
            assert_eq!(parse(&h), Ok((a(c), a(d), n)));
            for cut in 0..n {
                assert!(matches!(
                    parse(&h[..cut]),
                    Err(ProxyHeaderError::Incomplete(_))
                ));
            }
        }
        let h = encode(a("192.0.2.7:1"), a("[2001:db8::5]:443"));
        assert_eq!((h[13], h.len()), (0x21, 52));
        assert_eq!(
            parse(&h).unwrap().0,
            a("[::ffff:192.0.2.7]:1"),
            "an IPv4 client as an IPv4-mapped address"
        );
    }

    #[test]
    fn other_bytes_are_refused_without_panic() {
        let mut h = encode(a("192.0.2.7:1"), a("192.0.2.8:2"));
        h[0] = b'P';
        assert_eq!(parse(&h), Err(ProxyHeaderError::Bad("no signature")));
        let mut h = encode(a("192.0.2.7:1"), a("192.0.2.8:2"));
        h[13] = 0x12;
        assert!(matches!(parse(&h), Err(ProxyHeaderError::Bad(_))), "UDP");
        let mut h = encode(a("192.0.2.7:1"), a("192.0.2.8:2"));
        h[15] = 4;
        assert!(
            matches!(parse(&h), Err(ProxyHeaderError::Bad(_))),
            "too short"
        );
        for n in 0..64u8 {
            let junk: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37)).collect();
            let _ = parse(&junk);
        }
    }
}
