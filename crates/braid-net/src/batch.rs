//! Batched UDP I/O: many datagrams per system call.
//!
//! Send: one `sendmsg` with a `UDP_SEGMENT` control message (UDP GSO, Linux 4.18+) hands the
//! kernel up to [`MAX_SEGMENTS`] datagrams of one size (the last may be shorter) for one
//! destination; where the kernel or the device refuses GSO (`EIO`, `EINVAL`, no
//! `UDP_SEGMENT` option), every datagram goes in a `sendmsg` of its own from then on.
//! Receive: with `UDP_GRO` on (Linux 5.0+), one `recvmsg` returns several datagrams of one
//! sender back to back, and a `UDP_GRO` control message says their size; without it, one
//! datagram per call, as before. [`RecvBatch`] takes up to [`MESSAGES`] such receives in one
//! `recvmmsg` (`batch/many.rs`), for devices and kernels where GRO does not coalesce.
//! Where packet info is on (a socket on a wildcard address, see `pktinfo`), each receive
//! says the local address its datagrams were sent to, and a send can name its source.
//!
//! Owns: the socket options and system calls of batched sends and receives, and splitting
//! a received buffer into its datagrams. Must not touch: what the datagrams carry, which
//! socket a path uses (the agent's `links`, the server), or binding sockets (`udp`).

mod many;

pub use many::{recv_batch_async, RecvBatch, MESSAGES};

use bytes::BytesMut;
use socket2::SockAddr;
use std::io;
use std::mem::{size_of, MaybeUninit};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// Most datagrams in one GSO send (the kernel's `UDP_MAX_SEGMENTS` is 64 before 6.9).
pub const MAX_SEGMENTS: usize = 64;
/// Most bytes in one GSO send: a UDP payload's limit, less room for IPv6 headers.
pub const MAX_GSO_BYTES: usize = 65_000;
/// A receive buffer that holds the largest GRO batch (and any single datagram).
pub const RECV_BUFFER: usize = 65_536;

/// GSO was refused by the kernel or a device: every datagram goes alone from now on.
static GSO_REFUSED: AtomicBool = AtomicBool::new(false);

/// Whether this kernel has UDP GSO (probed once on a fresh socket) and nothing refused it.
pub fn gso_enabled() -> bool {
    static PROBE: OnceLock<bool> = OnceLock::new();
    let supported = *PROBE.get_or_init(|| {
        std::net::UdpSocket::bind("127.0.0.1:0")
            .or_else(|_| std::net::UdpSocket::bind("[::1]:0"))
            .is_ok_and(|s| set_int(&s, libc::SOL_UDP, libc::UDP_SEGMENT, 1200).is_ok())
    });
    supported && !GSO_REFUSED.load(Ordering::Relaxed)
}

/// How many datagrams of `segment_size` bytes one [`send`] should be given.
pub fn max_segments(segment_size: usize) -> usize {
    if !gso_enabled() {
        return 1;
    }
    (MAX_GSO_BYTES / segment_size.max(1)).clamp(1, MAX_SEGMENTS)
}

