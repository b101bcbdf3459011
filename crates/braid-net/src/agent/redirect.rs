//! Transparent redirection, for those who prefer a firewall rule to a TUN device: TCP
//! connections that nftables redirected to the agent (`redirect to :PORT`, in prerouting
//! for a LAN, in output for this machine) are carried like SOCKS5 CONNECTs to their
//! original destination, which the kernel keeps for the redirected socket
//! (SO_ORIGINAL_DST). docs/deployment.md has the rules.
//!
//! Owns: reading the original destination and refusing connections that were not
//! redirected. Must not touch: accepting (`front::accept_loop`), opening streams or direct
//! connections (`direct::open_tcp`), relaying.

use super::Shared;
use braid_proxy::TargetAddr;
use std::io;
use std::mem::{size_of, MaybeUninit};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;
use tokio::net::TcpStream;

/// SO_ORIGINAL_DST (linux/netfilter_ipv4.h) and IP6T_SO_ORIGINAL_DST: the same number at
/// SOL_IP and SOL_IPV6.
const SO_ORIGINAL_DST: libc::c_int = 80;

/// Where a redirected connection was going before nftables turned it to the agent.
pub fn original_dst(tcp: &TcpStream) -> io::Result<SocketAddr> {
    let fd = tcp.as_raw_fd();
    let local = tcp.local_addr()?;
    // An IPv4 connection on a dual-stack listener is IPv4 to netfilter.
    let v4 = local.ip().to_canonical().is_ipv4();
    let mut ss = MaybeUninit::<libc::sockaddr_storage>::zeroed();
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let level = if v4 { libc::SOL_IP } else { libc::SOL_IPV6 };
    // SAFETY: `ss` is large enough for either address family and `len` says so; the kernel
    // writes at most `len` bytes.
    let r =
        unsafe { libc::getsockopt(fd, level, SO_ORIGINAL_DST, ss.as_mut_ptr().cast(), &mut len) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel filled the structure (zeroed first, so every byte is initialised).
    let ss = unsafe { ss.assume_init() };
    match ss.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says this is a sockaddr_in, which fits in sockaddr_storage.
            let sin: libc::sockaddr_in =
                unsafe { std::ptr::read((&ss as *const libc::sockaddr_storage).cast()) };
            Ok(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6: libc::sockaddr_in6 =
                unsafe { std::ptr::read((&ss as *const libc::sockaddr_storage).cast()) };
            Ok(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        f => Err(io::Error::other(format!("unexpected address family {f}"))),
    }
}

/// One redirected connection: its stream to the original destination, then the relay.
pub(super) async fn conn(tcp: TcpStream, shared: &Shared) -> Result<(), String> {
    let dst = original_dst(&tcp).map_err(|e| {
        format!(
            "no original destination ({e}): a connection to the redirect port that nftables \
             did not redirect (see docs/deployment.md for the rule); closed"
        )
    })?;
    let local = tcp.local_addr().map_err(|e| e.to_string())?;
    if SocketAddr::new(dst.ip().to_canonical(), dst.port())
        == SocketAddr::new(local.ip().to_canonical(), local.port())
    {
        return Err(format!(
            "a connection straight to the redirect port {local}, not redirected by nftables; closed"
        ));
    }
    let limits = shared.cfg.proxy_limits;
    // Through the session, or directly on a path when none is up (direct mode).
    match super::direct::open_tcp(shared, &TargetAddr::Ip(dst)).await {
        Ok(relay) => {
            let peer = tcp
                .peer_addr()
                .map_or_else(|_| "?".into(), |a| a.to_string());
            let conn = shared.board.open("redirect", peer, dst.to_string(), None);
            relay.run(tcp, &conn, limits.idle_timeout).await;
            Ok(())
        }
        Err(code) => {
            // Like the destination refusing: the application sees a reset.
            let _ = socket2::SockRef::from(&tcp).set_linger(Some(std::time::Duration::ZERO));
            Err(format!("redirected to {dst}: {code}"))
        }
    }
}
