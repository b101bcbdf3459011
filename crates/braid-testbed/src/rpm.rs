//! Responsiveness under working conditions (RPM), after the IETF draft
//! draft-ietf-ippm-responsiveness: round trips a minute that small requests get while the
//! transfer loads the route.
//!
//! Owns: the request/response responder in the server namespace ([`RpmServer`]), the probes
//! in the client namespace ([`RpmProbe`]), and the formula ([`RpmSamples::rpm`]). Must not
//! touch: the bulk transfer and the connections' set-up (`traffic` opens them, along the
//! variant's route), the UDP probe (`probe`).
//!
//! **Method**, and where it departs from the draft:
//! - *Foreign probes*: a new connection each time, along the variant's route (its SOCKS5
//!   proxy, its source address, MPTCP for `mptcp`): the set-up time as the application sees
//!   it (`connect` until the connection, or the proxy's CONNECT reply, is up: the draft's
//!   TCP handshake) and one request/response on it (the draft's HTTP request).
//! - *Loaded probes*: request/response on one connection opened once the load runs and kept
//!   open. The draft sends these on the load-generating connections; the testbed's bulk
//!   flow speaks its own protocol, so a long-lived connection on the same route stands in
//!   (through a proxy: another stream of the same session).
//! - No TLS and no HTTP: a 16-byte request and a 16-byte answer.
//! - RPM = the mean of 60 000 / ((TM(connect) + TM(foreign request)) / 2) and 60 000 /
//!   TM(loaded request), times in milliseconds, where TM is the draft's trimmed mean: the
//!   mean of the values up to the 95th percentile.
//! - Timing: measuring starts [`RPM_DELAY`] after the transfer starts (the draft waits for
//!   working conditions) and lasts at most [`RPM_WINDOW`]; each kind of probe runs one at a
//!   time with [`PAUSE`] between, each bounded by [`PROBE_TIMEOUT`] (one that times out is
//!   left out and counted in [`RpmSamples::timeouts`]).

