//! NAT64 (RFC 6146) for IPv6-only paths to an IPv4-only server, sans-IO: the NAT64 prefix
//! (configured, like `64:ff9b::/96`, or discovered as RFC 7050 says: the AAAA records of
//! `ipv4only.arpa`, which a DNS64 resolver synthesizes from its well-known IPv4 addresses
//! 192.0.0.170 and 192.0.0.171), and the server's IPv6 address synthesized in it (RFC 6052
//! section 2.2: the IPv4 address after the prefix, bits 64 to 71 left zero). The agent's
//! IPv6-only paths then send to that address (`AgentConfig::server_other_family`).
//!
//! Owns: the prefix, its discovery from the answers, the address synthesis. Must not
//! touch: DNS queries or sockets (the caller resolves `ipv4only.arpa` and passes the
//! answers), the paths.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The name whose AAAA records reveal the prefix (RFC 7050).
pub const IPV4ONLY_ARPA: &str = "ipv4only.arpa";
/// The well-known addresses of `ipv4only.arpa` (RFC 7050 section 2.2).
pub const WELL_KNOWN: [Ipv4Addr; 2] =
    [Ipv4Addr::new(192, 0, 0, 170), Ipv4Addr::new(192, 0, 0, 171)];
/// The prefix lengths RFC 6052 allows.
pub const LENGTHS: [u8; 6] = [32, 40, 48, 56, 64, 96];

/// A NAT64 prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nat64Prefix {
    /// The prefix (bits past `len` zero).
    pub addr: Ipv6Addr,
    /// Its length: one of [`LENGTHS`].
    pub len: u8,
}

/// A NAT64 prefix that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("NAT64 prefix {given:?}: {reason}; give one like 64:ff9b::/96 (the lengths RFC 6052 allows: 32, 40, 48, 56, 64, 96), or `auto` to discover it from ipv4only.arpa")]
pub struct PrefixError {
    given: String,
    reason: &'static str,
}

/// The byte indexes of the IPv4 address in an address of a `len`-bit prefix (RFC 6052
/// 2.2: from the prefix's end on, byte 8 skipped).
fn places(len: u8) -> [usize; 4] {
    let mut at = [0; 4];
    let mut i = len as usize / 8;
    for a in &mut at {
        if i == 8 {
            i += 1;
        }
        *a = i;
        i += 1;
    }
    at
}

impl Nat64Prefix {
    /// Parse `ADDR/LEN`.
    pub fn parse(s: &str) -> Result<Nat64Prefix, PrefixError> {
        let err = |reason| PrefixError {
            given: s.to_string(),
            reason,
        };
        let (a, l) = s.split_once('/').ok_or(err("no /LENGTH"))?;
        let addr: Ipv6Addr = a.parse().map_err(|_| err("not an IPv6 address"))?;
        let len: u8 = l.parse().map_err(|_| err("a bad length"))?;
        if !LENGTHS.contains(&len) {
            return Err(err("a length RFC 6052 does not allow"));
        }
        let b = addr.octets();
        if b[len as usize / 8..].iter().any(|&x| x != 0) {
            return Err(err("bits set past the prefix length"));
        }
        Ok(Nat64Prefix { addr, len })
    }

    /// The IPv6 address of `v4` behind this prefix.
    pub fn synthesize(&self, v4: Ipv4Addr) -> Ipv6Addr {
        let mut b = self.addr.octets();
        for (&i, &x) in places(self.len).iter().zip(&v4.octets()) {
            b[i] = x;
        }
        Ipv6Addr::from(b)
    }

    /// The IPv4 address an address of this prefix stands for (`None`: not of this prefix).
    pub fn extract(&self, v6: Ipv6Addr) -> Option<Ipv4Addr> {
        let (b, p) = (v6.octets(), self.addr.octets());
        let n = self.len as usize / 8;
        if b[..n] != p[..n] {
            return None;
        }
        let at = places(self.len);
        Some(Ipv4Addr::new(b[at[0]], b[at[1]], b[at[2]], b[at[3]]))
    }

