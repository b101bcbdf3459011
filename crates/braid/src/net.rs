//! `braid keygen`, `braid server` and `braid agent`: flags, optional TOML config files
//! (flags win over the file), logging, and turning them into braid-net configurations.

use anyhow::{bail, Context, Result};
use braid_net::agent::{Agent, AgentConfig, AgentPath};
use braid_net::server::{Server, ServerConfig};
use braid_net::udp::PathBind;
use braid_proxy::{AuthPolicy, HttpLimits};
use clap::Args;
use serde::Deserialize;
use std::net::{SocketAddr, ToSocketAddrs};
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

/// `braid server`.
#[derive(Args, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerArgs {
    /// TOML file with any of these settings (flags take precedence).
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// UDP address to listen on, like 0.0.0.0:4433.
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<String>,
    /// The server's private key file (from `braid keygen`).
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// File of agent public keys allowed to connect, one per line, `#` comments allowed.
    #[arg(long, value_name = "FILE")]
    pub authorized: Option<PathBuf>,
    /// Where the newest handshake timestamp of each agent is kept across restarts, so a
    /// captured handshake cannot be replayed after one (default: the authorized file's
    /// path with `.state` appended; the server must be able to write it).
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,
    /// Most sessions at once.
    #[arg(long)]
    pub max_sessions: Option<usize>,
    /// Most proxied connections per session at once.
    #[arg(long)]
    pub max_streams: Option<u64>,
    /// Most bytes buffered per session.
    #[arg(long)]
    pub max_buffered: Option<u64>,
    /// Log level: error, warn, info, debug or trace.
    #[arg(long)]
    pub log_level: Option<String>,
}

/// `braid agent`.
#[derive(Args, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentArgs {
    /// TOML file with any of these settings (flags take precedence).
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// The server, HOST:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    pub server: Option<String>,
    /// The server's public key file (from `braid keygen` on the server).
    #[arg(long, value_name = "FILE")]
    pub server_pub: Option<PathBuf>,
    /// This agent's private key file.
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// A path: NAME=INTERFACE or NAME=LOCAL_IP (repeat for each path, 1 to 8).
    #[arg(long = "path", value_name = "NAME=IFACE_OR_LOCAL_IP")]
    #[serde(default, rename = "path")]
    pub paths: Vec<String>,
    /// SOCKS5 proxy listen address, like 127.0.0.1:1080.
    #[arg(long, value_name = "ADDR:PORT")]
    pub socks: Option<SocketAddr>,
    /// HTTP CONNECT proxy listen address, like 127.0.0.1:8080.
    #[arg(long, value_name = "ADDR:PORT")]
    pub http: Option<SocketAddr>,
    /// Require this SOCKS5 username (with --socks-pass).
    #[arg(long)]
    pub socks_user: Option<String>,
    /// Require this SOCKS5 password (with --socks-user).
    #[arg(long)]
    pub socks_pass: Option<String>,
    /// Packet scheduler: minrtt, rr, wrr, ecf, blest or super (minrtt with ACK offload,
    /// blackout freeze and random-loss recovery).
    #[arg(long)]
    pub scheduler: Option<String>,
    /// Congestion controller for both directions: bbr (default), cubic or reno.
    #[arg(long)]
    pub cc: Option<String>,
    /// Log level: error, warn, info, debug or trace.
    #[arg(long)]
    pub log_level: Option<String>,
}

fn load<T: for<'de> Deserialize<'de> + Default>(file: Option<&Path>) -> Result<T> {
    let Some(file) = file else {
        return Ok(T::default());
    };
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("reading the config file {}", file.display()))?;
    toml::from_str(&text).map_err(|e| anyhow::anyhow!("config file {}: {e}", file.display()))
}

