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
//! **Metrics.** Completion time runs from the start of `connect` (so it includes TCP/MPTCP
//! connection set-up and SOCKS5 negotiation, as an application sees them) to the last byte
//! (down) or the server's answer (up). Samples are the receiver's goodput in consecutive
//! 100 ms intervals from the same start.

use crate::error::{Result, TestbedError};
use braid_sim::payload::{expected_digest, Checker, Generator};
use braid_sim::Direction;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
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

/// A running traffic server; dropping it stops accepting and ends its connections.
pub struct TrafficServer {
    /// Where it listens (in its namespace).
    pub addr: SocketAddrV4,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl TrafficServer {
    /// Listens on `bind` (port 0: any) inside namespace `ns`.
    pub fn start(ns: &str, bind: SocketAddrV4, proto: Proto) -> Result<TrafficServer> {
        let listener = listen(ns, bind, proto, "the traffic server")?;
        let addr = match listener.local_addr() {
            Ok(std::net::SocketAddr::V4(a)) => a,
            Ok(other) => {
                return Err(TestbedError::Other(format!(
                    "the traffic server got a non-IPv4 address {other}"
                )))
            }
            Err(e) => return Err(TestbedError::io("reading the traffic server's address", e)),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let thread = std::thread::Builder::new()
            .name("traffic-server".into())
            .spawn(move || accept_loop(listener, st))
            .map_err(|e| TestbedError::io("spawning the traffic server thread", e))?;
        Ok(TrafficServer {
            addr,
            stop,
            thread: Some(thread),
        })
    }
}

/// A non-blocking listening TCP or MPTCP socket on `bind` (port 0: any) in namespace `ns`;
/// `what` names it in errors.
pub(crate) fn listen(
    ns: &str,
    bind: SocketAddrV4,
    proto: Proto,
    what: &str,
) -> Result<TcpListener> {
    let (ns_owned, what_owned) = (ns.to_string(), what.to_string());
    let listener = crate::netns::in_netns(ns, move || -> Result<TcpListener> {
        let fd = stream_socket(proto)?;
        set_int(&fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1);
        bind_fd(&fd, bind).map_err(|e| {
            TestbedError::io(format!("binding {what_owned} to {bind} in {ns_owned}"), e)
        })?;
        // SAFETY: fd is a valid socket.
        if unsafe { libc::listen(fd.as_raw_fd(), 128) } != 0 {
            return Err(TestbedError::io(
                format!("listening on {bind} in {ns_owned}"),
                io::Error::last_os_error(),
            ));
        }
        Ok(TcpListener::from(fd))
    })??;
    listener
        .set_nonblocking(true)
        .map_err(|e| TestbedError::io(format!("making {what} non-blocking"), e))?;
    Ok(listener)
}

impl Drop for TrafficServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: TcpListener, stop: Arc<AtomicBool>) {
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((s, _)) => {
                let st = stop.clone();
                if let Ok(h) = std::thread::Builder::new()
                    .name("traffic-conn".into())
                    .spawn(move || {
                        let _ = serve(s, &st);
                    })
                {
                    conns.push(h);
                }
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
        conns.retain(|h| !h.is_finished());
    }
    for h in conns {
        let _ = h.join();
    }
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

fn serve(mut s: TcpStream, stop: &AtomicBool) -> io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(POLL))?;
    s.set_write_timeout(Some(POLL))?;
    let _ = s.set_nodelay(true);
    let ab = Abort {
        stop: Some(stop),
        deadline: Instant::now() + Duration::from_secs(24 * 3600),
    };
    let mut req = [0u8; REQUEST_LEN];
    read_full(&mut s, &mut req, &ab)?;
    let Some(req) = Request::decode(&req) else {
        return Err(io::Error::other("bad request"));
    };
    if !req.cc.is_empty() {
        set_congestion(&s, &req.cc)?;
    }
    match req.direction {
        Direction::Down => {
            send_all(&mut s, req.seed, req.size, &ab)?;
            s.shutdown(Shutdown::Write)?;
            // Wait for the client to close so the last bytes are not cut by a reset.
            let mut b = [0u8; 64];
            loop {
                match s.read(&mut b) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) if retryable(&e) => ab.check()?,
                    Err(_) => break,
                }
            }
        }
        Direction::Up => {
            let (ck, samples) = receive_all(&mut s, Instant::now(), req.size, &ab)?;
            let mut reply = Vec::with_capacity(28 + samples.len() * 8);
            reply.extend_from_slice(&ck.received().to_le_bytes());
            reply.extend_from_slice(&ck.digest().to_le_bytes());
            reply.extend_from_slice(&(samples.len() as u32).to_le_bytes());
            for x in &samples {
                reply.extend_from_slice(&x.to_le_bytes());
            }
            write_full(&mut s, &reply, &ab)?;
            s.shutdown(Shutdown::Write)?;
        }
    }
    Ok(())
}

