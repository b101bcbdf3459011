//! One egress rule as an operator writes it: an address block (CIDR) and, optionally, the
//! ports it covers: `10.0.0.0/8`, `192.0.2.7`, `10.0.0.0/8:80,443,8000-8100`, `fc00::/7`,
//! `[2001:db8::/32]:443`.
//!
//! Owns: parsing and printing rules, matching one destination. Must not touch: which rule
//! wins (`policy`), sockets, the server's own addresses.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

/// An address block: the network address and the prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    net: IpAddr,
    len: u8,
}

impl Cidr {
    /// The block of `len` leading bits of `net` (an IPv4-mapped IPv6 block is taken as the
    /// IPv4 block it maps); `None` when `len` is too long for the family or `net` has bits
    /// set past the prefix.
    pub fn new(net: IpAddr, len: u8) -> Option<Cidr> {
        let (net, len) = match net {
            IpAddr::V6(a) if len >= 96 => match a.to_ipv4_mapped() {
                Some(v4) => (IpAddr::V4(v4), len - 96),
                None => (net, len),
            },
            _ => (net, len),
        };
        let c = Cidr { net, len };
        (len <= c.bits() && c.masked(net) == Some(net)).then_some(c)
    }

    /// One address, as a block of its own.
    pub fn host(ip: IpAddr) -> Cidr {
        let ip = canonical(ip);
        let len = if ip.is_ipv4() { 32 } else { 128 };
        Cidr { net: ip, len }
    }

    /// The prefix length.
    pub fn prefix_len(&self) -> u8 {
        self.len
    }

    fn bits(&self) -> u8 {
        if self.net.is_ipv4() {
            32
        } else {
            128
        }
    }

    /// `ip` with the bits past this block's prefix cleared, if of the same family.
    fn masked(&self, ip: IpAddr) -> Option<IpAddr> {
        match (self.net, ip) {
            (IpAddr::V4(_), IpAddr::V4(a)) => {
                let m = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                Some(IpAddr::V4(Ipv4Addr::from(u32::from(a) & m)))
            }
            (IpAddr::V6(_), IpAddr::V6(a)) => {
                let m = u128::MAX
                    .checked_shl(128 - u32::from(self.len))
                    .unwrap_or(0);
                Some(IpAddr::V6(Ipv6Addr::from(u128::from(a) & m)))
            }
            _ => None,
        }
    }

    /// Whether `ip` (canonical: an IPv4-mapped address as IPv4) is in the block.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.masked(ip) == Some(self.net)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.net, self.len)
    }
}

impl FromStr for Cidr {
    type Err = String;

    /// `10.0.0.0/8`, `fc00::/7`, or one address (`192.0.2.7`, `::1`).
    fn from_str(s: &str) -> Result<Cidr, String> {
        let (addr, len) = s.split_once('/').unwrap_or((s, ""));
        let ip: IpAddr = addr
            .parse()
            .map_err(|_| format!("{addr:?} is not an IPv4 or IPv6 address"))?;
        if len.is_empty() {
            return Ok(Cidr::host(ip));
        }
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let len: u8 = match len.parse() {
            Ok(n) if n <= max => n,
            _ => return Err(format!("the prefix length {len:?} is not 0 to {max}")),
        };
        Cidr::new(ip, len).ok_or_else(|| {
            let net = Cidr { net: ip, len }.masked(ip).unwrap_or(ip);
            format!("{s} has bits set past its prefix: did you mean {net}/{len}?")
        })
    }
}

/// The ports a rule covers: ranges, both ends included.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ports(Vec<(u16, u16)>);

impl Ports {
    /// Whether `port` is in one of the ranges.
    pub fn contains(&self, port: u16) -> bool {
        self.0.iter().any(|&(lo, hi)| (lo..=hi).contains(&port))
    }
}

impl FromStr for Ports {
    type Err = String;

    /// `80`, `80,443`, `8000-8100`.
    fn from_str(s: &str) -> Result<Ports, String> {
        let num = |p: &str| match p.trim().parse::<u16>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("the port {p:?} is not 1 to 65535")),
        };
        let mut v = Vec::new();
        for part in s.split(',') {
            let (lo, hi) = part.split_once('-').unwrap_or((part, part));
            let (lo, hi) = (num(lo)?, num(hi)?);
            if lo > hi {
                return Err(format!("the port range {part:?} ends before it starts"));
            }
            v.push((lo, hi));
        }
        Ok(Ports(v))
    }
}

impl fmt::Display for Ports {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, &(lo, hi)) in self.0.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            if lo == hi {
                write!(f, "{sep}{lo}")?;
            } else {
                write!(f, "{sep}{lo}-{hi}")?;
            }
        }
        Ok(())
    }
}

/// An address block and the ports it covers (all when `ports` is `None`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rule {
    /// The addresses.
    pub net: Cidr,
    /// The ports; `None`: every port.
    pub ports: Option<Ports>,
}

