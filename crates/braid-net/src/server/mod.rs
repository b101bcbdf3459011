//! `braid server`: accepts authenticated agents, one session each, and connects their
//! streams to legacy TCP servers and their datagrams to UDP destinations.
//!
//! Owns: [`ServerConfig`], [`Server`] (binding the worker sockets and the TCP fallback
//! listener, starting the workers, the accessors tests and `braid status` read). Must not
//! touch: the protocol (the session task and the core do that) and the cryptography
//! (braid-crypto's). The server sends nothing to a peer that has not sent a handshake
//! message with a valid mac1, and never more bytes than it received.
//!
//! - [`endpoint`]: the sans-IO endpoint: session table and handshake policy (in order,
//!   docs/protocol.md section 16), what to do with each datagram, the first exchanges due,
//! - `table`: one entry of that table (pending until the session's first packet, then
//!   started),
//! - [`steer`]: which worker owns a session id, the SO_REUSEPORT group and its BPF program,
//! - `worker`: the receive loop of each worker, the worker threads, hand-over channels,
//! - `session`: starting a session task (at its first packet) and what goes with it,
//! - [`authorized`]: the authorized agent keys, re-read when their file changes,
//! - [`gate`]: per-address rate limit, the load meter and the hint gate (one per worker),
//! - `shared`: what all workers' endpoints share (replay guard, authorized keys, session count),
//! - [`logs`]: rate-limited logging of drops, with counts,
//! - [`relay`]: streams to TCP targets and UDP flows (bounded return traffic),
//! - [`egress`]: where agents' connections and datagrams may go (refused by default: the
//!   server itself, loopback, link-local, special addresses),
//! - [`shares`]: each agent key's share: fair shares between agents, rate limits, quotas,
//! - `budget`: the bound on a session's UDP traffic waiting for the wire,
//! - [`inbound`]: public ports agents asked for and the configuration allows, carried to
//!   the agent (inbound port forwarding),
//! - [`report`]: the registry of live sessions behind `braid status` (all workers),
//! - `fingerprint`: how agent keys are named (`SHA256:...`),
//! - [`control`]: reloading the authorized keys (SIGHUP) and shutting down (SIGTERM).
//!
//! Threads: `threads` workers (`ServerConfig::threads`, 0 = one per core), each with its
//! own UDP socket on the listen address and its own session table; the kernel gives each
//! datagram to the worker of its session id (a classic-BPF reuseport program), so the
//! transport path takes no lock and crosses no thread. The DoS gate (mac1, per-address
//! token buckets, load meter, cookies, hints) is per worker, each with its share of the
//! budgets; what must be global (the replay guard, authorized keys, the session count,
//! counters, the status board) is shared ([`endpoint::Shared`]), and no handshake holds a
//! shared lock through its Diffie-Hellman. Worker 0 runs on the caller's runtime
//! inside [`Server::run`]; with one worker the server is one loop on one socket.
//!
//! On a wildcard listen address (`0.0.0.0`, `[::]`) every answer goes from the address its
//! agent sent to ([`crate::pktinfo`]); each session path remembers it.
//!
//! Channels and their bounds: packets to a session task, 4096 (dropped when full, like a
//! full socket buffer); packets handed to another worker (TCP fallback, or no BPF
//! program), 4096 per worker (dropped when full); datagrams from the session to its UDP
//! flows, 1024 (dropped when full); UDP return traffic, [`relay::UDP_RETURN_BYTES`] per
//! session (dropped when full); accepted streams, bounded by the session's stream limit;
//! session ends and expiries, one message per session.

mod authorized;
mod budget;
mod control;
pub mod egress;
pub mod endpoint;
mod fingerprint;
mod gate;
pub mod inbound;
mod logs;
mod path_addr;
mod relay;
mod report;
mod session;
mod shared;
pub mod shares;
pub mod steer;
mod table;
mod worker;

pub use authorized::AuthorizedKeys;
pub use control::{Reload, ServerControl, CLOSE_ORDERLY};
pub use fingerprint::fingerprint;
pub use gate::{HintGate, LoadMeter, RateLimiter};
pub use logs::{DropLog, Dropped};
pub use relay::{connect, UdpBudget, UDP_RETURN_BYTES};
pub use report::ServerBoard;
pub use worker::WorkerCounters;

