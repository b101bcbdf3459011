//! `braid bench`: braid's data path on loopback next to plain TCP, shadowsocks-libev
//! (ss-local + ss-server, aes-256-gcm) and kernel MPTCP, in one run: `--size` bytes in each
//! row (split over the streams), `--agents` sessions on one server with `--streams` streams
//! each and `--paths` paths each, the server's `--threads`, the packet `--cipher`; `--udp`
//! adds a flow of 200-byte datagrams through SOCKS5 UDP ASSOCIATE, `--idle-sessions N` the
//! server's memory per idle session and `--handshakes N` the server's CPU per handshake next
//! to this CPU's X25519 speed.
//!
//! Server, agents and the traffic source and sink each run on their own thread with their
//! own single-threaded runtime (as the `braid server` and `braid agent` processes do).
//! Reported per row: goodput and CPU seconds per GB (all threads of this process, so the
//! source and sink are counted in every row) and, for braid, the CPU of braid's own
//! threads alone (per-thread /proc/self/task/*/stat); braid's figures as ratios to TCP's.
//! The table's "proxy CPU s/GB" column is, for braid rows, the CPU of braid's threads (agents
//! and server), and for the shadowsocks row that of the ss-local and ss-server processes
//! together (/proc/PID/stat; their CPU is not in the row's process-wide "CPU s/GB", which is
//! then the source and sink alone); the first braid row is also given as ratios to
//! shadowsocks-libev's goodput and proxy CPU per GB. Without shadowsocks-libev installed the
//! shadowsocks row is skipped, as the MPTCP row is without kernel MPTCP.
//!
//! Owns: the options, the report and its table. Measuring: [`measure`]; traffic:
//! [`traffic`]; braid's server and agents: [`rig`]; shadowsocks-libev's processes: [`ss`];
//! idle sessions: [`idle`] (their agents: [`idle_agents`]); handshakes: [`handshakes`].
//! Must not touch: braid itself (only its public API and SOCKS5).

pub mod aead;
pub mod handshakes;
pub mod idle;
pub mod idle_agents;
pub mod measure;
pub mod probe;
pub mod rig;
pub mod ss;
pub mod traffic;

use anyhow::{bail, Context, Result};
use braid_core::{CcAlgorithm, Side};
use braid_crypto::Ciphers;
use braid_net::driver::counters::counts;
use measure::{braid_cpu_between, braid_threads, cores, cpu_seconds};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use traffic::Via;

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Bytes moved in each row.
    pub size: u64,
    /// Agent sessions on the server.
    pub agents: usize,
    /// Concurrent streams per agent (TCP and MPTCP rows: agents x streams connections).
    pub streams: usize,
    /// Paths per agent (127.0.0.1, .2, ...).
    pub paths: usize,
    /// The server's worker threads (`ServerConfig::threads`).
    pub threads: usize,
    /// The packet ciphers of agents and server.
    pub ciphers: Ciphers,
    /// Datagrams of the UDP flow (None: no UDP flow).
    pub udp: Option<u64>,
    /// Datagrams a second the UDP flow's sender offers (0: as fast as it can).
    pub udp_rate: u64,
    /// Idle sessions for the memory figure (None: not measured).
    pub idle_sessions: Option<usize>,
    /// Handshakes for the handshake figure (None: not measured).
    pub handshakes: Option<usize>,
    /// A progress line on stderr.
    pub progress: bool,
    /// How long each cipher figure seals and opens.
    pub aead_time: Duration,
    /// One braid row per congestion controller, in this order (`--cc`; the agent's default
    /// when empty).
    pub ccs: Vec<CcAlgorithm>,
}

