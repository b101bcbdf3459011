//! `braid keygen`, `braid server` and `braid agent`: flags, optional TOML config files
//! (flags win over the file; paths in a file are relative to its folder), logging, and
//! turning them into braid-net configurations.
//!
//! Owns: what the two commands share (loading a config file, paths beside it, ciphers,
//! logging, the runtime, the control socket and dashboard settings) and `braid keygen`;
//! `server` and `agent` own their flags, their checked settings and their run. Must not
//! touch: braid-net's behaviour (it only builds its configurations).

mod agent;
mod egress;
mod key_role;
mod limits;
mod server;

pub use agent::*;
pub use server::*;

use anyhow::{bail, Context, Result};
use braid_net::agent::{Agent, AgentConfig, AgentPath};
use braid_net::server::{Server, ServerConfig};
use braid_proxy::{AuthPolicy, HttpLimits};
use clap::Args;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// `braid keygen`.
#[derive(Args, Debug)]
pub struct KeygenArgs {
    /// Write PREFIX.key (private, mode 0600) and PREFIX.pub (public, base64).
    #[arg(long, value_name = "PREFIX")]
    pub out: PathBuf,
}

/// A TOML value that is one string or a list of strings.
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

fn load<T: for<'de> Deserialize<'de> + Default>(file: Option<&Path>) -> Result<T> {
    let Some(file) = file else {
        return Ok(T::default());
    };
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("reading the config file {}", file.display()))?;
    toml::from_str(&text).map_err(|e| anyhow::anyhow!("config file {}: {e}", file.display()))
}

/// `server_pub` given as the key itself (the base64 line of the server's `server.pub`)
/// rather than a file name.
fn inline_key(p: &Path) -> Option<braid_crypto::PublicKey> {
    let line = p.to_str()?;
    braid_crypto::keys::parse_public_key(line.split('#').next()?.trim()).ok()
}

/// A path from the config file `file`, relative to that file's folder (not the working
/// directory: a unit runs in `/`); an absolute path stays as it is.
fn beside(file: Option<&Path>, p: Option<PathBuf>) -> Option<PathBuf> {
    let dir = file.and_then(Path::parent).unwrap_or(Path::new(""));
    p.map(|p| dir.join(p))
}

/// `--cipher` (or `cipher` in the file): the packet ciphers, [`braid_crypto::Ciphers::auto`]
/// when not given.
fn ciphers(flag: Option<String>) -> Result<braid_crypto::Ciphers> {
    match flag {
        None => Ok(braid_crypto::Ciphers::auto()),
        Some(s) => braid_crypto::Ciphers::parse(&s).map_err(|e| anyhow::anyhow!("--cipher: {e}")),
    }
}

fn check_log_level(level: Option<&str>) -> Result<()> {
    let level = level.unwrap_or("info");
    if !["error", "warn", "info", "debug", "trace"].contains(&level) {
        bail!("--log-level {level:?}: expected error, warn, info, debug or trace");
    }
    Ok(())
}

fn init_logging(level: Option<&str>) -> Result<()> {
    check_log_level(level)?;
    let level = level.unwrap_or("info");
    let filter = tracing_subscriber::EnvFilter::try_from_env("BRAID_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!("braid={level},braid_net={level}"))
    });
    // Colour codes only for a person at a terminal: not into files, pipes or the journal.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    Ok(())
}

/// One thread runs everything: a session's packets, timers and streams wake each other
/// constantly, and on a multi-threaded runtime those wake-ups cross threads (futex and
/// context switches cost more than the protocol itself: measured 0.8 vs 1.6 Gbit/s on
/// loopback, see docs/results.md). Spreading sessions over cores is future work.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// `braid keygen`.
pub fn keygen(a: KeygenArgs) -> Result<()> {
    let (key, public) = braid_crypto::write_keypair(&a.out)?;
    outln!(
        "wrote {} (private, mode 0600) and {} (public)",
        key.display(),
        public.display()
    );
    outln!("public key: {}", braid_crypto::read_public_key(&public)?);
    Ok(())
}

/// How long a server or agent waits for its sessions to close on SIGTERM or Ctrl-C.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(2);

/// `--dashboard`, `--dashboard-token`, `--dashboard-public`, checked.
fn dashboard_config(
    addr: Option<SocketAddr>,
    token: Option<String>,
    public: bool,
) -> Result<Option<braid_ops::dashboard::DashboardConfig>> {
    match addr {
        Some(a) => Ok(Some(braid_ops::dashboard::DashboardConfig::new(
            a, token, public,
        )?)),
        None if token.is_some() || public => {
            bail!("--dashboard-token and --dashboard-public need --dashboard ADDR:PORT")
        }
        None => Ok(None),
    }
}

/// Start the control socket: at `path` (an error if that fails), or at the default place
/// (a warning if that fails: the agent or server runs without one). The task ends, and
/// the socket file goes, when the runtime does.
fn control_socket(
    path: Option<PathBuf>,
    role: &str,
    source: braid_ops::Source,
) -> Result<Option<tokio::task::JoinHandle<()>>> {
    use braid_ops::control::{default_path, ControlServer};
    let explicit = path.is_some();
    let path = path.unwrap_or_else(|| default_path(role));
    match ControlServer::bind(&path) {
        Ok(c) => Ok(Some(tokio::spawn(c.serve(source)))),
        Err(e) if explicit => Err(e.into()),
        Err(e) => {
            tracing::warn!(
                "{e}; running without a control socket (braid status will not reach this {role})"
            );
            Ok(None)
        }
    }
}

#[cfg(test)]
mod direct_tests;

#[cfg(test)]
mod forward_tests;

#[cfg(test)]
mod config_paths_tests;
