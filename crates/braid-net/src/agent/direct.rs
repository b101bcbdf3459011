//! Direct mode: no braid server (none configured, or none answering). Each new proxied
//! connection goes whole, straight to its destination, over one path chosen by the
//! connection-level scheduler (`braid_core::connsched`): a TCP socket bound to the path's
//! interface or address, names resolved through that path. A UDP association likewise gets
//! one path for its life. Mode detection: while the session slot holds a session, new
//! connections use it (packet level); otherwise they go direct. The switch affects new
//! connections only.
//!
//! [`open_tcp`] is the one entry point the front ends call (session stream or direct
//! connection; a destination `--bypass`/`--pin` names goes direct even with a session up,
//! see `direct_ruled`; the session stream's opening: `direct_session`); [`Relay::run`]
//! relays either. A direct connection on a path that dies is lost: nothing can move it
//! (docs/deployment.md).
//!
//! A new connection is held (at most `connsched::PROBE_WAIT`) while the first connection on
//! a never-measured path may still measure it, so that it is placed by measured rates; the
//! rates measured are remembered in the state file and start the next run
//! (`direct_paths`).
//!
//! Owns: the scheduler's state, binding and connecting direct sockets, the mode shown in
//! logs and status. Must not touch: the session (`run`), the SOCKS/HTTP wire (braid-proxy,
//! `front`), the status board's layout. The paths' kernel view, caps, remembered rates and
//! status: `direct_paths`; relaying a connection: `direct_relay`.

use super::dns;
use super::report::Counters;
use super::{AgentConfig, Shared};
use crate::policy::{Cap, CapLedger};
use crate::udp::PathBind;
use braid_core::connsched::{ConnId, ConnPolicy, ConnSched, PathInput};
use braid_proxy::target::ReplyCode;
use braid_proxy::TargetAddr;
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;
use tracing::{info, warn};

#[path = "direct_paths.rs"]
mod paths;
#[path = "direct_relay.rs"]
mod relay;
#[path = "direct_ruled.rs"]
mod ruled;
#[path = "direct_session.rs"]
mod session;
pub(super) use paths::measure;
pub(crate) use relay::Relay;
pub(super) use session::open_stream;

/// When the agent uses direct mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DirectMode {
    /// Never: with no session a connection waits for one (`session_wait`), then fails.
    #[default]
    Off,
    /// When no session is up (no server configured, or none answers).
    Fallback,
}

/// Direct-mode settings of the agent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DirectSettings {
    /// When.
    pub mode: DirectMode,
    /// How paths are chosen for connections.
    pub policy: ConnPolicy,
}

impl Default for DirectSettings {
    fn default() -> Self {
        DirectSettings {
            mode: DirectMode::Off,
            policy: ConnPolicy::Throughput,
        }
    }
}

/// A path whose socket could not be bound or connected is not chosen for this long.
const FAILED_FOR: Duration = Duration::from_secs(5);

/// The direct-mode state shared by the front ends.
pub(super) struct Direct {
    sched: Mutex<ConnSched>,
    live: Mutex<HashMap<ConnId, Arc<Counters>>>,
    names: Vec<String>,
    binds: Vec<PathBind>,
    backup: Vec<bool>,
    power: Vec<Option<f64>>,
    caps: Vec<Option<Cap>>,
    failed_until: Mutex<Vec<Option<Instant>>>,
    epoch: Instant,
    nameservers: Vec<SocketAddr>,
    open_timeout: Duration,
    /// The state file: caps, remembered rates.
    ledger: CapLedger,
    paths: Mutex<paths::PathsState>,
    /// The link watcher, until the measurement task takes it.
    watch: Mutex<Option<io::Result<paths::Watch>>>,
}