/// One row of the benchmark.
#[derive(Debug, Serialize)]
pub struct Row {
    /// "tcp", "braid", "shadowsocks" or "mptcp".
    pub name: String,
    /// braid rows: the congestion controller of the row's sessions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cc: Option<String>,
    /// braid rows: datagrams the receiving end (the agents) sent per datagram the sending
    /// end (the server) sent: its acknowledgements per data packet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acks_per_data_packet: Option<f64>,
    /// braid rows: turns of the session loops (agents and server) per GB moved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wakeups_per_gb: Option<f64>,
    /// Bytes moved.
    pub bytes: u64,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Goodput, Gbit/s.
    pub gbit_per_s: f64,
    /// Process CPU seconds (user + system) per GB moved.
    pub cpu_s_per_gb: f64,
    /// Cores the process kept busy on average: CPU seconds / wall-clock seconds (the
    /// machine is saturated near [`Report::cores`]).
    pub cores_busy: f64,
    /// braid rows: CPU seconds per GB of braid's threads alone (agents and server).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub braid_cpu_s_per_gb: Option<f64>,
    /// braid rows: CPU seconds per GB of the server's threads alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_cpu_s_per_gb: Option<f64>,
    /// braid rows: cores the server's threads kept busy on average (at most `--threads`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_cores_busy: Option<f64>,
    /// The shadowsocks row: CPU seconds per GB of the ss-local and ss-server processes
    /// together (user + system from /proc/PID/stat).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy_cpu_s_per_gb: Option<f64>,
    /// What a sparse flow made the same way waited, alone and beside the transfer
    /// (`probe.rs`; `null` when the row was skipped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe: Option<probe::ProbeReport>,
    /// Why the row was not measured (its figures are then 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// The settings the run used.
#[derive(Debug, Serialize)]
pub struct Settings {
    /// `--size`.
    pub size: u64,
    /// `--agents`.
    pub agents: usize,
    /// `--streams`.
    pub streams: usize,
    /// `--paths`.
    pub paths: usize,
    /// `--threads`.
    pub threads: usize,
    /// The ciphers offered and accepted, preferred first.
    pub ciphers: Vec<String>,
}

/// The whole benchmark.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The settings.
    pub settings: Settings,
    /// Plain TCP, braid (one row per controller), shadowsocks-libev, then kernel MPTCP.
    pub rows: Vec<Row>,
    /// braid goodput / TCP goodput.
    pub goodput_ratio: f64,
    /// braid CPU per GB / TCP CPU per GB.
    pub cpu_ratio: f64,
    /// The first braid row next to the shadowsocks row (None when that was skipped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vs_shadowsocks: Option<VsShadowsocks>,
    /// The cores the benchmark may use (agents, server, source and sink share them).
    pub cores: usize,
    /// The UDP flow (`--udp`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp: Option<traffic::UdpReport>,
    /// The packet ciphers alone, one core (seal and open of 1400-byte packets; the open
    /// figure includes copying each packet into the buffer).
    pub aead: Vec<aead::AeadRow>,
    /// Idle sessions' memory (`--idle-sessions`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle: Option<idle::IdleReport>,
    /// The server's CPU per handshake (`--handshakes`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handshakes: Option<handshakes::HandshakeReport>,
}

/// The first braid row as ratios to the shadowsocks row.
#[derive(Debug, Serialize)]
pub struct VsShadowsocks {
    /// braid goodput / shadowsocks goodput.
    pub goodput_ratio: f64,
    /// braid's threads' CPU per GB (`braid_cpu_s_per_gb`) / ss-local's and ss-server's
    /// (`proxy_cpu_s_per_gb`).
    pub cpu_ratio: f64,
}

fn row(name: &str, bytes: u64, seconds: f64, cpu: f64) -> Row {
    Row {
        name: name.into(),
        cc: None,
        acks_per_data_packet: None,
        wakeups_per_gb: None,
        bytes,
        seconds,
        gbit_per_s: bytes as f64 * 8.0 / seconds / 1e9,
        cpu_s_per_gb: cpu / (bytes as f64 / 1e9),
        cores_busy: cpu / seconds,
        braid_cpu_s_per_gb: None,
        server_cpu_s_per_gb: None,
        server_cores_busy: None,
        proxy_cpu_s_per_gb: None,
        probe: None,
        skipped: None,
    }
}

/// Move `per_conn` bytes on each of the connections `via` makes, timing it; a progress
/// line on stderr when asked.
/// Where a row's connections go: the bulk source and the probe's echo server.
#[derive(Debug, Clone, Copy)]
pub struct Targets {
    /// The source of the bulk transfer.
    pub source: std::net::SocketAddr,
    /// The latency probe's echo server.
    pub echo: std::net::SocketAddr,
}

