//! The agent's settings: [`AgentConfig`] and [`AgentPath`], the transport defaults
//! ([`agent_transport`], [`KEEPALIVE`]), `--path auto`'s expansion into slots and the check
//! that every `--pin` names a path.
//!
//! Owns: what an agent is configured with. Must not touch: starting anything (the agent's
//! `start` does), the configuration files (the `braid` binary reads them).

use super::*;
use crate::common::IDLE_TIMEOUT;

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
    /// The captive-portal check URL (`--captive-check`; `None`: no checks): asked from a
    /// path that does not validate (`pathmgr::captive`).
    pub captive_check: Option<crate::pathmgr::captive::CheckUrl>,
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
            captive_check: crate::pathmgr::captive::CheckUrl::parse(
                crate::pathmgr::captive::DEFAULT_CHECK_URL,
            )
            .ok(),
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

    pub(super) fn peer(&self, server: SocketAddr) -> SocketAddr {
        self.via.unwrap_or(server)
    }
}

/// Every `--pin` names a configured path that is not `auto`.
pub(super) fn check_rules(cfg: &AgentConfig) -> std::io::Result<()> {
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
