//! What the benchmark measures with: process and per-thread CPU time, resident memory,
//! and the threads the rows run on.
//!
//! Owns: reading getrusage, /proc/self/task/*/stat and /proc/self/status, and naming the
//! benchmark's own traffic threads (`load-*`) so that the rest of the process (braid's
//! agent and server threads) can be counted apart. Must not touch: braid itself.

use anyhow::{Context, Result};
use std::collections::HashMap;

/// Process CPU seconds (user + system, all threads so far).
pub fn cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes into the zeroed struct we pass.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

/// The prefix of the benchmark's traffic threads (source, sink, UDP sender): everything
/// else in the process but the main thread is braid.
pub const LOAD: &str = "load-";

/// The names of the server's threads: its runtime's (the rig names it) and its extra
/// workers' (`--threads` above 1).
const SERVER: [&str; 2] = ["bench-server", "braid-worker-"];

/// One braid thread's CPU seconds so far, and whether it is the server's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThreadCpu {
    /// User + system seconds.
    pub seconds: f64,
    /// A server thread (else an agent's).
    pub server: bool,
}

/// The number of cores this process may run on.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// CPU seconds of each live thread (by thread id) that is not a traffic thread nor the
/// main thread, from /proc/self/task/*/stat (clock-tick resolution).
pub fn braid_threads() -> HashMap<u32, ThreadCpu> {
    let mut out = HashMap::new();
    let pid = std::process::id();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if tid == pid {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // "tid (comm) state ...": comm may hold spaces, so split at the last ')'.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = &stat[open + 1..close];
        if comm.starts_with(LOAD) {
            continue;
        }
        let server = SERVER.iter().any(|s| comm.starts_with(s));
        let f: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        // After the comm: state is field 3, utime 14 and stime 15 (1-based, whole line).
        let ticks = |i: usize| {
            f.get(i - 3)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let seconds = (ticks(14) + ticks(15)) / hz;
        out.insert(tid, ThreadCpu { seconds, server });
    }
    out
}

/// CPU seconds braid's threads spent between two [`braid_threads`] snapshots (threads
/// that started in between count from zero; those that ended are missing): all of them,
/// and the server's alone.
pub fn braid_cpu_between(
    before: &HashMap<u32, ThreadCpu>,
    after: &HashMap<u32, ThreadCpu>,
) -> (f64, f64) {
    let mut all = 0.0;
    let mut server = 0.0;
    for (t, c) in after {
        let d = c.seconds - before.get(t).map_or(0.0, |b| b.seconds);
        if d > 0.0 {
            all += d;
            if c.server {
                server += d;
            }
        }
    }
    (all, server)
}

/// Resident set size of this process in KiB (VmRSS of /proc/self/status).
pub fn rss_kib() -> Result<u64> {
    let s = std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    parse_rss(&s).context("no VmRSS line in /proc/self/status")
}

/// Bytes this process has allocated and not freed (glibc's `mallinfo2`, all arenas: in
/// use in the arenas plus mmapped blocks), in KiB: the heap without what the allocator
/// keeps free.
pub fn heap_kib() -> u64 {
    // SAFETY: mallinfo2 only reads the allocator's statistics.
    let m = unsafe { libc::mallinfo2() };
    (m.uordblks as u64 + m.hblkhd as u64) / 1024
}

/// The VmRSS figure (KiB) of a /proc/PID/status text.
pub fn parse_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Run `f` on a new thread named `name` with its own single-threaded runtime, and wait
/// for its result.
pub fn on_thread<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<T>>>> + Send + 'static,
) -> Result<T> {
    let h = spawn_runtime(name, f)?;
    h.join()
        .map_err(|_| anyhow::anyhow!("the benchmark thread panicked"))?
}

/// Start `f` on a new thread named `name` with its own single-threaded runtime.
pub fn spawn_runtime<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<T>>>> + Send + 'static,
) -> Result<std::thread::JoinHandle<Result<T>>> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(f())
        })
        .with_context(|| format!("starting the benchmark thread {name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_parses_and_braid_threads_exclude_load_threads() {
        assert_eq!(parse_rss("Name:\tx\nVmRSS:\t  1234 kB\n"), Some(1234));
        assert_eq!(parse_rss("Name:\tx\n"), None);
        assert!(rss_kib().unwrap() > 0);
        let busy = |name: &str| {
            let name = name.to_string();
            let (tx, rx) = std::sync::mpsc::channel::<u32>();
            let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
            let h = std::thread::Builder::new()
                .name(name)
                .spawn(move || {
                    // Spin until this thread has used 0.15 s of CPU (however busy the
                    // machine is).
                    let own = || {
                        let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
                        // SAFETY: clock_gettime writes into the timespec we pass.
                        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
                        ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
                    };
                    let mut x = 0u64;
                    while own() < 0.15 {
                        x = x.wrapping_mul(31).wrapping_add(1);
                    }
                    std::hint::black_box(x);
                    // SAFETY: gettid has no preconditions.
                    let _ = tx.send(unsafe { libc::gettid() } as u32);
                    let _ = stop_rx.recv();
                })
                .unwrap();
            (rx.recv().unwrap(), stop_tx, h)
        };
        let (a, stop_a, ha) = busy("load-test");
        let (b, stop_b, hb) = busy("braid-test");
        let (w, stop_w, hw) = busy("braid-worker-9");
        let snap = braid_threads();
        assert!(!snap.contains_key(&a), "a load- thread counted as braid");
        let cpu = |t| snap.get(&t).map_or(0.0, |c: &ThreadCpu| c.seconds);
        assert!(cpu(b) >= 0.1 && cpu(w) >= 0.1, "{snap:?}");
        assert!(!snap[&b].server && snap[&w].server, "{snap:?}");
        let (all, server) = braid_cpu_between(&HashMap::new(), &snap);
        assert!(server >= cpu(w) && all >= server + cpu(b), "{all} {server}");
        drop((stop_a, stop_b, stop_w));
        ha.join().unwrap();
        hb.join().unwrap();
        hw.join().unwrap();
    }
}
