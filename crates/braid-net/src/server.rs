//! `braid server`: accepts authenticated agents, one session each, and connects their
//! streams to legacy TCP servers and their datagrams to UDP destinations.
//!
//! Owns: the listening socket, the handshake (Noise IK through braid-crypto, only keys in
//! the authorized list), demultiplexing packets to session tasks by session id, following
//! each path's peer address, and the per-session limits. Must not touch: the protocol (the
//! session task and the core do that). It sends nothing to a peer that has not completed a
//! valid handshake message.

use crate::bridge::{Cmd, StreamHandle, StreamMsg};
use crate::driver::{AddressHook, Clock, Incoming, PathSender, SessionTask};
use crate::protect::Aead;
use crate::udp::{bind_udp, send_datagram};
use braid_core::{Config, PathId, Session};
use braid_crypto::{
    parse_header, PacketType, PublicKey, ReplayGuard, ServerHandshake, StaticKeypair,
};
use braid_proxy::target::{self, ReplyCode};
use braid_proxy::{datagram, TargetAddr};
use bytes::{Bytes, BytesMut};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpStream, UdpSocket};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// UDP address to listen on.
    pub listen: SocketAddr,
    /// The server's static key.
    pub key: Arc<StaticKeypair>,
    /// Agent keys allowed to connect.
    pub authorized: Vec<PublicKey>,
    /// Most sessions at once.
    pub max_sessions: usize,
    /// Most streams (proxied connections) per session at once.
    pub max_streams: u64,
    /// Most bytes buffered per session (its receive window).
    pub max_buffered: u64,
    /// Most UDP flows per session.
    pub max_udp_flows: usize,
    /// How long a TCP connect to a target may take.
    pub connect_timeout: Duration,
    /// Transport settings.
    pub transport: Config,
}

impl ServerConfig {
    /// Defaults for everything but the listen address and keys.
    pub fn new(listen: SocketAddr, key: StaticKeypair, authorized: Vec<PublicKey>) -> Self {
        ServerConfig {
            listen,
            key: Arc::new(key),
            authorized,
            max_sessions: 1024,
            max_streams: 1024,
            max_buffered: 64 << 20,
            max_udp_flows: 256,
            connect_timeout: Duration::from_secs(10),
            // Keepalive and idle timeout as the agent's (see `agent::KEEPALIVE`): the
            // server's own keepalives would otherwise wake an idle cellular radio every 5 s.
            transport: Config {
                keepalive: crate::agent::KEEPALIVE,
                idle_timeout: crate::agent::IDLE_TIMEOUT,
                ..Config::default()
            },
        }
    }
}

struct Entry {
    tx: mpsc::Sender<Incoming>,
    /// The agent's message 1, byte for byte: only an identical retransmission gets...
    request: Vec<u8>,
    /// ...our cached reply (smaller than the request, so never an amplifier).
    reply: Vec<u8>,
}

/// A running server.
pub struct Server {
    socket: Arc<UdpSocket>,
    cfg: ServerConfig,
}

