//! The sparse latency probe: a UDP echo beside the transfer, as in Flent's RRUL.
//!
//! Owns: the echo responder in the server namespace ([`EchoServer`]), the probe flow in the
//! client namespace ([`Probe`]: 50 packets a second of 160 bytes, `braid_sim::latency`'s
//! shape), the SOCKS5 UDP ASSOCIATE client it uses through a proxy, and what it measured
//! ([`ProbeRun`]). Must not touch: the bulk transfer (`traffic`), RPM (`rpm`), helper
//! processes, links.
//!
//! **Packet.** `"BRPB"`, a kind byte (0 warm-up, 1 measured), 3 zero bytes, the sequence
//! number (u32 LE), the send time (u64 LE, nanoseconds since the probe started), zero
//! padding to [`PROBE_PAYLOAD`] bytes. The responder sends every datagram that starts with
//! the magic back to where it came from, unchanged; the round trip is the receive time minus
//! the send time carried in the answer, so both directions are crossed.
//!
//! **Route.** [`ProbeRoute::Direct`] sends from a source address of the client namespace to
//! the responder (policy routing then picks the path, as for the variant's TCP flow);
//! [`ProbeRoute::Socks`] goes through a SOCKS5 proxy's UDP relay (braid's agent, `ss-local
//! -u`), the TCP control connection held open while the probe runs.
//!
//! **Time.** A probe thread warms the route up first (a warm-up packet every 100 ms until one
//! comes back, at most [`WARM_UP`]: ARP, the proxy's flow set-up), then sends measured
//! packets until stopped or its time limit, then waits for the outstanding answers, at most
//! [`ANSWER_WITHIN`] after the last packet. A packet not answered within [`ANSWER_WITHIN`]
//! is lost.
//!
//! **Scheduling.** The probe's and the responder's threads ask for `SCHED_FIFO` (best
//! effort, as the emulator's threads do; they sleep in `recv` between packets), so that on
//! a busy machine the measuring tool's own wake-ups are not counted as the call's delay:
//! without it, four CPU hogs on two cores made the probe send 170 ms late.

use crate::error::{Result, TestbedError};
use crate::traffic::{self, Abort, Proto};
use braid_sim::latency::{probe_interval, PROBE_PAYLOAD};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A probe packet not answered within this long counts as lost.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(2);
/// How long the warm-up may take before measuring starts anyway.
pub const WARM_UP: Duration = Duration::from_secs(3);
const MAGIC: &[u8; 4] = b"BRPB";
const HEADER: usize = 20;
const POLL: Duration = Duration::from_millis(100);

/// How the probe reaches the echo responder: the way the variant's traffic goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeRoute {
    /// From `bind` (a path's address; `None`: the kernel's choice) straight to `target`.
    Direct {
        /// Source address.
        bind: Option<Ipv4Addr>,
        /// The responder as the client reaches it.
        target: SocketAddrV4,
    },
    /// Through a SOCKS5 proxy's UDP relay (UDP ASSOCIATE).
    Socks {
        /// The proxy's TCP address in the client namespace.
        proxy: SocketAddrV4,
        /// The responder as the proxy's far end reaches it.
        target: SocketAddrV4,
    },
}