impl Direct {
    /// Direct mode's state; `ledger` is the agent's state file (caps, remembered rates).
    /// Starts a link watcher, in the caller's network namespace.
    pub(super) fn new(cfg: &AgentConfig, ledger: CapLedger) -> Arc<Direct> {
        let n = cfg.paths.len();
        let names: Vec<String> = cfg.paths.iter().map(|p| p.name.clone()).collect();
        let binds: Vec<PathBind> = cfg.paths.iter().map(|p| p.bind.clone()).collect();
        let d = Direct {
            sched: Mutex::new(ConnSched::new(n, cfg.direct.policy)),
            live: Mutex::new(HashMap::new()),
            paths: Mutex::new(paths::PathsState::new(&binds, &ledger, &names)),
            names,
            binds,
            backup: cfg.paths.iter().map(|p| p.policy.backup).collect(),
            power: cfg.paths.iter().map(|p| p.policy.power_w).collect(),
            caps: cfg.paths.iter().map(|p| p.policy.cap).collect(),
            failed_until: Mutex::new(vec![None; n]),
            epoch: Instant::now(),
            nameservers: dns::system_nameservers(),
            open_timeout: cfg.open_timeout,
            ledger,
            watch: Mutex::new(Some(paths::Watch::start())),
        };
        if let Ok(mut s) = d.sched.lock() {
            d.remember_rates(&mut s);
        }
        Arc::new(d)
    }

    fn now(&self) -> braid_core::Instant {
        braid_core::Instant::from_duration(self.epoch.elapsed())
    }

