//! `braid agent`: the multi-homed side. It keeps one session to the server over every path
//! the kernel offers and offers SOCKS5 and HTTP proxy ports to unmodified applications.
//!
//! Owns: the agent's tasks. Submodules:
//! - [`config`]: the agent's settings ([`AgentConfig`], [`AgentPath`]) and their checks;
//! - [`client`]: the sans-IO client: the handshake's and the session keeping's decisions;
//! - [`handshake`]: the handshake's sockets, sent on every available path (first answer
//!   wins, as [`client::handshake`] decides);
//! - [`run`]: keeping a session, applying the path manager's decisions to it (paths,
//!   backup and cap policy);
//! - [`links`]: the paths' transports (a UDP socket, or a TCP connection where UDP is
//!   blocked) and their receive tasks;
//! - [`front`]: the proxy front ends;
//! - [`direct`], [`direct_udp`], [`dns`]: direct mode (no server, or none answers): each
//!   new connection whole on one path chosen by the connection-level scheduler;
//! - [`ruled_udp`]: the datagrams of a UDP association that `--bypass`/`--pin` send
//!   straight to their destination (TCP: `direct_ruled`, through [`direct`]);
//! - [`tun`] (with [`tun_conn`]): TUN mode, every application without a proxy setting;
//! - [`redirect`], [`redirect_udp`] (with [`tproxy`]): connections and datagrams nftables
//!   redirected; [`resolver`]: the agent's DNS port (`--dns`); [`lan_udp`]: the datagram
//!   flows of both; [`dns_tcp`]: DNS over TCP (TUN mode and `--dns`);
//! - [`flow_entry`]: a datagram flow's entry in the flow table, removed when it ends;
//! - [`inbound`]: inbound ports (`--forward`): the public ports asked of the server and
//!   the traffic that comes in through them;
//! - [`startup`]: the mode for new connections (session, starting, direct): the wait for
//!   the first session while the agent starts, and the mode's log lines;
//! - [`report`]: the status board (`braid status`), refreshed by the session loop.
//!
//! Must not touch: the protocol (the session task and the core), the SOCKS/HTTP wire
//! details (braid-proxy), or link decisions (`pathmgr`).

mod affinity;
mod client;
mod config;
mod direct;
mod direct_udp;
mod dns;
mod dns_tcp;
mod flow_entry;
mod front;
mod handshake;
mod inbound;
mod lan_udp;
mod links;
mod redirect;
mod redirect_udp;
mod report;
mod resolver;
mod ruled_udp;
mod run;
mod startup;
mod tproxy;
mod tun;
mod tun_conn;
mod tun_direct;

pub use inbound::Forward;
pub use tun::{tun_mtu, TunSettings};

pub use report::{Counters, StatusBoard};

pub use braid_core::connsched::ConnPolicy;
pub use client::startup::START_WAIT;
pub use direct::{DirectMode, DirectSettings};

pub use crate::common::IDLE_TIMEOUT;
use config::check_rules;
pub use config::{agent_transport, expand_auto, AgentConfig, AgentPath, KEEPALIVE};

use crate::bridge::Cmd;
use crate::policy::PathPolicy;
use crate::protect::KeyStats;
use crate::rules::{LearnedNames, Route, Rules};
use crate::udp::PathBind;
use braid_core::Config;
use braid_crypto::{Ciphers, PublicKey, RekeyPolicy, StaticKeypair};
use braid_proxy::TargetAddr;
use braid_proxy::{AuthPolicy, HttpLimits, ProxyLimits};
use client::startup::Startup;
use front::Front;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tracing::info;

/// The current session's command channel, `None` while there is none.
type SessionSlot = watch::Receiver<Option<mpsc::UnboundedSender<Cmd>>>;

/// What the front ends need from the current session.
#[derive(Clone)]
struct Shared {
    session: SessionSlot,
    flows: flow_entry::FlowTable,
    next_flow: Arc<AtomicU32>,
    cfg: Arc<AgentConfig>,
    board: Arc<StatusBoard>,
    /// Direct mode's state (`None`: direct mode off).
    direct: Option<Arc<direct::Direct>>,
    /// Set by [`Agent::shutdown`] before it closes the session: the session's end is then
    /// a clean stop, not a loss to reconnect from (no WARN, no switch to direct mode).
    stopping: Arc<AtomicBool>,
    /// Names learned from the DNS answers TUN mode carried, for domain rules.
    learned: Arc<Mutex<LearnedNames>>,
    /// The start-up: while the first handshake has its chance, new connections wait for
    /// the session instead of going direct (`startup`).
    startup: startup::StartSlot,
}

