//! `--idle-sessions N`: what an idle session costs the server in memory.
//!
//! Owns: the server the idle agents talk to and the measurement. The server runs in a
//! child process (`braid bench --idle-server-child FILE`, hidden) when this program is
//! `braid`, so its resident memory is its own: the figure is (VmRSS after - VmRSS before)
//! / sessions; the agents run in other child processes ([`super::idle_agents`]).
//! Elsewhere (unit tests run from a test binary) the server and the agents (on one
//! thread, `bench-idle`) run in this process and the figure includes the agents' memory;
//! the report says which. Must not touch: the throughput rows.

use super::idle_agents::{self, Spec, PER_CHILD};
use super::measure::{heap_kib, rss_kib, spawn_runtime};
use super::rig::{server_config, start_server};
use anyhow::{bail, Context, Result};
use braid_crypto::{Ciphers, PublicKey, StaticKeypair};
use serde::Serialize;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The memory figure.
#[derive(Debug, Clone, Serialize)]
pub struct IdleReport {
    /// Sessions asked for.
    pub sessions: usize,
    /// Sessions established and still up when the agents had all tried.
    pub established: usize,
    /// Server VmRSS before the agents connected, KiB.
    pub rss_before_kib: u64,
    /// ... and with every session established and idle, KiB.
    pub rss_after_kib: u64,
    /// `(after - before) / established`, KiB.
    pub kib_per_session: f64,
    /// The server's heap in use (allocated, not freed; see `measure::heap_kib`) before
    /// and after, KiB, and the difference per established session: RSS without what the
    /// allocator keeps free after the handshakes' peak.
    pub heap_before_kib: u64,
    pub heap_after_kib: u64,
    pub heap_kib_per_session: f64,
    /// "server process" or "in-process (agents included)".
    pub measured: String,
    /// Processes the agents ran in (0: a thread of the benchmark's own process).
    pub agent_processes: usize,
    /// `size_of::<braid_core::Session>()`: the session's own struct, without what it
    /// points to.
    pub session_struct_bytes: usize,
}

/// The server of the idle sessions: a child process or a thread of ours.
enum IdleServer {
    Child {
        child: Child,
        out: BufReader<std::process::ChildStdout>,
    },
    InProcess,
}

impl IdleServer {
    /// The server's (VmRSS, heap in use), KiB.
    fn memory(&mut self) -> Result<(u64, u64)> {
        match self {
            IdleServer::InProcess => Ok((rss_kib()?, heap_kib())),
            IdleServer::Child { child, out } => {
                let stdin = child.stdin.as_mut().context("the child server's stdin")?;
                writeln!(stdin, "rss")?;
                stdin.flush()?;
                let mut line = String::new();
                out.read_line(&mut line)?;
                let mut w = line.split_whitespace().map(str::parse::<u64>);
                match (w.next(), w.next()) {
                    (Some(Ok(rss)), Some(Ok(heap))) => Ok((rss, heap)),
                    _ => bail!("the child server answered {line:?} to rss"),
                }
            }
        }
    }
}

impl Drop for IdleServer {
    fn drop(&mut self) {
        if let IdleServer::Child { child, .. } = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Whether this program is the `braid` binary (which has the hidden child mode).
fn braid_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    (exe.file_stem()? == "braid").then_some(exe)
}

fn start_child(exe: &Path, authorized: &Path) -> Result<(IdleServer, SocketAddr, PublicKey)> {
    let mut child = Command::new(exe)
        .arg("bench")
        .arg("--idle-server-child")
        .arg(authorized)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the benchmark's server process")?;
    let stdout = child.stdout.take().context("the child server's stdout")?;
    let mut out = BufReader::new(stdout);
    let mut line = String::new();
    out.read_line(&mut line)?;
    let server = IdleServer::Child { child, out };
    let mut w = line.split_whitespace();
    let (Some("ready"), Some(addr), Some(public)) = (w.next(), w.next(), w.next()) else {
        bail!("the benchmark's server process said {line:?} instead of ready ADDR KEY");
    };
    Ok((
        server,
        addr.parse()?,
        braid_crypto::parse_public_key(public)?,
    ))
}

/// The hidden child mode: a server for the agent keys in `authorized`; prints `ready ADDR
/// PUBLIC_KEY`, then answers every `rss` line on stdin with its VmRSS and its heap in
/// use, in KiB; ends with stdin.
pub fn serve_child(authorized: &Path) -> Result<()> {
    let keys = braid_crypto::read_authorized(authorized)?;
    let key = StaticKeypair::generate()?;
    let public = key.public();
    let cfg = server_config(key, keys.clone(), keys.len(), 1, Ciphers::auto())?;
    let addr = start_server(cfg)?;
    outln!("ready {addr} {}", public.to_base64());
    for line in std::io::stdin().lock().lines() {
        if line?.trim() == "rss" {
            outln!("{} {}", rss_kib()?, heap_kib());
        }
    }
    Ok(())
}

/// Where the idle agents run: child processes (`braid`), or a thread of ours (tests).
enum IdleAgents {
    Children(Vec<Child>),
    Thread {
        stop: Option<tokio::sync::oneshot::Sender<()>>,
        thread: Option<std::thread::JoinHandle<Result<()>>>,
    },
}

impl Drop for IdleAgents {
    fn drop(&mut self) {
        match self {
            IdleAgents::Children(children) => {
                for c in children.iter_mut() {
                    // Closing stdin ends the child; kill in case it does not.
                    drop(c.stdin.take());
                    let _ = c.kill();
                    let _ = c.wait();
                }
            }
            IdleAgents::Thread { stop, thread } => {
                if let Some(s) = stop.take() {
                    let _ = s.send(());
                }
                if let Some(t) = thread.take() {
                    let _ = t.join();
                }
            }
        }
    }
}

/// Start the agents of `specs` in child processes of `exe`; each child's `established K`
/// and `done K` lines come to `tx` as (child, K, done).
fn start_agent_children(
    exe: &Path,
    specs: &[Spec],
    tx: &std::sync::mpsc::Sender<(usize, usize, bool)>,
) -> Result<IdleAgents> {
    let mut children = Vec::new();
    for (c, spec) in specs.iter().enumerate() {
        let mut child = Command::new(exe)
            .arg("bench")
            .arg("--idle-agents-child")
            .arg(spec.to_arg())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting a process of idle agents")?;
        let out = child.stdout.take().context("an agent process's stdout")?;
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
                let mut w = line.split_whitespace();
                let (Some(what), Some(Ok(k))) = (w.next(), w.next().map(str::parse)) else {
                    continue;
                };
                let _ = tx.send((c, k, what == "done"));
            }
        });
        children.push(child);
    }
    Ok(IdleAgents::Children(children))
}

