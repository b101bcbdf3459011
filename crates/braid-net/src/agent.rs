//! `braid agent`: the multi-homed side. It keeps one session to the server over every path
//! and offers SOCKS5 and HTTP CONNECT ports to unmodified applications; each proxied TCP
//! connection is one stream of the session, each SOCKS5 UDP association one datagram flow.
//!
//! Owns: the per-path sockets, the handshake with the server, re-establishing the session
//! when it ends, and the proxy front ends. Must not touch: the protocol (the session task
//! and the core) or the SOCKS/HTTP wire details (braid-proxy).

use crate::bridge::{Cmd, StreamMsg, StreamReader, StreamWriter};
use crate::driver::{Clock, Incoming, PathSender, SessionTask};
use crate::protect::Aead;
use crate::udp::{bind_path, PathBind};
use braid_core::{Config, PathId, Session};
use braid_crypto::{parse_header, ClientHandshake, PacketType, PublicKey, StaticKeypair};
use braid_proxy::socks5::{self, SocksRequest};
use braid_proxy::target::{self, ReplyCode};
use braid_proxy::{datagram, AuthPolicy, HttpLimits, TargetAddr};
use bytes::{Bytes, BytesMut};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{debug, info, warn};

/// Agent settings.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The server's UDP address.
    pub server: SocketAddr,
    /// The server's public key (pinned).
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
    /// How long opening a stream (server connect included) may take.
    pub open_timeout: Duration,
    /// Transport settings (scheduler, congestion control, ...).
    pub transport: Config,
}

/// One path of the agent.
#[derive(Debug, Clone)]
pub struct AgentPath {
    /// A name for logs.
    pub name: String,
    /// How its socket is bound.
    pub bind: PathBind,
    /// Send to this address instead of the server's (a relay or link emulator in front
    /// of the server); `None` in normal use.
    pub via: Option<SocketAddr>,
}

impl AgentPath {
    fn peer(&self, server: SocketAddr) -> SocketAddr {
        self.via.unwrap_or(server)
    }
}

/// What the front ends need from the current session.
#[derive(Clone)]
struct Shared {
    session: watch::Receiver<Option<mpsc::UnboundedSender<Cmd>>>,
    flows: Arc<Mutex<HashMap<u32, mpsc::Sender<Bytes>>>>,
    next_flow: Arc<AtomicU32>,
    cfg: Arc<AgentConfig>,
}

/// A running agent.
pub struct Agent {
    /// Bound SOCKS5 address.
    pub socks: Option<SocketAddr>,
    /// Bound HTTP CONNECT address.
    pub http: Option<SocketAddr>,
    established: watch::Receiver<Option<mpsc::UnboundedSender<Cmd>>>,
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
    /// Bind the proxy ports and start keeping a session to the server.
    pub async fn start(cfg: AgentConfig) -> std::io::Result<Agent> {
        if cfg.paths.is_empty() || cfg.paths.len() > 8 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("an agent needs 1 to 8 paths, got {}", cfg.paths.len()),
            ));
        }
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
            tasks.push(tokio::spawn(accept_loop(l, shared.clone(), Front::Socks)));
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
            tasks.push(tokio::spawn(accept_loop(l, shared.clone(), Front::Http)));
        }
        tasks.push(tokio::spawn(keep_session(cfg, tx, shared)));
        Ok(Agent {
            socks,
            http,
            established: rx,
            tasks,
        })
    }

    /// Wait until a session to the server is up (or `timeout` passed).
    pub async fn wait_established(&mut self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, self.established.wait_for(|s| s.is_some()))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