impl Shared {
    /// Direct mode's state when direct mode is on (it also exists, for `--bypass` and
    /// `--pin`, when direct mode is off).
    fn fallback(&self) -> Option<&Arc<direct::Direct>> {
        self.direct
            .as_ref()
            .filter(|_| self.cfg.direct.mode != DirectMode::Off)
    }

    /// The route the rules give `target` (an address also by the name learned for it).
    fn route(&self, target: &TargetAddr) -> Route {
        let rules = &self.cfg.rules;
        if rules.is_empty() {
            return Route::Default;
        }
        match target {
            TargetAddr::Domain(name, _) => rules.route_name(name),
            TargetAddr::Ip(a) => self.route_ip(a.ip()),
        }
    }

    /// Remember, from a DNS answer TUN mode carried, the addresses of names a domain rule
    /// matches.
    fn learn(&self, dns: &[u8]) {
        if !self.cfg.rules.is_empty() {
            if let Ok(mut l) = self.learned.lock() {
                l.learn(&self.cfg.rules, dns);
            }
        }
    }

    /// The route of an address: by the name DNS gave it (TUN mode), else by CIDR rules.
    fn route_ip(&self, ip: std::net::IpAddr) -> Route {
        let rules = &self.cfg.rules;
        if rules.is_empty() {
            return Route::Default;
        }
        let by_name = self
            .learned
            .lock()
            .ok()
            .and_then(|l| l.name_of(ip).map(|n| rules.route_name(n)));
        match by_name {
            Some(r) if r != Route::Default => r,
            _ => rules.route_ip(ip),
        }
    }
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
    /// Bound DNS address (`--dns`).
    pub dns: Option<SocketAddr>,
    established: SessionSlot,
    status: watch::Receiver<Vec<PathStatus>>,
    names: Vec<String>,
    board: Arc<StatusBoard>,
    keys: Arc<KeyStats>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    stopping: Arc<AtomicBool>,
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
    pub async fn start(mut cfg: AgentConfig) -> std::io::Result<Agent> {
        cfg.paths = expand_auto(std::mem::take(&mut cfg.paths))
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let direct_on = cfg.direct.mode != DirectMode::Off;
        if (cfg.servers.is_empty() && !direct_on)
            || cfg
                .servers
                .iter()
                .any(|s| s.is_ipv4() != cfg.servers[0].is_ipv4())
        {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "an agent needs 1 or more servers of one address family (or direct mode), got {:?}",
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
        let board = StatusBoard::new(&cfg);
        let cfg = Arc::new(cfg);
        let (tx, rx) = watch::channel(None);
        let mut tasks = Vec::new();
        check_rules(&cfg)?;
        let direct =
            (direct_on || !cfg.rules.is_empty()).then(|| direct::Direct::new(&cfg, ledger.clone()));
        let stopping = Arc::new(AtomicBool::new(false));
        let start = Startup::new(!cfg.servers.is_empty());
        let startup: startup::StartSlot = Arc::new(watch::channel(start).0);
        if let Some(d) = &direct {
            let (slot, b) = (rx.clone(), board.clone());
            tasks.push(tokio::spawn(direct::measure(d.clone(), slot, b, direct_on)));
        }
        if direct_on {
            tasks.push(tokio::spawn(startup::watch_mode(
                rx.clone(),
                startup.clone(),
                board.clone(),
                cfg.servers.len(),
                stopping.clone(),
            )));
        }
        let shared = Shared {
            session: rx.clone(),
            flows: Arc::new(Mutex::new(HashMap::new())),
            next_flow: Arc::new(AtomicU32::new(1)),
            cfg: cfg.clone(),
            board: board.clone(),
            direct,
            stopping: stopping.clone(),
            learned: Arc::default(),
            startup,
        };
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
                    format!("cannot listen for the HTTP proxy on {addr}: {e}"),
                )
            })?;
            http = Some(l.local_addr()?);
            info!(listen = %l.local_addr()?, "HTTP proxy ready (CONNECT and plain http://)");
            tasks.push(tokio::spawn(front::accept_loop(
                l,
                shared.clone(),
                Front::Http,
            )));
        }
        if let Some(addr) = cfg.redirect {
            let l = TcpListener::bind(addr).await.map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("cannot listen for redirected connections on {addr}: {e}"),
                )
            })?;
            let at = l.local_addr()?;
            info!(listen = %at, "accepting connections redirected by nftables");
            tasks.push(tokio::spawn(front::accept_loop(
                l,
                shared.clone(),
                Front::Redirect,
            )));
            redirect_udp::start(at, &shared, &mut tasks);
        }
        let mut dns = None;
        if let Some(addr) = cfg.dns {
            let socks = resolver::bind(addr).await?;
            dns = Some(socks.0.local_addr()?);
            resolver::start(socks, &shared, &mut tasks);
        }
        if let Some(t) = &cfg.tun {
            // Before any path socket exists: they must carry braid's routing mark.
            let dev = tun::Tun::create(t, cfg.transport.max_datagram_payload)?;
            tasks.push(tokio::spawn(tun::run(dev, shared.clone())));
        }
        // The link watcher is created here, in the caller's network namespace.
        let watcher = crate::netwatch::watch();
        let names = cfg.paths.iter().map(|p| p.name.clone()).collect();
        let (status_tx, status) = watch::channel(vec![PathStatus::Down; cfg.paths.len()]);
        let keys = Arc::new(KeyStats::default());
        if cfg.servers.is_empty() {
            // Direct mode only: no session, ever (the slot's sender lives with the agent).
            tasks.push(tokio::spawn(async move {
                let _keep = (tx, status_tx, watcher, ledger, shared);
                std::future::pending::<()>().await
            }));
        } else {
            tasks.push(tokio::spawn(run::keep_session(
                cfg,
                tx,
                shared,
                watcher,
                ledger,
                status_tx,
                keys.clone(),
            )));
        }
        Ok(Agent {
            socks,
            http,
            dns,
            established: rx,
            status,
            names,
            board,
            keys,
            tasks,
            stopping,
        })
    }

    /// The agent's status board (`braid status`): [`StatusBoard::snapshot`] at any time.
    pub fn status(&self) -> Arc<StatusBoard> {
        self.board.clone()
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

    /// Shut down (SIGTERM): close the current session (the server gets a CLOSE and frees it
    /// at once), wait up to `timeout` for it to go out, then stop every task (the proxy
    /// listeners close, proxied connections end). The cap ledger was saved when the
    /// session ended. Returns false if the session did not close in time.
    pub async fn shutdown(mut self, timeout: Duration) -> bool {
        self.stopping.store(true, Ordering::SeqCst);
        let cmd = self.established.borrow().clone();
        let closed = match cmd {
            Some(cmd) => {
                let _ = cmd.send(Cmd::Session(crate::bridge::SessionFn(Box::new(
                    |s, now| s.close(now, crate::common::CLOSE_ORDERLY, "agent shutting down"),
                ))));
                tokio::time::timeout(timeout, self.established.wait_for(|s| s.is_none()))
                    .await
                    .is_ok()
            }
            None => true,
        };
        for t in &self.tasks {
            t.abort();
        }
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
        closed
    }

    /// Wait until a session to the server is up (or `timeout` passed).
    pub async fn wait_established(&mut self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, self.established.wait_for(|s| s.is_some()))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

#[cfg(test)]
mod server_for_tests {
    use super::*;

    /// A path picks the server's address of its own family, either way round; without
    /// one configured it keeps the server's.
    #[test]
    fn a_path_reaches_the_server_at_the_address_of_its_family() {
        let key = Arc::new(StaticKeypair::generate().unwrap());
        let (v4, v6): (SocketAddr, SocketAddr) = (
            "192.0.2.1:4433".parse().unwrap(),
            "[2001:db8::1]:4433".parse().unwrap(),
        );
        let mut cfg = AgentConfig::new(v4, key.public(), key.clone(), Vec::new());
        let (l4, l6): (std::net::IpAddr, std::net::IpAddr) = (
            "10.0.0.2".parse().unwrap(),
            "2001:db8:1::2".parse().unwrap(),
        );
        assert_eq!(cfg.server_for(v4, l6), v4, "nothing configured");
        cfg.server_other_family = vec![(v4, v6)];
        assert_eq!(cfg.server_for(v4, l6), v6);
        assert_eq!(cfg.server_for(v4, l4), v4);
        assert_eq!(cfg.server_for(v6, l4), v4, "a session won over IPv6");
        assert_eq!(cfg.server_for(v4, "::".parse().unwrap()), v4, "unspecified");
    }
}