    /// Read every direct connection's counters into the scheduler.
    fn measure(&self) {
        let live: Vec<(ConnId, u64)> = self
            .live
            .lock()
            .map(|l| {
                l.iter()
                    .map(|(id, c)| {
                        (
                            *id,
                            c.up.load(Ordering::Relaxed) + c.down.load(Ordering::Relaxed),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let now = self.now();
        if let Ok(mut s) = self.sched.lock() {
            for (id, bytes) in live {
                s.progress(now, id, bytes);
            }
            s.tick(now);
        }
    }

    /// Choose a path for a connection to `dest`, excluding `not`.
    fn choose(&self, dest: &str, not: &[usize]) -> Option<(ConnId, usize)> {
        let mut s = self.sched.lock().ok()?;
        self.refresh(&mut s);
        for &i in not {
            s.set_path(i, PathInput::default());
        }
        s.choose(self.now(), dest).ok()
    }

    /// Hold a new connection while the scheduler waits for a probe's first sample (see
    /// the module doc), [`PROBE_WAIT`](braid_core::connsched::PROBE_WAIT) at most since
    /// it `arrived` (a connection that waited for the agent's start-up waited enough).
    async fn settle(&self, arrived: Instant) {
        let t0 = arrived;
        loop {
            let wait = match self.sched.lock() {
                Ok(mut s) => {
                    self.refresh(&mut s);
                    s.wait(self.now())
                }
                Err(_) => None,
            };
            match wait {
                Some(w) if t0.elapsed() < braid_core::connsched::PROBE_WAIT => {
                    tokio::time::sleep(w.min(Duration::from_millis(20))).await;
                }
                _ => return,
            }
        }
    }

    fn end(&self, id: ConnId) {
        let counters = self.live.lock().ok().and_then(|mut l| l.remove(&id));
        if let Ok(mut s) = self.sched.lock() {
            if let (Some(c), Some(p)) = (counters, s.path_of(id)) {
                if let Ok(mut st) = self.paths.lock() {
                    st.closed[p].0 += c.up.load(Ordering::Relaxed);
                    st.closed[p].1 += c.down.load(Ordering::Relaxed);
                }
            }
            s.close(self.now(), id);
        }
    }

    /// Path `i`'s name.
    pub(super) fn name(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// Count connection `id`'s bytes (from the status board's counters) for the scheduler.
    pub(super) fn watch(&self, id: ConnId, counters: Arc<Counters>) {
        if let Ok(mut l) = self.live.lock() {
            l.insert(id, counters);
        }
    }

    /// Forget connection `id` when the returned guard is dropped.
    pub(super) fn guard(self: &Arc<Self>, id: ConnId) -> DirectGuard {
        DirectGuard(self.clone(), id)
    }

    /// A path and a UDP socket bound to it (IPv6 when `v6`, else IPv4) for a new UDP
    /// association or flow.
    pub(super) fn udp_path(
        self: &Arc<Self>,
        v6: bool,
    ) -> Option<(usize, ConnId, tokio::net::UdpSocket)> {
        self.udp_path_for(None, v6)
    }

    /// [`Direct::udp_path`] on path `only` when given (`--pin`; no other path is tried).
    pub(super) fn udp_path_for(
        self: &Arc<Self>,
        only: Option<usize>,
        v6: bool,
    ) -> Option<(usize, ConnId, tokio::net::UdpSocket)> {
        let mut tried = Vec::new();
        for _ in 0..2 {
            let (id, path) = match only {
                Some(p) if tried.is_empty() => self.choose_only("udp", p)?,
                Some(_) => return None,
                None => self.choose("udp", &tried)?,
            };
            tried.push(path);
            let any: SocketAddr = if v6 {
                (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
            } else {
                (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
            };
            let bound = self
                .bind(path)
                .ok_or_else(|| io::Error::other("the path has no interface now"));
            match bound.and_then(|b| crate::udp::bind_path(&b, any)) {
                Ok(s) => return Some((path, id, s)),
                Err(e) => {
                    warn!(path = %self.names[path], "direct mode: cannot bind a UDP socket: {e}");
                    self.end(id);
                    self.fail(path);
                }
            }
        }
        None
    }

    /// Resolve `target` through path `i`.
    pub(super) async fn resolve(
        &self,
        i: usize,
        target: &TargetAddr,
    ) -> io::Result<Vec<SocketAddr>> {
        match target {
            TargetAddr::Ip(a) => Ok(vec![*a]),
            TargetAddr::Domain(name, port) if self.nameservers.is_empty() => {
                // No nameserver to ask through the path: the system resolver.
                Ok(tokio::net::lookup_host((name.as_str(), *port))
                    .await?
                    .collect())
            }
            TargetAddr::Domain(name, port) => {
                let bind = self.bind(i).unwrap_or_else(|| self.binds[i].clone());
                match dns::resolve_via(&bind, &self.nameservers, name, *port).await {
                    Ok(a) if !a.is_empty() => Ok(a),
                    r => {
                        // The path's resolver failed (a nameserver not reachable through
                        // this path): the system's resolver, whatever path it uses.
                        let why = r.map_or_else(|e| e.to_string(), |_| "no address".into());
                        info!(path = %self.names[i], %name, "resolving through the path failed ({why}); asking the system's resolver");
                        Ok(tokio::net::lookup_host((name.as_str(), *port))
                            .await?
                            .collect())
                    }
                }
            }
        }
    }

    /// Open a TCP connection to `target` over a path the scheduler chooses (or `only`, for
    /// `--pin`: then on no other); a path that cannot be bound or does not reach the
    /// destination is tried no more for a while and the connection tried once on another.
    /// `arrived`: when the application's connection came (see [`Direct::settle`]).
    pub(super) async fn connect(
        self: &Arc<Self>,
        target: &TargetAddr,
        only: Option<usize>,
        arrived: Instant,
    ) -> Result<DirectConn, ReplyCode> {
        let dest = target.to_string();
        let mut tried = Vec::new();
        let mut code = ReplyCode::NetworkUnreachable;
        if only.is_none() {
            self.settle(arrived).await;
        }
        for _ in 0..2 {
            let chosen = match only {
                Some(p) if tried.is_empty() => self.choose_only(&dest, p),
                Some(_) => None,
                None => self.choose(&dest, &tried),
            };
            let Some((id, path)) = chosen else {
                if tried.is_empty() {
                    warn!("direct mode: no path can take a connection to {dest} now");
                }
                break;
            };
            tried.push(path);
            // Resolution failures are the name's (or the resolver's), not the path's.
            let Some(addrs) = self.resolve_on(path, target).await else {
                self.end(id);
                return Err(ReplyCode::HostUnreachable);
            };
            match self.connect_on(path, addrs).await {
                Ok(stream) => {
                    info!(path = %self.names[path], %dest, "direct connection opened");
                    return Ok(DirectConn {
                        stream,
                        path,
                        _guard: self.guard(id),
                        rule: "direct".into(),
                    });
                }
                Err(e) => {
                    self.end(id);
                    code = ReplyCode::from_io_error(&e);
                    // Refused or reset: the destination answered, the path works.
                    let path_fault = !matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionReset
                    );
                    match only {
                        Some(_) => {
                            warn!(path = %self.names[path], %dest, "connection to a pinned destination failed: {e} (--pin: it goes over this path only, never another)")
                        }
                        None => {
                            warn!(path = %self.names[path], %dest, "direct connection failed: {e}")
                        }
                    }
                    if !path_fault {
                        break;
                    }
                    self.fail(path);
                }
            }
        }
        Err(code)
    }
}

impl Direct {
    /// [`Direct::resolve`] for a connection on path `path`, within the open timeout;
    /// `None` (logged) when the name has no address or cannot be resolved.
    async fn resolve_on(&self, path: usize, target: &TargetAddr) -> Option<Vec<SocketAddr>> {
        let why = match tokio::time::timeout(self.open_timeout, self.resolve(path, target)).await {
            Ok(Ok(a)) if !a.is_empty() => return Some(a),
            Ok(Err(e)) => e.to_string(),
            Ok(Ok(_)) => "no address".to_string(),
            Err(_) => "timed out".to_string(),
        };
        warn!(path = %self.names[path], dest = %target, "direct mode: cannot resolve: {why}");
        None
    }

    /// A TCP connection over path `path` to the first of `addrs` that answers, within the
    /// open timeout.
    async fn connect_on(&self, path: usize, addrs: Vec<SocketAddr>) -> io::Result<TcpStream> {
        tokio::time::timeout(self.open_timeout, async {
            let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
            // No interface now (down, gone, an auto slot without one): the network is
            // unreachable over this path (SOCKS5 reply 3), as a pinned connection's
            // client is told.
            let bind = self.bind(path).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NetworkUnreachable,
                    "the path has no interface now",
                )
            })?;
            for a in addrs {
                match connect_bound(&bind, a).await {
                    Ok(s) => return Ok(s),
                    Err(e) => last = e,
                }
            }
            Err(last)
        })
        .await
        .unwrap_or_else(|_| Err(io::Error::new(io::ErrorKind::TimedOut, "timed out")))
    }
}

/// Connect to `to` from a socket bound like path `bind` (the TUN mode's mark on it too).
pub(super) async fn connect_bound(bind: &PathBind, to: SocketAddr) -> io::Result<TcpStream> {
    let s = if to.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if let Some(mark) = crate::udp::socket_mark() {
        socket2::SockRef::from(&s).set_mark(mark)?;
    }
    match bind {
        PathBind::Interface(dev) => s.bind_device(Some(dev.as_bytes())).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot bind a TCP socket to interface {dev:?}: {e} (needs root or CAP_NET_RAW)"),
            )
        })?,
        PathBind::Address(ip) => s.bind(SocketAddr::new(*ip, 0))?,
        PathBind::Auto => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an auto path has no interface of its own in direct mode",
            ))
        }
    }
    let stream = s.connect(to).await?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

