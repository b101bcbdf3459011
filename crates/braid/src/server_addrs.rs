//! `--server` values to addresses: `HOST:PORT` (every address the name resolves to is one
//! server's), or several addresses of one server joined by commas
//! (`203.0.113.5:4433,[2001:db8::5]:4433`). Each server gets one address of the agent's
//! server family (the first `--server`'s first family) and, when it has one, an address of
//! the other family for paths that have only that family (an IPv6-only mobile network).
//!
//! A name that does not resolve is not a format error: `braid agent` says the name does not
//! resolve yet and tries again (1 s, doubling to 30 s: at boot the resolver may not be up),
//! `check-config` says so and fails.
//!
//! Owns: resolving (and retrying) and pairing. Must not touch: anything else of the
//! agent's settings.

use anyhow::{bail, Result};
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

/// What to do when a well-formed `HOST:PORT` does not resolve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unresolved {
    /// Fail with what is wrong (`check-config`).
    Fail,
    /// Say so and try again, for as long as it takes (`braid agent`).
    Retry,
}

/// The first wait before resolving a name again; it doubles up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// The system resolver.
fn system_lookup(part: &str) -> std::io::Result<Vec<SocketAddr>> {
    part.to_socket_addrs().map(Iterator::collect)
}

/// The host of `HOST:PORT` or `[IPV6]:PORT`, `None` when `part` is not of that form.
fn host_of(part: &str) -> Option<&str> {
    let (host, port) = match part.strip_prefix('[') {
        Some(rest) => rest.split_once("]:")?,
        None => part.rsplit_once(':').filter(|(h, _)| !h.contains(':'))?,
    };
    (!host.is_empty() && port.parse::<u16>().is_ok()).then_some(host)
}

/// The servers' addresses in the agent's family, and (address, the same server's address
/// of the other family) pairs.
pub(crate) type ServerAddrs = (Vec<SocketAddr>, Vec<(SocketAddr, SocketAddr)>);

/// Resolve every `--server` value (see the module docs).
pub(crate) fn resolve(servers: &[String], unresolved: Unresolved) -> Result<ServerAddrs> {
    resolve_with(
        servers,
        unresolved,
        &mut system_lookup,
        &mut std::thread::sleep,
    )
}

/// [`resolve`] with the lookup and the sleep given (tests).
fn resolve_with(
    servers: &[String],
    unresolved: Unresolved,
    lookup: &mut dyn FnMut(&str) -> std::io::Result<Vec<SocketAddr>>,
    sleep: &mut dyn FnMut(Duration),
) -> Result<ServerAddrs> {
    let mut all = Vec::new();
    for server in servers {
        let mut found: Vec<SocketAddr> = Vec::new();
        for part in server.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some(host) = host_of(part) else {
                bail!(
                    "--server {server:?}: {part:?} is not HOST:PORT (like vpn.example.net:4433, \
                     203.0.113.1:4433 or [2001:db8::1]:4433)"
                );
            };
            let mut wait = RETRY_FIRST;
            let addrs = loop {
                match lookup(part) {
                    Ok(a) => break a,
                    Err(e) if unresolved == Unresolved::Retry => {
                        eprintln!(
                            "braid: --server {server:?}: the name {host:?} does not resolve yet \
                             ({e}); trying again in {} s",
                            wait.as_secs()
                        );
                        sleep(wait);
                        wait = (wait * 2).min(RETRY_MAX);
                    }
                    Err(e) => bail!(
                        "--server {server:?}: the name {host:?} does not resolve ({e}); check \
                         the name and this machine's DNS (/etc/resolv.conf; `braid agent` \
                         waits for it)"
                    ),
                }
            };
            found.extend(addrs);
        }
        if found.is_empty() {
            bail!("--server {server:?}: no address");
        }
        all.push((server, found));
    }
    pair(&all)
}

/// Pick each server's address of the first server's first family and its other one.
fn pair(all: &[(&String, Vec<SocketAddr>)]) -> Result<ServerAddrs> {
    let Some(v4) = all.first().map(|(_, a)| a[0].is_ipv4()) else {
        return Ok((Vec::new(), Vec::new()));
    };
    let (mut primary, mut other) = (Vec::new(), Vec::new());
    for (server, found) in all {
        let Some(&p) = found.iter().find(|a| a.is_ipv4() == v4) else {
            bail!(
                "--server {server:?}: no {} address, unlike the first server; all servers need \
                 one of the same family (give each server's addresses as ADDR,ADDR)",
                if v4 { "IPv4" } else { "IPv6" }
            );
        };
        primary.push(p);
        if let Some(&o) = found.iter().find(|a| a.is_ipv4() != v4) {
            other.push((p, o));
        }
    }
    Ok((primary, other))
}

/// The servers' addresses for IPv6-only paths through a NAT64 with `prefix`: each IPv4
/// server without an IPv6 address of its own gets the one synthesized in the prefix.
pub(crate) fn with_nat64(
    primary: &[SocketAddr],
    other: &mut Vec<(SocketAddr, SocketAddr)>,
    prefix: &braid_net::nat64::Nat64Prefix,
) {
    for &p in primary.iter().filter(|p| p.is_ipv4()) {
        if other.iter().all(|(a, _)| *a != p) {
            other.push((p, prefix.server(p)));
        }
    }
}