fn init_logging(level: Option<&str>) -> Result<()> {
    let level = level.unwrap_or("info");
    if !["error", "warn", "info", "debug", "trace"].contains(&level) {
        bail!("--log-level {level:?}: expected error, warn, info, debug or trace");
    }
    let filter = tracing_subscriber::EnvFilter::try_from_env("BRAID_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!("braid={level},braid_net={level}"))
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
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
    println!(
        "wrote {} (private, mode 0600) and {} (public)",
        key.display(),
        public.display()
    );
    println!("public key: {}", std::fs::read_to_string(&public)?.trim());
    Ok(())
}

/// `braid server`.
pub fn server(a: ServerArgs) -> Result<()> {
    let f: ServerArgs = load(a.config.as_deref())?;
    let listen = a
        .listen
        .or(f.listen)
        .context("--listen ADDR:PORT is required (or `listen` in --config)")?;
    let listen: SocketAddr = listen
        .parse()
        .with_context(|| format!("--listen {listen:?}: expected ADDR:PORT like 0.0.0.0:4433"))?;
    let key = a
        .key
        .or(f.key)
        .context("--key FILE is required (make one with `braid keygen`)")?;
    let authorized = a
        .authorized
        .or(f.authorized)
        .context("--authorized FILE is required: the agent public keys allowed to connect")?;
    init_logging(a.log_level.or(f.log_level).as_deref())?;
    let key = braid_crypto::read_private_key(&key)?;
    let state = a.state.or(f.state).unwrap_or_else(|| {
        let mut p = authorized.clone().into_os_string();
        p.push(".state");
        PathBuf::from(p)
    });
    let authorized = braid_crypto::read_authorized(&authorized)?;
    let mut cfg = ServerConfig::new(listen, key, authorized);
    cfg.state_file = Some(state);
    if let Some(n) = a.max_sessions.or(f.max_sessions) {
        cfg.max_sessions = n;
    }
    if let Some(n) = a.max_streams.or(f.max_streams) {
        cfg.max_streams = n;
    }
    if let Some(n) = a.max_buffered.or(f.max_buffered) {
        cfg.max_buffered = n;
    }
    runtime()?.block_on(async move {
        let server = Server::bind(cfg).await?;
        tokio::select! {
            r = server.run() => r.context("server failed"),
            _ = tokio::signal::ctrl_c() => Ok(()),
        }
    })
}

fn parse_path(s: &str) -> Result<AgentPath> {
    let (name, bind) = s.split_once('=').with_context(|| {
        format!("--path {s:?}: expected NAME=INTERFACE or NAME=LOCAL_IP, like wifi=wlan0")
    })?;
    if name.is_empty() {
        bail!("--path {s:?}: the path needs a name before '='");
    }
    let bind: PathBind = bind
        .parse()
        .map_err(|e: String| anyhow::anyhow!("--path {s:?}: {e}"))?;
    Ok(AgentPath {
        name: name.to_string(),
        bind,
        via: None,
    })
}

/// `braid agent`.
pub fn agent(a: AgentArgs) -> Result<()> {
    let f: AgentArgs = load(a.config.as_deref())?;
    let server = a
        .server
        .or(f.server)
        .context("--server HOST:PORT is required")?;
    let server = server
        .to_socket_addrs()
        .with_context(|| format!("--server {server:?}: cannot resolve; expected HOST:PORT"))?
        .next()
        .with_context(|| format!("--server {server:?}: no address"))?;
    let server_pub = a
        .server_pub
        .or(f.server_pub)
        .context("--server-pub FILE is required")?;
    let key = a
        .key
        .or(f.key)
        .context("--key FILE is required (make one with `braid keygen`)")?;
    let paths = if a.paths.is_empty() { f.paths } else { a.paths };
    if paths.is_empty() || paths.len() > 8 {
        bail!(
            "give 1 to 8 paths with --path NAME=IFACE_OR_LOCAL_IP (got {})",
            paths.len()
        );
    }
    let paths = paths
        .iter()
        .map(|p| parse_path(p))
        .collect::<Result<Vec<_>>>()?;
    let socks = a.socks.or(f.socks);
    let http = a.http.or(f.http);
    if socks.is_none() && http.is_none() {
        bail!("give at least one proxy port: --socks ADDR:PORT and/or --http ADDR:PORT");
    }
    let socks_auth = match (a.socks_user.or(f.socks_user), a.socks_pass.or(f.socks_pass)) {
        (Some(u), Some(p)) => {
            AuthPolicy::user_pass(u, p).map_err(|e| anyhow::anyhow!("SOCKS5 credentials: {e}"))?
        }
        (None, None) => AuthPolicy::NoAuth,
        _ => bail!("--socks-user and --socks-pass go together"),
    };
    // Real links (WiFi, cellular) lose packets at random; a model-based controller does not
    // mistake that for congestion (see docs/results.md), so it is the agent's default.
    let mut transport = braid_core::Config {
        cc: braid_core::CcAlgorithm::Bbr,
        ..braid_core::Config::default()
    };
    if let Some(s) = a.scheduler.or(f.scheduler) {
        let kind = s
            .parse()
            .map_err(|e: String| anyhow::anyhow!("--scheduler: {e}"))?;
        transport = transport.with_scheduler(kind);
    }
    if let Some(c) = a.cc.or(f.cc) {
        transport.cc = c
            .parse()
            .map_err(|e: String| anyhow::anyhow!("--cc: {e}"))?;
    }
    init_logging(a.log_level.or(f.log_level).as_deref())?;
    let cfg = AgentConfig {
        server,
        server_pub: braid_crypto::read_public_key(&server_pub)?,
        key: Arc::new(braid_crypto::read_private_key(&key)?),
        paths,
        socks,
        http,
        socks_auth,
        http_limits: HttpLimits::default(),
        open_timeout: Duration::from_secs(15),
        transport,
    };
    runtime()?.block_on(async move {
        let _agent = Agent::start(cfg).await?;
        tokio::signal::ctrl_c()
            .await
            .context("waiting for Ctrl-C")?;
        Ok(())
    })
}