/// A UDP echo responder in the server namespace; dropping it stops it.
pub struct EchoServer {
    /// Where it listens (in its namespace).
    pub addr: SocketAddrV4,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EchoServer {
    /// Listens on `bind` (port 0: any) in namespace `ns`.
    pub fn start(ns: &str, bind: SocketAddrV4) -> Result<EchoServer> {
        let sock = crate::netns::in_netns(ns, move || UdpSocket::bind(bind))?.map_err(|e| {
            TestbedError::io(
                format!("binding the probe's echo responder to {bind} in {ns}"),
                e,
            )
        })?;
        let addr = v4(sock.local_addr())
            .map_err(|e| TestbedError::io("reading the echo responder's address", e))?;
        sock.set_read_timeout(Some(POLL))
            .map_err(|e| TestbedError::io("setting the echo responder's timeout", e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let thread = std::thread::Builder::new()
            .name("probe-echo".into())
            .spawn(move || echo_loop(&sock, &st))
            .map_err(|e| TestbedError::io("spawning the echo responder's thread", e))?;
        Ok(EchoServer {
            addr,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `SCHED_FIFO` priority of the probe's threads (below the emulator's, `l2emu`).
const RT_PRIORITY: libc::c_int = 5;

/// Asks for `SCHED_FIFO` for the calling thread; refused (not root), it stays as it was.
fn prefer_realtime() {
    let param = libc::sched_param {
        sched_priority: RT_PRIORITY,
    };
    // SAFETY: sched_setscheduler(0, ..) changes only this thread; `param` outlives the call.
    unsafe {
        libc::sched_setscheduler(0, libc::SCHED_FIFO, &param);
    }
}

fn echo_loop(sock: &UdpSocket, stop: &AtomicBool) {
    prefer_realtime();
    let mut buf = [0u8; 2048];
    while !stop.load(Ordering::Relaxed) {
        if let Ok((n, from)) = sock.recv_from(&mut buf) {
            if n >= HEADER && &buf[..4] == MAGIC {
                let _ = sock.send_to(&buf[..n], from);
            }
        }
    }
}

fn v4(a: io::Result<SocketAddr>) -> io::Result<SocketAddrV4> {
    match a? {
        SocketAddr::V4(a) => Ok(a),
        SocketAddr::V6(a) => Err(io::Error::other(format!("unexpected IPv6 address {a}"))),
    }
}

/// One measured probe packet.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProbeSample {
    /// When it was sent.
    pub sent: Instant,
    /// Its round trip; `None` when no answer came within [`ANSWER_WITHIN`].
    pub rtt: Option<Duration>,
}

/// What a probe measured.
#[derive(Debug, Clone, Default)]
pub struct ProbeRun {
    /// Every measured packet, in send order.
    pub samples: Vec<ProbeSample>,
    /// When the warm-up ended (measuring began); `None` if the probe never started.
    pub measuring_from: Option<Instant>,
    /// Whether a warm-up packet came back (the route works at all).
    pub warmed_up: bool,
    /// Why the probe stopped early, if it did.
    pub error: Option<String>,
}

impl ProbeRun {
    /// Round trips (seconds) of the packets sent in `[from, to)` that were answered, in send
    /// order, and how many packets were sent then.
    pub fn window(&self, from: Instant, to: Instant) -> (Vec<f64>, usize) {
        let sent: Vec<&ProbeSample> = self
            .samples
            .iter()
            .filter(|s| s.sent >= from && s.sent < to)
            .collect();
        let rtts = sent
            .iter()
            .filter_map(|s| s.rtt.map(|d| d.as_secs_f64()))
            .collect();
        (rtts, sent.len())
    }

    /// Every packet sent in `[from, to)`: its send time from `from` and its round trip, in
    /// seconds; the round trip is `f64::INFINITY` when the packet was lost.
    pub fn window_with_losses(&self, from: Instant, to: Instant) -> Vec<(f64, f64)> {
        self.samples
            .iter()
            .filter(|s| s.sent >= from && s.sent < to)
            .map(|s| {
                let rtt = s.rtt.map_or(f64::INFINITY, |d| d.as_secs_f64());
                (s.sent.duration_since(from).as_secs_f64(), rtt)
            })
            .collect()
    }
}

/// A running probe; [`Probe::finish`] stops it and returns what it measured.
pub struct Probe {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<ProbeRun>>,
}

impl Probe {
    /// Starts a probe thread in namespace `ns` along `route`, and returns once it is
    /// measuring (after the warm-up). It stops by itself after `limit` of measuring.
    pub fn start(ns: &str, route: ProbeRoute, limit: Duration) -> Result<Probe> {
        let stop = Arc::new(AtomicBool::new(false));
        let (st, name) = (stop.clone(), ns.to_string());
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("latency-probe".into())
            .spawn(move || {
                if let Err(e) = crate::netns::enter(&name) {
                    let _ = ready_tx.send(());
                    return ProbeRun {
                        error: Some(e.to_string()),
                        ..ProbeRun::default()
                    };
                }
                prefer_realtime();
                run_probe(route, limit, &st, ready_tx)
            })
            .map_err(|e| TestbedError::io("spawning the latency probe's thread", e))?;
        // The thread signals when measuring begins (or when it gave up).
        let _ = ready_rx.recv_timeout(WARM_UP + Duration::from_secs(30));
        Ok(Probe {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops sending, waits for the outstanding answers (at most [`ANSWER_WITHIN`]) and
    /// returns the packets.
    pub fn finish(mut self) -> ProbeRun {
        self.stop.store(true, Ordering::SeqCst);
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(run)) => run,
            _ => ProbeRun {
                error: Some("the probe thread panicked".into()),
                ..ProbeRun::default()
            },
        }
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The probe's socket and where its packets go.
struct Flow {
    sock: UdpSocket,
    /// Where datagrams are sent (the responder, or the proxy's relay).
    to: SocketAddr,
    /// The SOCKS5 UDP header for the responder, when going through a proxy.
    socks_header: Option<Vec<u8>>,
    /// The proxy's control connection (the association lives as long as it).
    _control: Option<TcpStream>,
}

impl Flow {
    fn open(route: ProbeRoute) -> io::Result<Flow> {
        match route {
            ProbeRoute::Direct { bind, target } => {
                let sock =
                    UdpSocket::bind(SocketAddrV4::new(bind.unwrap_or(Ipv4Addr::UNSPECIFIED), 0))?;
                Ok(Flow {
                    sock,
                    to: target.into(),
                    socks_header: None,
                    _control: None,
                })
            }
            ProbeRoute::Socks { proxy, target } => {
                let ab = Abort::new(None, Instant::now() + Duration::from_secs(10));
                let mut control = traffic::connect(Proto::Tcp, None, None, proxy, &ab)?;
                let any = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0);
                let relay = traffic::socks5_request(&mut control, 3, any, &ab)?
                    .ok_or_else(|| io::Error::other("the proxy's UDP relay is not IPv4"))?;
                // A relay on the wildcard address is reached at the proxy's address.
                let relay = if relay.ip().is_unspecified() {
                    SocketAddrV4::new(*proxy.ip(), relay.port())
                } else {
                    relay
                };
                let sock = UdpSocket::bind(SocketAddrV4::new(*proxy.ip(), 0))?;
                let mut head = vec![0u8, 0, 0, 1];
                head.extend_from_slice(&target.ip().octets());
                head.extend_from_slice(&target.port().to_be_bytes());
                Ok(Flow {
                    sock,
                    to: relay.into(),
                    socks_header: Some(head),
                    _control: Some(control),
                })
            }
        }
    }

    fn send(&self, kind: u8, seq: u32, sent_ns: u64) {
        let mut pkt = Vec::with_capacity(PROBE_PAYLOAD + 10);
        if let Some(h) = &self.socks_header {
            pkt.extend_from_slice(h);
        }
        let start = pkt.len();
        pkt.extend_from_slice(MAGIC);
        pkt.extend_from_slice(&[kind, 0, 0, 0]);
        pkt.extend_from_slice(&seq.to_le_bytes());
        pkt.extend_from_slice(&sent_ns.to_le_bytes());
        pkt.resize(start + PROBE_PAYLOAD, 0);
        let _ = self.sock.send_to(&pkt, self.to);
    }

    /// Waits up to `wait` for an answer: `(kind, seq, sent_ns)`.
    fn recv(&self, wait: Duration, buf: &mut [u8]) -> Option<(u8, u32, u64)> {
        let _ = self
            .sock
            .set_read_timeout(Some(wait.max(Duration::from_millis(1))));
        let (n, _) = self.sock.recv_from(buf).ok()?;
        let body = match &self.socks_header {
            Some(_) => strip_socks_udp(&buf[..n])?,
            None => &buf[..n],
        };
        parse(body)
    }
}

/// The payload of a SOCKS5 UDP datagram (RFC 1928 section 7), `None` if malformed or
/// fragmented.
fn strip_socks_udp(d: &[u8]) -> Option<&[u8]> {
    if d.len() < 4 || d[2] != 0 {
        return None;
    }
    let head = match d[3] {
        1 => 4 + 4 + 2,
        4 => 4 + 16 + 2,
        3 => 4 + 1 + *d.get(4)? as usize + 2,
        _ => return None,
    };
    d.get(head..)
}

fn parse(b: &[u8]) -> Option<(u8, u32, u64)> {
    if b.len() < HEADER || &b[..4] != MAGIC {
        return None;
    }
    let seq = u32::from_le_bytes(b[8..12].try_into().ok()?);
    let sent = u64::from_le_bytes(b[12..20].try_into().ok()?);
    Some((b[4], seq, sent))
}

fn stopped(stop: &AtomicBool) -> bool {
    stop.load(Ordering::Relaxed) || crate::signal::caught().is_some()
}

fn run_probe(
    route: ProbeRoute,
    limit: Duration,
    stop: &AtomicBool,
    ready: mpsc::Sender<()>,
) -> ProbeRun {
    let mut run = ProbeRun::default();
    let flow = match Flow::open(route) {
        Ok(f) => f,
        Err(e) => {
            run.error = Some(format!("opening the probe flow ({route:?}): {e}"));
            let _ = ready.send(());
            return run;
        }
    };
    let base = Instant::now();
    let ns = |t: Instant| t.duration_since(base).as_nanos() as u64;
    let mut buf = vec![0u8; 2048];
    // Warm-up: until one packet came back.
    let warm_end = base + WARM_UP;
    'warm: while Instant::now() < warm_end && !stopped(stop) {
        flow.send(0, 0, ns(Instant::now()));
        let until = Instant::now() + POLL;
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            if let Some((0, _, _)) = flow.recv(left, &mut buf) {
                run.warmed_up = true;
                break 'warm;
            }
        }
    }
    let start = Instant::now();
    run.measuring_from = Some(start);
    let _ = ready.send(());
    measure(&flow, base, start + limit, stop, &mut run, &mut buf);
    run
}

/// Sends measured packets every [`probe_interval`] until stopped or `end`, then collects
/// the answers still due.
fn measure(
    flow: &Flow,
    base: Instant,
    end: Instant,
    stop: &AtomicBool,
    run: &mut ProbeRun,
    buf: &mut [u8],
) {
    let gap = probe_interval();
    let mut next = Instant::now();
    let mut answered = 0usize;
    while !stopped(stop) && Instant::now() < end {
        let now = Instant::now();
        if now >= next {
            let seq = run.samples.len() as u32;
            run.samples.push(ProbeSample {
                sent: now,
                rtt: None,
            });
            flow.send(1, seq, now.duration_since(base).as_nanos() as u64);
            // A late wake-up does not make a burst: the next packet is one gap later.
            next = (next + gap).max(now + gap / 2);
        }
        let wait = next.saturating_duration_since(Instant::now()).min(POLL);
        let got = flow.recv(wait, buf);
        answered += usize::from(record(run, got, base));
    }
    let last = run.samples.last().map_or(Instant::now(), |s| s.sent);
    let drain_end = last + ANSWER_WITHIN;
    while answered < run.samples.len() && crate::signal::caught().is_none() {
        let Some(left) = drain_end.checked_duration_since(Instant::now()) else {
            break;
        };
        let got = flow.recv(left.min(POLL), buf);
        answered += usize::from(record(run, got, base));
    }
}

/// Notes an answer received now; true when it is the first answer of a measured packet
/// within [`ANSWER_WITHIN`].
fn record(run: &mut ProbeRun, got: Option<(u8, u32, u64)>, base: Instant) -> bool {
    let Some((1, seq, sent_ns)) = got else {
        return false;
    };
    let Some(s) = run.samples.get_mut(seq as usize) else {
        return false;
    };
    let rtt = base.elapsed().saturating_sub(Duration::from_nanos(sent_ns));
    if s.rtt.is_some() || rtt > ANSWER_WITHIN {
        return false;
    }
    s.rtt = Some(rtt);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socks_udp_header_is_stripped_and_junk_refused() {
        let mut d = vec![0u8, 0, 0, 1, 127, 0, 0, 1, 0x1f, 0x90];
        d.extend_from_slice(b"BRPB");
        assert_eq!(strip_socks_udp(&d), Some(&b"BRPB"[..]));
        assert_eq!(strip_socks_udp(&[0, 0, 1, 1, 0]), None, "fragment");
        assert_eq!(strip_socks_udp(&[0, 0, 0, 9]), None, "address type");
        assert_eq!(strip_socks_udp(&[0, 0, 0, 3, 200]), None, "short domain");
        assert_eq!(parse(b"BRPB"), None);
    }

    #[test]
    fn window_counts_losses() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let run = ProbeRun {
            samples: vec![
                ProbeSample {
                    sent: at(0),
                    rtt: Some(Duration::from_millis(20)),
                },
                ProbeSample {
                    sent: at(20),
                    rtt: None,
                },
                ProbeSample {
                    sent: at(40),
                    rtt: Some(Duration::from_millis(30)),
                },
            ],
            ..ProbeRun::default()
        };
        let (rtts, sent) = run.window(at(10), at(100));
        assert_eq!((rtts, sent), (vec![0.030], 2));
        assert_eq!(
            run.window_with_losses(at(0), at(30)),
            vec![(0.0, 0.020), (0.020, f64::INFINITY)]
        );
    }
}
