//! The braid side of the benchmark: one server and N agents in this process, each on its
//! own thread with its own single-threaded runtime (as the `braid server` and `braid agent`
//! processes run), talking over loopback.
//!
//! Owns: their configuration for the benchmark (keys made on the spot, loopback paths
//! 127.0.0.1, 127.0.0.2, ..., no handshake rate limit). Must not touch: the traffic (see
//! [`super::traffic`]).

use super::measure::spawn_runtime;
use anyhow::{Context, Result};
use braid_crypto::{Ciphers, PublicKey, StaticKeypair};
use braid_net::agent::{Agent, AgentConfig, AgentPath};
use braid_net::server::{Server, ServerConfig};
use braid_net::udp::PathBind;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

/// The server's settings for a benchmark with `sessions` sessions at most.
pub fn server_config(
    key: StaticKeypair,
    authorized: Vec<PublicKey>,
    sessions: usize,
    threads: usize,
    ciphers: Ciphers,
) -> Result<ServerConfig> {
    let mut cfg = ServerConfig::new("127.0.0.1:0".parse()?, key, authorized);
    cfg.max_sessions = sessions + 16;
    // Every agent comes from 127.0.0.x: no per-address handshake budget, no cookies.
    cfg.handshake_rate = 1_000_000;
    cfg.handshake_burst = 1_000_000;
    cfg.load_threshold = u64::MAX;
    cfg.threads = threads;
    cfg.ciphers = ciphers;
    // The bench's targets listen on loopback, which the egress policy refuses by default.
    cfg.egress
        .allow("127.0.0.0/8".parse().map_err(anyhow::Error::msg)?);
    Ok(cfg)
}

/// Start a server on a thread of its own (`bench-server`); returns its address.
pub fn start_server(cfg: ServerConfig) -> Result<SocketAddr> {
    Ok(start_server_counted(cfg)?.0)
}

/// [`start_server`], with what each of its workers counted.
pub fn start_server_counted(
    cfg: ServerConfig,
) -> Result<(SocketAddr, Arc<[braid_net::server::WorkerCounters]>)> {
    let (tx, rx) = std::sync::mpsc::channel();
    spawn_runtime("bench-server", move || {
        Box::pin(async move {
            match Server::bind(cfg).await {
                Ok(s) => {
                    let _ = tx.send(s.local_addr().ok().map(|a| (a, s.workers())));
                    s.run().await?;
                }
                Err(e) => {
                    let _ = tx.send(None);
                    return Err(e.into());
                }
            }
            Ok(())
        })
    })?;
    rx.recv_timeout(Duration::from_secs(5))?
        .context("the benchmark server did not start")
}

/// An agent's settings: `paths` loopback paths (127.0.0.1, .2, ...), SOCKS5 when `socks`.
pub fn agent_config(
    server: SocketAddr,
    server_pub: PublicKey,
    key: StaticKeypair,
    paths: usize,
    socks: bool,
    ciphers: Ciphers,
) -> Result<AgentConfig> {
    let paths = (1..=paths.clamp(1, 8))
        .map(|i| {
            let ip = Ipv4Addr::new(127, 0, 0, i as u8);
            AgentPath::new(format!("lo{i}"), PathBind::Address(ip.into()))
        })
        .collect();
    Ok(AgentConfig {
        socks: socks.then(|| SocketAddr::from((Ipv4Addr::LOCALHOST, 0))),
        // The core's stack as it is (the agent's defaults differ only in timeouts).
        transport: braid_core::Config::default(),
        ciphers,
        ..AgentConfig::new(server, server_pub, Arc::new(key), paths)
    })
}

/// Braid set up for the throughput rows: the SOCKS5 address of each agent.
pub struct Rig {
    /// One SOCKS5 proxy per agent.
    pub socks: Vec<SocketAddr>,
}

/// Start a server and `agents` agents (thread `bench-agent-I` each) whose sessions run the
/// congestion controller `cc` (the server follows the agent's choice), and wait until every
/// agent has its session.
pub fn start(
    agents: usize,
    paths: usize,
    threads: usize,
    ciphers: &Ciphers,
    cc: braid_core::CcAlgorithm,
) -> Result<Rig> {
    let server_key = StaticKeypair::generate()?;
    let server_pub = server_key.public();
    let keys = (0..agents)
        .map(|_| StaticKeypair::generate())
        .collect::<Result<Vec<_>, _>>()?;
    let authorized = keys.iter().map(|k| k.public()).collect();
    let scfg = server_config(server_key, authorized, agents, threads, ciphers.clone())?;
    let server = start_server(scfg)?;
    let mut waits = Vec::new();
    for (i, key) in keys.into_iter().enumerate() {
        let mut acfg = agent_config(server, server_pub, key, paths, true, ciphers.clone())?;
        acfg.transport.cc = cc;
        let (tx, rx) = std::sync::mpsc::channel();
        spawn_runtime(&format!("bench-agent-{i}"), move || {
            Box::pin(async move {
                let mut a = Agent::start(acfg).await?;
                let ok = a.wait_established(Duration::from_secs(15)).await;
                let _ = tx.send(if ok { a.socks } else { None });
                // Keep the agent alive for the rest of the process.
                std::future::pending::<()>().await;
                Ok(())
            })
        })?;
        waits.push(rx);
    }
    let socks = waits
        .into_iter()
        .enumerate()
        .map(|(i, rx)| {
            rx.recv_timeout(Duration::from_secs(20))
                .ok()
                .flatten()
                .with_context(|| format!("benchmark agent {i} did not establish a session"))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Rig { socks })
}