fn measure_row(
    name: &str,
    via: Via,
    to: Targets,
    streams: usize,
    per_conn: u64,
    total: u64,
    progress: bool,
) -> Result<Row> {
    let done = Arc::new(AtomicU64::new(0));
    let ticker = progress.then(|| {
        let (d, name) = (done.clone(), name.to_string());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let h = std::thread::Builder::new()
            .name("load-progress".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(500));
                    let pct = d.load(Ordering::Relaxed) as f64 * 100.0 / total as f64;
                    eprint!("\r{name}: {pct:5.1}%   ");
                }
                eprintln!("\r{name}: done     ");
            });
        (stop, h)
    });
    let probe = probe::Probe::start(&via, to.echo)?;
    std::thread::sleep(probe::IDLE);
    probe.loaded();
    let (c0, b0, t0) = (cpu_seconds(), braid_threads(), Instant::now());
    let (client0, server0) = (counts(Side::Client), counts(Side::Server));
    let r = traffic::sink_all(via, to.source, streams, per_conn, done);
    let (seconds, cpu, b1) = (
        t0.elapsed().as_secs_f64(),
        cpu_seconds() - c0,
        braid_threads(),
    );
    let waited = probe.finish();
    if let Some((stop, h)) = ticker {
        stop.store(true, Ordering::Relaxed);
        if let Ok(h) = h {
            let _ = h.join();
        }
    }
    r?;
    let mut x = row(name, total, seconds, cpu);
    x.probe = Some(waited?);
    if name.starts_with("braid") {
        let (all, server) = braid_cpu_between(&b0, &b1);
        let gb = total as f64 / 1e9;
        x.braid_cpu_s_per_gb = Some(all / gb);
        x.server_cpu_s_per_gb = Some(server / gb);
        x.server_cores_busy = Some(server / seconds);
        let client = counts(Side::Client).since(&client0);
        let server = counts(Side::Server).since(&server0);
        x.acks_per_data_packet = Some(client.datagrams as f64 / server.datagrams.max(1) as f64);
        x.wakeups_per_gb = Some((client.wakeups + server.wakeups) as f64 / gb);
    }
    Ok(x)
}

/// Run the benchmark.
pub fn run(o: &Options) -> Result<Report> {
    if o.agents == 0 || o.streams == 0 || o.paths == 0 || o.paths > 8 {
        bail!("--agents and --streams must be at least 1 and --paths 1 to 8");
    }
    let conns = (o.agents * o.streams) as u64;
    let per_conn = o.size / conns;
    if per_conn == 0 {
        bail!(
            "--size {} is less than one byte per stream ({conns} streams)",
            o.size
        );
    }
    let total = per_conn * conns;
    let source = traffic::start_source(per_conn, false)?;
    let to = Targets {
        source,
        echo: probe::start_echo()?,
    };
    let n = conns as usize;
    let tcp = measure_row("tcp", Via::Tcp, to, n, per_conn, total, o.progress)?;
    let (braids, first_socks) = braid_rows(o, to, per_conn, total)?;
    let braid = &braids[0];
    let shadowsocks = ss::measure_row(to, n, per_conn, total, o.progress)?;
    let vs_shadowsocks = shadowsocks.skipped.is_none().then(|| VsShadowsocks {
        goodput_ratio: braid.gbit_per_s / shadowsocks.gbit_per_s,
        cpu_ratio: braid.braid_cpu_s_per_gb.unwrap_or(0.0)
            / shadowsocks.proxy_cpu_s_per_gb.unwrap_or(0.0),
    });
    let mptcp = mptcp_row(to, n, per_conn, total, o.progress)?;
    let udp = match o.udp {
        Some(count) => Some(traffic::udp_flow(first_socks, count, o.udp_rate)?),
        None => None,
    };
    let idle = match o.idle_sessions {
        Some(n) => Some(idle::measure(n, o.progress)?),
        None => None,
    };
    let handshakes = match o.handshakes {
        Some(n) => Some(handshakes::measure(n, o.threads, o.progress)?),
        None => None,
    };
    Ok(Report {
        settings: Settings {
            size: o.size,
            agents: o.agents,
            streams: o.streams,
            paths: o.paths,
            threads: o.threads,
            ciphers: o
                .ciphers
                .as_slice()
                .iter()
                .map(|c| c.name().to_string())
                .collect(),
        },
        goodput_ratio: braid.gbit_per_s / tcp.gbit_per_s,
        cpu_ratio: braid.cpu_s_per_gb / tcp.cpu_s_per_gb,
        vs_shadowsocks,
        cores: cores(),
        rows: std::iter::once(tcp)
            .chain(braids)
            .chain([shadowsocks, mptcp])
            .collect(),
        aead: aead::measure(o.aead_time)?,
        udp,
        idle,
        handshakes,
    })
}

