//! The built-in traffic tool: a bulk-transfer server and client with byte-exact checking.
//!
//! Owns: the transfer protocol (below), TCP and MPTCP sockets (`IPPROTO_MPTCP` = 262),
//! `TCP_CONGESTION`, the SOCKS5 CONNECT client used for `braid` and `ss-mptcp`, completion
//! time, goodput and the 100 ms throughput samples. Must not touch: namespaces' set-up,
//! links, helper processes.
//!
//! **Where it runs.** No helper processes: the server and the client are threads of the
//! testbed process that entered the server or client namespace with `setns` before creating
//! their sockets ([`crate::netns::enter`]); a socket stays in the namespace it was created
//! in. The server thread accepts and hands every connection to a thread of its own.
//!
//! **Protocol.** The client sends a 40-byte request: `"BRTB"`, version 1, direction (0 down:
//! the server sends; 1 up: the client sends), 2 zero bytes, size (u64 LE), seed (u64 LE),
//! and the congestion controller the server must set on its socket (16 bytes, NUL-padded;
//! empty: the namespace default). The payload is braid-sim's deterministic byte stream
//! (`payload::Generator`) for that seed and size. Down: the server sends the bytes and
//! closes its side; the client hashes what arrives up to EOF. Up: the client sends and
//! closes its side; the server answers with the byte count (u64), the xxh3-128 digest
//! (u128), then its throughput samples (u32 count, f64 each, bit/s), all little-endian.
//! Either way the receiver's count and digest must match `payload::expected_digest`.
//!
//! **Layout.** This module holds the protocol's request, the byte-stream helpers both ends
//! share and the sampler; `server` the server, `client` the client and the readiness probe,
//! `socket` the socket calls.
//!
//! **Metrics.** Completion time runs from the start of `connect` (so it includes TCP/MPTCP
//! connection set-up and SOCKS5 negotiation, as an application sees them) to the last byte
//! (down) or the server's answer (up). Samples are the receiver's goodput in consecutive
//! 100 ms intervals from the same start.

mod client;
mod server;
mod socket;

pub(crate) use self::client::open_stream;
pub use self::client::{transfer, wait_ready, Socks, TransferOutcome, TransferSpec};
pub(crate) use self::server::listen;
pub use self::server::TrafficServer;
pub(crate) use self::socket::{connect, socks5_request};
pub use self::socket::{set_congestion, stream_socket};
use braid_sim::payload::{Checker, Generator};
use braid_sim::Direction;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// `IPPROTO_MPTCP`.
pub const IPPROTO_MPTCP: libc::c_int = 262;
/// Throughput sampling interval.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(100);
const MAGIC: &[u8; 4] = b"BRTB";
const REQUEST_LEN: usize = 40;
const POLL: Duration = Duration::from_millis(100);
const CHUNK: usize = 64 * 1024;

/// Which transport the sockets use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// Plain TCP.
    Tcp,
    /// Kernel MPTCP (falls back to TCP when the peer does not speak it).
    Mptcp,
}

struct Request {
    direction: Direction,
    size: u64,
    seed: u64,
    cc: String,
}

impl Request {
    fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut b = [0u8; REQUEST_LEN];
        b[..4].copy_from_slice(MAGIC);
        b[4] = 1;
        b[5] = u8::from(self.direction == Direction::Up);
        b[8..16].copy_from_slice(&self.size.to_le_bytes());
        b[16..24].copy_from_slice(&self.seed.to_le_bytes());
        let cc = self.cc.as_bytes();
        let n = cc.len().min(15);
        b[24..24 + n].copy_from_slice(&cc[..n]);
        b
    }

    fn decode(b: &[u8; REQUEST_LEN]) -> Option<Request> {
        if &b[..4] != MAGIC || b[4] != 1 || b[5] > 1 {
            return None;
        }
        let u = |r: std::ops::Range<usize>| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[r]);
            u64::from_le_bytes(a)
        };
        let cc_end = b[24..].iter().position(|&c| c == 0).unwrap_or(16);
        let cc = std::str::from_utf8(&b[24..24 + cc_end]).ok()?.to_string();
        Some(Request {
            direction: if b[5] == 1 {
                Direction::Up
            } else {
                Direction::Down
            },
            size: u(8..16),
            seed: u(16..24),
            cc,
        })
    }
}

