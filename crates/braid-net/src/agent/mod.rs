//! `braid agent`: the multi-homed side. It keeps one session to the server over every path
//! the kernel offers and offers SOCKS5 and HTTP CONNECT ports to unmodified applications.
//!
//! Owns: the agent's configuration and its tasks. Submodules:
//! - [`handshake`]: the handshake, sent on every available path (first answer wins);
//! - [`run`]: keeping a session, applying the path manager's decisions to it (sockets,
//!   paths, backup and cap policy);
//! - [`front`]: the proxy front ends.
//!
//! Must not touch: the protocol (the session task and the core), the SOCKS/HTTP wire
//! details (braid-proxy), or link decisions (`pathmgr`).

mod front;
mod handshake;
mod run;

use crate::bridge::Cmd;
use crate::policy::PathPolicy;
use crate::protect::KeyStats;
use crate::udp::PathBind;
use braid_core::Config;
use braid_crypto::{PublicKey, RekeyPolicy, StaticKeypair};
use braid_proxy::{AuthPolicy, HttpLimits, ProxyLimits};
use bytes::Bytes;
use front::Front;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tracing::info;

/// Agent settings.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The servers' UDP addresses (1 or more; they share one key). The agent handshakes
    /// with all at once and keeps its session with the first that answers.
    pub servers: Vec<SocketAddr>,
    /// The servers' public key (pinned).
    pub server_pub: PublicKey,
    /// The agent's static key.
    pub key: Arc<StaticKeypair>,
    /// Paths (path ids follow this order).
    pub paths: Vec<AgentPath>,
    /// SOCKS5 listen address.
    pub socks: Option<SocketAddr>,
    /// HTTP CONNECT listen address.
    pub http: Option<SocketAddr>,
    /// SOCKS5 authentication.
    pub socks_auth: AuthPolicy,
    /// HTTP CONNECT limits and authentication.
    pub http_limits: HttpLimits,
    /// Connection limit, handshake and idle timeouts of each proxy front end.
    pub proxy_limits: ProxyLimits,
    /// How long opening a stream (server connect included) may take.
    pub open_timeout: Duration,
    /// How long a proxied connection waits for a session when none is up.
    pub session_wait: Duration,
    /// Where the bytes counted against path caps are kept across restarts.
    pub state_file: Option<PathBuf>,
    /// Transport settings (scheduler, congestion control, ...).
    pub transport: Config,
    /// When the session keys are rotated (docs/protocol.md section 16a).
    pub rekey: RekeyPolicy,
}

impl AgentConfig {
    /// Settings with the defaults for everything but the server, keys and paths.
    pub fn new(
        server: SocketAddr,
        server_pub: PublicKey,
        key: Arc<StaticKeypair>,
        paths: Vec<AgentPath>,
    ) -> AgentConfig {
        AgentConfig {
            servers: vec![server],
            server_pub,
            key,
            paths,
            socks: None,
            http: None,
            socks_auth: AuthPolicy::NoAuth,
            http_limits: HttpLimits::default(),
            proxy_limits: ProxyLimits::default(),
            open_timeout: Duration::from_secs(15),
            session_wait: Duration::from_secs(10),
            state_file: None,
            transport: agent_transport(),
            rekey: RekeyPolicy::default(),
        }
    }
}

/// The agent's transport defaults: braid's default stack (`Config::default()`: minRTT,
/// CUBIC with RACK-style loss detection, blackout freeze, random-loss recovery; see
/// docs/results.md "One default"), keepalives only as often as NAT bindings need (see
/// [`KEEPALIVE`], which is also the core's default) and the agent's idle timeout.
pub fn agent_transport() -> Config {
    Config {
        keepalive: KEEPALIVE,
        idle_timeout: IDLE_TIMEOUT,
        ..Config::default()
    }
}

/// Keepalive interval of an idle path: 25 s. Keepalives exist only to keep NAT bindings
/// open (the session notices dead paths from its own traffic). RFC 4787 asks NATs to keep
/// UDP bindings at least 2 minutes, but deployed home routers and carrier NATs are seen
/// dropping them after 30 s; 25 s is what WireGuard and most QUIC stacks use. Each
/// keepalive wakes a cellular radio, which then stays in its high-power tail for several
/// seconds: 5 s kept an idle 3G radio permanently awake (319 J for nothing in the
/// simulator's standby scenario); 25 s lets it sleep most of the time.
pub const KEEPALIVE: Duration = Duration::from_secs(25);
const _: () = assert!(
    KEEPALIVE.as_secs() == 25,
    "keep in step with Config::default"
);

/// Idle timeout: long enough that one lost keepalive (and its answer) does not end the
/// session.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// One path of the agent.
#[derive(Debug, Clone)]
pub struct AgentPath {
    /// A name for logs (and the cap state file).
    pub name: String,
    /// How its socket is bound.
    pub bind: PathBind,
    /// Send to this address instead of the server's (a relay or link emulator in front
    /// of the server); `None` in normal use.
    pub via: Option<SocketAddr>,
    /// Backup, cap, power.
    pub policy: PathPolicy,
}

