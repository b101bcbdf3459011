//! `--handshakes N`: what a handshake costs the server, next to this CPU's X25519 speed
//! measured in the same run.
//!
//! Owns: the handshake server (its own, `--threads` workers, sessions that do not complete
//! their first exchange expire after [`EXPIRE`]), the load generator (one thread,
//! `load-handshakes`, [`PORTS`] source ports on 127.0.0.1, one authorized agent key per
//! port, one handshake in flight per port: each a fresh message 1, checked message 2) and
//! the X25519 figure. Must not touch: the throughput rows.
//!
//! The server's CPU is the CPU time of its threads (per-thread /proc/self/task/*/stat)
//! from before the first handshake until the last session expired: each handshake's
//! receive, gate, Noise step, reply and its expiry. The server makes a session only at the
//! agent's first packet, so a second run of N handshakes follows each with one
//! authenticated transport packet (padding, sealed with the handshake's keys): that run's
//! figures (`started`) include the session made, its packet opened and the session's
//! expiry (its core's handshake never completes). A Noise IK
//! responder does five X25519 operations (its ephemeral key and four Diffie-Hellman); the
//! report gives the server's CPU per handshake as a multiple of five X25519 operations of
//! the backend the handshake uses (AWS-LC's, braid-crypto's `dh`), timed on this thread's
//! CPU clock in the same run, and for comparison against snow's own backend
//! (curve25519-dalek, the server's before) and ring's X25519 (BoringSSL's code).

use super::aead::thread_cpu;
use super::measure::{braid_threads, spawn_runtime};
use super::rig::{server_config, start_server_counted};
use anyhow::{bail, Context, Result};
use braid_crypto::{Ciphers, ClientHandshake, PacketType, PublicKey, StaticKeypair};
use serde::Serialize;
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::UdpSocket;

/// Source ports of the load generator (one handshake in flight on each).
pub const PORTS: usize = 64;

/// A session whose agent says nothing after its handshake ends this long after it.
pub const EXPIRE: Duration = Duration::from_secs(1);

/// The handshake figures.
#[derive(Debug, Clone, Serialize)]
pub struct HandshakeReport {
    /// Handshakes completed (message 2 checked by the generator).
    pub count: usize,
    /// Handshakes whose message 2 did not come within 2 s.
    pub lost: usize,
    /// Source ports of the generator.
    pub source_ports: usize,
    /// The server's worker threads.
    pub threads: usize,
    /// Wall-clock seconds from the first message 1 to the last message 2.
    pub seconds: f64,
    /// Handshakes a second (`count / seconds`; the generator, one thread that does as
    /// much X25519 work per handshake as the server, sets the pace).
    pub per_s: f64,
    /// CPU seconds of the server's threads, the sessions' expiry included.
    pub server_cpu_s: f64,
    /// Server CPU microseconds per handshake.
    pub server_cpu_us_per_handshake: f64,
    /// X25519 operations a second on one core, with the backend the handshake uses
    /// (AWS-LC's).
    pub x25519_ops_per_s: f64,
    /// X25519 operations a second on one core with snow's own backend (curve25519-dalek),
    /// for comparison.
    pub dalek_x25519_ops_per_s: f64,
    /// X25519 operations a second on one core with ring (BoringSSL's code, as fast as
    /// OpenSSL's), for comparison.
    pub ring_x25519_ops_per_s: f64,
    /// Microseconds of five X25519 operations (what a Noise IK responder must do).
    pub five_x25519_us: f64,
    /// `server_cpu_us_per_handshake / five_x25519_us` (goal: at most 1.4).
    pub ratio_to_five_x25519: f64,
    /// The same against five of curve25519-dalek's X25519 operations.
    pub ratio_to_five_dalek_x25519: f64,
    /// The same against five of ring's X25519 operations.
    pub ratio_to_five_ring_x25519: f64,
    /// Sessions the server made in this run (none: no packet follows the handshakes).
    pub sessions: u64,
    /// N more handshakes, each followed by one authenticated packet: the server makes
    /// each session, opens its packet and expires it.
    pub started: StartedReport,
}