impl Rule {
    /// Whether `dest` (its address canonical) is covered.
    pub fn matches(&self, dest: SocketAddr) -> bool {
        self.net.contains(dest.ip()) && self.ports.as_ref().is_none_or(|p| p.contains(dest.port()))
    }
}

impl From<Cidr> for Rule {
    fn from(net: Cidr) -> Rule {
        Rule { net, ports: None }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.ports, self.net.net) {
            (None, _) => write!(f, "{}", self.net),
            (Some(p), IpAddr::V4(_)) => write!(f, "{}:{p}", self.net),
            (Some(p), IpAddr::V6(_)) => write!(f, "[{}]:{p}", self.net),
        }
    }
}

impl FromStr for Rule {
    type Err = String;

    /// `CIDR`, `CIDR:PORTS` (IPv4), `[CIDR]:PORTS` (IPv6); see the module doc.
    fn from_str(s: &str) -> Result<Rule, String> {
        let s = s.trim();
        let bad = |why: String| {
            format!(
                "egress rule {s:?}: {why}; expected CIDR[:PORTS] like 10.0.0.0/8, \
                 192.0.2.7:80,443, 10.0.0.0/8:8000-8100 or [fc00::/7]:443"
            )
        };
        let (net, ports) = if let Some(rest) = s.strip_prefix('[') {
            let (net, after) = rest
                .split_once(']')
                .ok_or_else(|| bad("no ']' after '['".into()))?;
            match after.strip_prefix(':') {
                Some(p) => (net, Some(p)),
                None if after.is_empty() => (net, None),
                None => return Err(bad(format!("{after:?} after ']'"))),
            }
        } else if s.matches(':').count() >= 2 {
            // An IPv6 block without ports (ports need the brackets).
            (s, None)
        } else {
            match s.split_once(':') {
                Some((n, p)) => (n, Some(p)),
                None => (s, None),
            }
        };
        let net: Cidr = net.parse().map_err(bad)?;
        let ports = ports.map(str::parse).transpose().map_err(bad)?;
        Ok(Rule { net, ports })
    }
}

/// `ip`, an IPv4-mapped IPv6 address as the IPv4 address it maps (the address the kernel
/// connects to), so that `::ffff:127.0.0.1` is loopback.
pub fn canonical(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(s: &str) -> Rule {
        s.parse().unwrap_or_else(|e| panic!("{e}"))
    }

    fn at(s: &str) -> SocketAddr {
        let a: SocketAddr = s.parse().unwrap();
        SocketAddr::new(canonical(a.ip()), a.port())
    }

    #[test]
    fn rules_parse_and_print_back() {
        for s in [
            "10.0.0.0/8",
            "192.0.2.7/32",
            "10.0.0.0/8:80,443,8000-8100",
            "fc00::/7",
            "[2001:db8::/32]:443",
            "0.0.0.0/0:25",
            "::/0",
        ] {
            assert_eq!(rule(s).to_string(), s);
        }
        assert_eq!(rule("192.0.2.7").to_string(), "192.0.2.7/32");
        assert_eq!(rule("::1").to_string(), "::1/128");
        assert_eq!(rule("[::1]:22").to_string(), "[::1/128]:22");
        // An IPv4-mapped block is the IPv4 block.
        assert_eq!(rule("::ffff:127.0.0.0/104").to_string(), "127.0.0.0/8");
    }

    #[test]
    fn bad_rules_say_what_is_wrong() {
        for (s, says) in [
            ("10.0.0.0/33", "prefix length"),
            ("10.1.2.3/8", "did you mean 10.0.0.0/8"),
            ("example.com", "not an IPv4 or IPv6 address"),
            ("10.0.0.0/8:0", "port"),
            ("10.0.0.0/8:90-80", "ends before it starts"),
            ("10.0.0.0/8:http", "port"),
            ("[fc00::/7", "no ']'"),
            ("[fc00::/7]443", "after ']'"),
            ("", "not an IPv4"),
        ] {
            let e = s.parse::<Rule>().unwrap_err();
            assert!(e.contains(says) && e.contains("expected CIDR"), "{s}: {e}");
        }
    }

    #[test]
    fn rules_match_addresses_and_ports() {
        let r = rule("10.0.0.0/8:80,443,8000-8100");
        assert!(r.matches(at("10.1.2.3:443")));
        assert!(r.matches(at("10.255.0.1:8050")));
        assert!(!r.matches(at("10.1.2.3:22")));
        assert!(!r.matches(at("11.0.0.1:80")));
        assert!(!r.matches(at("[::1]:80")));
        let all = rule("0.0.0.0/0");
        assert!(all.matches(at("1.2.3.4:1")) && !all.matches(at("[2001:db8::1]:1")));
        let v6 = rule("[fe80::/10]:53");
        assert!(v6.matches(at("[fe80::1]:53")) && !v6.matches(at("[fe80::1]:54")));
        // A mapped destination matches the IPv4 rule.
        assert!(rule("127.0.0.0/8").matches(at("[::ffff:127.0.0.1]:80")));
    }
}
