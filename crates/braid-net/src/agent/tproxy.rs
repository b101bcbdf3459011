//! The sockets of transparent UDP redirection (nftables `tproxy`): a listening socket that
//! receives datagrams addressed to anywhere (IP_TRANSPARENT) and says, for each, the
//! address it was sent to (IP_RECVORIGDSTADDR, IPV6_RECVORIGDSTADDR); and reply sockets
//! bound to such a foreign address, so an answer reaches the LAN host from the address it
//! asked. Both need CAP_NET_ADMIN.
//!
//! Owns: the socket options and the receive with its control message. Must not touch: what
//! the datagrams become (`redirect_udp`), the nftables rules (docs/deployment.md).

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::mem::{size_of, MaybeUninit};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;
use tokio::net::UdpSocket;

fn setsockopt(s: &Socket, level: i32, name: i32, what: &str) -> io::Result<()> {
    let v: libc::c_int = 1;
    // SAFETY: a pointer to a live c_int of the size passed.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            level,
            name,
            (&v as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        let e = io::Error::last_os_error();
        Err(io::Error::new(e.kind(), format!("{what}: {e}")))
    }
}

/// A UDP socket of `addr`'s family, transparent (it may bind, and send from, an address
/// that is not the machine's).
fn transparent(addr: SocketAddr) -> io::Result<Socket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_address(true)?;
    if addr.is_ipv6() {
        setsockopt(
            &s,
            libc::SOL_IPV6,
            libc::IPV6_TRANSPARENT,
            "IPV6_TRANSPARENT",
        )?;
        if addr.ip().is_unspecified() {
            s.set_only_v6(false)?;
            // IPv4 packets reach a dual-stack socket as IPv4 to the kernel.
            let _ = setsockopt(&s, libc::SOL_IP, libc::IP_TRANSPARENT, "IP_TRANSPARENT");
        }
    } else {
        setsockopt(&s, libc::SOL_IP, libc::IP_TRANSPARENT, "IP_TRANSPARENT")?;
    }
    s.set_nonblocking(true)?;
    Ok(s)
}

/// The socket nftables' `tproxy to :PORT` hands datagrams to, bound to `addr`; every
/// receive says the datagram's original destination ([`recv`]).
pub(super) fn listen(addr: SocketAddr) -> io::Result<UdpSocket> {
    let s = transparent(addr)?;
    if addr.is_ipv6() {
        setsockopt(
            &s,
            libc::SOL_IPV6,
            libc::IPV6_RECVORIGDSTADDR,
            "IPV6_RECVORIGDSTADDR",
        )?;
        if addr.ip().is_unspecified() {
            let _ = setsockopt(
                &s,
                libc::SOL_IP,
                libc::IP_RECVORIGDSTADDR,
                "IP_RECVORIGDSTADDR",
            );
        }
    } else {
        setsockopt(
            &s,
            libc::SOL_IP,
            libc::IP_RECVORIGDSTADDR,
            "IP_RECVORIGDSTADDR",
        )?;
    }
    let _ = s.set_recv_buffer_size(crate::udp::SOCKET_BUFFER);
    s.bind(&SockAddr::from(addr))?;
    UdpSocket::from_std(s.into())
}

/// A socket that sends from `from`, an address that need not be the machine's (the
/// original destination of a redirected flow, answering its LAN host).
pub(super) fn reply_from(from: SocketAddr) -> io::Result<UdpSocket> {
    let s = transparent(from)?;
    s.bind(&SockAddr::from(from))?;
    UdpSocket::from_std(s.into())
}

/// One datagram received on a [`listen`] socket: its length, sender and original
/// destination (`None` when the kernel gave none: a datagram sent straight to the socket).
pub(super) async fn recv(
    sock: &UdpSocket,
    buf: &mut [u8],
) -> io::Result<(usize, SocketAddr, Option<SocketAddr>)> {
    loop {
        sock.readable().await?;
        match sock.try_io(tokio::io::Interest::READABLE, || recvmsg(sock, buf)) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            r => return r,
        }
    }
}

fn recvmsg(
    sock: &UdpSocket,
    buf: &mut [u8],
) -> io::Result<(usize, SocketAddr, Option<SocketAddr>)> {
    let mut from = MaybeUninit::<libc::sockaddr_storage>::zeroed();
    // Room for one sockaddr_in6 control message (the larger of the two).
    let mut ctl = [0u64; 16];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: zeroed msghdr is valid; every pointer set below points to live buffers of
    // the lengths given, which outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = from.as_mut_ptr().cast();
    msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<[u64; 16]>() as _;
    // SAFETY: as above.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel wrote msg_namelen bytes of an address (zeroed first).
    let from = unsafe { sockaddr(from.as_ptr(), msg.msg_namelen) }
        .ok_or_else(|| io::Error::other("a datagram with no sender address"))?;
    let mut orig = None;
    // SAFETY: walking the control messages the kernel wrote with the libc macros, within
    // msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            let (level, kind) = ((*c).cmsg_level, (*c).cmsg_type);
            let is_v4 = level == libc::SOL_IP && kind == libc::IP_ORIGDSTADDR;
            let is_v6 = level == libc::SOL_IPV6 && kind == libc::IPV6_ORIGDSTADDR;
            if is_v4 || is_v6 {
                let len = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                orig = sockaddr(libc::CMSG_DATA(c).cast(), len as libc::socklen_t);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, canonical(from), orig.map(canonical)))
}

/// An IPv4-mapped IPv6 address (a dual-stack socket's IPv4 peer) as IPv4.
fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
}

/// The address at `p` (`len` bytes of a sockaddr_in or sockaddr_in6).
///
/// # Safety
/// `p` must point to at least `len` readable bytes.
unsafe fn sockaddr(p: *const libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = len as usize;
    if len < size_of::<libc::sa_family_t>() {
        return None;
    }
    let family = std::ptr::read_unaligned(p.cast::<libc::sa_family_t>());
    match i32::from(family) {
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            let sin = std::ptr::read_unaligned(p.cast::<libc::sockaddr_in>());
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            let sin6 = std::ptr::read_unaligned(p.cast::<libc::sockaddr_in6>());
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without tproxy, a datagram sent straight to the socket has no original destination
    /// other than the socket's own address; a reply socket on a local address sends from it.
    /// Needs CAP_NET_ADMIN (skipped without).
    #[tokio::test]
    async fn receives_with_the_destination_and_replies_from_an_address() {
        let Ok(l) = listen("127.0.0.1:0".parse().unwrap()) else {
            eprintln!("skipped: IP_TRANSPARENT needs CAP_NET_ADMIN");
            return;
        };
        let at = l.local_addr().unwrap();
        let c = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        c.send_to(b"hello", at).await.unwrap();
        let mut buf = [0u8; 64];
        let (n, from, orig) = recv(&l, &mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"hello");
        assert_eq!(from, c.local_addr().unwrap());
        assert_eq!(orig, Some(at), "the kernel says where it was sent");
        // From an address of this machine that no socket has: 127.0.0.9.
        let r = reply_from("127.0.0.9:5353".parse().unwrap()).unwrap();
        r.send_to(b"back", from).await.unwrap();
        let (n, src) = c.recv_from(&mut buf).await.unwrap();
        assert_eq!(
            (&buf[..n], src),
            (&b"back"[..], "127.0.0.9:5353".parse().unwrap())
        );
    }
}