/// Establish, run, and re-establish the session for as long as the agent runs.
async fn keep_session(
    cfg: Arc<AgentConfig>,
    tx: watch::Sender<Option<mpsc::UnboundedSender<Cmd>>>,
    shared: Shared,
) {
    let mut backoff = Duration::from_millis(500);
    loop {
        match run_session(&cfg, &tx, &shared).await {
            Ok(reason) => {
                warn!("session ended ({reason}); reconnecting");
                backoff = Duration::from_millis(500);
            }
            Err(e) => {
                warn!("cannot establish a session: {e}; retrying in {backoff:?}");
            }
        }
        let _ = tx.send(None);
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}

fn new_session_id() -> u64 {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let c = COUNTER.fetch_add(1, Ordering::Relaxed) as u64;
    braid_core::rng::splitmix64(t ^ (std::process::id() as u64) << 32 ^ c.rotate_left(48))
}

/// Per-path sockets, each sending to its peer (the server, or a relay in front of it).
struct PathSockets {
    sockets: Vec<(Arc<UdpSocket>, SocketAddr)>,
}

impl PathSender for PathSockets {
    fn send(&mut self, path: PathId, packet: &[u8]) {
        if let Some((s, to)) = self.sockets.get(path as usize) {
            if let Err(e) = s.try_send_to(packet, *to) {
                debug!(path, "send failed: {e}");
            }
        }
    }
}

async fn run_session(
    cfg: &Arc<AgentConfig>,
    tx: &watch::Sender<Option<mpsc::UnboundedSender<Cmd>>>,
    shared: &Shared,
) -> Result<String, String> {
    let mut sockets = Vec::new();
    for p in &cfg.paths {
        let s = bind_path(&p.bind, cfg.server).map_err(|e| format!("path {}: {e}", p.name))?;
        sockets.push((Arc::new(s), p.peer(cfg.server)));
    }
    // Handshake on the first path.
    let sid = new_session_id();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let (mut hs, msg1) = ClientHandshake::new(&cfg.key, &cfg.server_pub, sid, 0, now_ms)
        .map_err(|e| format!("handshake: {e}"))?;
    let (s0, peer0) = sockets[0].clone();
    let mut buf = vec![0u8; 65536];
    let mut keys = None;
    'attempts: for attempt in 0..6u32 {
        s0.send_to(&msg1, peer0)
            .await
            .map_err(|e| format!("sending to {peer0} on path {}: {e}", cfg.paths[0].name))?;
        let wait = Duration::from_millis(500) * (1 << attempt.min(3));
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let r = tokio::time::timeout_at(deadline, s0.recv_from(&mut buf)).await;
            let Ok(Ok((n, from))) = r else {
                continue 'attempts;
            };
            if from != peer0 {
                continue;
            }
            let pkt = &buf[..n];
            match parse_header(pkt) {
                Ok(h) if h.ptype == PacketType::Handshake && h.session_id == sid => {}
                _ => continue,
            }
            match hs.finish(pkt) {
                Ok(k) => {
                    keys = Some(k);
                    break 'attempts;
                }
                Err(e) => debug!("ignored a bad handshake reply: {e}"),
            }
        }
    }
    let keys = keys.ok_or_else(|| {
        format!(
            "no handshake answer from {} on path {}: check the address, that `braid server` runs there, \
             that its key matches --server-pub and that this agent's key is in its authorized file",
            cfg.server, cfg.paths[0].name
        )
    })?;
    info!(session = format_args!("{sid:016x}"), server = %cfg.server, paths = cfg.paths.len(), "session established");

    let clock = Clock::new();
    let mut session = Session::connect(cfg.transport.clone(), clock.now(), sid, 0);
    for i in 1..cfg.paths.len() {
        session
            .add_path(clock.now(), i as PathId)
            .map_err(|e| format!("path {}: {e}", cfg.paths[i].name))?;
    }
    let (in_tx, in_rx) = mpsc::channel::<Incoming>(4096);
    let mut readers = Vec::new();
    for (s, peer) in &sockets {
        let (s, in_tx, server) = (s.clone(), in_tx.clone(), *peer);
        readers.push(tokio::spawn(async move {
            let mut buf = vec![0u8; 65536];
            while let Ok((n, from)) = s.recv_from(&mut buf).await {
                if from == server
                    && in_tx
                        .send(Incoming {
                            from,
                            data: BytesMut::from(&buf[..n]),
                        })
                        .await
                        .is_err()
                {
                    return;
                }
            }
        }));
    }
    let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
    let (dg_tx, mut dg_rx) = mpsc::channel::<Bytes>(1024);
    let flows = shared.flows.clone();
    let dispatcher = tokio::spawn(async move {
        while let Some(d) = dg_rx.recv().await {
            let Ok(p) = datagram::parse(&d) else { continue };
            let tx = flows.lock().ok().and_then(|m| m.get(&p.flow_id).cloned());
            if let Some(tx) = tx {
                let _ = tx.try_send(d);
            }
        }
    });
    let task = SessionTask {
        session,
        protection: Aead::new(keys),
        sender: PathSockets {
            sockets: sockets.clone(),
        },
        incoming: in_rx,
        cmd_rx,
        cmd_tx: cmd_tx.clone(),
        accepted: None,
        datagrams: Some(dg_tx),
        on_packet: None,
        events: None,
        clock,
    };
    let _ = tx.send(Some(cmd_tx));
    let reason = task.run().await;
    for r in readers {
        r.abort();
    }
    dispatcher.abort();
    Ok(reason.map_or_else(|| "closed".to_string(), |e| e.to_string()))
}