/// How to reach the server through a SOCKS5 proxy.
#[derive(Debug, Clone, Copy)]
pub struct Socks {
    /// The proxy (in the client namespace).
    pub proxy: SocketAddrV4,
    /// The target as the proxy's far end sees it.
    pub target: SocketAddrV4,
}

/// One transfer to run.
#[derive(Debug, Clone)]
pub struct TransferSpec {
    /// The client namespace.
    pub ns: String,
    /// The traffic server (ignored when `socks` is set).
    pub target: SocketAddrV4,
    /// Source address to bind, if any.
    pub bind: Option<Ipv4Addr>,
    /// TCP or MPTCP for the client's socket.
    pub proto: Proto,
    /// Congestion controller for both ends' sockets (`None`: namespace default).
    pub cc: Option<String>,
    /// Go through this SOCKS5 proxy.
    pub socks: Option<Socks>,
    /// Which way the bytes go.
    pub direction: Direction,
    /// Bytes to move.
    pub size: u64,
    /// Payload seed.
    pub seed: u64,
    /// Give up after this long.
    pub timeout: Duration,
}

/// What a transfer achieved.
#[derive(Debug, Clone, Default)]
pub struct TransferOutcome {
    /// Byte count and digest matched.
    pub verified: bool,
    /// Seconds from connect to the last byte.
    pub completion_s: f64,
    /// size × 8 / completion_s.
    pub goodput_bps: f64,
    /// Receiver goodput per [`SAMPLE_INTERVAL`].
    pub samples_bps: Vec<f64>,
    /// Why it failed.
    pub error: Option<String>,
}

/// Runs one transfer from the client namespace. A failed transfer is an outcome with an
/// error; only a signal (or not being able to enter the namespace) is an `Err`.
pub fn transfer(spec: &TransferSpec) -> Result<TransferOutcome> {
    let sp = spec.clone();
    let out = crate::netns::in_netns(&spec.ns, move || {
        let start = Instant::now();
        let r = run_client(&sp, start);
        let elapsed = start.elapsed().as_secs_f64();
        match r {
            Ok((verified, samples, why)) => TransferOutcome {
                verified,
                completion_s: elapsed,
                goodput_bps: if elapsed > 0.0 {
                    sp.size as f64 * 8.0 / elapsed
                } else {
                    0.0
                },
                samples_bps: samples,
                error: why,
            },
            Err(e) => TransferOutcome {
                completion_s: elapsed,
                error: Some(e.to_string()),
                ..TransferOutcome::default()
            },
        }
    })?;
    crate::signal::check()?;
    Ok(out)
}

type ClientResult = (bool, Vec<f64>, Option<String>);