/// A stop condition for blocking loops: the server's flag, a signal, or a deadline.
pub(crate) struct Abort<'a> {
    stop: Option<&'a AtomicBool>,
    deadline: Instant,
}

impl<'a> Abort<'a> {
    /// Stops when `stop` is set, a signal was caught, or at `deadline`.
    pub(crate) fn new(stop: Option<&'a AtomicBool>, deadline: Instant) -> Abort<'a> {
        Abort { stop, deadline }
    }

    /// An error when it is time to stop.
    pub(crate) fn check(&self) -> io::Result<()> {
        if self.stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
            return Err(io::Error::other("stopped"));
        }
        if let Some(sig) = crate::signal::caught() {
            return Err(io::Error::other(format!("interrupted by {sig}")));
        }
        if Instant::now() >= self.deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the time limit passed",
            ));
        }
        Ok(())
    }
}

pub(crate) fn retryable(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

pub(crate) fn read_full(s: &mut TcpStream, buf: &mut [u8], ab: &Abort<'_>) -> io::Result<()> {
    let mut off = 0;
    while off < buf.len() {
        match s.read(&mut buf[off..]) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "early EOF")),
            Ok(n) => off += n,
            Err(e) if retryable(&e) => ab.check()?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

pub(crate) fn write_full(s: &mut TcpStream, buf: &[u8], ab: &Abort<'_>) -> io::Result<()> {
    let mut off = 0;
    while off < buf.len() {
        match s.write(&buf[off..]) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "write returned 0")),
            Ok(n) => off += n,
            Err(e) if retryable(&e) => ab.check()?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Receiver-side goodput per interval.
struct Sampler {
    start: Instant,
    bytes: Vec<u64>,
}

impl Sampler {
    fn new(start: Instant) -> Self {
        Sampler {
            start,
            bytes: Vec::new(),
        }
    }
    fn add(&mut self, n: usize) {
        let k = (self.start.elapsed().as_nanos() / SAMPLE_INTERVAL.as_nanos()) as usize;
        if self.bytes.len() <= k {
            self.bytes.resize(k + 1, 0);
        }
        self.bytes[k] += n as u64;
    }
    fn bps(&self) -> Vec<f64> {
        let secs = SAMPLE_INTERVAL.as_secs_f64();
        self.bytes.iter().map(|&b| b as f64 * 8.0 / secs).collect()
    }
}

/// Reads to EOF into a checker; returns it and the samples.
fn receive_all(
    s: &mut TcpStream,
    start: Instant,
    limit: u64,
    ab: &Abort<'_>,
) -> io::Result<(Checker, Vec<f64>)> {
    let mut ck = Checker::new();
    let mut sm = Sampler::new(start);
    let mut buf = vec![0u8; CHUNK];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                ck.update(&buf[..n]);
                sm.add(n);
                if ck.received() > limit {
                    return Err(io::Error::other(format!(
                        "received more than the {limit} bytes requested"
                    )));
                }
            }
            Err(e) if retryable(&e) => ab.check()?,
            Err(e) => return Err(e),
        }
    }
    Ok((ck, sm.bps()))
}

fn send_all(s: &mut TcpStream, seed: u64, size: u64, ab: &Abort<'_>) -> io::Result<()> {
    let mut g = Generator::new(seed, size);
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = g.fill(&mut buf);
        if n == 0 {
            return Ok(());
        }
        write_full(s, &buf[..n], ab)?;
    }
}

#[cfg(test)]
mod tests;