impl Drop for Direct {
    /// The agent stops: save the rates measured for the next run.
    fn drop(&mut self) {
        self.save_rates(true, false);
    }
}

/// Makes the scheduler forget a direct connection or flow when dropped.
pub(super) struct DirectGuard(Arc<Direct>, ConnId);

impl Drop for DirectGuard {
    fn drop(&mut self) {
        self.0.end(self.1);
    }
}

/// A direct connection; the scheduler forgets it when dropped.
pub(crate) struct DirectConn {
    stream: TcpStream,
    path: usize,
    _guard: DirectGuard,
    /// The way it took, for `braid status`: `direct`, `bypass` or `pin PATH`.
    rule: String,
}

/// The one function the front ends (and TUN mode) call for a new TCP connection: a
/// destination a rule names goes straight to it (`--bypass`: on a path the scheduler
/// picks; `--pin`: on its path or not at all), whether or not a session is up; otherwise a
/// stream of the current session when one is up (or direct mode is off: then it waits for
/// one), else, once the agent's start-up wait is over (`startup`), a direct connection.
pub(crate) async fn open_tcp(shared: &Shared, target: &TargetAddr) -> Result<Relay, ReplyCode> {
    if let Some(r) = ruled::open(shared, target).await {
        return r;
    }
    if let Some(d) = shared.fallback() {
        // While the agent starts, wait for its first session rather than go direct for
        // the connection's whole life.
        let arrived = Instant::now();
        shared.wait_start().await;
        if shared.direct_now() {
            return d.connect(target, None, arrived).await.map(Relay::Direct);
        }
    }
    open_stream(shared, target)
        .await
        .map(|(r, w, early)| Relay::Session(r, w, early))
}
