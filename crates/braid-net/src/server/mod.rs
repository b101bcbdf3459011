//! `braid server`: accepts authenticated agents, one session each, and connects their
//! streams to legacy TCP servers and their datagrams to UDP destinations.
//!
//! Owns: the listening socket, the handshake policy (the order of the cheap and the
//! expensive checks, cookies under load, per-address rate limits, the replay guard and its
//! state file), demultiplexing packets to session tasks by session id, following each
//! path's peer address, the per-session limits and the expiry of sessions that never
//! complete their first exchange. Must not touch: the protocol (the session task and the
//! core do that) and the cryptography (braid-crypto's). It sends nothing to a peer that has
//! not sent a handshake message with a valid mac1, and never more bytes than it received.
//!
//! - [`authorized`]: the authorized agent keys, re-read when their file changes,
//! - [`gate`]: per-address rate limit and the load meter,
//! - [`logs`]: rate-limited logging of drops, with counts,
//! - [`relay`]: streams to TCP targets and UDP flows (bounded return traffic),
//! - [`report`]: the registry of live sessions behind `braid status`,
//! - [`control`]: reloading the authorized keys (SIGHUP) and shutting down (SIGTERM).
//!
//! A handshake packet (type 1) goes through, in order (docs/protocol.md section 16):
//! mac1 (one HMAC; else dropped silently) -> an existing session's retransmission (the
//! cached reply, only to the address that session started from) -> under load, mac2 (else
//! a cookie reply) -> the address's token bucket (else dropped) -> the session limit ->
//! the Noise handshake with the replay guard -> the reply and a new session. A new
//! handshake for a live session, from one of its path addresses, by the agent key that
//! opened it and still authorized, is a key rotation (section 16a): its keys go to the
//! session task ([`RekeyInbox`]) before message 2 goes out.
//!
//! Channels and their bounds: packets to a session task, 4096 (dropped when full, like a
//! full socket buffer); datagrams from the session to its UDP flows, 1024 (dropped when
//! full); UDP return traffic, [`relay::UDP_RETURN_BYTES`] per session (dropped when full);
//! accepted streams, bounded by the session's stream limit; session ends and expiries, one
//! message per session.

mod authorized;
mod control;
mod gate;
mod logs;
mod relay;
mod report;

pub use authorized::AuthorizedKeys;
pub use control::{Reload, ServerControl, CLOSE_ORDERLY};
pub use gate::{HintGate, LoadMeter, RateLimiter};
pub use logs::{DropLog, Dropped};
pub use relay::{connect, UdpBudget, UDP_RETURN_BYTES};
pub use report::{fingerprint, ServerBoard};

use crate::bridge::StreamHandle;
use crate::driver::{AddressHook, Clock, Incoming, PathSender, SessionTask};
use crate::protect::{Aead, KeyStats, RekeyInbox};
use crate::tcp::{self, Outbound, TcpPeers};
use crate::udp::bind_udp;
use braid_core::{Config, Event, PathId, Session};
use braid_crypto::{
    parse_header, Ciphers, CookieChecker, HandshakeError, PacketType, PublicKey, RekeyPolicy,
    ReplayGuard, Responder, StaticKeypair,
};
use bytes::BytesMut;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

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
    /// Transport settings.
    pub transport: Config,
    /// The packet ciphers accepted, the preferred first: of those an agent offers, the
    /// first of this list is used (default: AES-256-GCM first where the CPU has AES
    /// instructions, else ChaCha20-Poly1305 first).
    pub ciphers: Ciphers,
    /// Worker threads (0: one per core).
    pub threads: usize,
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
            // Keepalive as the core's default (25 s, the agent's) and the agent's idle
            // timeout (see `agent::IDLE_TIMEOUT`).
            transport: Config {
                idle_timeout: crate::agent::IDLE_TIMEOUT,
                ..Config::default()
            },
            ciphers: Ciphers::auto(),
            threads: 1,
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

