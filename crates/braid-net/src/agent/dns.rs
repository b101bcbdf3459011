//! Name resolution through one path (direct mode): a name may resolve differently on each
//! network (a CDN answers with a server near the network's resolver), so a connection's
//! name is resolved with queries sent from a socket bound to the path it will use, to the
//! system's nameservers (`/etc/resolv.conf`).
//!
//! Owns: reading the nameservers, one A (then AAAA) query per nameserver with a short
//! timeout, and reading the answer (the wire format is simple-dns's). Must not touch: which
//! path is used (`direct`), caching (none: every connection asks; the nameserver caches).

use crate::udp::PathBind;
use simple_dns::{Name, Packet, PacketFlag, Question, CLASS, QCLASS, QTYPE, TYPE};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// How long one nameserver gets to answer one query.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// The nameservers of `resolv_conf` (the text of /etc/resolv.conf), port 53.
pub fn nameservers(resolv_conf: &str) -> Vec<SocketAddr> {
    resolv_conf
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("nameserver")).then(|| w.next()).flatten()
        })
        // A scoped IPv6 address (fe80::1%eth0) is not parsed: skipped.
        .filter_map(|a| a.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .collect()
}

/// The system's nameservers.
pub fn system_nameservers() -> Vec<SocketAddr> {
    std::fs::read_to_string("/etc/resolv.conf")
        .map(|t| nameservers(&t))
        .unwrap_or_default()
}

/// The addresses `hosts` (the text of /etc/hosts) gives `name` (case-insensitive).
pub fn hosts_lookup(hosts: &str, name: &str) -> Vec<IpAddr> {
    hosts
        .lines()
        .map(|l| l.split('#').next().unwrap_or_default())
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let ip = w.next()?.parse::<IpAddr>().ok()?;
            w.any(|n| n.eq_ignore_ascii_case(name)).then_some(ip)
        })
        .collect()
}

/// A query for `name` of type `qtype` with id `id`.
fn query(id: u16, name: &str, qtype: TYPE) -> io::Result<Vec<u8>> {
    let bad = |e: simple_dns::SimpleDnsError| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a DNS name: {e}"),
        )
    };
    let mut p = Packet::new_query(id);
    p.set_flags(PacketFlag::RECURSION_DESIRED);
    p.questions.push(Question::new(
        Name::new(name).map_err(bad)?,
        QTYPE::TYPE(qtype),
        QCLASS::CLASS(CLASS::IN),
        false,
    ));
    p.build_bytes_vec().map_err(bad)
}

/// The addresses in answer `data` to query `id`; `None` if it is not an answer to it.
pub fn addresses(id: u16, data: &[u8]) -> Option<Vec<IpAddr>> {
    let p = Packet::parse(data).ok()?;
    if p.id() != id {
        return None;
    }
    Some(
        p.answers
            .iter()
            .filter_map(|rr| match &rr.rdata {
                simple_dns::rdata::RData::A(a) => Some(IpAddr::V4(Ipv4Addr::from(a.address))),
                simple_dns::rdata::RData::AAAA(a) => Some(IpAddr::V6(Ipv6Addr::from(a.address))),
                _ => None,
            })
            .collect(),
    )
}

/// Resolve `name` with queries sent through path `bind` to `servers` (in turn), A records
/// first, AAAA if there is none.
pub async fn resolve_via(
    bind: &PathBind,
    servers: &[SocketAddr],
    name: &str,
    port: u16,
) -> io::Result<Vec<SocketAddr>> {
    if let Ok(ip) = name.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    // /etc/hosts first, as the system's resolver does (localhost, local names).
    let local = std::fs::read_to_string("/etc/hosts")
        .map(|h| hosts_lookup(&h, name))
        .unwrap_or_default();
    if !local.is_empty() {
        return Ok(local
            .into_iter()
            .map(|ip| SocketAddr::new(ip, port))
            .collect());
    }
    if servers.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "no nameserver in /etc/resolv.conf to resolve names through a path",
        ));
    }
    let mut last = None;
    for qtype in [TYPE::A, TYPE::AAAA] {
        for &ns in servers {
            match ask(bind, ns, name, qtype).await {
                Ok(ips) if !ips.is_empty() => {
                    return Ok(ips
                        .into_iter()
                        .map(|ip| SocketAddr::new(ip, port))
                        .collect())
                }
                Ok(_) => {}
                Err(e) => last = Some(e),
            }
        }
    }
    Err(last
        .unwrap_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{name}: no address"))))
}

