//! UDP sockets for paths: bound to a network interface (SO_BINDTODEVICE) or to a local
//! source address, with large buffers.
//!
//! Owns: creating and configuring sockets, and sending a proxied datagram to a target.
//! Must not touch: what is sent on them.

use braid_proxy::TargetAddr;
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use tokio::net::UdpSocket;

/// Socket buffers: several bandwidth-delay products of a fast path.
pub const SOCKET_BUFFER: usize = 8 << 20;

/// How a path's socket is bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathBind {
    /// To this network interface (needs CAP_NET_RAW or root).
    Interface(String),
    /// To this local source address.
    Address(IpAddr),
    /// `--path auto`: whichever interface with a default route the path manager gives the
    /// path (`PathManager::bind_of`); never bound as such.
    Auto,
}

impl std::str::FromStr for PathBind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "auto" {
            return Ok(PathBind::Auto);
        }
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(PathBind::Address(ip));
        }
        if s.is_empty() || s.len() > 15 || s.contains(['/', ' ', '\0']) {
            return Err(format!(
                "{s:?} is neither a local IP address nor a network interface name (like eth0 or wwan0)"
            ));
        }
        Ok(PathBind::Interface(s.to_string()))
    }
}

/// The firewall mark every path socket carries (0: none). TUN mode sets it so that policy
/// routing keeps braid's own packets out of the tunnel.
static SOCKET_MARK: AtomicU32 = AtomicU32::new(0);

/// Marks every path socket bound from now on with `mark` (SO_MARK; needs CAP_NET_ADMIN).
pub fn set_socket_mark(mark: Option<u32>) {
    SOCKET_MARK.store(mark.unwrap_or(0), Ordering::Relaxed);
}

/// The mark path sockets carry now, if any.
pub fn socket_mark() -> Option<u32> {
    Some(SOCKET_MARK.load(Ordering::Relaxed)).filter(|&m| m != 0)
}

/// Bind a non-blocking UDP socket to `addr`, optionally to a device, with big buffers.
pub fn bind_udp(addr: SocketAddr, device: Option<&str>) -> io::Result<UdpSocket> {
    let domain = if addr.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let sock = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    if let Some(dev) = device {
        sock.bind_device(Some(dev.as_bytes())).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot bind to interface {dev:?}: {e} (binding to a device needs root or CAP_NET_RAW)"),
            )
        })?;
    }
    if let Some(mark) = socket_mark() {
        sock.set_mark(mark).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot mark a path socket for TUN mode's routing: {e}"),
            )
        })?;
    }
    if addr.is_ipv6() && addr.ip().is_unspecified() {
        // Bound to no address (a path bound to an interface): IPv4 destinations too
        // (IPv4-mapped), whatever the host's `bindv6only`.
        let _ = sock.set_only_v6(false);
    }
    let _ = sock.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = sock.set_send_buffer_size(SOCKET_BUFFER);
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())
        .map_err(|e| io::Error::new(e.kind(), format!("cannot bind UDP socket to {addr}: {e}")))?;
    UdpSocket::from_std(sock.into())
}

/// A socket for one path towards `server`.
pub fn bind_path(bind: &PathBind, server: SocketAddr) -> io::Result<UdpSocket> {
    match bind {
        PathBind::Address(ip) => bind_udp(SocketAddr::new(*ip, 0), None),
        PathBind::Interface(dev) => {
            let any: IpAddr = if server.is_ipv4() {
                Ipv4Addr::UNSPECIFIED.into()
            } else {
                Ipv6Addr::UNSPECIFIED.into()
            };
            bind_udp(SocketAddr::new(any, 0), Some(dev))
        }
        PathBind::Auto => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "an auto path is bound to the interface the path manager chose, not as `auto`",
        )),
    }
}

/// A socket for one proxied UDP flow: IPv6 and IPv4 both (one flow may send to either
/// family, and the application chose the destination), or IPv4 alone where the host has no
/// IPv6.
pub fn flow_socket() -> io::Result<UdpSocket> {
    let dual = || -> io::Result<std::net::UdpSocket> {
        let s = Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP))?;
        s.set_only_v6(false)?;
        s.set_nonblocking(true)?;
        s.bind(&SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)).into())?;
        Ok(s.into())
    };
    let std = match dual() {
        Ok(s) => s,
        Err(_) => {
            let s = std::net::UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
            s.set_nonblocking(true)?;
            s
        }
    };
    UdpSocket::from_std(std)
}

/// True when this host can make IPv6 sockets (asked once).
pub fn ipv6_available() -> bool {
    static V6: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *V6.get_or_init(|| Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP)).is_ok())
}

/// `to` as `sock` can send to it: an IPv4 address becomes IPv4-mapped on an IPv6 socket.
fn reachable_as(sock: &UdpSocket, to: SocketAddr) -> SocketAddr {
    reachable_from(sock.local_addr().is_ok_and(|a| a.is_ipv6()), to)
}

/// `to` as a socket of the given family can send to it (see [`reachable_as`]), for callers
/// that know the family and must not ask the kernel per datagram.
pub fn reachable_from(ipv6_socket: bool, to: SocketAddr) -> SocketAddr {
    match to {
        SocketAddr::V4(v4) if ipv6_socket => {
            SocketAddr::new(v4.ip().to_ipv6_mapped().into(), v4.port())
        }
        _ => to,
    }
}

/// Where a datagram came from, IPv4-mapped addresses of a dual-stack socket as IPv4.
pub fn canonical(from: SocketAddr) -> SocketAddr {
    SocketAddr::new(from.ip().to_canonical(), from.port())
}

/// Send a proxied datagram, resolving a name first. Failures are dropped (UDP semantics).
pub async fn send_datagram(sock: &UdpSocket, dest: &TargetAddr, payload: &[u8]) {
    let to = match dest {
        TargetAddr::Ip(a) => Some(*a),
        TargetAddr::Domain(name, port) => tokio::net::lookup_host((name.as_str(), *port))
            .await
            .ok()
            .and_then(|mut a| a.next()),
    };
    if let Some(to) = to {
        let _ = sock.send_to(payload, reachable_as(sock, to)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TUN-mode flow to an IPv6 destination got nothing back: the server's flow socket was
    /// IPv4-only. One flow socket reaches both families, and replies name IPv4 senders as
    /// IPv4 (what the agent matches against).
    #[tokio::test]
    async fn udp_flow_to_ipv6_destination_is_relayed() {
        let mut peers = vec![UdpSocket::bind("127.0.0.1:0").await.unwrap()];
        if let Ok(v6) = UdpSocket::bind("[::1]:0").await {
            peers.push(v6);
        } else {
            eprintln!("no IPv6 loopback here: checking IPv4 only");
        }
        let flow = flow_socket().unwrap();
        for peer in &peers {
            let at = peer.local_addr().unwrap();
            send_datagram(&flow, &TargetAddr::Ip(at), b"hello").await;
            let mut buf = [0u8; 16];
            let wait = std::time::Duration::from_secs(2);
            let got = tokio::time::timeout(wait, peer.recv_from(&mut buf)).await;
            let (n, from) = got.expect("the datagram reaches {at}").unwrap();
            assert_eq!(&buf[..n], b"hello");
            peer.send_to(b"back", from).await.unwrap();
            let got = tokio::time::timeout(wait, flow.recv_from(&mut buf)).await;
            let (n, from) = got.expect("the reply arrives").unwrap();
            assert_eq!(&buf[..n], b"back");
            assert_eq!(canonical(from), at, "the reply names its sender as it is");
        }
    }
}