struct Entry {
    tx: mpsc::Sender<Incoming>,
    /// The agent key that opened the session: only it may rotate its keys.
    client: PublicKey,
    /// Where a rotation's keys go.
    inbox: Arc<RekeyInbox>,
    /// The session's path addresses (a rotation must come from one of them).
    addrs: PathAddrs,
    /// Where the agent's newest message 1 came from: only there (or from another of its
    /// path addresses)...
    from: SocketAddr,
    /// ...does a byte-for-byte copy of its header and Noise message (mac2 may differ)...
    request: Vec<u8>,
    /// ...get our cached reply (smaller than the request, so never an amplifier).
    reply: Vec<u8>,
}

/// A running server.
pub struct Server {
    socket: Arc<UdpSocket>,
    /// The TCP listener on the same port, for agents whose network blocks UDP.
    tcp: Option<tokio::net::TcpListener>,
    /// Sends to UDP peers and down TCP connections.
    out: Outbound,
    cfg: ServerConfig,
    guard: ReplayGuard,
    counters: Arc<HandshakeCounters>,
    board: Arc<ServerBoard>,
    authorized: control::Authorized,
    keys: Arc<KeyStats>,
}

/// Each path's peer address of one session.
type PathAddrs = Arc<Mutex<HashMap<PathId, SocketAddr>>>;