/// One braid row per controller asked for (the agent's default when none), each through a
/// server and agents of its own; those of the rows before stay up, idle. Also the first
/// row's SOCKS5 address (for the UDP flow).
fn braid_rows(
    o: &Options,
    to: Targets,
    per_conn: u64,
    total: u64,
) -> Result<(Vec<Row>, std::net::SocketAddr)> {
    let ccs = if o.ccs.is_empty() {
        vec![braid_core::Config::default().cc]
    } else {
        o.ccs.clone()
    };
    let mut braids = Vec::new();
    let mut first_socks = None;
    for cc in ccs {
        let rig = rig::start(o.agents, o.paths, o.threads, &o.ciphers, cc)?;
        let via = Via::Socks(rig.socks.clone());
        first_socks.get_or_insert(rig.socks[0]);
        let label = format!("braid {cc}");
        let mut b = measure_row(&label, via, to, o.streams, per_conn, total, o.progress)?;
        b.name = "braid".into();
        b.cc = Some(cc.to_string());
        braids.push(b);
    }
    Ok((braids, first_socks.context("no braid row")?))
}

/// Kernel MPTCP through the same source (its MPTCP listener), or why it is skipped.
fn mptcp_row(to: Targets, n: usize, per_conn: u64, total: u64, progress: bool) -> Result<Row> {
    Ok(match traffic::mptcp_unavailable() {
        Some(why) => Row {
            skipped: Some(why),
            ..row("mptcp", 0, 1.0, 0.0)
        },
        None => {
            let src = Targets {
                source: traffic::start_source(per_conn, true)?,
                ..to
            };
            measure_row("mptcp", Via::Mptcp, src, n, per_conn, total, progress)?
        }
    })
}

/// Print the report as a table.
pub fn print(r: &Report) {
    print_rows(r);
    print_summary(r);
    print_extras(r);
}

/// The settings line and one line per row.
fn print_rows(r: &Report) {
    let s = &r.settings;
    outln!(
        "{} agent(s) x {} stream(s), {} path(s) each, server threads {}, ciphers {}",
        s.agents,
        s.streams,
        s.paths,
        s.threads,
        s.ciphers.join(" > ")
    );
    outln!(
        "{:<12} {:>12} {:>9} {:>10} {:>12} {:>16} {:>10} {:>12} {:>22}",
        "",
        "bytes",
        "seconds",
        "Gbit/s",
        "CPU s/GB",
        "proxy CPU s/GB",
        "acks/data",
        "wake-ups/GB",
        "probe idle/load/95 ms"
    );
    for x in &r.rows {
        let label = match &x.cc {
            Some(cc) => format!("{} {cc}", x.name),
            None => x.name.clone(),
        };
        if let Some(why) = &x.skipped {
            outln!("{label:<12} skipped: {why}");
            continue;
        }
        let opt =
            |v: Option<f64>, digits: usize| v.map_or(String::new(), |v| format!("{v:.digits$}"));
        let probe = x.probe.map_or(String::new(), |p| {
            format!(
                "{:.2}/{:.2}/{:.2}",
                p.idle_p50_ms, p.loaded_p50_ms, p.loaded_p95_ms
            )
        });
        outln!(
            "{:<12} {:>12} {:>9.2} {:>10.2} {:>12.2} {:>16} {:>10} {:>12} {:>22}",
            label,
            x.bytes,
            x.seconds,
            x.gbit_per_s,
            x.cpu_s_per_gb,
            opt(x.braid_cpu_s_per_gb.or(x.proxy_cpu_s_per_gb), 2),
            opt(x.acks_per_data_packet, 3),
            opt(x.wakeups_per_gb, 0),
            probe
        );
    }
}

