//! `--idle-sessions N`: what an idle session costs the server in memory.
//!
//! Owns: the idle agents (all on one thread, `bench-idle`, no proxy front end, no
//! traffic) and the server they talk to. The server runs in a child process (`braid bench
//! --idle-server-child FILE`, hidden) when this program is `braid`, so its resident
//! memory is its own: the figure is (VmRSS after - VmRSS before) / sessions. Elsewhere
//! (unit tests run from a test binary) the server runs in this process and the figure
//! includes the agents' memory; the report says which. Must not touch: the throughput
//! rows.

use super::measure::{rss_kib, spawn_runtime};
use super::rig::{agent_config, server_config, start_server};
use anyhow::{bail, Context, Result};
use braid_crypto::{Ciphers, PublicKey, StaticKeypair};
use braid_net::agent::Agent;
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
    /// Sessions that were established.
    pub established: usize,
    /// Server VmRSS before the agents connected, KiB.
    pub rss_before_kib: u64,
    /// ... and with every session established and idle, KiB.
    pub rss_after_kib: u64,
    /// `(after - before) / established`, KiB.
    pub kib_per_session: f64,
    /// "server process" or "in-process (agents included)".
    pub measured: String,
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
    fn rss(&mut self) -> Result<u64> {
        match self {
            IdleServer::InProcess => rss_kib(),
            IdleServer::Child { child, out } => {
                let stdin = child.stdin.as_mut().context("the child server's stdin")?;
                writeln!(stdin, "rss")?;
                stdin.flush()?;
                let mut line = String::new();
                out.read_line(&mut line)?;
                line.trim()
                    .parse()
                    .with_context(|| format!("the child server answered {line:?} to rss"))
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
/// PUBLIC_KEY`, then answers every `rss` line on stdin with its VmRSS in KiB; ends with
/// stdin.
pub fn serve_child(authorized: &Path) -> Result<()> {
    let keys = braid_crypto::read_authorized(authorized)?;
    let key = StaticKeypair::generate()?;
    let public = key.public();
    let cfg = server_config(key, keys.clone(), keys.len(), 1, Ciphers::auto())?;
    let addr = start_server(cfg)?;
    println!("ready {addr} {}", public.to_base64());
    for line in std::io::stdin().lock().lines() {
        if line?.trim() == "rss" {
            println!("{}", rss_kib()?);
        }
    }
    Ok(())
}

/// Open `n` idle sessions on one server and measure its memory.
pub fn measure(n: usize, progress: bool) -> Result<IdleReport> {
    let keys = (0..n)
        .map(|_| StaticKeypair::generate())
        .collect::<Result<Vec<_>, _>>()?;
    let publics: Vec<PublicKey> = keys.iter().map(|k| k.public()).collect();
    let (mut server, addr, server_pub, measured) = match braid_binary() {
        Some(exe) => {
            let file =
                std::env::temp_dir().join(format!("braid-bench-{}.authorized", std::process::id()));
            let text: String = publics.iter().map(|p| p.to_base64() + "\n").collect();
            std::fs::write(&file, text).with_context(|| format!("writing {}", file.display()))?;
            let r = start_child(&exe, &file);
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
    let before = server.rss()?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (count_tx, count_rx) = std::sync::mpsc::channel::<usize>();
    let cfgs = keys
        .into_iter()
        .map(|k| agent_config(addr, server_pub, k, 1, false, Ciphers::auto()))
        .collect::<Result<Vec<_>>>()?;
    let agents = spawn_runtime("bench-idle", move || {
        Box::pin(async move {
            let mut live = Vec::new();
            let mut established = 0;
            // In batches, so that handshakes do not time out behind each other.
            let mut cfgs = cfgs.into_iter().peekable();
            while cfgs.peek().is_some() {
                let batch: Vec<_> = cfgs.by_ref().take(100).collect();
                let mut set = tokio::task::JoinSet::new();
                for c in batch {
                    set.spawn(async move {
                        let mut a = Agent::start(c).await.ok()?;
                        a.wait_established(Duration::from_secs(20))
                            .await
                            .then_some(a)
                    });
                }
                while let Some(r) = set.join_next().await {
                    if let Ok(Some(a)) = r {
                        established += 1;
                        live.push(a);
                    }
                }
                if progress {
                    eprint!("\ridle sessions: {established}/{n}   ");
                }
            }
            if progress {
                eprintln!();
            }
            let _ = count_tx.send(established);
            let _ = stop_rx.await;
            drop(live);
            Ok(())
        })
    })?;
    let established = count_rx
        .recv_timeout(Duration::from_secs(60 + n as u64 / 10))
        .context("the idle agents did not finish connecting")?;
    // Let the handshakes' buffers go and the sessions settle.
    std::thread::sleep(Duration::from_secs(1));
    let after = server.rss()?;
    let _ = stop_tx.send(());
    let _ = agents.join();
    Ok(IdleReport {
        sessions: n,
        established,
        rss_before_kib: before,
        rss_after_kib: after,
        kib_per_session: after.saturating_sub(before) as f64 / established.max(1) as f64,
        measured: measured.into(),
    })
}
