//! `braid agent`: the multi-homed side. It keeps one session to the server over every path
//! the kernel offers and offers SOCKS5 and HTTP proxy ports to unmodified applications.
//!
//! Owns: the agent's configuration and its tasks. Submodules:
//! - [`handshake`]: the handshake, sent on every available path (first answer wins);
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
//! - [`inbound`]: inbound ports (`--forward`): the public ports asked of the server and
//!   the traffic that comes in through them;
//! - [`report`]: the status board (`braid status`), refreshed by the session loop.
//!
//! Must not touch: the protocol (the session task and the core), the SOCKS/HTTP wire
//! details (braid-proxy), or link decisions (`pathmgr`).

mod affinity;
mod direct;
mod direct_udp;
mod dns;
mod dns_tcp;
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
mod tproxy;
mod tun;
mod tun_conn;
mod tun_direct;

pub use inbound::Forward;
pub use tun::{tun_mtu, TunSettings};

pub use report::{Counters, StatusBoard};

pub use braid_core::connsched::ConnPolicy;
pub use direct::{DirectMode, DirectSettings};

use crate::bridge::Cmd;
use crate::policy::PathPolicy;
use crate::protect::KeyStats;
use crate::rules::{LearnedNames, Route, Rules};
use crate::udp::PathBind;
use braid_core::Config;
use braid_crypto::{Ciphers, PublicKey, RekeyPolicy, StaticKeypair};
use braid_proxy::TargetAddr;
use braid_proxy::{AuthPolicy, HttpLimits, ProxyLimits};
use bytes::Bytes;
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

/// Agent settings.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The servers' UDP addresses (they share one key). The agent handshakes with all at
    /// once and keeps its session with the first that answers. None: direct mode only.
    pub servers: Vec<SocketAddr>,
    /// The same servers' addresses of the other address family: (an address in
    /// `servers`, that server's address of the other family). A path whose link has only
    /// the other family (an IPv6-only mobile network and a server given by IPv4, or the
    /// reverse) sends there; paths of both families join one session. Empty: every path
    /// uses the family of `servers`.
    pub server_other_family: Vec<(SocketAddr, SocketAddr)>,
    /// The servers' public key (pinned).
    pub server_pub: PublicKey,
    /// The agent's static key.
    pub key: Arc<StaticKeypair>,
    /// Paths (path ids follow this order). One of them may be bound as
    /// [`PathBind::Auto`]: it stands for as many paths as the other paths leave room for
    /// (8 in all), named after it with 1, 2, ..., each taking an interface with a default
    /// route as the kernel offers them.
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
    /// TUN mode: a device carrying every application (needs CAP_NET_ADMIN).
    pub tun: Option<TunSettings>,
    /// Accept TCP connections nftables redirected here (`redirect`), and UDP datagrams it
    /// handed here with `tproxy` (the same port).
    pub redirect: Option<SocketAddr>,
    /// Answer DNS (UDP and TCP) here, through the server's resolver (`--dns`).
    pub dns: Option<SocketAddr>,
    /// When the session keys are rotated (docs/protocol.md section 16a).
    pub rekey: RekeyPolicy,
    /// Direct mode: connections straight to their destinations when no session is up.
    pub direct: DirectSettings,
    /// The packet ciphers offered to the server, the preferred first (default:
    /// AES-256-GCM first where the CPU has AES instructions, else ChaCha20-Poly1305 first).
    pub ciphers: Ciphers,
    /// Per-destination rules (`--bypass`, `--pin`): destinations that go straight to their
    /// destination on one path, never through the server ([`crate::rules`]).
    pub rules: Rules,
    /// Inbound ports: public ports the server is asked to open, and the services behind
    /// the agent their traffic goes to.
    pub forwards: Vec<Forward>,
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
            server_other_family: Vec::new(),
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
            tun: None,
            redirect: None,
            dns: None,
            rekey: RekeyPolicy::default(),
            direct: DirectSettings::default(),
            ciphers: Ciphers::auto(),
            rules: Rules::default(),
            forwards: Vec::new(),
        }
    }

    /// Where a path sending from `local` reaches `server` (either of a server's
    /// addresses): `server` itself when `local` is of its family (or unspecified), else
    /// that server's address of `local`'s family if configured (`server_other_family`),
    /// else `server`.
    pub fn server_for(&self, server: SocketAddr, local: std::net::IpAddr) -> SocketAddr {
        if local.is_unspecified() || local.is_ipv4() == server.is_ipv4() {
            return server;
        }
        self.server_other_family
            .iter()
            .find(|(a, b)| *a == server || *b == server)
            .map(|&(a, b)| if a.is_ipv4() == local.is_ipv4() { a } else { b })
            .filter(|a| a.is_ipv4() == local.is_ipv4())
            .unwrap_or(server)
    }

    /// Settings for an agent without a server: direct mode only (a throwaway key stands
    /// in for the server's).
    pub fn direct_only(paths: Vec<AgentPath>) -> std::io::Result<AgentConfig> {
        let key = StaticKeypair::generate()
            .map_err(|e| std::io::Error::other(format!("cannot make a key: {e}")))?;
        let public = key.public();
        let mut cfg = AgentConfig::new(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            public,
            Arc::new(key),
            paths,
        );
        cfg.servers.clear();
        cfg.direct.mode = DirectMode::Fallback;
        Ok(cfg)
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

pub use crate::common::IDLE_TIMEOUT;

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

/// Every `--pin` names a configured path that is not `auto`.
fn check_rules(cfg: &AgentConfig) -> std::io::Result<()> {
    for r in cfg.rules.rules() {
        if let crate::rules::Action::Pin(p) = &r.action {
            let ok = cfg
                .paths
                .iter()
                .any(|q| &q.name == p && q.bind != PathBind::Auto);
            if !ok {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "{}: no path named {p:?} bound to an interface or address",
                        crate::rules::describe(r)
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Replace an `auto` path by as many auto slots as the other paths leave room for (8 in
/// all), named NAME1, NAME2, ...
pub fn expand_auto(paths: Vec<AgentPath>) -> Result<Vec<AgentPath>, String> {
    let autos = paths.iter().filter(|p| p.bind == PathBind::Auto).count();
    if autos == 0 {
        return Ok(paths);
    }
    if autos > 1 {
        return Err("--path auto may be given once".into());
    }
    let room = 8usize.saturating_sub(paths.len() - 1);
    if room == 0 {
        return Err("--path auto: the other paths already use all 8 slots".into());
    }
    let mut out = Vec::new();
    for p in paths {
        if p.bind == PathBind::Auto {
            for i in 1..=room {
                out.push(AgentPath {
                    name: format!("{}{i}", p.name),
                    ..p.clone()
                });
            }
        } else {
            out.push(p);
        }
    }
    Ok(out)
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
    board: Arc<StatusBoard>,
    /// Direct mode's state (`None`: direct mode off).
    direct: Option<Arc<direct::Direct>>,
    /// Set by [`Agent::shutdown`] before it closes the session: the session's end is then
    /// a clean stop, not a loss to reconnect from (no WARN, no switch to direct mode).
    stopping: Arc<AtomicBool>,
    /// Names learned from the DNS answers TUN mode carried, for domain rules.
    learned: Arc<Mutex<LearnedNames>>,
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
        if let Some(d) = &direct {
            let (slot, b) = (rx.clone(), board.clone());
            tasks.push(tokio::spawn(direct::measure(d.clone(), slot, b, direct_on)));
        }
        if direct_on {
            tasks.push(tokio::spawn(direct::watch_mode(
                rx.clone(),
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