/// `--nat64-prefix`: the prefix given, or with `auto` the one the AAAA records of
/// ipv4only.arpa reveal (RFC 7050), through `lookup`; `None` when none is found.
pub(crate) fn nat64_prefix(
    given: &str,
    lookup: &mut dyn FnMut(&str) -> std::io::Result<Vec<SocketAddr>>,
) -> Result<Option<braid_net::nat64::Nat64Prefix>> {
    use braid_net::nat64::{discover, Nat64Prefix, IPV4ONLY_ARPA};
    if given != "auto" {
        return Ok(Some(Nat64Prefix::parse(given)?));
    }
    let answers: Vec<std::net::Ipv6Addr> = lookup(&format!("{IPV4ONLY_ARPA}:0"))
        .unwrap_or_default()
        .into_iter()
        .filter_map(|a| match a.ip() {
            std::net::IpAddr::V6(v6) => Some(v6),
            std::net::IpAddr::V4(_) => None,
        })
        .collect();
    Ok(discover(&answers))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nat64_gives_ipv4_servers_a_synthesized_ipv6_address_and_auto_discovers_the_prefix() {
        let p = braid_net::nat64::Nat64Prefix::parse("64:ff9b::/96").unwrap();
        let v4: SocketAddr = "203.0.113.5:4433".parse().unwrap();
        let own: SocketAddr = "198.51.100.7:4433".parse().unwrap();
        let own6: SocketAddr = "[2001:db8::7]:4433".parse().unwrap();
        let mut other = vec![(own, own6)];
        with_nat64(&[v4, own], &mut other, &p);
        let nat: SocketAddr = "[64:ff9b::cb00:7105]:4433".parse().unwrap();
        assert_eq!(
            other,
            [(own, own6), (v4, nat)],
            "a server's own IPv6 address is kept"
        );
        let mut dns64 = |_: &str| Ok(vec!["[64:ff9b::c000:aa]:0".parse().unwrap()]);
        assert_eq!(nat64_prefix("auto", &mut dns64).unwrap(), Some(p));
        let mut plain = |_: &str| Ok(vec!["192.0.0.170:0".parse().unwrap()]);
        assert_eq!(nat64_prefix("auto", &mut plain).unwrap(), None);
        let e = nat64_prefix("64:ff9b::/95", &mut plain)
            .unwrap_err()
            .to_string();
        assert!(e.contains("64:ff9b::/95"), "{e}");
    }

    fn r(v: &[&str]) -> Result<ServerAddrs> {
        resolve(&strings(v), Unresolved::Fail)
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// Issue 38, item 12: a temporary DNS failure ended the agent with "cannot resolve
    /// ...; expected HOST:PORT". The agent tries again (1 s, 2 s, ...) until the name
    /// resolves; check-config says the name does not resolve, not that the format is wrong.
    #[test]
    fn a_name_that_does_not_resolve_yet_is_tried_again_and_not_blamed_on_the_format() {
        let want: SocketAddr = "192.0.2.7:4433".parse().unwrap();
        let mut failures = 3;
        let mut lookup = |part: &str| {
            assert_eq!(part, "vpn.example.net:4433");
            if failures > 0 {
                failures -= 1;
                let e = "Temporary failure in name resolution";
                return Err(std::io::Error::other(e));
            }
            Ok(vec![want])
        };
        let mut slept = Vec::new();
        let servers = strings(&["vpn.example.net:4433"]);
        let (p, _) = resolve_with(&servers, Unresolved::Retry, &mut lookup, &mut |d| {
            slept.push(d.as_secs())
        })
        .unwrap();
        assert_eq!(p, vec![want]);
        assert_eq!(slept, [1, 2, 4]);
        let mut down = |_: &str| Err(std::io::Error::other("Temporary failure"));
        let e = resolve_with(&servers, Unresolved::Fail, &mut down, &mut |_| {})
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("does not resolve") && !e.contains("HOST:PORT"),
            "{e}"
        );
        // A value that is not HOST:PORT is a format error, and no lookup is made.
        for bad in [
            "vpn.example.net",
            "vpn.example.net:x",
            "2001:db8::1:4433",
            ":4433",
        ] {
            let mut never = |_: &str| -> std::io::Result<Vec<SocketAddr>> { panic!("looked up") };
            let e = resolve_with(&strings(&[bad]), Unresolved::Retry, &mut never, &mut |_| {})
                .unwrap_err()
                .to_string();
            assert!(e.contains("is not HOST:PORT"), "{bad}: {e}");
        }
    }

    /// One server's IPv4 and IPv6 addresses joined by a comma: the IPv4 one is the
    /// server's, the IPv6 one its other-family address.
    #[test]
    fn a_server_given_by_both_its_addresses_gets_both() {
        let (p, o) = r(&["192.0.2.1:4433,[2001:db8::1]:4433"]).unwrap();
        assert_eq!(p, vec!["192.0.2.1:4433".parse().unwrap()]);
        assert_eq!(
            o,
            vec![(
                "192.0.2.1:4433".parse().unwrap(),
                "[2001:db8::1]:4433".parse().unwrap()
            )]
        );
    }

    /// The first server's first address sets the family; a second server with both
    /// families contributes its address of that family, one with only the other is refused
    /// with what to do.
    #[test]
    fn servers_share_the_first_servers_family() {
        let (p, o) = r(&["[2001:db8::1]:1", "192.0.2.2:2,[2001:db8::2]:2"]).unwrap();
        assert_eq!(p.len(), 2);
        assert!(p.iter().all(|a| a.is_ipv6()));
        assert_eq!(o.len(), 1);
        let e = r(&["192.0.2.1:1", "[2001:db8::1]:1"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no IPv4 address") && e.contains("ADDR,ADDR"),
            "{e}"
        );
        assert!(r(&["nonsense"]).is_err());
        assert_eq!(r(&[]).unwrap(), (vec![], vec![]));
    }
}