/// Run all agents on a thread of this process (no `braid` binary to start children of).
fn start_agent_thread(
    spec: Spec,
    tx: std::sync::mpsc::Sender<(usize, usize, bool)>,
) -> Result<IdleAgents> {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = spawn_runtime("bench-idle", move || {
        Box::pin(async move {
            let (live, up) = idle_agents::run(&spec, |k| {
                let _ = tx.send((0, k, false));
            })
            .await?;
            let _ = tx.send((0, up, true));
            let _ = stop_rx.await;
            drop(live);
            Ok(())
        })
    })?;
    Ok(IdleAgents::Thread {
        stop: Some(stop_tx),
        thread: Some(thread),
    })
}

/// Open `n` idle sessions on one server and measure its memory.
pub fn measure(n: usize, progress: bool) -> Result<IdleReport> {
    let mut seed = [0u8; 24];
    braid_crypto::random::fill(&mut seed)?;
    let publics = (0..n)
        .map(|i| idle_agents::key(&seed, i).map(|k| k.public()))
        .collect::<Result<Vec<PublicKey>>>()?;
    let exe = braid_binary();
    let (mut server, addr, server_pub, measured) = match &exe {
        Some(exe) => {
            let file =
                std::env::temp_dir().join(format!("braid-bench-{}.authorized", std::process::id()));
            let text: String = publics.iter().map(|p| p.to_base64() + "\n").collect();
            std::fs::write(&file, text).with_context(|| format!("writing {}", file.display()))?;
            let r = start_child(exe, &file);
            let _ = std::fs::remove_file(&file);
            let (s, a, p) = r?;
            (s, a, p, "server process")
        }
        None => {
            let key = StaticKeypair::generate()?;
            let public = key.public();
            let cfg = server_config(key, publics, n, 1, Ciphers::auto())?;
            (
                IdleServer::InProcess,
                start_server(cfg)?,
                public,
                "in-process (agents included)",
            )
        }
    };
    std::thread::sleep(Duration::from_millis(200));
    let (before, heap_before) = server.memory()?;
    let spec = |start: usize, count: usize| Spec {
        server: addr,
        server_pub,
        seed,
        start,
        count,
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let (agents, processes) = match &exe {
        Some(exe) => {
            let specs: Vec<Spec> = (0..n)
                .step_by(PER_CHILD)
                .map(|s| spec(s, PER_CHILD.min(n - s)))
                .collect();
            (start_agent_children(exe, &specs, &tx)?, specs.len())
        }
        None => (start_agent_thread(spec(0, n), tx.clone())?, 0),
    };
    drop(tx);
    let established = wait_established(&rx, processes.max(1), n, progress)?;
    // Let the handshakes' buffers go and the sessions settle.
    std::thread::sleep(Duration::from_secs(1));
    let (after, heap_after) = server.memory()?;
    drop(agents);
    Ok(IdleReport {
        sessions: n,
        established,
        rss_before_kib: before,
        rss_after_kib: after,
        kib_per_session: after.saturating_sub(before) as f64 / established.max(1) as f64,
        heap_before_kib: heap_before,
        heap_after_kib: heap_after,
        heap_kib_per_session: heap_after.saturating_sub(heap_before) as f64
            / established.max(1) as f64,
        measured: measured.into(),
        agent_processes: processes,
        session_struct_bytes: std::mem::size_of::<braid_core::Session>(),
    })
}

/// Wait until each of the `groups` agent groups says it is done; returns the sum.
fn wait_established(
    rx: &std::sync::mpsc::Receiver<(usize, usize, bool)>,
    groups: usize,
    n: usize,
    progress: bool,
) -> Result<usize> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60 + n as u64 / 10);
    let mut counts = vec![(0usize, false); groups];
    while counts.iter().any(|c| !c.1) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let Ok((g, k, done)) = rx.recv_timeout(left) else {
            // Measure what is up rather than nothing; the count says it fell short.
            eprintln!(
                "idle sessions: the agents did not finish connecting in time ({} of {n} established)",
                counts.iter().map(|c| c.0).sum::<usize>()
            );
            break;
        };
        if let Some(c) = counts.get_mut(g) {
            *c = (k, done);
        }
        if progress {
            eprint!(
                "\ridle sessions: {}/{n}   ",
                counts.iter().map(|c| c.0).sum::<usize>()
            );
        }
    }
    if progress {
        eprintln!();
    }
    Ok(counts.iter().map(|c| c.0).sum())
}
