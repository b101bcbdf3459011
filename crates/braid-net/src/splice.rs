//! Copying bytes between a TCP connection and a session stream, both directions at once,
//! with half-close: a FIN on one side becomes a FIN on the other. A stream reset by the peer
//! or ended with its session (bytes were lost) closes the TCP connection at once with a RST,
//! so the application sees an error, never a connection left open or a clean but truncated
//! end. A connection idle for the idle timeout is closed the same way.
//!
//! Owns: the byte relay of one proxied connection. Must not touch: the proxy handshakes
//! (SOCKS5, HTTP, the stream-open header) that come before it.

use crate::bridge::{StreamMsg, StreamReader, StreamWriter};
use bytes::{Bytes, BytesMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::debug;

/// The most bytes a relayed TCP socket's kernel buffer may hold unsent
/// (`TCP_NOTSENT_LOWAT`): the rest waits in the session, where flow control pushes back on
/// the sender and the session's queues decide what goes first, instead of megabytes of an
/// auto-tuned send buffer in front of everything written after them.
pub const NOTSENT_LOWAT: u32 = 128 * 1024;

/// Bound the unsent bytes the kernel keeps for `tcp` ([`NOTSENT_LOWAT`]). Linux only;
/// elsewhere a no-op.
pub fn bound_unsent(tcp: &TcpStream) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let v: libc::c_int = NOTSENT_LOWAT as libc::c_int;
        // SAFETY: a valid socket descriptor and a c_int option of the size given.
        let rc = unsafe {
            libc::setsockopt(
                tcp.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_NOTSENT_LOWAT,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = tcp;
    Ok(())
}

/// Application error code for a stream aborted because its TCP side failed.
pub const TCP_FAILED: u64 = 0x10;

/// Application error code for a stream closed because it carried nothing for the idle
/// timeout.
pub const IDLE: u64 = 0x11;

/// Relay until both directions are finished. `early` are stream bytes that arrived with
/// the open reply and belong to the TCP side first. A connection that carries no byte
/// either way for `idle` is closed at both ends (stream reset with [`IDLE`], TCP RST).
pub async fn splice(
    tcp: TcpStream,
    reader: StreamReader,
    writer: StreamWriter,
    early: Bytes,
    idle: Duration,
) {
    let (up, down) = (AtomicU64::new(0), AtomicU64::new(0));
    splice_counted(tcp, reader, writer, early, idle, &up, &down).await;
}

/// Counts (and may hold back or stop) the bytes of a splice as they go: the server's
/// per-agent shares, rate limits and quotas, status counters.
pub trait Meter: Sync {
    /// `n` bytes read from the TCP side go to the stream (`blocked`: the stream has no
    /// room for them yet: the session sends slower than they come); `Err`: reset the
    /// stream with this code instead (the connection may carry no more).
    fn to_stream(&self, n: usize, blocked: bool) -> Result<(), u64>;
    /// `n` bytes of the stream were written to the TCP side; `Err`: reset with this code.
    fn to_tcp(&self, n: usize) -> Result<(), u64>;
}

/// Counts the bytes each way (status displays).
struct Counted<'a> {
    up: &'a AtomicU64,
    down: &'a AtomicU64,
}

impl Meter for Counted<'_> {
    fn to_stream(&self, n: usize, _: bool) -> Result<(), u64> {
        self.up.fetch_add(n as u64, Ordering::Relaxed);
        Ok(())
    }
    fn to_tcp(&self, n: usize) -> Result<(), u64> {
        self.down.fetch_add(n as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// [`splice`], adding the bytes read from the TCP side to `up` and the bytes written to it
/// to `down` as they go (for status displays).
pub async fn splice_counted(
    tcp: TcpStream,
    reader: StreamReader,
    writer: StreamWriter,
    early: Bytes,
    idle: Duration,
    up: &AtomicU64,
    down: &AtomicU64,
) {
    splice_metered(tcp, reader, writer, (early, idle), &Counted { up, down }).await;
}

/// [`splice`], every byte through `meter` as it goes, which may reset the stream.
pub async fn splice_metered(
    tcp: TcpStream,
    mut reader: StreamReader,
    writer: StreamWriter,
    (early, idle): (Bytes, Duration),
    meter: &dyn Meter,
) {
    let _ = tcp.set_nodelay(true);
    if let Err(e) = bound_unsent(&tcp) {
        debug!("TCP_NOTSENT_LOWAT not set: {e}");
    }
    let start = tokio::time::Instant::now();
    // Milliseconds since `start` of the last byte either way.
    let active = AtomicU64::new(0);
    let touch = || active.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
    let (mut rd, mut wr) = tcp.into_split();
    let mut to_stream = Box::pin(tcp_to_stream(&mut rd, &writer, meter, &touch));
    // True when the stream ended in a reset (or its session ended): abort the TCP side.
    let mut to_tcp = Box::pin(stream_to_tcp(&mut reader, &mut wr, &early, meter, &touch));
    let (mut up_done, mut down_done, mut aborted) = (false, false, false);
    let idle_check = tokio::time::sleep(idle);
    tokio::pin!(idle_check);
    while !(up_done && down_done) {
        tokio::select! {
            _ = &mut idle_check => {
                let last = start + Duration::from_millis(active.load(Ordering::Relaxed));
                if last.elapsed() >= idle {
                    debug!("proxied connection idle for {idle:?}: closing it");
                    aborted = true;
                    writer.reset(IDLE);
                    break;
                }
                idle_check.as_mut().reset(last + idle);
            }
            _ = &mut to_stream, if !up_done => up_done = true,
            reset = &mut to_tcp, if !down_done => {
                down_done = true;
                if reset {
                    aborted = true;
                    // Stop reading the application (its bytes have nowhere to go) and
                    // close with a RST: linger 0, then drop both halves.
                    writer.reset(TCP_FAILED);
                    break;
                }
            }
        }
    }
    drop(to_stream);
    drop(to_tcp);
    if aborted {
        // One socket again (dropping the write half alone would send a FIN first), then
        // closed with linger 0: a RST.
        if let Ok(tcp) = rd.reunite(wr) {
            let _ = socket2::SockRef::from(&tcp).set_linger(Some(std::time::Duration::ZERO));
        }
    }
}

/// The application's bytes to the stream until its FIN (then FIN) or an error (then a
/// reset), each read through `meter`.
async fn tcp_to_stream(
    rd: &mut tokio::net::tcp::OwnedReadHalf,
    writer: &StreamWriter,
    meter: &dyn Meter,
    touch: &(dyn Fn() + Sync),
) {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    loop {
        if buf.capacity() - buf.len() < 16 * 1024 {
            buf.reserve(64 * 1024);
        }
        match rd.read_buf(&mut buf).await {
            Ok(0) => {
                writer.finish();
                return;
            }
            Ok(n) => {
                touch();
                if let Err(code) = meter.to_stream(n, writer.would_wait(n)) {
                    return writer.reset(code);
                }
                if writer.write(buf.split().freeze()).await.is_err() {
                    return;
                }
            }
            Err(_) => {
                writer.reset(TCP_FAILED);
                return;
            }
        }
    }
}

/// `early` and then the stream's bytes to the application, each through `meter`, until the
/// stream's FIN (then a TCP FIN; false) or its reset or the meter's refusal (true: abort).
async fn stream_to_tcp(
    reader: &mut StreamReader,
    wr: &mut tokio::net::tcp::OwnedWriteHalf,
    early: &Bytes,
    meter: &dyn Meter,
    touch: &(dyn Fn() + Sync),
) -> bool {
    if !early.is_empty() && wr.write_all(early).await.is_err() {
        return false;
    }
    if meter.to_tcp(early.len()).is_err() {
        return true;
    }
    loop {
        match reader.read().await {
            Some(StreamMsg::Data(b)) => {
                touch();
                if wr.write_all(&b).await.is_err() {
                    return false;
                }
                if meter.to_tcp(b.len()).is_err() {
                    return true;
                }
            }
            Some(StreamMsg::Fin) => {
                let _ = wr.shutdown().await;
                return false;
            }
            Some(StreamMsg::Reset(_)) | None => return true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    fn unsent_limit(tcp: &TcpStream) -> libc::c_int {
        use std::os::fd::AsRawFd;
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: a valid socket descriptor, a c_int and its size.
        let rc = unsafe {
            libc::getsockopt(
                tcp.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_NOTSENT_LOWAT,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
        v
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_relayed_socket_keeps_at_most_128_kib_unsent() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tcp = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let before = unsent_limit(&tcp);
        bound_unsent(&tcp).unwrap();
        assert_eq!(unsent_limit(&tcp), NOTSENT_LOWAT as libc::c_int);
        assert_ne!(
            before, NOTSENT_LOWAT as libc::c_int,
            "the kernel's default differs"
        );
    }
}