use crate::protect::KeyStats;
use crate::tcp::{self, TcpPeers};
use braid_core::Config;
use braid_crypto::{Ciphers, PublicKey, RekeyPolicy, ReplayGuard, StaticKeypair};
use endpoint::{Shared, SharedConfig};
use session::SessionCtx;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use steer::Steering;
use tokio::sync::{mpsc, watch};
use tracing::{info, warn};
use worker::{Common, Worker};

/// Most worker threads (`ServerConfig::threads`).
pub const MAX_THREADS: usize = 1024;

/// How far a handshake timestamp may be from the server's clock.
pub const MAX_SKEW_MS: u64 = 120_000;

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// UDP address to listen on.
    pub listen: SocketAddr,
    /// The server's static key.
    pub key: Arc<StaticKeypair>,
    /// Agent keys allowed to connect (at start; `ServerControl::reload_authorized`
    /// replaces them while the server runs).
    pub authorized: Vec<PublicKey>,
    /// The file `authorized` was read from: re-read when it changes (at most once a
    /// second), so that a removed key gets no new session and no key rotation.
    pub authorized_file: Option<PathBuf>,
    /// Key rotation: the server refuses keys older than `rekey.lifetime` (the agent
    /// rotates them every `rekey.interval`).
    pub rekey: RekeyPolicy,
    /// Where the replay guard (newest handshake timestamp per agent key) is kept across
    /// restarts; `None` keeps it in memory only.
    pub state_file: Option<PathBuf>,
    /// Most sessions at once.
    pub max_sessions: usize,
    /// Most streams (proxied connections) per session at once.
    pub max_streams: u64,
    /// Most bytes buffered per session (its receive window).
    pub max_buffered: u64,
    /// Most UDP flows per session.
    pub max_udp_flows: usize,
    /// Where DNS queries to [`braid_proxy::datagram::SERVER_RESOLVER`] go (`None`: the
    /// first nameserver of /etc/resolv.conf, read as each session starts).
    pub resolver: Option<SocketAddr>,
    /// How long a TCP connect to a target may take.
    pub connect_timeout: Duration,
    /// A proxied connection that carries nothing either way for this long is closed.
    pub stream_idle_timeout: Duration,
    /// Handshake work and replies per second per source address (IPv4, or IPv6 /64).
    pub handshake_rate: u32,
    /// ...and how many at once.
    pub handshake_burst: u32,
    /// Above this many handshake packets (valid mac1) per second, from all sources
    /// together, the server is under load and demands a cookie (mac2) first.
    pub load_threshold: u64,
    /// A session whose first exchange (the agent's first authenticated packet) has not
    /// completed after this long is closed.
    pub first_exchange_timeout: Duration,
    /// This machine's own unicast address, told to every agent in the handshake answer
    /// when several servers share one name, anycast address or load balancer: the agent
    /// then sends every path of its session here (docs/deployment.md).
    pub unicast: Option<SocketAddr>,
    /// Worker threads, each with its own socket (SO_REUSEPORT, steered by session id)
    /// and session table; 0: one per core. `ServerConfig::new` sets 1.
    pub threads: usize,
    /// Transport settings.
    pub transport: Config,
    /// The packet ciphers accepted, the preferred first: of those an agent offers, the
    /// first of this list is used (default: AES-256-GCM first where the CPU has AES
    /// instructions, else ChaCha20-Poly1305 first).
    pub ciphers: Ciphers,
    /// The public ports each agent key may ask for (`[forward]` in the config file); none
    /// by default.
    pub forward: inbound::ForwardPolicy,
    /// Where agents' connections and datagrams may go (`[egress]`, `--egress-allow`,
    /// `--egress-deny`, `--deny-private`); the default refuses the server's own
    /// addresses, loopback, link-local, unspecified, multicast and broadcast addresses.
    pub egress: egress::EgressPolicy,
    /// Fair shares between agents (on by default), rate limits and quotas per agent key
    /// (`[limits]`); quotas are kept beside `state_file` (`STATE.usage`).
    pub shares: shares::SharesPolicy,
}