/// The run of handshakes that start sessions.
#[derive(Debug, Clone, Serialize)]
pub struct StartedReport {
    /// Handshakes completed (message 2 checked), each followed by its first packet.
    pub count: usize,
    /// Sessions the server made (one per first packet).
    pub sessions: u64,
    /// Handshakes whose message 2 did not come within 2 s.
    pub lost: usize,
    /// Handshakes a second.
    pub per_s: f64,
    /// CPU seconds of the server's threads, the sessions' expiry included.
    pub server_cpu_s: f64,
    /// Server CPU microseconds per handshake and session.
    pub server_cpu_us_per_handshake: f64,
    /// `server_cpu_us_per_handshake` over five of AWS-LC's X25519 operations.
    pub ratio_to_five_x25519: f64,
}

/// Operations a second of `ops(64)` (64 at a time) on this thread's CPU clock, over about
/// `time` of CPU.
pub fn x25519_speed(time: Duration, ops: fn(usize) -> u8) -> f64 {
    let (mut n, t) = (0usize, thread_cpu());
    let mut sink = 0u8;
    while thread_cpu() - t < time.as_secs_f64() {
        sink ^= ops(64);
        n += 64;
    }
    std::hint::black_box(sink);
    n as f64 / (thread_cpu() - t)
}

/// CPU seconds of the threads in `tids`, from a [`braid_threads`] snapshot.
fn cpu_of(tids: &HashSet<u32>) -> f64 {
    let now = braid_threads();
    tids.iter()
        .filter_map(|t| now.get(t))
        .map(|c| c.seconds)
        .sum()
}

/// Run `n` handshakes against a server of `threads` workers.
pub fn measure(n: usize, threads: usize, progress: bool) -> Result<HandshakeReport> {
    if n == 0 {
        bail!("--handshakes must be at least 1");
    }
    let x25519 = x25519_speed(Duration::from_millis(300), braid_crypto::speed::x25519_ops);
    let dalek = x25519_speed(
        Duration::from_millis(300),
        braid_crypto::speed::dalek_x25519_ops,
    );
    let ring = x25519_speed(
        Duration::from_millis(300),
        braid_crypto::speed::ring_x25519_ops,
    );
    let keys = (0..PORTS)
        .map(|_| StaticKeypair::generate().map(Arc::new))
        .collect::<Result<Vec<_>, _>>()?;
    let server_key = StaticKeypair::generate()?;
    let server_pub = server_key.public();
    let authorized = keys.iter().map(|k| k.public()).collect();
    let mut cfg = server_config(server_key, authorized, n, threads, Ciphers::auto())?;
    cfg.first_exchange_timeout = EXPIRE;
    let before: HashSet<u32> = braid_threads().into_keys().collect();
    let (addr, workers) = start_server_counted(cfg)?;
    let started = || -> u64 {
        let w = workers.iter();
        w.map(|c| c.sessions.load(Ordering::Relaxed)).sum()
    };
    // The extra workers start inside `Server::run`.
    std::thread::sleep(Duration::from_millis(300));
    let server: HashSet<u32> = braid_threads()
        .into_iter()
        .filter(|(t, c)| c.server && !before.contains(t))
        .map(|(t, _)| t)
        .collect();
    if server.len() != threads.max(1) {
        bail!(
            "found {} new server threads for --threads {threads}: cannot tell the server's CPU",
            server.len()
        );
    }
    let run = |first_packet: bool| -> Result<(usize, usize, f64, f64, u64)> {
        let (cpu0, sessions0) = (cpu_of(&server), started());
        let keys = keys.clone();
        let h = spawn_runtime("load-handshakes", move || {
            Box::pin(async move {
                let load = Load {
                    n,
                    first_packet,
                    progress,
                };
                generate(addr, server_pub, keys, load).await
            })
        })?;
        let (count, lost, seconds) = h
            .join()
            .map_err(|_| anyhow::anyhow!("the handshake generator panicked"))??;
        // Every handshake's entry or session ends within EXPIRE: count that work too.
        std::thread::sleep(EXPIRE + Duration::from_millis(700));
        let cpu = cpu_of(&server) - cpu0;
        Ok((count, lost, seconds, cpu, started() - sessions0))
    };
    let (count, lost, seconds, server_cpu_s, sessions) = run(false)?;
    let (s_count, s_lost, s_seconds, s_cpu, s_sessions) = run(true)?;
    let per = server_cpu_s / count.max(1) as f64 * 1e6;
    let s_per = s_cpu / s_count.max(1) as f64 * 1e6;
    let five = 5.0 / x25519 * 1e6;
    Ok(HandshakeReport {
        count,
        lost,
        source_ports: PORTS,
        threads: threads.max(1),
        seconds,
        per_s: count as f64 / seconds,
        server_cpu_s,
        server_cpu_us_per_handshake: per,
        x25519_ops_per_s: x25519,
        dalek_x25519_ops_per_s: dalek,
        ring_x25519_ops_per_s: ring,
        five_x25519_us: five,
        ratio_to_five_x25519: per / five,
        ratio_to_five_dalek_x25519: per / (5.0 / dalek * 1e6),
        ratio_to_five_ring_x25519: per / (5.0 / ring * 1e6),
        sessions,
        started: StartedReport {
            count: s_count,
            sessions: s_sessions,
            lost: s_lost,
            per_s: s_count as f64 / s_seconds,
            server_cpu_s: s_cpu,
            server_cpu_us_per_handshake: s_per,
            ratio_to_five_x25519: s_per / five,
        },
    })
}

