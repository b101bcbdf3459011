//! What a flood test's host did beside the server: datagrams the kernel dropped at each
//! UDP socket (the `drops` column of /proc/net/udp, by local port) and how late a thread
//! that wants to wake every millisecond was woken (the host's scheduling hiccups, which
//! the emulator's, the agent's and the sink's threads see as well).
//!
//! Owns: those two measurements for `hardening_flood`, and [`Watched`], which reports them
//! with the emulated path's drops and the server's view of the path. Must not touch: the
//! server, the flood, the goodput figures.

use braid_emu::Emulator;
use braid_net::server::ServerBoard;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Drops so far of every UDP socket over IPv4 in this network namespace, by (local port,
/// inode).
pub fn udp_drops() -> HashMap<(u16, u64), u64> {
    let text = std::fs::read_to_string("/proc/net/udp").unwrap_or_default();
    let mut m = HashMap::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let port = f
            .get(1)
            .and_then(|a| a.rsplit_once(':'))
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
        let inode = f.get(9).and_then(|i| i.parse::<u64>().ok());
        let drops = f.last().and_then(|d| d.parse::<u64>().ok());
        if let (Some(port), Some(inode), Some(drops)) = (port, inode, drops) {
            m.insert((port, inode), drops);
        }
    }
    m
}

/// What grew between two [`udp_drops`] snapshots: for each of `ports` (name, port) the
/// growth of each of its sockets (in inode order, so the order they were made in), and
/// last ("other") the growth of every other socket together.
pub fn drops_between(
    before: &HashMap<(u16, u64), u64>,
    after: &HashMap<(u16, u64), u64>,
    ports: &[(&str, u16)],
) -> Vec<(String, Vec<u64>)> {
    let grew = |k: &(u16, u64), v: &u64| v - before.get(k).copied().unwrap_or(0);
    let mut out: Vec<(String, Vec<u64>)> = ports
        .iter()
        .map(|&(name, p)| {
            let mut socks: Vec<(u64, u64)> = after
                .iter()
                .filter(|(k, _)| k.0 == p)
                .map(|(k, v)| (k.1, grew(k, v)))
                .collect();
            socks.sort();
            (name.to_string(), socks.into_iter().map(|s| s.1).collect())
        })
        .collect();
    let other = after
        .iter()
        .filter(|(k, _)| !ports.iter().any(|p| p.1 == k.0))
        .map(|(k, v)| grew(k, v))
        .sum();
    out.push(("other".to_string(), vec![other]));
    out
}

/// A thread that sleeps 1 ms at a time and records how late it woke.
pub struct Lateness {
    /// Largest lateness since the last [`Lateness::take`], microseconds.
    max_us: AtomicU64,
    /// Wake-ups more than 10 ms late since the last take.
    over_10ms: AtomicU64,
    stop: AtomicBool,
}

impl Lateness {
    /// Start the probe thread (at the priority of the calling thread).
    pub fn start() -> Arc<Lateness> {
        let l = Arc::new(Lateness {
            max_us: AtomicU64::new(0),
            over_10ms: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let p = l.clone();
        std::thread::spawn(move || {
            while !p.stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                std::thread::sleep(Duration::from_millis(1));
                let late = t.elapsed().saturating_sub(Duration::from_millis(1));
                p.max_us
                    .fetch_max(late.as_micros() as u64, Ordering::Relaxed);
                if late > Duration::from_millis(10) {
                    p.over_10ms.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        l
    }

    /// (largest lateness in ms, wake-ups over 10 ms late) since the last take; resets both.
    pub fn take(&self) -> (f64, u64) {
        let max = self.max_us.swap(0, Ordering::Relaxed) as f64 / 1000.0;
        (max, self.over_10ms.swap(0, Ordering::Relaxed))
    }
}

impl Lateness {
    /// End the probe thread.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// What is watched beside the server during each measurement (see `flood_watch`).
pub struct Watched<'a> {
    pub emu: &'a Emulator,
    pub board: Arc<ServerBoard>,
    pub lateness: Arc<Lateness>,
    /// Named local ports whose sockets' kernel drops are reported.
    pub ports: Vec<(&'static str, u16)>,
}

/// Snapshot of what [`Watched`] counts.
pub struct Marks {
    drops: std::collections::HashMap<(u16, u64), u64>,
    emu_down: (u64, u64),
}

impl Watched<'_> {
    pub fn mark(&self) -> Marks {
        let s = self.emu.stats();
        let emu_down = (
            s.down_in.load(Ordering::Relaxed),
            s.down_out.load(Ordering::Relaxed),
        );
        self.lateness.take();
        Marks {
            drops: udp_drops(),
            emu_down,
        }
    }

    /// The server's view of the downloading session's path (it sends the download).
    pub async fn server_path(&self) -> String {
        let st = self.board.snapshot().await;
        st.sessions
            .iter()
            .flat_map(|s| s.paths.iter())
            .filter(|p| p.bytes_sent > 10_000_000)
            .map(|p| {
                format!(
                    "srtt {:?} min {:?} ms, cwnd {} in flight {}, pacing {:.1} Mbit/s, lost {}, \
                     retransmitted {} B",
                    p.srtt_ms,
                    p.min_rtt_ms,
                    p.cwnd_bytes,
                    p.bytes_in_flight,
                    p.pacing_rate_bps as f64 * 1e-6,
                    p.packets_lost,
                    p.retransmitted_bytes
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// One line: kernel drops per named socket, datagrams the emulated path dropped, the
    /// probe thread's lateness, since `m`.
    pub fn since(&self, m: &Marks, extra: &[(&'static str, u16)]) -> String {
        let mut ports = self.ports.clone();
        ports.extend_from_slice(extra);
        let drops = drops_between(&m.drops, &udp_drops(), &ports);
        let s = self.emu.stats();
        let din = s.down_in.load(Ordering::Relaxed) - m.emu_down.0;
        let dout = s.down_out.load(Ordering::Relaxed) - m.emu_down.1;
        let (late, over) = self.lateness.take();
        format!(
            "kernel drops {drops:?}; emulated path down {din} in, {dout} out; probe woke up              to {late:.1} ms late, {over} times over 10 ms"
        )
    }
}
