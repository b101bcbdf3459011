//! Latency under load (issue 23): bulk flows to the rig's destinations for a fixed time,
//! with the testbed's sparse UDP echo probe (50 packets/s of 160 bytes) beside them, idle
//! first. Flows and probe go the way an application's would: by the client namespace's
//! routes (TUN mode, or a plain link without braid), or through a SOCKS5 proxy (CONNECT for
//! the flows, UDP ASSOCIATE for the probe). A script may run beside the loaded phase
//! ([`Rig::measure_load_during`]: faults on the links), and the result keeps the probe's
//! packets and the downloads' goodput in 100 ms samples to time them against.

use super::{set_cc, Rig, DEST4, HTTP_PORT, SINK_PORT};
use braid_sim::Latency;
use braid_testbed::netns::enter;
use braid_testbed::probe::{EchoServer, Probe, ProbeRoute};
use std::io::{Read, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How the client namespace's flows reach the destinations.
#[derive(Debug, Clone, Copy)]
pub enum Via {
    /// The namespace's routes: the TUN device, or a plain link ([`Rig::route_dest_over`]).
    Routes,
    /// The SOCKS5 proxy at this address.
    Socks(SocketAddrV4),
}

/// One bulk flow: a download from the HTTP server or an upload to the sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bulk {
    Down,
    Up,
}

/// The durations of one measurement.
#[derive(Debug, Clone, Copy)]
pub struct LoadTimes {
    /// The probe alone.
    pub idle: Duration,
    /// The flows run this long; the probe's loaded samples are those sent meanwhile.
    pub load: Duration,
    /// Goodput is counted from this long after the flows start to their end (ramp-up out).
    pub ramp: Duration,
}

/// What one measurement saw.
#[derive(Debug, Clone)]
pub struct LoadResult {
    pub latency: Latency,
    /// Goodput of the downloads together and of the uploads together, bit/s, over the
    /// loaded time after the ramp.
    pub down_bps: f64,
    pub up_bps: f64,
    /// Flows that failed, and why.
    pub errors: Vec<String>,
    /// Whether the probe came back at all before measuring.
    pub warmed_up: bool,
    /// The probe's packets sent while loaded: (send time from the load's start, round trip;
    /// infinite when lost), seconds, as `braid_testbed::faults::measure_fault` takes them.
    pub loaded_probe: Vec<(f64, f64)>,
    /// The downloads' goodput together, bit/s, in [`SAMPLE`] intervals from the load's start.
    pub down_samples_bps: Vec<f64>,
}

/// The interval of [`LoadResult::down_samples_bps`].
pub const SAMPLE: Duration = Duration::from_millis(100);

impl LoadResult {
    pub fn added_p50_ms(&self) -> f64 {
        self.latency.added_p50_ms().unwrap_or(f64::INFINITY)
    }
    pub fn added_p95_ms(&self) -> f64 {
        self.latency.added_p95_ms().unwrap_or(f64::INFINITY)
    }

    /// One row of the table [`LoadResult::HEADER`] heads: `what`, idle p50, loaded
    /// p50/p95/p99 (ms), what the load added at p50 and p95, probe loss, goodput down and
    /// up (Mbit/s) and `frac` (goodput over what it is compared with).
    pub fn row(&self, what: &str, frac: f64) -> String {
        let ms = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.1}"));
        let l = &self.latency;
        format!(
            "| {what} | {} | {} | {} | {} | {:+.1} | {:+.1} | {:.1} % | {:.2} | {:.2} | {frac:.3} |",
            ms(l.latency_idle_p50_ms),
            ms(l.latency_load_p50_ms),
            ms(l.latency_load_p95_ms),
            ms(l.latency_load_p99_ms),
            self.added_p50_ms(),
            self.added_p95_ms(),
            l.probe_loss.unwrap_or(1.0) * 100.0,
            self.down_bps / 1e6,
            self.up_bps / 1e6,
        )
    }

    pub const HEADER: &'static str = "| case | idle p50 | loaded p50 | p95 | p99 | added p50 | \
        added p95 | probe loss | down Mbit/s | up Mbit/s | of capacity |\n\
        |---|---|---|---|---|---|---|---|---|---|---|";
}

impl Rig {
    /// The probe alone for `t.idle`, then `flows` at once for `t.load` with the probe
    /// beside them, all from the client namespace `via` the given way.
    pub fn measure_load(&self, via: Via, flows: &[Bulk], t: LoadTimes) -> LoadResult {
        self.measure_load_during(via, flows, t, || {})
    }