/// What the generator does.
#[derive(Clone, Copy)]
struct Load {
    /// Handshakes in all.
    n: usize,
    /// Follow each with one authenticated transport packet.
    first_packet: bool,
    progress: bool,
}

/// The generator: one task per source port, each with its own agent key, one handshake
/// at a time until `n` have been started. Returns (completed, lost, seconds).
async fn generate(
    server: std::net::SocketAddr,
    server_pub: PublicKey,
    keys: Vec<Arc<StaticKeypair>>,
    load: Load,
) -> Result<(usize, usize, f64)> {
    let Load { n, progress, .. } = load;
    let tickets = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let t0 = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for key in keys {
        let sock = UdpSocket::bind("127.0.0.1:0").await?;
        sock.connect(server).await?;
        let (tickets, done) = (tickets.clone(), done.clone());
        set.spawn(async move { port(sock, (key, server_pub), load, tickets, done).await });
    }
    let mut lost = 0;
    let mut last = Instant::now();
    while let Some(r) = set.join_next().await {
        lost += r.context("a generator task failed")??;
        if progress && last.elapsed() > Duration::from_millis(500) {
            last = Instant::now();
            eprint!("\rhandshakes: {}/{n}   ", done.load(Ordering::Relaxed));
        }
    }
    if progress {
        eprintln!();
    }
    Ok((
        done.load(Ordering::Relaxed),
        lost,
        t0.elapsed().as_secs_f64(),
    ))
}

/// One source port's handshakes; returns how many were lost.
async fn port(
    sock: UdpSocket,
    (key, server_pub): (Arc<StaticKeypair>, PublicKey),
    Load {
        n, first_packet, ..
    }: Load,
    tickets: Arc<AtomicUsize>,
    done: Arc<AtomicUsize>,
) -> Result<usize> {
    let ciphers = Ciphers::auto();
    let (mut last_ts, mut lost) = (0u64, 0usize);
    let mut buf = vec![0u8; 2048];
    while tickets.fetch_add(1, Ordering::Relaxed) < n {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis() as u64;
        let ts = now.max(last_ts + 1);
        last_ts = ts;
        let sid = braid_crypto::random::session_id()?;
        let (mut hs, m1) = ClientHandshake::offering(&key, &server_pub, sid, 0, ts, &ciphers)?;
        sock.send(&m1).await?;
        let reply = loop {
            match tokio::time::timeout(Duration::from_secs(2), sock.recv(&mut buf)).await {
                Err(_) => break None,
                Ok(r) => {
                    let len = r?;
                    let ok = braid_crypto::parse_header(&buf[..len])
                        .is_ok_and(|h| h.ptype == PacketType::Handshake && h.session_id == sid);
                    if ok {
                        break Some(len);
                    }
                }
            }
        };
        match reply.map(|len| hs.finish(&buf[..len])) {
            Some(Ok(keys)) => {
                done.fetch_add(1, Ordering::Relaxed);
                if first_packet {
                    sock.send(&first_packet_of(sid, &keys)?).await?;
                }
            }
            Some(Err(_)) => bail!("the server's message 2 did not check out"),
            None => lost += 1,
        }
    }
    Ok(lost)
}

/// An agent's first transport packet of session `sid`: 32 bytes of padding, sealed with its
/// keys (the server opens it; its core waits for a hello that never comes).
fn first_packet_of(sid: u64, keys: &braid_crypto::SessionKeys) -> Result<Vec<u8>> {
    let mut p = Vec::new();
    let header = braid_crypto::write_header(&mut p, PacketType::Transport, sid, 0, 0)?;
    p.resize(header + 32 + braid_crypto::TAG_LEN, 0);
    keys.send.seal_in_place(&mut p, header)?;
    Ok(p)
}