async fn ask(bind: &PathBind, ns: SocketAddr, name: &str, qtype: TYPE) -> io::Result<Vec<IpAddr>> {
    let id = braid_crypto::random::random_u64().map_or(0x5eed, |r| r as u16);
    let q = query(id, name, qtype)?;
    let sock = crate::udp::bind_path(bind, ns)?;
    sock.send_to(&q, ns).await?;
    let mut buf = vec![0u8; 4096];
    let wait = async {
        loop {
            let (n, from) = sock.recv_from(&mut buf).await?;
            if from != ns {
                continue;
            }
            if let Some(a) = addresses(id, &buf[..n]) {
                return Ok::<_, io::Error>(a);
            }
        }
    };
    tokio::time::timeout(QUERY_TIMEOUT, wait)
        .await
        .map_err(|_| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("nameserver {ns} did not answer for {name} within {QUERY_TIMEOUT:?}"),
            )
        })?
}

#[cfg(test)]
mod tests {
    use super::*;
    use simple_dns::rdata::{RData, A};
    use simple_dns::ResourceRecord;

    #[test]
    fn reads_nameservers() {
        let t = "# c\nsearch x\nnameserver 10.0.0.53\nnameserver  ::1\nnameserver fe80::1%eth0\nnameserver\n";
        assert_eq!(
            nameservers(t),
            vec!["10.0.0.53:53".parse().unwrap(), "[::1]:53".parse().unwrap()]
        );
    }

    #[test]
    fn reads_hosts() {
        let h = "127.0.0.1 localhost\n::1 localhost ip6-localhost # c\n# 10.0.0.1 gone\n10.0.0.2 Box box.lan\n";
        assert_eq!(hosts_lookup(h, "localhost").len(), 2);
        assert_eq!(hosts_lookup(h, "box"), vec![IpAddr::from([10, 0, 0, 2])]);
        assert!(hosts_lookup(h, "gone").is_empty());
    }

    #[test]
    fn bad_names_and_answers_are_errors_not_panics() {
        assert!(query(1, &"a".repeat(300), TYPE::A).is_err());
        assert_eq!(addresses(1, b"\x00\x01garbage"), None);
        assert_eq!(addresses(1, &[]), None);
    }

    /// A nameserver on loopback answers a query sent from a socket bound to 127.0.0.1.
    #[tokio::test]
    async fn resolves_through_a_bound_socket() {
        let ns = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = ns.local_addr().unwrap();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            while let Ok((n, from)) = ns.recv_from(&mut buf).await {
                let q = Packet::parse(&buf[..n]).unwrap();
                let mut a = q.into_reply();
                let is_a = a.questions[0].qtype == QTYPE::TYPE(TYPE::A);
                if is_a {
                    a.answers.push(ResourceRecord::new(
                        Name::new_unchecked("example.test"),
                        CLASS::IN,
                        60,
                        RData::A(A {
                            address: u32::from(Ipv4Addr::new(192, 0, 2, 7)),
                        }),
                    ));
                }
                let out = a.build_bytes_vec().unwrap();
                ns.send_to(&out, from).await.unwrap();
            }
        });
        let bind = PathBind::Address("127.0.0.1".parse().unwrap());
        let got = resolve_via(&bind, &[addr], "example.test", 8080)
            .await
            .unwrap();
        assert_eq!(got, vec!["192.0.2.7:8080".parse().unwrap()]);
        let ip = resolve_via(&bind, &[], "192.0.2.9", 1).await.unwrap();
        assert_eq!(ip, vec!["192.0.2.9:1".parse().unwrap()]);
        assert!(resolve_via(&bind, &[], "example.test", 1).await.is_err());
    }
}