/// The ratios against TCP and shadowsocks, and how busy the braid row kept the machine.
fn print_summary(r: &Report) {
    let s = &r.settings;
    let cc = r.rows.iter().find_map(|x| x.cc.as_deref()).unwrap_or("?");
    outln!(
        "braid ({cc}) / tcp: goodput {:.3}, CPU per GB {:.1}x (encrypted, loopback)",
        r.goodput_ratio,
        r.cpu_ratio
    );
    if let Some(v) = &r.vs_shadowsocks {
        outln!(
            "braid ({cc}) / shadowsocks-libev: goodput {:.2}x, proxy CPU per GB {:.2}x",
            v.goodput_ratio,
            v.cpu_ratio
        );
    }
    if let Some(b) = r
        .rows
        .iter()
        .find(|x| x.name == "braid" && x.skipped.is_none())
    {
        let server = b.server_cores_busy.unwrap_or(0.0);
        outln!(
            "braid row: {:.2} of {} cores busy, the server's {} thread(s) {:.2} of them ({:.2} CPU s/GB)",
            b.cores_busy,
            r.cores,
            s.threads,
            server,
            b.server_cpu_s_per_gb.unwrap_or(0.0)
        );
        if b.cores_busy >= 0.9 * r.cores as f64 {
            outln!(
                "  the machine was saturated: agents, server, source and sink share its cores, \
                 so more server threads cannot raise this row here"
            );
        }
    }
}

/// The optional measurements: AEAD speed, the UDP flow, idle sessions, handshakes.
fn print_extras(r: &Report) {
    for a in &r.aead {
        outln!(
            "{}: one core seals {:.2} and opens {:.2} Gbit/s of {}-byte packets: {:.2} CPU s per GB sealed and opened",
            a.cipher, a.seal_gbit_per_s, a.open_gbit_per_s, a.packet_bytes, a.seal_open_s_per_gb
        );
    }
    if let Some(u) = &r.udp {
        outln!(
            "udp: {} of {} datagrams of {} bytes ({}) delivered in {:.2} s: {:.0} datagrams/s, loss {:.1}%",
            u.delivered,
            u.sent,
            u.datagram_bytes,
            match u.offered_per_s {
                0 => "sent as fast as possible".to_string(),
                r => format!("offered at {r}/s"),
            },
            u.seconds,
            u.datagrams_per_s,
            u.loss * 100.0
        );
    }
    if let Some(i) = &r.idle {
        outln!(
            "idle sessions: {} of {} established, server RSS {} -> {} KiB: {:.1} KiB per session; heap in use {} -> {} KiB: {:.1} KiB per session ({}; agents in {} process(es)); braid_core::Session itself {} bytes",
            i.established, i.sessions, i.rss_before_kib, i.rss_after_kib, i.kib_per_session,
            i.heap_before_kib, i.heap_after_kib, i.heap_kib_per_session, i.measured,
            i.agent_processes, i.session_struct_bytes
        );
    }
    if let Some(h) = &r.handshakes {
        outln!(
            "handshakes: {} ({} lost) from {} ports in {:.2} s: {:.0}/s; server ({} thread(s)) {:.3} CPU s, {:.1} us each = {:.2}x five X25519 ({:.0} ops/s on one core: {:.1} us; {:.2}x five of curve25519-dalek's, {:.0} ops/s; {:.2}x five of ring's, {:.0} ops/s)",
            h.count, h.lost, h.source_ports, h.seconds, h.per_s, h.threads, h.server_cpu_s,
            h.server_cpu_us_per_handshake, h.ratio_to_five_x25519, h.x25519_ops_per_s, h.five_x25519_us,
            h.ratio_to_five_dalek_x25519, h.dalek_x25519_ops_per_s,
            h.ratio_to_five_ring_x25519, h.ring_x25519_ops_per_s
        );
        let s = &h.started;
        outln!(
            "handshakes each followed by a first packet: {} ({} lost), {} sessions made: {:.0}/s; server {:.3} CPU s, {:.1} us each = {:.2}x five X25519",
            s.count, s.lost, s.sessions, s.per_s, s.server_cpu_s, s.server_cpu_us_per_handshake, s.ratio_to_five_x25519
        );
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
