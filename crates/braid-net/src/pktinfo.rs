//! Replying from the address asked. On a UDP socket bound to a wildcard address
//! (`0.0.0.0`, `[::]`) the kernel picks each reply's source address from the route back to
//! the peer, which need not be the address the peer sent to (a second address, one on the
//! loopback device, a floating, anycast or load balancer's address): a peer whose socket
//! is connected to the address it asked drops such replies. With packet info on
//! ([`enable`]), every received datagram says the local address it was sent to
//! ([`read`]), and a send can name its source address ([`write`]).
//!
//! Owns: the socket options (IP_PKTINFO, IPV6_RECVPKTINFO), reading the destination
//! address out of a receive's control message and writing the source address into a
//! send's. Must not touch: the system calls (`batch`), which address a path replies from
//! (the server's session), binding sockets (`udp`, the server's `steer`).
//!
//! A socket bound to a specific address never gets the options: its replies already go
//! from that address, and its receives and sends carry no extra control message.

use std::io;
use std::mem::size_of;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;

/// Packet info could not be turned on.
#[derive(Debug, thiserror::Error)]
#[error("cannot turn on {option} on the UDP socket bound to {bound}: {source}")]
pub struct PktInfoError {
    /// The socket option refused.
    pub option: &'static str,
    /// The socket's address.
    pub bound: SocketAddr,
    /// The kernel's answer.
    #[source]
    pub source: io::Error,
}

/// True when a socket bound to `addr` needs packet info to reply from the address asked.
pub fn is_wildcard(addr: SocketAddr) -> bool {
    addr.ip().is_unspecified()
}

fn setsockopt(fd: i32, level: i32, name: i32, v: i32) -> io::Result<()> {
    // SAFETY: a pointer to a live c_int of the size passed.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const i32).cast(),
            size_of::<i32>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn getsockopt(fd: i32, level: i32, name: i32) -> io::Result<i32> {
    let mut v: i32 = 0;
    let mut len = size_of::<i32>() as libc::socklen_t;
    // SAFETY: a pointer to a live c_int and its length.
    let r = unsafe { libc::getsockopt(fd, level, name, (&mut v as *mut i32).cast(), &mut len) };
    if r == 0 {
        Ok(v)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Turn packet info on for `sock`, bound to `bound`, when that is a wildcard address
/// (IP_PKTINFO on IPv4; IPV6_RECVPKTINFO on IPv6, and IP_PKTINFO too on a dual-stack
/// socket, for its IPv4-mapped peers). Returns whether it did.
pub fn enable(sock: &impl AsRawFd, bound: SocketAddr) -> Result<bool, PktInfoError> {
    if !is_wildcard(bound) {
        return Ok(false);
    }
    let fd = sock.as_raw_fd();
    let err = |option| {
        move |source| PktInfoError {
            option,
            bound,
            source,
        }
    };
    let v4 = || setsockopt(fd, libc::IPPROTO_IP, libc::IP_PKTINFO, 1).map_err(err("IP_PKTINFO"));
    if bound.is_ipv4() {
        v4()?;
    } else {
        setsockopt(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1)
            .map_err(err("IPV6_RECVPKTINFO"))?;
        let v6only = getsockopt(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY)
            .map_err(err("IPV6_V6ONLY (reading)"))?;
        if v6only == 0 {
            v4()?;
        }
    }
    Ok(true)
}

/// The local address a received datagram was sent to, if `c` is a packet-info control
/// message that says it (IPv4-mapped addresses as IPv4; a multicast address, which no
/// reply can come from, and an IPv6 link-local one, which needs its interface too, as
/// none: the kernel chooses then, as without packet info).
///
/// # Safety
/// `c` points at a control message header the kernel wrote, inside the control buffer of
/// the `msghdr` it came with, its data `cmsg_len` long.
pub(crate) unsafe fn read(c: *const libc::cmsghdr) -> Option<IpAddr> {
    let (level, kind, len) = ((*c).cmsg_level, (*c).cmsg_type, (*c).cmsg_len);
    let ip: IpAddr = if level == libc::IPPROTO_IP && kind == libc::IP_PKTINFO {
        if len < libc::CMSG_LEN(size_of::<libc::in_pktinfo>() as u32) as _ {
            return None;
        }
        let p = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::in_pktinfo>());
        // ipi_spec_dst: the destination itself for a unicast datagram, and a local
        // address of the receiving interface for a broadcast one.
        Ipv4Addr::from(u32::from_be(p.ipi_spec_dst.s_addr)).into()
    } else if level == libc::IPPROTO_IPV6 && kind == libc::IPV6_PKTINFO {
        if len < libc::CMSG_LEN(size_of::<libc::in6_pktinfo>() as u32) as _ {
            return None;
        }
        let p = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::in6_pktinfo>());
        Ipv6Addr::from(p.ipi6_addr.s6_addr).to_canonical()
    } else {
        return None;
    };
    let usable = match ip {
        IpAddr::V4(a) => !a.is_unspecified() && !a.is_multicast() && !a.is_broadcast(),
        IpAddr::V6(a) => {
            !a.is_unspecified() && !a.is_multicast() && (a.segments()[0] & 0xffc0) != 0xfe80
        }
    };
    usable.then_some(ip)
}

/// Control-message space a send from `src` needs ([`write`]).
pub(crate) fn space(src: IpAddr) -> usize {
    // SAFETY: CMSG_SPACE is arithmetic.
    unsafe {
        match src {
            IpAddr::V4(_) => libc::CMSG_SPACE(size_of::<libc::in_pktinfo>() as u32) as usize,
            IpAddr::V6(_) => libc::CMSG_SPACE(size_of::<libc::in6_pktinfo>() as u32) as usize,
        }
    }
}

/// Write the control message that sends a datagram from `src` (IP_PKTINFO for IPv4, on
/// an IPv4 socket or to an IPv4-mapped peer of a dual-stack one; IPV6_PKTINFO for IPv6),
/// the interface left to the route.
///
/// # Safety
/// `c` points at a control message header inside the control buffer of a `msghdr`, with
/// at least [`space`]`(src)` bytes from `c` to that buffer's end.
pub(crate) unsafe fn write(c: *mut libc::cmsghdr, src: IpAddr) {
    match src {
        IpAddr::V4(a) => {
            (*c).cmsg_level = libc::IPPROTO_IP;
            (*c).cmsg_type = libc::IP_PKTINFO;
            (*c).cmsg_len = libc::CMSG_LEN(size_of::<libc::in_pktinfo>() as u32) as _;
            let p = libc::in_pktinfo {
                ipi_ifindex: 0,
                ipi_spec_dst: libc::in_addr {
                    s_addr: u32::from(a).to_be(),
                },
                ipi_addr: libc::in_addr { s_addr: 0 },
            };
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::in_pktinfo>(), p);
        }
        IpAddr::V6(a) => {
            (*c).cmsg_level = libc::IPPROTO_IPV6;
            (*c).cmsg_type = libc::IPV6_PKTINFO;
            (*c).cmsg_len = libc::CMSG_LEN(size_of::<libc::in6_pktinfo>() as u32) as _;
            let p = libc::in6_pktinfo {
                ipi6_addr: libc::in6_addr {
                    s6_addr: a.octets(),
                },
                ipi6_ifindex: 0,
            };
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::in6_pktinfo>(), p);
        }
    }
}

#[cfg(test)]
mod tests;