impl ServerConfig {
    /// Defaults for everything but the listen address and keys.
    pub fn new(listen: SocketAddr, key: StaticKeypair, authorized: Vec<PublicKey>) -> Self {
        ServerConfig {
            listen,
            key: Arc::new(key),
            authorized,
            authorized_file: None,
            rekey: RekeyPolicy::default(),
            state_file: None,
            max_sessions: 1024,
            max_streams: 1024,
            max_buffered: 64 << 20,
            max_udp_flows: 256,
            resolver: None,
            connect_timeout: Duration::from_secs(10),
            stream_idle_timeout: braid_proxy::ProxyLimits::default().idle_timeout,
            handshake_rate: 80,
            handshake_burst: 10,
            load_threshold: 256,
            first_exchange_timeout: Duration::from_secs(10),
            unicast: None,
            threads: 1,
            ciphers: Ciphers::auto(),
            forward: inbound::ForwardPolicy::default(),
            egress: egress::EgressPolicy::default(),
            shares: shares::SharesPolicy::default(),
            // Keepalive as the core's default (25 s, the agent's) and the agent's idle
            // timeout (see `agent::IDLE_TIMEOUT`).
            transport: Config {
                idle_timeout: crate::common::IDLE_TIMEOUT,
                ..Config::default()
            },
        }
    }
}

/// What the server did with handshake packets, since it started (for tests and reports).
#[derive(Debug, Default)]
pub struct HandshakeCounters {
    /// Handshakes accepted (sessions created).
    pub accepted: AtomicU64,
    /// Message 2 sent, first answers and cached retransmissions together.
    pub replies: AtomicU64,
    /// Cookie replies sent.
    pub cookies: AtomicU64,
    /// Handshake packets dropped by the per-address rate limit.
    pub rate_limited: AtomicU64,
    /// Handshakes that reached the Noise step and were refused there.
    pub refused: AtomicU64,
    /// Handshake packets without a valid mac1.
    pub bad_mac1: AtomicU64,
    /// Sessions closed because their first exchange did not complete in time.
    pub unfinished: AtomicU64,
    /// Log lines written about drops (`DropLog`), at any level.
    pub log_lines: AtomicU64,
    /// Key rotations accepted (message 2 sent with a live session's new keys).
    pub rotations: AtomicU64,
    /// Key rotations refused (another agent key, or no longer authorized).
    pub rotations_refused: AtomicU64,
    /// "Unknown session" hints sent.
    pub hints: AtomicU64,
    /// Handshakes refused (and told so) because `max_sessions` sessions were live.
    pub full: AtomicU64,
    /// Now (not a count since start): handshakes accepted whose agent has sent no
    /// packet yet. Each holds a slot of `max_sessions` but no session task; it ends at its
    /// first-exchange timeout unless a packet comes.
    pub waiting: AtomicU64,
}

