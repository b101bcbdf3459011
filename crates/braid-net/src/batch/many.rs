//! Receiving several messages per system call (`recvmmsg`), where GRO does not coalesce
//! them: a device without GRO (the testbed's veths, many virtual NICs), datagrams of
//! different sizes or senders, or a kernel without `UDP_GRO`. Each message may still be a
//! GRO batch of its own.
//!
//! Owns: the receive buffer of up to [`MESSAGES`] messages, the `recvmmsg` call and the
//! per-message addresses, sizes and control messages. Must not touch: what the datagrams
//! carry, or the socket's options (GRO is turned on by [`super::enable_gro`]).

use super::{read_cmsgs, Cmsgs, Received, RECV_BUFFER};
use bytes::BytesMut;
use socket2::SockAddr;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd};

/// Most messages one receive takes.
pub const MESSAGES: usize = 8;

/// A reusable buffer for [`RecvBatch::recv`]: room for [`MESSAGES`] messages of up to
/// [`RECV_BUFFER`] bytes each (512 KiB, allocated at the first receive), and what the last
/// receive got.
#[derive(Default)]
pub struct RecvBatch {
    buf: Vec<u8>,
    got: Vec<Received>,
}

impl std::fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBatch").field("got", &self.got).finish()
    }
}

impl RecvBatch {
    /// An empty batch; its buffer is allocated at the first receive.
    pub fn new() -> Self {
        Self::default()
    }

    /// Receive once, without blocking (`WouldBlock` when nothing waits): up to
    /// [`MESSAGES`] messages, each possibly a GRO batch. Returns how many messages.
    pub fn recv(&mut self, sock: &impl AsFd) -> io::Result<usize> {
        let fd = sock.as_fd().as_raw_fd();
        self.got.clear();
        if self.buf.len() < MESSAGES * RECV_BUFFER {
            self.buf.resize(MESSAGES * RECV_BUFFER, 0);
        }
        // SAFETY: all-zero bytes are a valid sockaddr_storage, cmsg buffer, iovec and
        // mmsghdr (null pointers, zero lengths) before they are filled in below.
        let mut names: [libc::sockaddr_storage; MESSAGES] = unsafe { std::mem::zeroed() };
        let mut cmsgs: [Cmsgs; MESSAGES] = std::array::from_fn(|_| Cmsgs([0; 128]));
        let mut iovs: [libc::iovec; MESSAGES] = unsafe { std::mem::zeroed() };
        let mut hdrs: [libc::mmsghdr; MESSAGES] = unsafe { std::mem::zeroed() };
        for (i, chunk) in self.buf.chunks_mut(RECV_BUFFER).take(MESSAGES).enumerate() {
            iovs[i] = libc::iovec {
                iov_base: chunk.as_mut_ptr().cast(),
                iov_len: chunk.len(),
            };
            let h = &mut hdrs[i].msg_hdr;
            h.msg_name = (&mut names[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = cmsgs[i].0.as_mut_ptr().cast();
            h.msg_controllen = cmsgs[i].0.len() as _;
        }
        let n = loop {
            // SAFETY: every header points at live buffers of the lengths it gives (the
            // message slots of `buf`, `names`, `cmsgs`), which outlive the call.
            let n = unsafe {
                libc::recvmmsg(
                    fd,
                    hdrs.as_mut_ptr(),
                    MESSAGES as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if n >= 0 {
                break n as usize;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        };
        for (i, h) in hdrs.iter().enumerate().take(n) {
            let len = h.msg_len as usize;
            // SAFETY: the kernel filled this header in the receive: its control messages
            // lie inside `msg_controllen`, its name inside `msg_namelen` bytes of storage.
            let ((segment, local), from) = unsafe {
                (
                    read_cmsgs(&h.msg_hdr),
                    SockAddr::new(names[i], h.msg_hdr.msg_namelen).as_socket(),
                )
            };
            // A message from something that is not an IP sender is skipped.
            let Some(from) = from else { continue };
            self.got.push(Received {
                from,
                len,
                segment_size: segment.unwrap_or(len).min(len).max(1),
                local,
            });
            if self.got.len() - 1 != i {
                // A message before was skipped: move this one into the slot of its index
                // in `got`, where `messages` looks for it.
                let (dst, src) = ((self.got.len() - 1) * RECV_BUFFER, i * RECV_BUFFER);
                self.buf.copy_within(src..src + len, dst);
            }
        }
        Ok(self.got.len())
    }

    /// The messages of the last receive, each with its datagrams copied out one by one
    /// into allocations of their own size (as [`super::split`] does).
    pub fn messages(
        &self,
    ) -> impl Iterator<Item = (Received, impl Iterator<Item = BytesMut> + '_)> {
        self.got.iter().enumerate().map(move |(i, r)| {
            let data = &self.buf[i * RECV_BUFFER..i * RECV_BUFFER + r.len];
            (*r, data.chunks(r.segment_size).map(BytesMut::from))
        })
    }
}

/// Wait for and receive the next messages on a tokio socket (see [`RecvBatch::recv`]).
pub async fn recv_batch_async(
    sock: &tokio::net::UdpSocket,
    batch: &mut RecvBatch,
) -> io::Result<usize> {
    sock.async_io(tokio::io::Interest::READABLE, || batch.recv(sock))
        .await
}