fn set_int(sock: &impl AsRawFd, level: i32, name: i32, v: i32) -> io::Result<()> {
    // SAFETY: a valid descriptor and a pointer to a live c_int of the size passed.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
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

/// Turn on UDP GRO for `sock`: its receives may then hold several datagrams, which only
/// [`recv`] splits. False when the kernel lacks it (receives stay one datagram each).
pub fn enable_gro(sock: &impl AsRawFd) -> bool {
    set_int(sock, libc::SOL_UDP, libc::UDP_GRO, 1).is_ok()
}

/// Control-message space, aligned for `cmsghdr`: room for UDP_GRO or UDP_SEGMENT and both
/// kinds of packet info.
#[repr(C, align(8))]
struct Cmsgs([u8; 128]);

/// Send `buf`, datagrams of `segment_size` bytes back to back (the last may be shorter),
/// to `to` on the non-blocking socket `sock`. The first error ends the send (the rest
/// count as lost, as UDP may lose them).
pub fn send(sock: &impl AsFd, to: SocketAddr, buf: &[u8], segment_size: usize) -> io::Result<()> {
    send_from(sock, to, None, buf, segment_size)
}

/// [`send`] from the local address `src` (a socket on a wildcard address with packet
/// info on, see `pktinfo`); `None` lets the kernel choose, as [`send`]. Where the kernel
/// refuses `src` (an address no longer on this host), the kernel chooses instead.
pub fn send_from(
    sock: &impl AsFd,
    to: SocketAddr,
    src: Option<IpAddr>,
    buf: &[u8],
    segment_size: usize,
) -> io::Result<()> {
    let fd = sock.as_fd().as_raw_fd();
    let addr = SockAddr::from(to);
    let seg = segment_size.max(1);
    let mut rest = buf;
    while !rest.is_empty() {
        let gso = rest.len() > seg && gso_enabled();
        let take = if gso {
            rest.len().min(max_segments(seg) * seg)
        } else {
            rest.len().min(seg)
        };
        let (chunk, tail) = rest.split_at(take);
        let segment = (gso && chunk.len() > seg).then_some(seg);
        let mut sent = sendmsg(fd, &addr, chunk, segment, src);
        if src.is_some() && sent.as_ref().is_err_and(source_refused) {
            sent = sendmsg(fd, &addr, chunk, segment, None);
        }
        match sent {
            Ok(()) => rest = tail,
            Err(e) if gso && matches!(e.raw_os_error(), Some(libc::EIO | libc::EINVAL)) => {
                // The device cannot segment (no checksum offload) or the kernel refuses:
                // send one by one from now on, this chunk included.
                if !GSO_REFUSED.swap(true, Ordering::Relaxed) {
                    tracing::info!("UDP GSO refused ({e}): sending one datagram per call");
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// An error of a send from a chosen source that says the source is not usable (not, or no
/// longer, an address of this host; the route from it).
fn source_refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::EADDRNOTAVAIL | libc::ENETUNREACH)
    )
}

fn sendmsg(
    fd: i32,
    to: &SockAddr,
    data: &[u8],
    segment: Option<usize>,
    src: Option<IpAddr>,
) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let mut cmsgs = Cmsgs([0; 128]);
    // SAFETY: msghdr is plain data; every pointer in it points at live locals of the
    // lengths given, and the control messages are written inside `cmsgs` (CMSG_SPACE of a
    // u16 and of an in6_pktinfo together are 40 of its 128 bytes), each within the
    // control length set before it is written.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_name = to.as_ptr() as *mut libc::c_void;
        msg.msg_namelen = to.len();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        let seg_space = libc::CMSG_SPACE(size_of::<u16>() as u32) as usize;
        let space = segment.map_or(0, |_| seg_space) + src.map_or(0, crate::pktinfo::space);
        if space > 0 {
            msg.msg_control = cmsgs.0.as_mut_ptr().cast();
            msg.msg_controllen = space as _;
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            if let Some(seg) = segment {
                (*c).cmsg_level = libc::SOL_UDP;
                (*c).cmsg_type = libc::UDP_SEGMENT;
                (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg as u16);
                c = libc::CMSG_NXTHDR(&msg, c);
            }
            if let Some(src) = src {
                crate::pktinfo::write(c, src);
            }
        }
        loop {
            if libc::sendmsg(fd, &msg, 0) >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// What one [`recv`] got: `len` bytes at the end of the buffer, datagrams of
/// `segment_size` bytes back to back (the last may be shorter), all from `from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// The sender.
    pub from: SocketAddr,
    /// Bytes received.
    pub len: usize,
    /// The size of each datagram but the last (`len` when there is one datagram).
    pub segment_size: usize,
    /// The local address they were sent to, where packet info is on (see `pktinfo`).
    pub local: Option<IpAddr>,
}

/// Receive once (non-blocking: `WouldBlock` when nothing waits) into the spare capacity of
/// `buf` (at least [`RECV_BUFFER`] bytes are made available); the datagrams are appended to
/// `buf`. Split them with [`split`].
pub fn recv(sock: &impl AsFd, buf: &mut BytesMut) -> io::Result<Received> {
    let fd = sock.as_fd().as_raw_fd();
    buf.reserve(RECV_BUFFER);
    let spare: &mut [MaybeUninit<u8>] = buf.spare_capacity_mut();
    let mut iov = libc::iovec {
        iov_base: spare.as_mut_ptr().cast(),
        iov_len: spare.len(),
    };
    let mut cmsgs = Cmsgs([0; 128]);
    let mut segment = None;
    let mut local = None;
    // SAFETY: the kernel writes at most `iov_len` bytes into the spare capacity, the
    // address into the storage `try_init` provides (with its length), and control messages
    // into `cmsgs`, whose headers are then read with the CMSG macros inside the length the
    // kernel reported.
    let (n, from) = unsafe {
        SockAddr::try_init(|storage, len| {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_name = storage.cast();
            msg.msg_namelen = *len;
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = cmsgs.0.as_mut_ptr().cast();
            msg.msg_controllen = cmsgs.0.len() as _;
            let n = loop {
                let n = libc::recvmsg(fd, &mut msg, 0);
                if n >= 0 {
                    break n as usize;
                }
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            };
            *len = msg.msg_namelen;
            (segment, local) = read_cmsgs(&msg);
            Ok(n)
        })?
    };
    // SAFETY: the kernel initialised the first `n` bytes of the spare capacity.
    unsafe { buf.set_len(buf.len() + n) };
    let from = from
        .as_socket()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not an IP sender"))?;
    Ok(Received {
        from,
        len: n,
        segment_size: segment.unwrap_or(n).min(n).max(1),
        local,
    })
}

/// The GRO segment size and the local address (packet info) among the control messages of
/// a received message.
///
/// # Safety
/// `msg` is a `msghdr` the kernel filled in a receive: its control buffer holds
/// `msg_controllen` bytes of control messages.
unsafe fn read_cmsgs(msg: &libc::msghdr) -> (Option<usize>, Option<IpAddr>) {
    let (mut segment, mut local) = (None, None);
    let mut c = libc::CMSG_FIRSTHDR(msg);
    while !c.is_null() {
        if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
            let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
            segment = usize::try_from(v).ok().filter(|&s| s > 0);
        } else if let Some(ip) = crate::pktinfo::read(c) {
            local = Some(ip);
        }
        c = libc::CMSG_NXTHDR(msg, c);
    }
    (segment, local)
}

/// Take the datagrams of one receive off the front of `buf` (which holds `len` bytes of it
/// and nothing else), each in an exact-size allocation of its own (one copy, see below).
pub fn split(buf: &mut BytesMut, segment_size: usize) -> impl Iterator<Item = BytesMut> + '_ {
    let seg = segment_size.max(1);
    std::iter::from_fn(move || {
        if buf.is_empty() {
            None
        } else {
            // Each datagram in an allocation of its own size: a slice of the 64 KiB receive
            // buffer would keep all of it alive while the core holds the datagram's stream
            // data (reassembly, unread bytes), up to ~46x the data under reordering. The
            // receive buffer itself is then reused for the next receive.
            let n = seg.min(buf.len());
            let d = BytesMut::from(&buf[..n]);
            bytes::Buf::advance(buf, n);
            Some(d)
        }
    })
}

/// Wait for and receive the next datagrams on a tokio socket (see [`recv`]).
pub async fn recv_async(sock: &tokio::net::UdpSocket, buf: &mut BytesMut) -> io::Result<Received> {
    sock.async_io(tokio::io::Interest::READABLE, || recv(sock, buf))
        .await
}

#[cfg(test)]
mod tests;
