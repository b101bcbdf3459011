//! How large a datagram each path carries: its address family's IP header and the MTU of
//! the route it takes. 1472 bytes of UDP payload fill a 1500-byte MTU over IPv4, but over
//! IPv6 (a 40-byte header) they make 1520-byte packets that a 1500-byte link drops; 1452
//! fit. The drivers tell the session each path's limit (`Session::set_path_max_datagram`).
//!
//! Owns: the arithmetic and the kernel's route MTU for a path (`IP_MTU` / `IPV6_MTU` of a
//! connected probe socket bound as the path is). Must not touch: the path sockets
//! themselves, the session.

use crate::udp::PathBind;
use socket2::{Domain, Protocol, Socket, Type};
use std::net::SocketAddr;

/// The header arithmetic lives with the sans-IO connection (which sizes the paths whose
/// addresses it learns); the agent's links use it from here.
pub use braid_conn::addr::{datagram_limit, is_ipv6_on_wire, DEFAULT_MTU};

/// The MTU of the route from a socket bound like `bind` (marked with `mark`, as TUN mode
/// marks path sockets) to `peer`, as the kernel reports it for a connected UDP socket:
/// the interface's MTU, or a route's `mtu` attribute, or a learned path MTU. `None` when
/// the kernel cannot say (no route, an `auto` bind).
pub fn route_mtu(bind: &PathBind, peer: SocketAddr, mark: Option<u32>) -> Option<u32> {
    let v6 = peer.is_ipv6();
    let domain = if v6 { Domain::IPV6 } else { Domain::IPV4 };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP)).ok()?;
    if let Some(m) = mark {
        s.set_mark(m).ok()?;
    }
    match bind {
        PathBind::Interface(dev) => s.bind_device(Some(dev.as_bytes())).ok()?,
        PathBind::Address(ip) => s.bind(&SocketAddr::new(*ip, 0).into()).ok()?,
        PathBind::Auto => return None,
    }
    s.connect(&peer.into()).ok()?;
    let (level, name) = if v6 {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU)
    } else {
        (libc::IPPROTO_IP, libc::IP_MTU)
    };
    let mut mtu: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `s` is an open socket for the call's duration; `mtu` and `len` are valid
    // for writes and `len` holds `mtu`'s size.
    let rc = unsafe {
        libc::getsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&s),
            level,
            name,
            (&mut mtu as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (rc == 0 && mtu > 0).then_some(mtu as u32)
}

/// The datagram limit of a path bound like `bind` towards `peer`: [`datagram_limit`] over
/// its route's MTU (1500 if the kernel cannot say).
pub fn path_limit(bind: &PathBind, peer: SocketAddr) -> usize {
    datagram_limit(peer, route_mtu(bind, peer, crate::udp::socket_mark()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    /// Regression: one size for every path (1472) made 1520-byte IPv6 packets.
    #[test]
    fn an_ipv6_peer_gets_40_bytes_of_header_and_ipv4_20() {
        let v4: SocketAddr = "192.0.2.1:4433".parse().unwrap();
        let v6: SocketAddr = "[2001:db8::1]:4433".parse().unwrap();
        let mapped: SocketAddr = "[::ffff:192.0.2.1]:4433".parse().unwrap();
        assert_eq!(datagram_limit(v4, None), 1472);
        assert_eq!(datagram_limit(v6, None), 1452);
        assert_eq!(
            datagram_limit(mapped, None),
            1472,
            "IPv4-mapped is IPv4 on the wire"
        );
        assert_eq!(datagram_limit(v4, Some(1492)), 1464, "PPPoE");
        assert_eq!(datagram_limit(v6, Some(1280)), 1232, "IPv6's minimum MTU");
    }

    /// The kernel's answer for the loopback route: its device's MTU (65536 on Linux).
    #[test]
    fn the_route_mtu_is_the_kernels() {
        let lo4 = PathBind::Address(IpAddr::V4(Ipv4Addr::LOCALHOST));
        let got = route_mtu(&lo4, "127.0.0.1:9".parse().unwrap(), None);
        assert!(got.is_some_and(|m| m >= 1500), "{got:?}");
        let lo6 = PathBind::Address(IpAddr::V6(Ipv6Addr::LOCALHOST));
        if let Some(m) = route_mtu(&lo6, "[::1]:9".parse().unwrap(), None) {
            assert!(m >= 1280, "{m}");
        }
        assert_eq!(
            route_mtu(&PathBind::Auto, "127.0.0.1:9".parse().unwrap(), None),
            None
        );
    }
}