#[derive(Clone, Copy)]
enum Front {
    Socks,
    Http,
}

async fn accept_loop(l: TcpListener, shared: Shared, front: Front) {
    loop {
        let Ok((tcp, peer)) = l.accept().await else {
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let r = match front {
                Front::Socks => socks_conn(tcp, &shared).await,
                Front::Http => http_conn(tcp, &shared).await,
            };
            if let Err(e) = r {
                info!(%peer, "proxy connection ended: {e}");
            }
        });
    }
}

/// Open a stream to `target` through the server; returns the stream and any bytes that
/// came after the server's answer.
async fn open(
    shared: &Shared,
    target: &TargetAddr,
) -> Result<(StreamReader, StreamWriter, Bytes), ReplyCode> {
    let cmd = shared
        .session
        .borrow()
        .clone()
        .ok_or(ReplyCode::NetworkUnreachable)?;
    let (tx, rx) = oneshot::channel();
    cmd.send(Cmd::Open(tx))
        .map_err(|_| ReplyCode::NetworkUnreachable)?;
    let h = rx.await.map_err(|_| ReplyCode::NetworkUnreachable)?.map_err(|e| {
        warn!("cannot open a stream to {target}: {e} (the server's limit on connections per agent)");
        ReplyCode::GeneralFailure
    })?;
    let (mut reader, writer) = (h.reader, h.writer);
    let mut req = Vec::new();
    target::emit_request(target, &mut req).map_err(|_| ReplyCode::AddressTypeNotSupported)?;
    writer
        .write(Bytes::from(req))
        .await
        .map_err(|_| ReplyCode::GeneralFailure)?;
    let answer = async {
        let mut head = BytesMut::new();
        loop {
            match target::parse_reply(&head) {
                Ok((code, used)) if code.is_success() => return Ok(head.split_off(used).freeze()),
                Ok((code, _)) => return Err(code),
                Err(braid_proxy::ParseError::Incomplete) => {}
                Err(_) => return Err(ReplyCode::GeneralFailure),
            }
            match reader.read().await {
                Some(StreamMsg::Data(b)) => head.extend_from_slice(&b),
                _ => return Err(ReplyCode::GeneralFailure),
            }
        }
    };
    match tokio::time::timeout(shared.cfg.open_timeout, answer).await {
        Ok(Ok(early)) => Ok((reader, writer, early)),
        Ok(Err(code)) => {
            writer.reset(0);
            Err(code)
        }
        Err(_) => {
            writer.reset(0);
            Err(ReplyCode::TtlExpired)
        }
    }
}