impl AgentPath {
    /// A path with no policy options, straight to the server.
    pub fn new(name: impl Into<String>, bind: PathBind) -> AgentPath {
        AgentPath {
            name: name.into(),
            bind,
            via: None,
            policy: PathPolicy::default(),
        }
    }

    fn peer(&self, server: SocketAddr) -> SocketAddr {
        self.via.unwrap_or(server)
    }
}

/// The current session's command channel, `None` while there is none.
type SessionSlot = watch::Receiver<Option<mpsc::UnboundedSender<Cmd>>>;

/// What the front ends need from the current session.
#[derive(Clone)]
struct Shared {
    session: SessionSlot,
    flows: Arc<Mutex<HashMap<u32, mpsc::Sender<Bytes>>>>,
    next_flow: Arc<AtomicU32>,
    cfg: Arc<AgentConfig>,
}

/// Where a configured path stands in the current session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathStatus {
    /// Not in the session (absent, down, or no session).
    Down,
    /// In the session, waiting for validation.
    Validating,
    /// Validated: may carry data.
    Up,
}

/// A running agent.
pub struct Agent {
    /// Bound SOCKS5 address.
    pub socks: Option<SocketAddr>,
    /// Bound HTTP CONNECT address.
    pub http: Option<SocketAddr>,
    established: SessionSlot,
    status: watch::Receiver<Vec<PathStatus>>,
    names: Vec<String>,
    keys: Arc<KeyStats>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Agent {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Agent {
    /// Bind the proxy ports and start keeping a session to the server. Paths that are
    /// absent now are used when they appear.
    pub async fn start(cfg: AgentConfig) -> std::io::Result<Agent> {
        if cfg.servers.is_empty()
            || cfg
                .servers
                .iter()
                .any(|s| s.is_ipv4() != cfg.servers[0].is_ipv4())
        {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "an agent needs 1 or more servers of one address family, got {:?}",
                    cfg.servers
                ),
            ));
        }
        if cfg.paths.is_empty() || cfg.paths.len() > 8 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("an agent needs 1 to 8 paths, got {}", cfg.paths.len()),
            ));
        }
        let ledger = crate::policy::CapLedger::load(cfg.state_file.as_deref())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        let cfg = Arc::new(cfg);
        let (tx, rx) = watch::channel(None);
        let shared = Shared {
            session: rx.clone(),
            flows: Arc::new(Mutex::new(HashMap::new())),
            next_flow: Arc::new(AtomicU32::new(1)),
            cfg: cfg.clone(),
        };
        let mut tasks = Vec::new();
        let mut socks = None;
        if let Some(addr) = cfg.socks {
            let l = TcpListener::bind(addr).await.map_err(|e| {
                std::io::Error::new(e.kind(), format!("cannot listen for SOCKS5 on {addr}: {e}"))
            })?;
            socks = Some(l.local_addr()?);
            info!(listen = %l.local_addr()?, "SOCKS5 proxy ready");
            tasks.push(tokio::spawn(front::accept_loop(
                l,
                shared.clone(),
                Front::Socks,
            )));
        }
        let mut http = None;
        if let Some(addr) = cfg.http {
            let l = TcpListener::bind(addr).await.map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("cannot listen for HTTP CONNECT on {addr}: {e}"),
                )
            })?;
            http = Some(l.local_addr()?);
            info!(listen = %l.local_addr()?, "HTTP CONNECT proxy ready");
            tasks.push(tokio::spawn(front::accept_loop(
                l,
                shared.clone(),
                Front::Http,
            )));
        }
        // The link watcher is created here, in the caller's network namespace.
        let watcher = crate::netwatch::watch();
        let names = cfg.paths.iter().map(|p| p.name.clone()).collect();
        let (status_tx, status) = watch::channel(vec![PathStatus::Down; cfg.paths.len()]);
        let keys = Arc::new(KeyStats::default());
        tasks.push(tokio::spawn(run::keep_session(
            cfg,
            tx,
            shared,
            watcher,
            ledger,
            status_tx,
            keys.clone(),
        )));
        Ok(Agent {
            socks,
            http,
            established: rx,
            status,
            names,
            keys,
            tasks,
        })
    }

    /// Packet protection counters of the agent's sessions (key epochs, rotations, packets
    /// that failed to open).
    pub fn key_stats(&self) -> Arc<KeyStats> {
        self.keys.clone()
    }

    /// Each configured path's name and status.
    pub fn paths(&self) -> Vec<(String, PathStatus)> {
        self.names
            .iter()
            .cloned()
            .zip(self.status.borrow().iter().copied())
            .collect()
    }

    /// Wait until path `name` has `status` (or `timeout` passed).
    pub async fn wait_path(&mut self, name: &str, status: PathStatus, timeout: Duration) -> bool {
        let Some(i) = self.names.iter().position(|n| n == name) else {
            return false;
        };
        tokio::time::timeout(timeout, self.status.wait_for(|v| v.get(i) == Some(&status)))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Wait until a session to the server is up (or `timeout` passed).
    pub async fn wait_established(&mut self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, self.established.wait_for(|s| s.is_some()))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}
