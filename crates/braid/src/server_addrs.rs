//! `--server` values to addresses: `HOST:PORT` (every address the name resolves to is one
//! server's), or several addresses of one server joined by commas
//! (`203.0.113.5:4433,[2001:db8::5]:4433`). Each server gets one address of the agent's
//! server family (the first `--server`'s first family) and, when it has one, an address of
//! the other family for paths that have only that family (an IPv6-only mobile network).
//!
//! Owns: resolving and pairing. Must not touch: anything else of the agent's settings.

use anyhow::{bail, Context, Result};
use std::net::{SocketAddr, ToSocketAddrs};

/// The servers' addresses in the agent's family, and (address, the same server's address
/// of the other family) pairs.
pub(crate) type ServerAddrs = (Vec<SocketAddr>, Vec<(SocketAddr, SocketAddr)>);

/// Resolve every `--server` value (see the module docs).
pub(crate) fn resolve(servers: &[String]) -> Result<ServerAddrs> {
    let mut all = Vec::new();
    for server in servers {
        let mut found: Vec<SocketAddr> = Vec::new();
        for part in server.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let addrs = part.to_socket_addrs().with_context(|| {
                format!("--server {server:?}: cannot resolve {part:?}; expected HOST:PORT")
            })?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn r(v: &[&str]) -> Result<ServerAddrs> {
        resolve(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
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