async fn socks_conn(mut tcp: TcpStream, shared: &Shared) -> Result<(), String> {
    let req = socks5::accept(&mut tcp, &shared.cfg.socks_auth)
        .await
        .map_err(|e| e.to_string())?;
    let bound = tcp.local_addr().map_err(|e| e.to_string())?;
    match req {
        SocksRequest::Connect(target) => match open(shared, &target).await {
            Ok((reader, writer, early)) => {
                socks5::reply(&mut tcp, ReplyCode::Succeeded, bound)
                    .await
                    .map_err(|e| e.to_string())?;
                crate::splice::splice(tcp, reader, writer, early).await;
                Ok(())
            }
            Err(code) => {
                let _ = socks5::reply(&mut tcp, code, bound).await;
                Err(format!("CONNECT {target}: {code}"))
            }
        },
        SocksRequest::UdpAssociate(_) => udp_associate(tcp, shared, bound).await,
    }
}

async fn http_conn(mut tcp: TcpStream, shared: &Shared) -> Result<(), String> {
    let target = braid_proxy::http::accept_connect(&mut tcp, &shared.cfg.http_limits)
        .await
        .map_err(|e| e.to_string())?;
    match open(shared, &target).await {
        Ok((reader, writer, early)) => {
            braid_proxy::http::respond_ok(&mut tcp)
                .await
                .map_err(|e| e.to_string())?;
            crate::splice::splice(tcp, reader, writer, early).await;
            Ok(())
        }
        Err(code) => {
            let _ = braid_proxy::http::respond_error(&mut tcp, code).await;
            Err(format!("CONNECT {target}: {code}"))
        }
    }
}

/// SOCKS5 UDP ASSOCIATE: a relay socket for the client, one datagram flow of the session;
/// it lasts as long as the client's TCP control connection.
async fn udp_associate(
    mut tcp: TcpStream,
    shared: &Shared,
    bound: SocketAddr,
) -> Result<(), String> {
    let relay = UdpSocket::bind(SocketAddr::new(bound.ip(), 0))
        .await
        .map_err(|e| e.to_string())?;
    let relay_addr = relay.local_addr().map_err(|e| e.to_string())?;
    let flow = shared.next_flow.fetch_add(1, Ordering::Relaxed);
    let (tx, mut rx) = mpsc::channel::<Bytes>(1024);
    if let Ok(mut m) = shared.flows.lock() {
        m.insert(flow, tx);
    }
    socks5::reply(&mut tcp, ReplyCode::Succeeded, relay_addr)
        .await
        .map_err(|e| e.to_string())?;
    let mut client: Option<SocketAddr> = None;
    let mut buf = vec![0u8; 65536];
    let mut ctl = [0u8; 64];
    let result = loop {
        tokio::select! {
            r = tcp.read(&mut ctl) => match r {
                Ok(0) | Err(_) => break Ok(()),
                Ok(_) => {}
            },
            r = relay.recv_from(&mut buf) => {
                let Ok((n, from)) = r else { break Err("relay socket failed".to_string()) };
                // Only the client that asked (same IP as its control connection) may use it.
                if tcp.peer_addr().map(|p| p.ip()).ok() != Some(from.ip()) {
                    continue;
                }
                client = Some(from);
                let Ok(p) = socks5::parse_udp(&buf[..n]) else {
                    debug!("dropped a malformed or fragmented SOCKS5 UDP datagram");
                    continue;
                };
                let mut out = Vec::with_capacity(n + 8);
                if datagram::emit(flow, &p.addr.to_target_addr(), p.payload, &mut out).is_ok() {
                    if let Some(cmd) = shared.session.borrow().clone() {
                        let _ = cmd.send(Cmd::Datagram(Bytes::from(out)));
                    }
                }
            }
            Some(d) = rx.recv() => {
                let (Some(c), Ok(p)) = (client, datagram::parse(&d)) else { continue };
                let mut out = Vec::with_capacity(d.len() + 8);
                if socks5::emit_udp(&p.addr.to_target_addr(), p.payload, &mut out).is_ok() {
                    let _ = relay.send_to(&out, c).await;
                }
            }
        }
    };
    if let Ok(mut m) = shared.flows.lock() {
        m.remove(&flow);
    }
    result
}