impl HandshakeCounters {
    fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Read a counter.
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

/// A running server.
pub struct Server {
    /// Two sockets per worker (the SO_REUSEPORT group: the workers' transport sockets in
    /// worker order, then their control sockets).
    sockets: Vec<std::net::UdpSocket>,
    local: SocketAddr,
    /// The TCP listener on the same port, for agents whose network blocks UDP.
    tcp: Option<tokio::net::TcpListener>,
    peers: TcpPeers,
    cfg: ServerConfig,
    guard: ReplayGuard,
    counters: Arc<HandshakeCounters>,
    board: Arc<ServerBoard>,
    authorized: control::Authorized,
    keys: Arc<KeyStats>,
    steering: Steering,
    kernel_steering: bool,
    workers: Arc<[WorkerCounters]>,
}

impl Server {
    /// Bind the listening socket(s) and load the replay guard's state file (checking that
    /// it can be written).
    pub async fn bind(cfg: ServerConfig) -> std::io::Result<Server> {
        let guard = match &cfg.state_file {
            Some(path) => {
                let g = ReplayGuard::load(path).map_err(std::io::Error::other)?;
                g.save(path).map_err(|e| {
                    std::io::Error::other(format!(
                        "{e}; the server keeps the newest handshake timestamp of each agent \
                         there across restarts: choose a writable path (--state FILE)"
                    ))
                })?;
                info!(path = %path.display(), agents = g.len(), "replay guard loaded");
                g
            }
            None => ReplayGuard::new(),
        };
        let threads = match cfg.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        if threads > MAX_THREADS {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "{threads} server worker threads: at most {MAX_THREADS}; give --threads \
                     at most the number of cores (0: one per core)"
                ),
            ));
        }
        let mix = braid_crypto::random::random_u64().map_err(std::io::Error::other)? as u32;
        let steering = Steering::new(threads, mix);
        // Two sockets per worker: its transport packets, and everything else (see steer).
        let sockets = steer::bind_group(cfg.listen, 2 * threads)?;
        let kernel_steering = match steering.attach(&sockets[0]) {
            Ok(()) => true,
            Err(e) => {
                warn!(
                    "cannot attach the reuseport BPF program ({e}): handshake floods share \
                     the socket buffers of live sessions, and packets that reach the wrong \
                     worker are handed over (slower)"
                );
                threads == 1
            }
        };
        let local = sockets[0].local_addr()?;
        // On a wildcard address, every reply goes from the address its agent sent to (an
        // address on the loopback device, a second or floating one): packet info.
        let mut reply_from_destination = false;
        for s in &sockets {
            match crate::pktinfo::enable(s, local) {
                Ok(on) => reply_from_destination = on,
                Err(e) => {
                    warn!("{e}: replies go from the address the kernel picks, which agents that sent to another address of this server drop");
                    reply_from_destination = false;
                    break;
                }
            }
        }
        // The same port over TCP, for agents on networks that block UDP (docs/protocol.md
        // section 18a). A port the operator chose must be free; an ephemeral one (tests)
        // may happen to be taken over TCP, and then only the fallback is missing.
        let tcp = match tcp::listen(local).await {
            Ok(l) => Some(l),
            Err(e) if cfg.listen.port() != 0 => return Err(e),
            Err(e) => {
                warn!("{e}: agents whose network blocks UDP cannot reach this server");
                None
            }
        };
        info!(listen = %local, tcp = tcp.is_some(), threads, kernel_steering, reply_from_destination, "braid server listening");
        let counters: Arc<HandshakeCounters> = Arc::default();
        let egress = egress::Egress::new(cfg.egress.clone());
        let usage = cfg.state_file.as_deref().map(shares::Shares::usage_file_of);
        let shares = shares::Shares::new(cfg.shares.clone(), usage);
        let authorized = Arc::new(std::sync::RwLock::new(cfg.authorized.clone()));
        let mut board = ServerBoard::new(&cfg, local, counters.clone(), (egress, shares));
        board.authorized = Some(authorized.clone());
        let board = Arc::new(board);
        Ok(Server {
            workers: (0..threads).map(|_| WorkerCounters::default()).collect(),
            sockets,
            local,
            tcp,
            peers: TcpPeers::default(),
            cfg,
            guard,
            counters,
            board,
            authorized,
            keys: Arc::default(),
            steering,
            kernel_steering,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }

    /// What the server did with handshake packets (shared; read it while it runs).
    pub fn counters(&self) -> Arc<HandshakeCounters> {
        self.counters.clone()
    }

    /// What each worker did (one entry per worker; read it while the server runs).
    pub fn workers(&self) -> Arc<[WorkerCounters]> {
        self.workers.clone()
    }

    /// True when the kernel steers every packet to the worker of its session (always with
    /// one worker; with several, when the reuseport BPF program attached).
    pub fn kernel_steering(&self) -> bool {
        self.kernel_steering
    }

    /// Which worker owns which session id.
    pub fn steering(&self) -> Steering {
        self.steering
    }

    /// The server's status (`braid status`): [`ServerBoard::snapshot`] while it runs.
    pub fn status(&self) -> Arc<ServerBoard> {
        self.board.clone()
    }

    /// Reload the authorized keys and shut down while the server runs.
    pub fn control(&self) -> ServerControl {
        ServerControl {
            board: self.board.clone(),
            authorized: self.authorized.clone(),
        }
    }

    /// Packet protection counters of all sessions (key epochs, packets that failed to
    /// open, sessions whose keys expired).
    pub fn key_stats(&self) -> Arc<KeyStats> {
        self.keys.clone()
    }

    /// Serve until the task is dropped (which also stops the worker threads). Worker 0
    /// runs on the caller's runtime, the others on threads of their own.
    pub async fn run(mut self) -> std::io::Result<()> {
        let n = self.sockets.len() / 2;
        let shared_cfg = SharedConfig {
            key: self.cfg.key.clone(),
            unicast: self.cfg.unicast,
            ciphers: self.cfg.ciphers.clone(),
            max_sessions: self.cfg.max_sessions,
            rate: (self.cfg.handshake_rate, self.cfg.handshake_burst),
            load_threshold: self.cfg.load_threshold,
            first_exchange_timeout: self.cfg.first_exchange_timeout,
        };
        // One task looks at the authorized file; the workers read the list it fills.
        let file = self.cfg.authorized_file.clone();
        let _watch = file.map(|f| {
            let keys = AuthorizedKeys::new(self.authorized.clone(), Some(f));
            tcp::AbortOnDrop(tokio::spawn(authorized::watch(keys)))
        });
        let shared = Arc::new(Shared::new(
            shared_cfg,
            self.guard.clone(),
            AuthorizedKeys::new(self.authorized.clone(), None),
            self.counters.clone(),
        ));
        // The state file is written by one task, from a snapshot it takes itself after
        // each change (a worker only bumps the generation: no copy of the guard per
        // handshake).
        let state_tx = self.cfg.state_file.clone().map(|path| {
            let (tx, rx) = watch::channel(0u64);
            tokio::spawn(worker::persist_guard(path, rx, shared.clone()));
            tx
        });
        // The fair-share controller and the quotas' file, on worker 0's runtime.
        let _shares = tcp::AbortOnDrop(tokio::spawn(self.board.shares.clone().run()));
        let (handoff, mut inboxes): (Vec<_>, Vec<_>) =
            (0..n).map(|_| mpsc::channel(worker::HANDOFF_QUEUE)).unzip();
        let _tcp = self.tcp.take().map(|l| {
            let to = if n == 1 {
                handoff[0].clone()
            } else {
                let (tx, rx) = mpsc::channel(worker::HANDOFF_QUEUE);
                tokio::spawn(worker::route_tcp(rx, self.steering, handoff.clone()));
                tx
            };
            tcp::AbortOnDrop(tokio::spawn(tcp::serve(l, self.peers.clone(), to)))
        });
        let common = Arc::new(Common {
            shared,
            session: SessionCtx {
                cfg: self.cfg.clone(),
                board: self.board.clone(),
                keys: self.keys.clone(),
                peers: self.peers.clone(),
                inbound: inbound::Ports::new(self.cfg.forward.clone(), self.cfg.listen.ip()),
                system_resolver: relay::SystemResolver::default(),
                egress: self.board.egress.clone(),
                shares: self.board.shares.clone(),
            },
            steering: self.steering,
            handoff,
            stats: self.workers.clone(),
            state_tx,
        });
        let mut sockets = std::mem::take(&mut self.sockets);
        let control = sockets.split_off(n);
        let mut pairs = sockets.into_iter().zip(control);
        let first = pairs
            .next()
            .ok_or_else(|| std::io::Error::other("no socket"))?;
        let first_inbox = inboxes.remove(0);
        let mut threads = worker::Threads::new();
        for (i, (pair, inbox)) in pairs.zip(inboxes).enumerate() {
            threads.spawn(i + 1, pair, inbox, common.clone())?;
        }
        let w0 = Worker::new(0, first, common)?;
        tokio::select! {
            r = worker::spawn(w0, first_inbox) => r,
            Some(i) = threads.died.recv() => Err(std::io::Error::other(format!("server worker {i} stopped"))),
        }
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