    /// `server` (an IPv4 address) as reached through this NAT64: the synthesized address,
    /// same port; an IPv6 address stays.
    pub fn server(&self, server: SocketAddr) -> SocketAddr {
        match server.ip() {
            IpAddr::V4(v4) => SocketAddr::new(IpAddr::V6(self.synthesize(v4)), server.port()),
            IpAddr::V6(_) => server,
        }
    }
}

impl std::fmt::Display for Nat64Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// The NAT64 prefix the AAAA answers for [`IPV4ONLY_ARPA`] reveal (RFC 7050 section 3):
/// the first answer holding a well-known address at one of the allowed places, the longest
/// length tried first; `None` when no answer does (no DNS64 on the network).
pub fn discover(answers: &[Ipv6Addr]) -> Option<Nat64Prefix> {
    answers.iter().find_map(|&a| {
        LENGTHS.iter().rev().find_map(|&len| {
            let mut b = a.octets();
            let at = places(len);
            let v4 = Ipv4Addr::new(b[at[0]], b[at[1]], b[at[2]], b[at[3]]);
            if !WELL_KNOWN.contains(&v4) {
                return None;
            }
            b[len as usize / 8..].iter_mut().for_each(|x| *x = 0);
            Some(Nat64Prefix {
                addr: Ipv6Addr::from(b),
                len,
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 6052 section 2.4's table: 192.0.2.33 in each prefix length.
    const RFC6052: [(&str, &str); 6] = [
        ("2001:db8::/32", "2001:db8:c000:221::"),
        ("2001:db8:100::/40", "2001:db8:1c0:2:21::"),
        ("2001:db8:122::/48", "2001:db8:122:c000:2:2100::"),
        ("2001:db8:122:300::/56", "2001:db8:122:3c0:0:221::"),
        ("2001:db8:122:344::/64", "2001:db8:122:344:c0:2:2100:0"),
        ("2001:db8:122:344::/96", "2001:db8:122:344::192.0.2.33"),
    ];

    #[test]
    fn synthesis_matches_rfc_6052_for_every_length_and_extraction_undoes_it() {
        let v4 = Ipv4Addr::new(192, 0, 2, 33);
        for (prefix, want) in RFC6052 {
            let p = Nat64Prefix::parse(prefix).unwrap();
            let want: Ipv6Addr = want.parse().unwrap();
            assert_eq!(p.synthesize(v4), want, "{prefix}");
            assert_eq!(p.extract(want), Some(v4), "{prefix}");
            assert_eq!(p.to_string(), prefix);
        }
        let wkp = Nat64Prefix::parse("64:ff9b::/96").unwrap();
        let s: SocketAddr = "203.0.113.5:4433".parse().unwrap();
        assert_eq!(wkp.server(s), "[64:ff9b::cb00:7105]:4433".parse().unwrap());
        let v6: SocketAddr = "[2001:db8::5]:4433".parse().unwrap();
        assert_eq!(wkp.server(v6), v6);
        assert_eq!(wkp.extract("2001:db8::1".parse().unwrap()), None);
    }

    #[test]
    fn the_prefix_is_discovered_from_ipv4only_arpa_answers_of_any_length() {
        for (prefix, _) in RFC6052 {
            let p = Nat64Prefix::parse(prefix).unwrap();
            let answers = [p.synthesize(WELL_KNOWN[0]), p.synthesize(WELL_KNOWN[1])];
            assert_eq!(discover(&answers), Some(p), "{prefix}");
        }
        // The well-known prefix, as a DNS64 answers with it most often.
        let a: Ipv6Addr = "64:ff9b::c000:aa".parse().unwrap();
        assert_eq!(discover(&[a]), Nat64Prefix::parse("64:ff9b::/96").ok());
        // No DNS64: real IPv6 addresses or none.
        assert_eq!(discover(&["2001:db8::1".parse().unwrap()]), None);
        assert_eq!(discover(&[]), None);
    }

    #[test]
    fn bad_prefixes_are_refused_saying_what_to_give() {
        for bad in [
            "64:ff9b::",
            "64:ff9b::/97",
            "64:ff9b::/33",
            "10.0.0.0/96",
            "64:ff9b::1/96",
        ] {
            let e = Nat64Prefix::parse(bad).unwrap_err().to_string();
            assert!(e.contains(bad) && e.contains("64:ff9b::/96"), "{e}");
        }
    }
}