impl Server {
    /// Bind the listening socket.
    pub async fn bind(cfg: ServerConfig) -> std::io::Result<Server> {
        let socket = Arc::new(bind_udp(cfg.listen, None)?);
        info!(listen = %socket.local_addr()?, "braid server listening");
        Ok(Server { socket, cfg })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Serve until the task is dropped.
    pub async fn run(self) -> std::io::Result<()> {
        let mut sessions: HashMap<u64, Entry> = HashMap::new();
        let mut guard = ReplayGuard::new();
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<u64>();
        let mut buf = vec![0u8; 65536];
        loop {
            let (n, from) = tokio::select! {
                r = self.socket.recv_from(&mut buf) => match r {
                    Ok(x) => x,
                    Err(e) => {
                        debug!("receive error: {e}");
                        continue;
                    }
                },
                Some(id) = done_rx.recv() => {
                    sessions.remove(&id);
                    info!(session = format_args!("{id:016x}"), active = sessions.len(), "session ended");
                    continue;
                }
            };
            let pkt = &buf[..n];
            let Ok(h) = parse_header(pkt) else {
                debug!(%from, len = n, "dropped a datagram that is not a braid packet");
                continue;
            };
            match h.ptype {
                PacketType::Transport => match sessions.get(&h.session_id) {
                    Some(e) => {
                        let _ = e.tx.try_send(Incoming {
                            from,
                            data: BytesMut::from(pkt),
                        });
                    }
                    None => debug!(%from, "dropped a packet for an unknown session"),
                },
                PacketType::Handshake => {
                    if let Some(e) = sessions.get(&h.session_id) {
                        // Our reply was lost and the agent sent the very same message 1:
                        // send the same reply again. Anything else is dropped.
                        if e.request == pkt {
                            let _ = self.socket.try_send_to(&e.reply, from);
                        } else {
                            debug!(%from, "dropped a handshake for a session that exists");
                        }
                        continue;
                    }
                    if sessions.len() >= self.cfg.max_sessions {
                        warn!(%from, limit = self.cfg.max_sessions, "session limit reached; handshake refused");
                        continue;
                    }
                    let now_ms = unix_ms();
                    match ServerHandshake::respond(
                        &self.cfg.key,
                        &self.cfg.authorized,
                        &mut guard,
                        pkt,
                        now_ms,
                        120_000,
                    ) {
                        Ok((client, keys, reply)) => {
                            info!(%from, client = %client.to_base64(), session = format_args!("{:016x}", h.session_id), "agent authenticated");
                            let _ = self.socket.try_send_to(&reply, from);
                            let tx = self.spawn_session(
                                h.session_id,
                                h.path_id,
                                from,
                                keys,
                                done_tx.clone(),
                            );
                            sessions.insert(
                                h.session_id,
                                Entry {
                                    tx,
                                    request: pkt.to_vec(),
                                    reply,
                                },
                            );
                        }
                        Err(e) => warn!(%from, "handshake refused: {e}"),
                    }
                }
            }
        }
    }

    fn spawn_session(
        &self,
        id: u64,
        first_path: PathId,
        from: SocketAddr,
        keys: braid_crypto::SessionKeys,
        done: mpsc::UnboundedSender<u64>,
    ) -> mpsc::Sender<Incoming> {
        let mut tcfg = self.cfg.transport.clone();
        tcfg.max_streams = self.cfg.max_streams;
        tcfg.session_window = self.cfg.max_buffered;
        let clock = Clock::new();
        let session = Session::accept(tcfg, clock.now(), id);
        let (in_tx, in_rx) = mpsc::channel(4096);
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
        let (acc_tx, mut acc_rx) = mpsc::unbounded_channel::<StreamHandle>();
        let (dg_tx, dg_rx) = mpsc::channel::<Bytes>(1024);
        let addrs: Arc<Mutex<HashMap<PathId, SocketAddr>>> = Arc::new(Mutex::new(HashMap::new()));
        addrs.lock().map(|mut m| m.insert(first_path, from)).ok();
        let hook_addrs = addrs.clone();
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
                }
                None => {
                    if m.len() >= 16 {
                        return false;
                    }
                    m.insert(path, from);
                }
            }
            true
        });
        let sender = SharedSocketSender {
            socket: self.socket.clone(),
            addrs,
        };
        let task = SessionTask {
            session,
            protection: Aead::new(keys),
            sender,
            incoming: in_rx,
            cmd_rx,
            cmd_tx: cmd_tx.clone(),
            accepted: Some(acc_tx),
            datagrams: Some(dg_tx),
            on_packet: Some(hook),
            events: None,
            clock,
        };
        let connect_timeout = self.cfg.connect_timeout;
        let max_streams = self.cfg.max_streams as usize;
        tokio::spawn(async move {
            let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
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
                    serve_stream(h, connect_timeout).await;
                    open.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                });
            }
        });
        tokio::spawn(udp_flows(dg_rx, cmd_tx, self.cfg.max_udp_flows));
        tokio::spawn(async move {
            if let Some(e) = task.run().await {
                info!(session = format_args!("{id:016x}"), "session ended: {e}");
            }
            let _ = done.send(id);
        });
        in_tx
    }
}

/// Sends on the shared listening socket to each path's current peer address.
struct SharedSocketSender {
    socket: Arc<UdpSocket>,
    addrs: Arc<Mutex<HashMap<PathId, SocketAddr>>>,
}