    /// [`Rig::measure_load`], with `script` started on its own thread as the flows start
    /// (it must end within `t.load`; its timing is the caller's).
    pub fn measure_load_during(
        &self,
        via: Via,
        flows: &[Bulk],
        t: LoadTimes,
        script: impl FnOnce() + Send + 'static,
    ) -> LoadResult {
        let ns = self.topo.client.clone();
        let any = SocketAddrV4::new(DEST4, 0);
        let echo = EchoServer::start(&self.topo.server, any).expect("the probe's echo");
        let target = SocketAddrV4::new(DEST4, echo.addr.port());
        let route = match via {
            Via::Routes => ProbeRoute::Direct { bind: None, target },
            Via::Socks(proxy) => ProbeRoute::Socks { proxy, target },
        };
        let limit = t.idle + t.load + Duration::from_secs(10);
        let probe = Probe::start(&ns, route, limit).expect("the probe");
        std::thread::sleep(t.idle);

        let stop = Arc::new(AtomicBool::new(false));
        let down = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let load_from = Instant::now();
        let script = std::thread::spawn(script);
        let sampler = {
            let (stop, down) = (stop.clone(), down.clone());
            std::thread::spawn(move || sample_every(SAMPLE, load_from, &down, &stop))
        };
        let threads: Vec<_> = flows
            .iter()
            .map(|&b| {
                let (ns, stop, down, errors) =
                    (ns.clone(), stop.clone(), down.clone(), errors.clone());
                let cc = self.host_cc;
                std::thread::spawn(move || {
                    if let Err(e) = enter(&ns)
                        .map_err(|e| e.to_string())
                        .and_then(|()| bulk(via, b, cc, &down, &stop))
                    {
                        errors
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(format!("{b:?}: {e}"));
                    }
                })
            })
            .collect();
        std::thread::sleep(t.ramp);
        let (d0, u0, t0) = (
            down.load(Ordering::Relaxed),
            self.uploaded.load(Ordering::Relaxed),
            Instant::now(),
        );
        std::thread::sleep(t.load.saturating_sub(t.ramp));
        let (d1, u1) = (
            down.load(Ordering::Relaxed),
            self.uploaded.load(Ordering::Relaxed),
        );
        let secs = t0.elapsed().as_secs_f64();
        let load_to = Instant::now();
        stop.store(true, Ordering::Relaxed);
        let run = probe.finish();
        for th in threads {
            let _ = th.join();
        }
        let down_samples_bps = sampler.join().unwrap_or_default();
        if script.join().is_err() {
            errors
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push("the script beside the load panicked".into());
        }
        let idle_from = run.measuring_from.unwrap_or(load_from);
        let (idle, _) = run.window(idle_from, load_from);
        let (loaded, sent) = run.window(load_from, load_to);
        let loaded_probe = run.window_with_losses(load_from, load_to);
        let errors = std::mem::take(&mut *errors.lock().unwrap_or_else(|e| e.into_inner()));
        LoadResult {
            latency: Latency::from_samples(&idle, &loaded, sent),
            down_bps: (d1 - d0) as f64 * 8.0 / secs,
            up_bps: (u1 - u0) as f64 * 8.0 / secs,
            errors: errors.into_iter().chain(run.error).collect(),
            warmed_up: run.warmed_up,
            loaded_probe,
            down_samples_bps,
        }
    }
}

/// The growth of `count` in each `every` from `from` until `stop`, bit/s.
fn sample_every(every: Duration, from: Instant, count: &AtomicU64, stop: &AtomicBool) -> Vec<f64> {
    let mut out = Vec::new();
    let mut last = count.load(Ordering::Relaxed);
    while !stop.load(Ordering::Relaxed) {
        let due = from + every * (out.len() as u32 + 1);
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        let now = count.load(Ordering::Relaxed);
        out.push((now - last) as f64 * 8.0 / every.as_secs_f64());
        last = now;
    }
    out
}

/// Runs one bulk flow until `stop` with congestion controller `cc` on its socket; a download
/// counts what it receives in `down`.
fn bulk(
    via: Via,
    b: Bulk,
    cc: Option<&str>,
    down: &AtomicU64,
    stop: &AtomicBool,
) -> Result<(), String> {
    let port = match b {
        Bulk::Down => HTTP_PORT,
        Bulk::Up => SINK_PORT,
    };
    let mut s =
        connect(via, SocketAddrV4::new(DEST4, port)).map_err(|e| format!("connect: {e}"))?;
    set_cc(&s, cc);
    let tick = Some(Duration::from_millis(100));
    match b {
        Bulk::Down => {
            s.set_read_timeout(tick).map_err(|e| e.to_string())?;
            // More than any test moves: the server sends until the flow closes.
            s.write_all(b"GET /1000000000000 HTTP/1.1\r\nHost: dest\r\n\r\n")
                .map_err(|e| format!("request: {e}"))?;
            let mut buf = vec![0u8; 1 << 16];
            while !stop.load(Ordering::Relaxed) {
                match s.read(&mut buf) {
                    Ok(0) => return Err("the download ended early".into()),
                    Ok(n) => {
                        down.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    Err(e) if is_timeout(&e) => {}
                    Err(e) => return Err(format!("receiving: {e}")),
                }
            }
        }
        Bulk::Up => {
            s.set_write_timeout(tick).map_err(|e| e.to_string())?;
            let buf = vec![0x5au8; 1 << 16];
            while !stop.load(Ordering::Relaxed) {
                match s.write(&buf) {
                    Ok(_) => {}
                    Err(e) if is_timeout(&e) => {}
                    Err(e) => return Err(format!("sending: {e}")),
                }
            }
        }
    }
    Ok(())
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// A TCP connection to `to`: straight, or through a SOCKS5 proxy's CONNECT (no auth).
fn connect(via: Via, to: SocketAddrV4) -> std::io::Result<TcpStream> {
    let wait = Duration::from_secs(10);
    match via {
        Via::Routes => TcpStream::connect_timeout(&SocketAddr::V4(to), wait),
        Via::Socks(proxy) => {
            let mut s = TcpStream::connect_timeout(&SocketAddr::V4(proxy), wait)?;
            s.set_read_timeout(Some(wait))?;
            s.write_all(&[5, 1, 0])?;
            let mut hello = [0u8; 2];
            s.read_exact(&mut hello)?;
            let mut req = vec![5, 1, 0, 1];
            req.extend_from_slice(&to.ip().octets());
            req.extend_from_slice(&to.port().to_be_bytes());
            s.write_all(&req)?;
            let mut reply = [0u8; 10];
            s.read_exact(&mut reply)?;
            if hello != [5, 0] || reply[..2] != [5, 0] || reply[3] != 1 {
                return Err(std::io::Error::other(format!(
                    "the proxy refused: {hello:?} {:?}",
                    &reply[..4]
                )));
            }
            Ok(s)
        }
    }
}
