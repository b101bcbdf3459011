//! Sockets: TCP and MPTCP (`IPPROTO_MPTCP`) creation, binding, `TCP_CONGESTION`, a
//! connect that notices signals and deadlines, and the SOCKS5 request.
//!
//! Owns: the libc calls on sockets. Must not touch: the transfer protocol (`mod.rs`,
//! `server.rs`, `client.rs`).

use super::{read_full, write_full, Abort, Proto, IPPROTO_MPTCP, POLL};
use crate::error::{Result, TestbedError};
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A new TCP or MPTCP socket.
pub fn stream_socket(proto: Proto) -> Result<OwnedFd> {
    let p = match proto {
        Proto::Tcp => 0,
        Proto::Mptcp => IPPROTO_MPTCP,
    };
    // SAFETY: plain socket creation.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, p) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        if proto == Proto::Mptcp {
            return Err(TestbedError::Unsupported {
                what: "MPTCP sockets".into(),
                detail: e.to_string(),
                hint: "use a kernel built with CONFIG_MPTCP and set net.mptcp.enabled=1".into(),
            });
        }
        return Err(TestbedError::io("creating a TCP socket", e));
    }
    // SAFETY: fd is a freshly created descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(super) fn sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

pub(super) fn bind_fd(fd: &OwnedFd, a: SocketAddrV4) -> io::Result<()> {
    let sa = sockaddr(a);
    // SAFETY: sa is a valid sockaddr_in and its size is passed.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &sa as *const libc::sockaddr_in as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

pub(super) fn set_int(fd: &impl AsRawFd, level: libc::c_int, opt: libc::c_int, v: libc::c_int) {
    // SAFETY: v is a valid c_int for the duration of the call.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            &v as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// Sets `TCP_CONGESTION` on a socket.
pub fn set_congestion(fd: &impl AsRawFd, cc: &str) -> io::Result<()> {
    // SAFETY: the name is a valid buffer of its length.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            cc.as_ptr() as *const libc::c_void,
            cc.len() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        let e = io::Error::last_os_error();
        Err(io::Error::new(
            e.kind(),
            format!(
                "setting congestion control {cc:?}: {e} (see \
                 /proc/sys/net/ipv4/tcp_available_congestion_control)"
            ),
        ))
    }
}

/// Connects (non-blocking connect, polled so signals and the deadline are noticed).
pub(crate) fn connect(
    proto: Proto,
    bind: Option<Ipv4Addr>,
    cc: Option<&str>,
    to: SocketAddrV4,
    ab: &Abort<'_>,
) -> io::Result<TcpStream> {
    let fd = stream_socket(proto).map_err(|e| io::Error::other(e.to_string()))?;
    if let Some(ip) = bind {
        bind_fd(&fd, SocketAddrV4::new(ip, 0))
            .map_err(|e| io::Error::new(e.kind(), format!("binding to {ip}: {e}")))?;
    }
    if let Some(cc) = cc {
        set_congestion(&fd, cc)?;
    }
    // SAFETY: fcntl on a valid descriptor.
    unsafe {
        let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
    let sa = sockaddr(to);
    // SAFETY: sa is a valid sockaddr_in and its size is passed.
    let r = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            &sa as *const libc::sockaddr_in as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if r != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(io::Error::new(e.kind(), format!("connecting to {to}: {e}")));
        }
        loop {
            let mut p = libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLOUT,
                revents: 0,
            };
            // SAFETY: p is a valid pollfd.
            let n = unsafe { libc::poll(&mut p, 1, POLL.as_millis() as libc::c_int) };
            if n > 0 {
                break;
            }
            ab.check()?;
        }
        let mut err: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: err and len are valid output locations.
        unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                &mut err as *mut libc::c_int as *mut libc::c_void,
                &mut len,
            );
        }
        if err != 0 {
            let e = io::Error::from_raw_os_error(err);
            return Err(io::Error::new(e.kind(), format!("connecting to {to}: {e}")));
        }
    }
    let s = TcpStream::from(fd);
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(POLL))?;
    s.set_write_timeout(Some(POLL))?;
    let _ = s.set_nodelay(true);
    Ok(s)
}

/// A SOCKS5 request without authentication (RFC 1928; `cmd` 1 CONNECT, 3 UDP ASSOCIATE);
/// returns the address in the reply (for UDP ASSOCIATE, the relay's; `None` unless IPv4).
pub(crate) fn socks5_request(
    s: &mut TcpStream,
    cmd: u8,
    target: SocketAddrV4,
    ab: &Abort<'_>,
) -> io::Result<Option<SocketAddrV4>> {
    write_full(s, &[5, 1, 0], ab)?;
    let mut m = [0u8; 2];
    read_full(s, &mut m, ab)?;
    if m != [5, 0] {
        return Err(io::Error::other(format!(
            "SOCKS5 proxy refused no-authentication (answered {m:?})"
        )));
    }
    let mut req = vec![5, cmd, 0, 1];
    req.extend_from_slice(&target.ip().octets());
    req.extend_from_slice(&target.port().to_be_bytes());
    write_full(s, &req, ab)?;
    let mut head = [0u8; 4];
    read_full(s, &mut head, ab)?;
    if head[1] != 0 {
        return Err(io::Error::other(format!(
            "SOCKS5 request {cmd} for {target} failed with reply code {}",
            head[1]
        )));
    }
    let rest = match head[3] {
        1 => 4 + 2,
        4 => 16 + 2,
        3 => {
            let mut l = [0u8; 1];
            read_full(s, &mut l, ab)?;
            l[0] as usize + 2
        }
        t => {
            return Err(io::Error::other(format!(
                "SOCKS5 reply with address type {t}"
            )))
        }
    };
    let mut addr = vec![0u8; rest];
    read_full(s, &mut addr, ab)?;
    Ok((head[3] == 1).then(|| {
        SocketAddrV4::new(
            Ipv4Addr::new(addr[0], addr[1], addr[2], addr[3]),
            u16::from_be_bytes([addr[4], addr[5]]),
        )
    }))
}