impl PathSender for SharedSocketSender {
    fn send(&mut self, path: PathId, packet: &[u8]) {
        let to = self.addrs.lock().ok().and_then(|m| m.get(&path).copied());
        if let Some(to) = to {
            if let Err(e) = self.socket.try_send_to(packet, to) {
                debug!(path, "send failed: {e}");
            }
        }
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One proxied connection: read the open request, connect, answer, relay.
async fn serve_stream(h: StreamHandle, connect_timeout: Duration) {
    let StreamHandle {
        id,
        mut reader,
        writer,
    } = h;
    let mut head = BytesMut::new();
    let (target, used) = loop {
        match target::parse_request(&head) {
            Ok((req, used)) => break (req.target.to_target_addr(), used),
            Err(braid_proxy::ParseError::Incomplete) => {}
            Err(e) => {
                warn!(stream = id, "bad stream-open request: {e}");
                reply(&writer, e.reply_code()).await;
                writer.finish();
                return;
            }
        }
        match reader.read().await {
            Some(StreamMsg::Data(b)) => head.extend_from_slice(&b),
            _ => return,
        }
        if head.len() > 4096 {
            return;
        }
    };
    let early = head.split_off(used).freeze();
    match connect(&target, connect_timeout).await {
        Ok(tcp) => {
            debug!(stream = id, %target, "connected");
            reply(&writer, ReplyCode::Succeeded).await;
            crate::splice::splice(tcp, reader, writer, early).await;
        }
        Err(code) => {
            info!(stream = id, %target, ?code, "connect failed");
            reply(&writer, code).await;
            writer.finish();
        }
    }
}

async fn reply(w: &crate::bridge::StreamWriter, code: ReplyCode) {
    let mut out = Vec::with_capacity(2);
    target::emit_reply(code, &mut out);
    let _ = w.write(Bytes::from(out)).await;
}

/// Resolve (names at the server, as SOCKS5 with remote resolution expects) and connect.
pub async fn connect(target: &TargetAddr, timeout: Duration) -> Result<TcpStream, ReplyCode> {
    let addrs: Vec<SocketAddr> = match target {
        TargetAddr::Ip(a) => vec![*a],
        TargetAddr::Domain(name, port) => {
            match tokio::time::timeout(timeout, tokio::net::lookup_host((name.as_str(), *port)))
                .await
            {
                Ok(Ok(a)) => a.collect(),
                Ok(Err(_)) => return Err(ReplyCode::HostUnreachable),
                Err(_) => return Err(ReplyCode::TtlExpired),
            }
        }
    };
    let mut last = ReplyCode::HostUnreachable;
    for a in addrs {
        match tokio::time::timeout(timeout, TcpStream::connect(a)).await {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) => last = ReplyCode::from_io_error(&e),
            Err(_) => last = ReplyCode::TtlExpired,
        }
    }
    Err(last)
}

/// UDP flows of one session: each flow gets its own socket towards its destinations.
async fn udp_flows(
    mut rx: mpsc::Receiver<Bytes>,
    cmd: mpsc::UnboundedSender<Cmd>,
    max_flows: usize,
) {
    let mut flows: HashMap<u32, Arc<UdpSocket>> = HashMap::new();
    while let Some(d) = rx.recv().await {
        let Ok(p) = datagram::parse(&d) else {
            debug!("dropped a malformed proxied datagram");
            continue;
        };
        let sock = match flows.get(&p.flow_id) {
            Some(s) => s.clone(),
            None => {
                if flows.len() >= max_flows {
                    warn!(
                        limit = max_flows,
                        "UDP flow limit reached; datagram dropped"
                    );
                    continue;
                }
                let Ok(s) = UdpSocket::bind("0.0.0.0:0")
                    .await
                    .or(UdpSocket::bind("[::]:0").await)
                else {
                    continue;
                };
                let s = Arc::new(s);
                flows.insert(p.flow_id, s.clone());
                tokio::spawn(udp_return(s.clone(), p.flow_id, cmd.clone()));
                s
            }
        };
        let dest = p.addr.to_target_addr();
        send_datagram(&sock, &dest, p.payload).await;
    }
}

async fn udp_return(sock: Arc<UdpSocket>, flow: u32, cmd: mpsc::UnboundedSender<Cmd>) {
    let mut buf = vec![0u8; 65536];
    while let Ok((n, from)) = sock.recv_from(&mut buf).await {
        let mut out = Vec::with_capacity(n + 32);
        if datagram::emit(flow, &TargetAddr::Ip(from), &buf[..n], &mut out).is_ok()
            && cmd.send(Cmd::Datagram(Bytes::from(out))).is_err()
        {
            return;
        }
    }
}