use crate::error::{Result, TestbedError};
use crate::traffic::{self, Abort, Proto, TransferSpec};
use std::io::{self, Read};
use std::net::{SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long after the transfer's start measuring begins.
pub const RPM_DELAY: Duration = Duration::from_secs(1);
/// How long measuring lasts at most.
pub const RPM_WINDOW: Duration = Duration::from_secs(4);
/// A probe (set-up plus request, or one request) taking longer is abandoned.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(4);
/// Between two probes of one kind.
pub const PAUSE: Duration = Duration::from_millis(20);
/// The share of the values the trimmed mean keeps.
pub const TRIM: f64 = 0.95;
const REQUEST: &[u8; 16] = b"BRRQ-responsive?";
const ANSWER: &[u8; 16] = b"BRRS-responsive!";

/// The request/response responder; dropping it stops it and its connections.
pub struct RpmServer {
    /// Where it listens (in its namespace).
    pub addr: SocketAddrV4,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl RpmServer {
    /// Listens on `bind` (port 0: any) in namespace `ns`, with TCP or MPTCP sockets.
    pub fn start(ns: &str, bind: SocketAddrV4, proto: Proto) -> Result<RpmServer> {
        let listener = traffic::listen(ns, bind, proto, "the RPM responder")?;
        let addr = match listener.local_addr() {
            Ok(std::net::SocketAddr::V4(a)) => a,
            other => {
                return Err(TestbedError::Other(format!(
                    "the RPM responder got no IPv4 address ({other:?})"
                )))
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let thread = std::thread::Builder::new()
            .name("rpm-server".into())
            .spawn(move || accept_loop(&listener, &st))
            .map_err(|e| TestbedError::io("spawning the RPM responder's thread", e))?;
        Ok(RpmServer {
            addr,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for RpmServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, stop: &Arc<AtomicBool>) {
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((s, _)) => {
                let st = stop.clone();
                if let Ok(h) =
                    std::thread::Builder::new()
                        .name("rpm-conn".into())
                        .spawn(move || {
                            let _ = answer_requests(s, &st);
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

/// Answers every request on a connection until EOF or stop.
fn answer_requests(mut s: TcpStream, stop: &AtomicBool) -> io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_millis(100)))?;
    s.set_write_timeout(Some(Duration::from_millis(100)))?;
    let _ = s.set_nodelay(true);
    let ab = Abort::new(Some(stop), Instant::now() + Duration::from_secs(24 * 3600));
    let mut req = [0u8; 16];
    loop {
        match read_request(&mut s, &mut req, &ab) {
            Ok(true) => {}
            Ok(false) => return Ok(()),
            Err(e) => return Err(e),
        }
        if &req != REQUEST {
            return Err(io::Error::other("not an RPM request"));
        }
        traffic::write_full(&mut s, ANSWER, &ab)?;
    }
}

/// Reads one request; `false` at a clean EOF before it.
fn read_request(s: &mut TcpStream, buf: &mut [u8; 16], ab: &Abort<'_>) -> io::Result<bool> {
    let mut off = 0;
    while off < buf.len() {
        match s.read(&mut buf[off..]) {
            Ok(0) if off == 0 => return Ok(false),
            Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "early EOF")),
            Ok(n) => off += n,
            Err(e) if traffic::retryable(&e) => ab.check()?,
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// One request and its answer; the time it took.
fn request(s: &mut TcpStream, ab: &Abort<'_>) -> io::Result<Duration> {
    let t = Instant::now();
    traffic::write_full(s, REQUEST, ab)?;
    let mut ans = [0u8; 16];
    traffic::read_full(s, &mut ans, ab)?;
    if &ans != ANSWER {
        return Err(io::Error::other(
            "the RPM responder answered something else",
        ));
    }
    Ok(t.elapsed())
}

/// What the probes measured, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RpmSamples {
    /// Set-up times of the foreign probes' new connections.
    pub connect_ms: Vec<f64>,
    /// Request/response times on the foreign probes' new connections.
    pub foreign_ms: Vec<f64>,
    /// Request/response times on the long-lived connection.
    pub loaded_ms: Vec<f64>,
    /// Probes abandoned after [`PROBE_TIMEOUT`] or failed.
    pub timeouts: usize,
}

/// The mean of the sorted values up to the `keep` quantile (nearest rank), `None` when
/// there are none.
pub fn trimmed_mean(values: &[f64], keep: f64) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = ((keep.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize).clamp(1, v.len());
    Some(v[..n].iter().sum::<f64>() / n as f64)
}

impl RpmSamples {
    /// Round trips a minute (see the module's method); `None` without samples. With only
    /// one kind of probe answered, that kind alone.
    pub fn rpm(&self) -> Option<f64> {
        let per_min = |ms: f64| (ms > 0.0).then(|| 60_000.0 / ms);
        let foreign = match (
            trimmed_mean(&self.connect_ms, TRIM),
            trimmed_mean(&self.foreign_ms, TRIM),
        ) {
            (Some(c), Some(r)) => per_min((c + r) / 2.0),
            _ => None,
        };
        let loaded = trimmed_mean(&self.loaded_ms, TRIM).and_then(per_min);
        match (foreign, loaded) {
            (Some(f), Some(l)) => Some((f + l) / 2.0),
            (f, l) => f.or(l),
        }
    }
}

/// The running probes; [`RpmProbe::finish`] stops them.
pub struct RpmProbe {
    stop: Arc<AtomicBool>,
    foreign: Option<JoinHandle<RpmSamples>>,
    loaded: Option<JoinHandle<RpmSamples>>,
}

impl RpmProbe {
    /// Starts both kinds of probe towards the responder `spec` leads to (its `target`, or
    /// its proxy's target), from `spec.ns`; they wait [`RPM_DELAY`], then measure for at
    /// most [`RPM_WINDOW`].
    pub fn start(spec: &TransferSpec) -> Result<RpmProbe> {
        let stop = Arc::new(AtomicBool::new(false));
        let begin = Instant::now() + RPM_DELAY;
        let spawn = |name: &str, foreign: bool| {
            let (sp, st) = (spec.clone(), stop.clone());
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    if crate::netns::enter(&sp.ns).is_err() {
                        return RpmSamples::default();
                    }
                    probe_loop(&sp, &st, begin, foreign)
                })
                .map_err(|e| TestbedError::io("spawning an RPM probe thread", e))
        };
        let foreign = spawn("rpm-foreign", true)?;
        let loaded = spawn("rpm-loaded", false)?;
        Ok(RpmProbe {
            stop,
            foreign: Some(foreign),
            loaded: Some(loaded),
        })
    }

    /// Stops the probes (one in flight is abandoned) and returns their samples.
    pub fn finish(mut self) -> RpmSamples {
        self.stop.store(true, Ordering::SeqCst);
        let mut out = RpmSamples::default();
        for h in [self.foreign.take(), self.loaded.take()]
            .into_iter()
            .flatten()
        {
            if let Ok(s) = h.join() {
                out.connect_ms.extend(s.connect_ms);
                out.foreign_ms.extend(s.foreign_ms);
                out.loaded_ms.extend(s.loaded_ms);
                out.timeouts += s.timeouts;
            }
        }
        out
    }
}

impl Drop for RpmProbe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for h in [self.foreign.take(), self.loaded.take()]
            .into_iter()
            .flatten()
        {
            let _ = h.join();
        }
    }
}

fn wait_until(t: Instant, stop: &AtomicBool) -> bool {
    while Instant::now() < t {
        if stop.load(Ordering::Relaxed) || crate::signal::caught().is_some() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Foreign (`foreign`) or loaded probes, one after the other, until stopped or the window
/// ends.
fn probe_loop(sp: &TransferSpec, stop: &AtomicBool, begin: Instant, foreign: bool) -> RpmSamples {
    let mut out = RpmSamples::default();
    if !wait_until(begin, stop) {
        return out;
    }
    let end = begin + RPM_WINDOW;
    let mut kept: Option<TcpStream> = None;
    let live = || !stop.load(Ordering::Relaxed) && crate::signal::caught().is_none();
    while live() && Instant::now() < end {
        let ab = Abort::new(Some(stop), (Instant::now() + PROBE_TIMEOUT).min(end));
        let r = if foreign {
            foreign_probe(sp, &ab).map(|(c, q)| {
                out.connect_ms.push(ms(c));
                out.foreign_ms.push(ms(q));
            })
        } else {
            loaded_probe(sp, &mut kept, &ab).map(|q| out.loaded_ms.push(ms(q)))
        };
        if r.is_err() {
            kept = None;
            if live() && Instant::now() < end {
                out.timeouts += 1;
            }
        }
        if !wait_until(Instant::now() + PAUSE, stop) {
            break;
        }
    }
    out
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn foreign_probe(sp: &TransferSpec, ab: &Abort<'_>) -> io::Result<(Duration, Duration)> {
    let t = Instant::now();
    let mut s = traffic::open_stream(sp, ab)?;
    let set_up = t.elapsed();
    let q = request(&mut s, ab)?;
    Ok((set_up, q))
}

fn loaded_probe(
    sp: &TransferSpec,
    kept: &mut Option<TcpStream>,
    ab: &Abort<'_>,
) -> io::Result<Duration> {
    if kept.is_none() {
        let mut s = traffic::open_stream(sp, ab)?;
        // The first request also warms the connection up; it is not counted.
        request(&mut s, ab)?;
        *kept = Some(s);
    }
    match kept {
        Some(s) => request(s, ab),
        None => Err(io::Error::other("no connection")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trimmed_mean_drops_the_top_five_percent() {
        let mut v: Vec<f64> = (1..=19).map(|_| 10.0).collect();
        v.push(1000.0);
        assert_eq!(trimmed_mean(&v, TRIM), Some(10.0));
        assert_eq!(trimmed_mean(&[], TRIM), None);
        assert_eq!(trimmed_mean(&[f64::NAN, 4.0], TRIM), Some(4.0));
    }

    #[test]
    fn rpm_is_the_mean_of_foreign_and_loaded() {
        let s = RpmSamples {
            connect_ms: vec![20.0],
            foreign_ms: vec![20.0],
            loaded_ms: vec![60.0],
            timeouts: 0,
        };
        // Foreign: 60000 / 20 = 3000; loaded: 60000 / 60 = 1000.
        assert_eq!(s.rpm(), Some(2000.0));
        let only_loaded = RpmSamples {
            loaded_ms: vec![30.0],
            ..RpmSamples::default()
        };
        assert_eq!(only_loaded.rpm(), Some(2000.0));
        assert_eq!(RpmSamples::default().rpm(), None);
    }
}