fn run_client(sp: &TransferSpec, start: Instant) -> io::Result<ClientResult> {
    let ab = Abort {
        stop: None,
        deadline: start + sp.timeout,
    };
    let mut s = open_stream(sp, &ab)?;
    let req = Request {
        direction: sp.direction,
        size: sp.size,
        seed: sp.seed,
        cc: if sp.socks.is_some() {
            String::new()
        } else {
            sp.cc.clone().unwrap_or_default()
        },
    };
    write_full(&mut s, &req.encode(), &ab)?;
    let expected = expected_digest(sp.seed, sp.size);
    match sp.direction {
        Direction::Down => {
            let (ck, samples) = receive_all(&mut s, start, sp.size, &ab)?;
            let ok = ck.received() == sp.size && ck.digest() == expected;
            let why = (!ok).then(|| {
                format!(
                    "received {} of {} bytes{}",
                    ck.received(),
                    sp.size,
                    if ck.received() == sp.size {
                        " with the wrong content (hash mismatch)"
                    } else {
                        ""
                    }
                )
            });
            Ok((ok, samples, why))
        }
        Direction::Up => {
            send_all(&mut s, sp.seed, sp.size, &ab)?;
            s.shutdown(Shutdown::Write)?;
            let mut head = [0u8; 28];
            read_full(&mut s, &mut head, &ab)?;
            let mut n8 = [0u8; 8];
            n8.copy_from_slice(&head[..8]);
            let mut d16 = [0u8; 16];
            d16.copy_from_slice(&head[8..24]);
            let mut c4 = [0u8; 4];
            c4.copy_from_slice(&head[24..28]);
            let received = u64::from_le_bytes(n8);
            let digest = u128::from_le_bytes(d16);
            let count = (u32::from_le_bytes(c4) as usize).min(10_000_000);
            let mut raw = vec![0u8; count * 8];
            read_full(&mut s, &mut raw, &ab)?;
            let samples = raw
                .chunks_exact(8)
                .map(|c| {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(c);
                    f64::from_le_bytes(a)
                })
                .collect();
            let ok = received == sp.size && digest == expected;
            let why = (!ok).then(|| {
                format!(
                    "the server received {received} of {} bytes or a wrong hash",
                    sp.size
                )
            });
            Ok((ok, samples, why))
        }
    }
}

/// A connection along the spec's route: through its SOCKS5 proxy (CONNECT to the proxy's
/// target), else from its source address to its target with its transport and controller.
pub(crate) fn open_stream(sp: &TransferSpec, ab: &Abort<'_>) -> io::Result<TcpStream> {
    match sp.socks {
        Some(p) => {
            let mut s = connect(Proto::Tcp, None, None, p.proxy, ab)?;
            socks5_request(&mut s, 1, p.target, ab)?;
            Ok(s)
        }
        None => connect(sp.proto, sp.bind, sp.cc.as_deref(), sp.target, ab),
    }
}

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

fn sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

fn bind_fd(fd: &OwnedFd, a: SocketAddrV4) -> io::Result<()> {
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

fn set_int(fd: &impl AsRawFd, level: libc::c_int, opt: libc::c_int, v: libc::c_int) {
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

/// Tries a 1000-byte transfer until it succeeds or `within` passes (readiness probe for
/// proxies). Returns the last error on failure.
pub fn wait_ready(
    spec: &TransferSpec,
    within: Duration,
) -> Result<std::result::Result<(), String>> {
    let deadline = Instant::now() + within;
    let mut probe = spec.clone();
    probe.size = 1000;
    probe.timeout = Duration::from_secs(3);
    loop {
        let o = transfer(&probe)?;
        if o.verified {
            return Ok(Ok(()));
        }
        if Instant::now() >= deadline {
            return Ok(Err(o.error.unwrap_or_else(|| "not verified".into())));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trips_and_rejects_junk() {
        let r = Request {
            direction: Direction::Up,
            size: 123_456,
            seed: 99,
            cc: "bbr".into(),
        };
        let d = Request::decode(&r.encode()).unwrap();
        assert_eq!(
            (d.direction, d.size, d.seed, d.cc.as_str()),
            (Direction::Up, 123_456, 99, "bbr")
        );
        let mut bad = r.encode();
        bad[0] = b'X';
        assert!(Request::decode(&bad).is_none());
        let mut bad = r.encode();
        bad[5] = 7;
        assert!(Request::decode(&bad).is_none());
        let mut bad = r.encode();
        bad[24] = 0xff;
        assert!(Request::decode(&bad).is_none());
    }
}
