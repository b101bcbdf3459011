//! The benchmark's sparse flow: while a row's bulk transfer runs, a connection made the same
//! way (straight, MPTCP, or through the same SOCKS5 proxy) sends a 32-byte request every
//! 10 ms to an echo server and times each answer, first alone (idle) and then beside the
//! transfer (loaded): what a call or a game would wait beside a download, as every table
//! that reports goodput must say.
//!
//! Owns: the echo server, the probe's connection and its samples (threads named `load-*`,
//! so their CPU is not counted as braid's). Must not touch: the bulk transfer or braid.

use super::measure::spawn_runtime;
use super::traffic::{connect, Via};
use anyhow::Result;
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Time between two requests.
const EVERY: Duration = Duration::from_millis(10);
/// How long the probe runs alone before the transfer starts.
pub const IDLE: Duration = Duration::from_millis(300);
/// Request and answer size.
const SIZE: usize = 32;

/// What the probe measured for one row, milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct ProbeReport {
    /// Median round trip with the transfer not running.
    pub idle_p50_ms: f64,
    /// Median round trip beside the transfer.
    pub loaded_p50_ms: f64,
    /// 95th percentile beside the transfer.
    pub loaded_p95_ms: f64,
    /// Round trips measured beside the transfer.
    pub loaded_samples: usize,
}

/// A TCP echo server on 127.0.0.1 (thread `load-echo`).
pub fn start_echo() -> Result<SocketAddr> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    l.set_nonblocking(true)?;
    let addr = l.local_addr()?;
    spawn_runtime("load-echo", move || {
        Box::pin(async move {
            let l = TcpListener::from_std(l)?;
            loop {
                let (mut s, _) = l.accept().await?;
                let _ = s.set_nodelay(true);
                tokio::spawn(async move {
                    let mut buf = [0u8; SIZE];
                    while s.read_exact(&mut buf).await.is_ok() {
                        if s.write_all(&buf).await.is_err() {
                            return;
                        }
                    }
                });
            }
            #[allow(unreachable_code)]
            Ok::<(), anyhow::Error>(())
        })
    })?;
    Ok(addr)
}

/// A running probe: [`Probe::loaded`] marks the start of the transfer,
/// [`Probe::finish`] stops it and reports.
pub struct Probe {
    loaded: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<(bool, Duration)>>>,
    thread: std::thread::JoinHandle<Result<()>>,
}

impl Probe {
    /// Connect to `echo` the way `via` says (its first proxy) and start timing.
    pub fn start(via: &Via, echo: SocketAddr) -> Result<Probe> {
        let (loaded, stop) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let samples = Arc::new(Mutex::new(Vec::new()));
        let (l, s, out, via) = (loaded.clone(), stop.clone(), samples.clone(), via.clone());
        let thread = spawn_runtime("load-probe", move || {
            Box::pin(async move {
                let mut c = connect(&via, echo).await?;
                let _ = c.set_nodelay(true);
                let mut buf = [0x42u8; SIZE];
                while !s.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    c.write_all(&buf).await?;
                    c.read_exact(&mut buf).await?;
                    let rtt = t.elapsed();
                    if let Ok(mut v) = out.lock() {
                        v.push((l.load(Ordering::Relaxed), rtt));
                    }
                    tokio::time::sleep(EVERY.saturating_sub(rtt)).await;
                }
                Ok(())
            })
        })?;
        Ok(Probe {
            loaded,
            stop,
            samples,
            thread,
        })
    }

    /// The transfer starts now.
    pub fn loaded(&self) {
        self.loaded.store(true, Ordering::Relaxed);
    }

    /// Stop and report (a probe whose connection failed reports nothing).
    pub fn finish(self) -> Result<ProbeReport> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.join() {
            Ok(r) => r?,
            Err(_) => anyhow::bail!("the latency probe's thread panicked"),
        }
        let v = self.samples.lock().map(|v| v.clone()).unwrap_or_default();
        Ok(report(&v))
    }
}

/// The percentiles of `samples` (loaded or not, round trip).
pub fn report(samples: &[(bool, Duration)]) -> ProbeReport {
    let ms = |loaded: bool| {
        let mut v: Vec<f64> = samples
            .iter()
            .filter(|s| s.0 == loaded)
            .map(|s| s.1.as_secs_f64() * 1e3)
            .collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let pct = |v: &[f64], p: f64| {
        if v.is_empty() {
            return 0.0;
        }
        v[((v.len() - 1) as f64 * p).round() as usize]
    };
    let (idle, loaded) = (ms(false), ms(true));
    ProbeReport {
        idle_p50_ms: pct(&idle, 0.5),
        loaded_p50_ms: pct(&loaded, 0.5),
        loaded_p95_ms: pct(&loaded, 0.95),
        loaded_samples: loaded.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_keep_idle_and_loaded_apart() {
        let ms = Duration::from_millis;
        let mut s: Vec<(bool, Duration)> = (1..=5).map(|i| (false, ms(i))).collect();
        s.extend((1..=100).map(|i| (true, ms(i))));
        let r = report(&s);
        assert_eq!(r.idle_p50_ms, 3.0);
        assert_eq!(r.loaded_p50_ms, 51.0);
        assert_eq!(r.loaded_p95_ms, 95.0);
        assert_eq!(r.loaded_samples, 100);
        assert_eq!(report(&[]), ProbeReport::default());
    }
}
