//! The idle agents of `--idle-sessions N`: their keys, their source addresses, and the
//! child processes that run them.
//!
//! Each agent is a whole `braid_net` agent (one path, no proxy front end, no traffic) and
//! holds two descriptors (its path's UDP socket and its netlink socket for link changes;
//! counted with `ls /proc/PID/fd` at 300 and 1000 agents). With every agent in one
//! process, 10 000 agents needed 20 000 descriptors, this machine's hard limit, and the
//! last few dozen could not open their sockets (the 9964 of 10 000 of earlier runs). So the
//! agents run in child processes (`braid bench --idle-agents-child SPEC`, hidden) of at
//! most [`PER_CHILD`] agents, each with its own descriptor limit. Agent `i` has the key
//! made from the run's seed and `i` ([`key`]), so the server's authorized list and the
//! children agree without passing 10 000 keys around, and sends from its own loopback
//! address ([`source`]), spread over 127.0.0.0/8 as the sessions of a real server come
//! from many addresses (and so that no per-address budget of the server is shared).
//!
//! Must not touch: the server or its measurement (see [`super::idle`]).

use super::rig::agent_config;
use anyhow::{bail, Context, Result};
use braid_crypto::{Ciphers, PublicKey, StaticKeypair};
use braid_net::agent::{Agent, AgentPath};
use braid_net::udp::PathBind;
use std::io::{BufRead, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

/// Agents per child process: 2 descriptors each, so 8 000 of the 20 000 allowed.
pub const PER_CHILD: usize = 4000;

/// Handshakes a runtime has under way at once (a batch waits for all of its agents).
const BATCH: usize = 100;

/// How long an agent may take to establish its session: long, because on a loaded
/// machine thousands of established agents and the server share the cores with the
/// handshakes (an agent that gets no answer keeps trying, with backoff).
const ESTABLISH: Duration = Duration::from_secs(90);

/// What one child runs: agents `start..start + count` of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    /// The server's address and key.
    pub server: SocketAddr,
    pub server_pub: PublicKey,
    /// The run's key seed (see [`key`]).
    pub seed: [u8; 24],
    pub start: usize,
    pub count: usize,
}

impl Spec {
    /// The child's command-line form: `ADDR,KEY,SEED,START,COUNT`.
    pub fn to_arg(&self) -> String {
        let seed: String = self.seed.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{},{},{seed},{},{}",
            self.server,
            self.server_pub.to_base64(),
            self.start,
            self.count
        )
    }

    /// Reads [`Spec::to_arg`]'s form.
    pub fn parse(s: &str) -> Result<Spec> {
        let f: Vec<&str> = s.split(',').collect();
        let [addr, key, seed, start, count] = f[..] else {
            bail!("--idle-agents-child: expected ADDR,KEY,SEED,START,COUNT, got {s:?}");
        };
        let mut sd = [0u8; 24];
        if seed.len() != 48 {
            bail!("--idle-agents-child: the seed must be 48 hex digits, got {seed:?}");
        }
        for (i, b) in sd.iter_mut().enumerate() {
            *b = u8::from_str_radix(&seed[2 * i..2 * i + 2], 16)
                .with_context(|| format!("--idle-agents-child: seed {seed:?}"))?;
        }
        Ok(Spec {
            server: addr.parse().context("--idle-agents-child: the address")?,
            server_pub: braid_crypto::parse_public_key(key)?,
            seed: sd,
            start: start.parse().context("--idle-agents-child: START")?,
            count: count.parse().context("--idle-agents-child: COUNT")?,
        })
    }
}

/// Agent `i`'s key: the seed followed by `i` (X25519 takes any 32 bytes as a private key).
pub fn key(seed: &[u8; 24], i: usize) -> Result<StaticKeypair> {
    let mut private = [0u8; 32];
    private[..24].copy_from_slice(seed);
    private[24..].copy_from_slice(&(i as u64).to_le_bytes());
    Ok(StaticKeypair::from_private(private)?)
}

/// Agent `i`'s source address: 127.A.B.C with C in 2..=251, B in 0..250, A from 1 (so
/// 62 500 agents per A), never 127.0.0.x where the server listens.
pub fn source(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(
        127,
        (1 + i / 62_500) as u8,
        ((i / 250) % 250) as u8,
        (2 + i % 250) as u8,
    )
}

/// Start the agents of `spec` on the current runtime, [`BATCH`] at a time, calling
/// `progress` with the number established after each batch; returns the agents that
/// established a session and how many of them still have it at the end.
pub async fn run(spec: &Spec, mut progress: impl FnMut(usize)) -> Result<(Vec<Agent>, usize)> {
    let mut live = Vec::new();
    let ids: Vec<usize> = (spec.start..spec.start + spec.count).collect();
    for chunk in ids.chunks(BATCH) {
        let mut set = tokio::task::JoinSet::new();
        for &i in chunk {
            let mut cfg = agent_config(
                spec.server,
                spec.server_pub,
                key(&spec.seed, i)?,
                1,
                false,
                Ciphers::auto(),
            )?;
            cfg.paths = vec![AgentPath::new("lo1", PathBind::Address(source(i).into()))];
            set.spawn(async move {
                let mut a = Agent::start(cfg).await.ok()?;
                a.wait_established(ESTABLISH).await.then_some(a)
            });
        }
        while let Some(r) = set.join_next().await {
            if let Ok(Some(a)) = r {
                live.push(a);
            }
        }
        progress(live.len());
    }
    let mut up = 0;
    for a in live.iter_mut() {
        up += usize::from(a.wait_established(Duration::ZERO).await);
    }
    Ok((live, up))
}

/// The hidden child mode: run the agents of `arg` ([`Spec::to_arg`]), print
/// `established K` after each batch and `done K` at the end (K: those whose session is
/// still up then), then keep them until stdin ends.
pub fn serve_child(arg: &str) -> Result<()> {
    let spec = Spec::parse(arg)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let (live, up) = run(&spec, |k| {
            outln!("established {k}");
            let _ = std::io::stdout().flush();
        })
        .await?;
        outln!("done {up}");
        std::io::stdout().flush()?;
        // The agents keep their sessions (keepalives) while the parent measures.
        let stdin_closed = tokio::task::spawn_blocking(|| {
            for line in std::io::stdin().lock().lines() {
                if line.is_err() {
                    break;
                }
            }
        });
        let _ = stdin_closed.await;
        drop(live);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_survives_its_command_line_form_and_sources_are_distinct() {
        let server_pub = StaticKeypair::from_private([3; 32]).unwrap().public();
        let spec = Spec {
            server: "127.0.0.1:4433".parse().unwrap(),
            server_pub,
            seed: [0xa5; 24],
            start: 4000,
            count: 1234,
        };
        assert_eq!(Spec::parse(&spec.to_arg()).unwrap(), spec);
        assert!(Spec::parse("127.0.0.1:1,x,00,1").is_err());
        let all: std::collections::HashSet<Ipv4Addr> = (0..200_000).map(source).collect();
        assert_eq!(all.len(), 200_000);
        assert!(all.iter().all(|a| a.is_loopback() && a.octets()[1] >= 1));
        assert_eq!(
            key(&spec.seed, 7).unwrap().public(),
            key(&spec.seed, 7).unwrap().public()
        );
        assert_ne!(
            key(&spec.seed, 7).unwrap().public(),
            key(&spec.seed, 8).unwrap().public()
        );
    }
}