impl Server {
    /// Bind the listening socket and load the replay guard's state file (checking that it
    /// can be written).
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
        let socket = Arc::new(bind_udp(cfg.listen, None)?);
        let local = socket.local_addr()?;
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
        info!(listen = %local, tcp = tcp.is_some(), "braid server listening");
        let out = Outbound {
            udp: socket.clone(),
            tcp: TcpPeers::default(),
        };
        let counters: Arc<HandshakeCounters> = Arc::default();
        let board = Arc::new(ServerBoard::new(&cfg, local, counters.clone()));
        let authorized = Arc::new(std::sync::RwLock::new(cfg.authorized.clone()));
        Ok(Server {
            socket,
            tcp,
            out,
            cfg,
            guard,
            counters,
            board,
            authorized,
            keys: Arc::default(),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// What the server did with handshake packets (shared; read it while it runs).
    pub fn counters(&self) -> Arc<HandshakeCounters> {
        self.counters.clone()
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

    /// Serve until the task is dropped.
    pub async fn run(mut self) -> std::io::Result<()> {
        let (tcp_tx, mut tcp_rx) = mpsc::channel::<(BytesMut, SocketAddr)>(4096);
        let _tcp = self.tcp.take().map(|l| {
            crate::tcp::AbortOnDrop(tokio::spawn(tcp::serve(l, self.out.tcp.clone(), tcp_tx)))
        });
        let now_ms = unix_ms();
        let checker =
            CookieChecker::new(&self.cfg.key.public(), now_ms).map_err(std::io::Error::other)?;
        let (state_tx, state_rx) = watch::channel(self.guard.clone());
        if let Some(path) = self.cfg.state_file.clone() {
            tokio::spawn(persist_guard(path, state_rx));
        }
        let mut l = Listener {
            sessions: HashMap::new(),
            guard: self.guard.clone(),
            state_tx,
            checker,
            authorized: AuthorizedKeys::new(
                self.authorized.clone(),
                self.cfg.authorized_file.clone(),
            ),
            limiter: RateLimiter::new(self.cfg.handshake_rate, self.cfg.handshake_burst),
            hints: HintGate::new(),
            load: LoadMeter::new(self.cfg.load_threshold),
            log: DropLog::new(),
            server: &self,
        };
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<u64>();
        let (expire_tx, mut expire_rx) = mpsc::unbounded_channel::<u64>();
        let mut tick = tokio::time::interval(DropLog::PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // GRO: one receive may hold several datagrams of one sender (split below).
        crate::batch::enable_gro(self.socket.as_ref());
        let mut buf = BytesMut::new();
        loop {
            let r = tokio::select! {
                r = crate::batch::recv_async(&self.socket, &mut buf) => match r {
                    Ok(x) => x,
                    Err(_) => {
                        buf.clear();
                        continue;
                    }
                },
                Some((pkt, from)) = tcp_rx.recv() => {
                    l.datagram(&pkt, from, &done_tx, &expire_tx);
                    continue;
                }
                Some(id) = done_rx.recv() => {
                    if l.sessions.remove(&id).is_some() {
                        info!(session = format_args!("{id:016x}"), active = l.sessions.len(), "session ended");
                    }
                    continue;
                }
                Some(id) = expire_rx.recv() => {
                    if l.sessions.remove(&id).is_some() {
                        HandshakeCounters::bump(&self.counters.unfinished);
                        l.log.count(Dropped::Unfinished, None, || format!(
                            "session {id:016x} sent no authenticated packet within {:?} of its handshake",
                            self.cfg.first_exchange_timeout
                        ));
                    }
                    continue;
                }
                _ = tick.tick() => {
                    let now = std::time::Instant::now();
                    l.log.flush(now);
                    l.limiter.gc(now);
                    l.hints.gc(now);
                    self.counters.log_lines.store(l.log.lines(), Ordering::Relaxed);
                    continue;
                }
            };
            for pkt in crate::batch::split(&mut buf, r.segment_size) {
                l.datagram(&pkt, r.from, &done_tx, &expire_tx);
            }
            self.counters
                .log_lines
                .store(l.log.lines(), Ordering::Relaxed);
        }
    }
}

/// The listening loop's state.
struct Listener<'a> {
    sessions: HashMap<u64, Entry>,
    guard: ReplayGuard,
    state_tx: watch::Sender<ReplayGuard>,
    checker: CookieChecker,
    authorized: AuthorizedKeys,
    limiter: RateLimiter,
    hints: HintGate,
    load: LoadMeter,
    log: DropLog,
    server: &'a Server,
}

impl Listener<'_> {
    fn datagram(
        &mut self,
        pkt: &[u8],
        from: SocketAddr,
        done: &mpsc::UnboundedSender<u64>,
        expire: &mpsc::UnboundedSender<u64>,
    ) {
        let Ok(h) = parse_header(pkt) else {
            self.log.count(Dropped::NotBraid, Some(from), || {
                format!("{} bytes", pkt.len())
            });
            return;
        };
        match h.ptype {
            PacketType::Transport => match self.sessions.get(&h.session_id) {
                Some(e) => {
                    let _ = e.tx.try_send(Incoming {
                        from,
                        data: BytesMut::from(pkt),
                    });
                }
                None => {
                    self.log.count(Dropped::UnknownSession, Some(from), || {
                        format!("session {:016x}", h.session_id)
                    });
                    // Perhaps a session of ours before a restart: tell the agent, so that it
                    // shakes hands again now rather than after a silence (it only takes
                    // this as a hint). Never more bytes than the packet had.
                    let now = std::time::Instant::now();
                    if pkt.len() >= h.header_len + braid_crypto::TAG_LEN
                        && self.hints.allow(from.ip(), now)
                    {
                        let hint = braid_crypto::session_unknown_hint(&h);
                        let _ = self.server.socket.try_send_to(&hint, from);
                        HandshakeCounters::bump(&self.server.counters.hints);
                    }
                }
            },
            PacketType::Cookie | PacketType::SessionUnknown | PacketType::SessionLimit => {
                self.log.count(Dropped::NotBraid, Some(from), || {
                    "a server-to-client packet sent to the server".into()
                })
            }
            PacketType::Handshake => self.handshake(pkt, from, &h, done, expire),
        }
    }

    fn handshake(
        &mut self,
        pkt: &[u8],
        from: SocketAddr,
        h: &braid_crypto::HeaderInfo,
        done: &mpsc::UnboundedSender<u64>,
        expire: &mpsc::UnboundedSender<u64>,
    ) {
        let (sid, path) = (h.session_id, h.path_id);
        let s = self.server;
        let c = &s.counters;
        if !self.checker.check_mac1(pkt) {
            HandshakeCounters::bump(&c.bad_mac1);
            self.log.count(Dropped::BadMac1, Some(from), || {
                format!("{} bytes", pkt.len())
            });
            return;
        }
        let now = std::time::Instant::now();
        let now_ms = unix_ms();
        self.load.record(now);
        let body = &pkt[..pkt.len() - braid_crypto::cookie::MAC_LEN];
        if let Some(e) = self.sessions.get(&sid) {
            let known =
                e.from == from || e.addrs.lock().is_ok_and(|m| m.values().any(|a| *a == from));
            if known && e.request == body {
                // Our reply was lost and the agent sent its message 1 again: the same
                // reply, to one of its addresses only, within its address's budget.
                if self.limiter.allow(from.ip(), now) {
                    let _ = s.out.send_to(&e.reply, from);
                    HandshakeCounters::bump(&c.replies);
                }
            } else if known {
                self.rotate(pkt, body, from, sid, now, now_ms);
            } else {
                self.log.count(Dropped::ExistingSession, Some(from), || {
                    format!("session {sid:016x}")
                });
            }
            return;
        }
        // One token of the address's budget pays for whatever comes next: a cookie reply
        // or the Diffie-Hellman. A flood from one address costs one HMAC and one lookup
        // per packet beyond it.
        if !self.limiter.allow(from.ip(), now) {
            HandshakeCounters::bump(&c.rate_limited);
            self.log.count(Dropped::RateLimited, Some(from), || {
                format!(
                    "more than {} a second (burst {})",
                    s.cfg.handshake_rate, s.cfg.handshake_burst
                )
            });
            return;
        }
        if self.load.under_load(now) && !self.checker.check_mac2(pkt, from, now_ms) {
            if let Ok(r) = self.checker.cookie_reply(pkt, from, now_ms) {
                let _ = s.out.send_to(&r, from);
                HandshakeCounters::bump(&c.cookies);
            }
            self.log
                .count(Dropped::CookieDemanded, Some(from), String::new);
            return;
        }
        if self.sessions.len() >= s.cfg.max_sessions {
            // A clear refusal (12 bytes, paid from the address's budget, after the cookie
            // under load), so that the agent can say why instead of timing out.
            let _ = s
                .socket
                .try_send_to(&braid_crypto::session_limit_refusal(h), from);
            HandshakeCounters::bump(&c.full);
            self.log.count(Dropped::SessionLimit, Some(from), || {
                format!("limit {}", s.cfg.max_sessions)
            });
            return;
        }
        // One list: what SIGHUP reloaded or the file re-read last (`authorized`).
        let allowed: Vec<PublicKey> = self.authorized.get(now);
        let responder = Responder {
            key: &s.cfg.key,
            authorized: &allowed,
            max_skew_ms: MAX_SKEW_MS,
            unicast: s.cfg.unicast,
            ciphers: &s.cfg.ciphers,
        };
        match responder.respond(&mut self.guard, pkt, now_ms) {
            Ok((client, keys, reply)) => {
                info!(%from, client = %client.to_base64(), session = format_args!("{sid:016x}"), cipher = %keys.cipher(), "agent authenticated");
                HandshakeCounters::bump(&c.accepted);
                self.state_tx.send_replace(self.guard.clone());
                let _ = s.out.send_to(&reply, from);
                HandshakeCounters::bump(&c.replies);
                let (tx, addrs, inbox) = s.spawn_session(
                    sid,
                    path,
                    from,
                    (client, keys),
                    done.clone(),
                    expire.clone(),
                );
                self.sessions.insert(
                    sid,
                    Entry {
                        tx,
                        client,
                        inbox,
                        addrs,
                        from,
                        request: body.to_vec(),
                        reply,
                    },
                );
            }
            Err(e) => {
                HandshakeCounters::bump(&c.refused);
                self.log.count(Dropped::Refused, Some(from), || refusal(&e));
            }
        }
    }
}

impl Listener<'_> {
    /// A new handshake for live session `sid` from one of its addresses: a key rotation.
    /// It pays like a first handshake (the address's budget, a cookie under load, the
    /// replay guard) and must come from the agent key that opened the session, still in
    /// the authorized file; then the new keys go to the session task and message 2 goes
    /// back. A refused rotation changes nothing: the session keeps its keys until they
    /// expire.
    fn rotate(
        &mut self,
        pkt: &[u8],
        body: &[u8],
        from: SocketAddr,
        sid: u64,
        now: std::time::Instant,
        now_ms: u64,
    ) {
        let s = self.server;
        let c = &s.counters;
        if !self.limiter.allow(from.ip(), now) {
            HandshakeCounters::bump(&c.rate_limited);
            self.log.count(Dropped::RateLimited, Some(from), || {
                format!("a key rotation of session {sid:016x}")
            });
            return;
        }
        if self.load.under_load(now) && !self.checker.check_mac2(pkt, from, now_ms) {
            if let Ok(r) = self.checker.cookie_reply(pkt, from, now_ms) {
                let _ = s.socket.try_send_to(&r, from);
                HandshakeCounters::bump(&c.cookies);
            }
            self.log
                .count(Dropped::CookieDemanded, Some(from), String::new);
            return;
        }
        let Some(e) = self.sessions.get_mut(&sid) else {
            return;
        };
        let responder = Responder {
            key: &s.cfg.key,
            authorized: &self.authorized.get(now),
            max_skew_ms: MAX_SKEW_MS,
            unicast: None,
            ciphers: &s.cfg.ciphers,
        };
        let refused = match responder.respond(&mut self.guard, pkt, now_ms) {
            Ok((client, keys, reply)) if client == e.client => {
                debug!(%from, session = format_args!("{sid:016x}"), "session keys rotated");
                self.state_tx.send_replace(self.guard.clone());
                e.inbox.put(keys);
                let _ = s.socket.try_send_to(&reply, from);
                HandshakeCounters::bump(&c.replies);
                HandshakeCounters::bump(&c.rotations);
                e.from = from;
                e.request = body.to_vec();
                e.reply = reply;
                return;
            }
            Ok((client, _, _)) => format!(
                "session {sid:016x} belongs to another agent key than {}",
                client.to_base64()
            ),
            Err(e) => format!("session {sid:016x}: {e}"),
        };
        HandshakeCounters::bump(&c.rotations_refused);
        self.log
            .count(Dropped::RotationRefused, Some(from), || refused);
    }
}

/// The log detail of a refused handshake.
fn refusal(e: &HandshakeError) -> String {
    e.to_string()
}

/// Writes the replay guard to its state file whenever it changed (coalescing changes that
/// come faster than the disk).
async fn persist_guard(path: PathBuf, mut rx: watch::Receiver<ReplayGuard>) {
    let mut failures = 0u64;
    while rx.changed().await.is_ok() {
        let g = rx.borrow_and_update().clone();
        let p = path.clone();
        match tokio::task::spawn_blocking(move || g.save(&p)).await {
            Ok(Ok(())) => failures = 0,
            Ok(Err(e)) => {
                failures += 1;
                if failures == 1 || failures.is_power_of_two() {
                    warn!("{e} (failure {failures}); a restarted server could accept a replayed handshake of the last minutes once");
                }
            }
            Err(_) => return,
        }
    }
}

impl Server {
    fn spawn_session(
        &self,
        id: u64,
        first_path: PathId,
        from: SocketAddr,
        (client, keys): (PublicKey, braid_crypto::SessionKeys),
        done: mpsc::UnboundedSender<u64>,
        expire: mpsc::UnboundedSender<u64>,
    ) -> (mpsc::Sender<Incoming>, PathAddrs, Arc<RekeyInbox>) {
        let inbox = Arc::new(RekeyInbox::default());
        let mut tcfg = self.cfg.transport.clone();
        // The seed of the session's challenge tokens: unguessable, like everything else.
        tcfg.seed = braid_crypto::random::random_u64().unwrap_or(tcfg.seed ^ id);
        tcfg.max_streams = self.cfg.max_streams;
        tcfg.session_window = self.cfg.max_buffered;
        let clock = Clock::new();
        let session = Session::accept(tcfg, clock.now(), id);
        let (in_tx, in_rx) = mpsc::channel(4096);
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
        let (acc_tx, mut acc_rx) = mpsc::unbounded_channel::<StreamHandle>();
        let (dg_tx, dg_rx) = mpsc::channel::<bytes::Bytes>(1024);
        // Watch for the first exchange; then stop listening (later events are discarded).
        let (ev_tx, mut ev_rx) = mpsc::unbounded_channel::<Event>();
        let first = self.cfg.first_exchange_timeout;
        tokio::spawn(async move {
            let established = tokio::time::timeout(first, async {
                while let Some(ev) = ev_rx.recv().await {
                    if matches!(ev, Event::Established) {
                        return true;
                    }
                }
                false
            })
            .await;
            if !matches!(established, Ok(true)) {
                let _ = expire.send(id);
            }
        });
        let addrs: PathAddrs = Arc::new(Mutex::new(HashMap::new()));
        addrs.lock().map(|mut m| m.insert(first_path, from)).ok();
        let hook_addrs = addrs.clone();
        let tcp = self.out.tcp.clone();
        let hook: AddressHook = Box::new(move |s: &mut Session, now, path, from| {
            let Ok(mut m) = hook_addrs.lock() else {
                return false;
            };
            match m.get(&path) {
                Some(a) if *a == from => {}
                Some(a) => {
                    info!(path, old = %a, new = %from, "path moved; validating the new address");
                    m.insert(path, from);
                    s.path_address_changed(now, path);
                    s.set_path_reliable(now, path, tcp.contains(&from));
                }
                None => {
                    if m.len() >= 16 {
                        return false;
                    }
                    m.insert(path, from);
                    s.set_path_reliable(now, path, tcp.contains(&from));
                }
            }
            true
        });
        let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let udp_flows = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        self.board.insert(
            id,
            report::Live {
                key: client,
                started: std::time::Instant::now(),
                cmd: cmd_tx.clone(),
                open_streams: open.clone(),
                udp_flows: udp_flows.clone(),
                addrs: addrs.clone(),
            },
        );
        let sender = SharedSocketSender {
            out: self.out.clone(),
            addrs: addrs.clone(),
        };
        let task = SessionTask {
            session,
            protection: Aead::server(keys, self.cfg.rekey, inbox.clone(), self.keys.clone()),
            sender,
            incoming: in_rx,
            cmd_rx,
            cmd_tx: cmd_tx.clone(),
            accepted: Some(acc_tx),
            datagrams: Some(dg_tx),
            on_packet: Some(hook),
            events: Some(ev_tx),
            clock,
        };
        let connect_timeout = self.cfg.connect_timeout;
        let idle = self.cfg.stream_idle_timeout;
        let max_streams = self.cfg.max_streams as usize;
        tokio::spawn(async move {
            while let Some(h) = acc_rx.recv().await {
                let n = open.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                if n == max_streams {
                    // The session's MAX_STREAMS keeps the agent from opening more.
                    warn!(
                        session = format_args!("{id:016x}"),
                        limit = max_streams,
                        "stream limit reached: this agent's new connections are refused until one closes"
                    );
                }
                let open = open.clone();
                tokio::spawn(async move {
                    relay::serve_stream(h, connect_timeout, idle).await;
                    open.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                });
            }
        });
        let resolver = self.cfg.resolver.or_else(relay::system_resolver);
        let limits = (self.cfg.max_udp_flows, resolver);
        tokio::spawn(relay::udp_flows(dg_rx, cmd_tx, limits, id, udp_flows));
        let board = self.board.clone();
        tokio::spawn(async move {
            if let Some(e) = task.run().await {
                info!(session = format_args!("{id:016x}"), "session ended: {e}");
            }
            board.remove(id);
            let _ = done.send(id);
        });
        (in_tx, addrs, inbox)
    }
}

/// Sends on the shared listening socket (or down a TCP connection) to each path's current
/// peer address.
struct SharedSocketSender {
    out: Outbound,
    addrs: PathAddrs,
}

impl PathSender for SharedSocketSender {
    fn send(&mut self, path: PathId, packet: &[u8]) {
        let to = self.addrs.lock().ok().and_then(|m| m.get(&path).copied());
        if let Some(to) = to {
            if let Err(e) = self.out.send_to(packet, to) {
                debug!(path, "send failed: {e}");
            }
        }
    }

    fn send_batch(&mut self, path: PathId, packets: &[u8], segment_size: usize) {
        let to = self.addrs.lock().ok().and_then(|m| m.get(&path).copied());
        let Some(to) = to else { return };
        let r = if self.out.tcp.contains(&to) {
            (packets.chunks(segment_size.max(1))).try_for_each(|p| self.out.send_to(p, to))
        } else {
            crate::batch::send(self.out.udp.as_ref(), to, packets, segment_size)
        };
        if let Err(e) = r {
            debug!(path, "send failed: {e}");
        }
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
