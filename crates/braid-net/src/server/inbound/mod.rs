//! Inbound ports at the server: public TCP and UDP ports an agent asked for (and the
//! configuration allows its key), whose connections and datagrams go over the agent's
//! session to a service behind the agent (docs/protocol.md section 19a).
//!
//! Owns: the server-wide [`Ports`] (each open port's socket and the task that serves it for
//! its session), a session's [`SessionPorts`] (answering its forward request, a stream per
//! connection to one of its TCP ports, its UDP ports' datagrams both ways). The decisions
//! (allowed or not, who holds a port) are [`table`]'s. Must not touch: the handshake, the
//! session's protocol, outbound streams and flows (`relay`).
//!
//! Sockets live in [`Ports`] (one per open port, bound once); each session's task works on
//! its own duplicate of the descriptor, registered with the runtime of that session's
//! worker. A reconnecting agent's new session takes its ports over without closing them:
//! the old session's task is aborted and a new one starts on a new duplicate. A port closes
//! when the session that holds it ends.

mod table;

pub use table::{Claim, ForwardPolicy, Owner, PortRange, PortTable};

use super::budget::UdpBudget;
use crate::bridge::{Cmd, StreamMsg};
use braid_crypto::PublicKey;
use braid_proxy::inbound::{self as wire, ForwardResult, InboundHeader, Proto, PublicPort};
use braid_proxy::{datagram, TargetAddr};
use bytes::{Bytes, BytesMut};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;
use tracing::{debug, info, warn};

/// Bytes of datagrams from public UDP ports one session may have waiting for the wire.
const UDP_INBOUND_BYTES: usize = 1 << 20;

/// An open port's socket (blocking mode off), kept while a session holds the port.
enum Sock {
    Tcp(std::net::TcpListener),
    Udp(std::net::UdpSocket),
}

impl Sock {
    fn bind(ip: IpAddr, port: PublicPort) -> std::io::Result<Sock> {
        use socket2::{Domain, Protocol, Socket, Type};
        let addr = SocketAddr::new(ip, port.port);
        let (ty, proto) = match port.proto {
            Proto::Tcp => (Type::STREAM, Protocol::TCP),
            Proto::Udp => (Type::DGRAM, Protocol::UDP),
        };
        let s = Socket::new(Domain::for_address(addr), ty, Some(proto))?;
        if addr.is_ipv6() && ip.is_unspecified() {
            s.set_only_v6(false)?;
        }
        if port.proto == Proto::Tcp {
            s.set_reuse_address(true)?;
        }
        s.set_nonblocking(true)?;
        s.bind(&addr.into())?;
        Ok(match port.proto {
            Proto::Tcp => {
                s.listen(1024)?;
                Sock::Tcp(s.into())
            }
            Proto::Udp => Sock::Udp(s.into()),
        })
    }

    fn try_clone(&self) -> std::io::Result<Sock> {
        Ok(match self {
            Sock::Tcp(l) => Sock::Tcp(l.try_clone()?),
            Sock::Udp(u) => Sock::Udp(u.try_clone()?),
        })
    }
}

struct Open {
    sock: Sock,
    task: Option<AbortHandle>,
}

#[derive(Default)]
struct Inner {
    table: PortTable,
    open: HashMap<PublicPort, Open>,
}

/// Every open public port of the server.
pub struct Ports {
    policy: ForwardPolicy,
    bind_ip: IpAddr,
    inner: Mutex<Inner>,
}

impl Ports {
    /// Ports as `policy` allows them, bound on `bind_ip` (the server's listen address).
    pub fn new(policy: ForwardPolicy, bind_ip: IpAddr) -> Arc<Ports> {
        Arc::new(Ports {
            policy,
            bind_ip,
            inner: Mutex::new(Inner::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Claim `port` for `session` of `key`: a duplicate of its socket to serve it with, or
    /// why not (logged).
    fn claim(&self, key: PublicKey, session: u64, port: PublicPort) -> Result<Sock, ForwardResult> {
        let mut inner = self.lock();
        let sid = format_args!("{session:016x}");
        match inner.table.claim(&self.policy, key, session, port) {
            Claim::NotAllowed => {
                let how = self.policy.how_to_allow(&key, port);
                warn!(
                    %key, %port, session = %sid,
                    "inbound port refused: the server's configuration does not allow it for \
                     this agent's key; to allow it, {how}"
                );
                Err(ForwardResult::NotAllowed)
            }
            Claim::InUse(o) => {
                warn!(%key, %port, session = %sid, holder = %o.key,
                      "inbound port refused: another agent's session holds it");
                Err(ForwardResult::InUse)
            }
            Claim::Granted { replaces } => {
                if let Some(old) = inner.open.get_mut(&port) {
                    if let Some(t) = old.task.take() {
                        t.abort();
                    }
                    if let Some(prev) = replaces {
                        info!(%key, %port, session = %sid, previous = format_args!("{prev:016x}"),
                              "inbound port moves to the agent's new session");
                    }
                    return old.sock.try_clone().map_err(|e| {
                        warn!(%port, "cannot duplicate the port's socket: {e}");
                        ForwardResult::BindFailed
                    });
                }
                let bound = Sock::bind(self.bind_ip, port).and_then(|s| Ok((s.try_clone()?, s)));
                match bound {
                    Ok((dup, sock)) => {
                        inner.open.insert(port, Open { sock, task: None });
                        Ok(dup)
                    }
                    Err(e) => {
                        inner.table.release(port, session);
                        warn!(%key, %port, session = %sid, ip = %self.bind_ip,
                              "inbound port allowed but not opened: cannot bind it ({e}); \
                               is another program using it?");
                        Err(ForwardResult::BindFailed)
                    }
                }
            }
        }
    }

    /// The task serving `port` for `session` started; it is aborted if the port is no
    /// longer the session's.
    fn started(&self, port: PublicPort, session: u64, task: AbortHandle) {
        let mut inner = self.lock();
        let mine = inner
            .table
            .owner(port)
            .is_some_and(|o| o.session == session);
        match inner.open.get_mut(&port) {
            Some(o) if mine => {
                if let Some(old) = o.task.replace(task) {
                    old.abort();
                }
            }
            _ => task.abort(),
        }
    }

    /// `session` ended: close the ports it holds.
    pub fn release_session(&self, session: u64) {
        let mut inner = self.lock();
        for p in inner.table.release_session(session) {
            if let Some(o) = inner.open.remove(&p) {
                if let Some(t) = o.task {
                    t.abort();
                }
                info!(port = %p, session = format_args!("{session:016x}"), "inbound port closed: its session ended");
            }
        }
    }

    /// The ports `session` holds.
    pub fn ports_of(&self, session: u64) -> Vec<PublicPort> {
        self.lock().table.ports_of(session)
    }
}

/// One session's side of its inbound ports.
pub struct SessionPorts {
    ports: Arc<Ports>,
    key: PublicKey,
    session: u64,
    cmd: mpsc::UnboundedSender<Cmd>,
    udp: Mutex<HashMap<u16, Arc<tokio::net::UdpSocket>>>,
    budget: UdpBudget,
    idle: Duration,
}

impl SessionPorts {
    /// Session `session` of agent `key`, whose session task takes `cmd`; inbound TCP
    /// connections idle for `idle` are closed.
    pub fn new(
        ports: Arc<Ports>,
        key: PublicKey,
        session: u64,
        cmd: mpsc::UnboundedSender<Cmd>,
        idle: Duration,
    ) -> Arc<SessionPorts> {
        Arc::new(SessionPorts {
            ports,
            key,
            session,
            cmd,
            udp: Mutex::new(HashMap::new()),
            budget: UdpBudget::new(UDP_INBOUND_BYTES),
            idle,
        })
    }

    /// The public ports the session holds.
    pub fn ports(&self) -> Vec<PublicPort> {
        self.ports.ports_of(self.session)
    }

    /// The session ended: its ports close.
    pub fn release(&self) {
        self.ports.release_session(self.session);
    }

    /// Answer a forward request on a stream the agent opened; `head` holds what was read.
    pub async fn serve_request(
        self: &Arc<Self>,
        mut reader: crate::bridge::StreamReader,
        writer: crate::bridge::StreamWriter,
        mut head: BytesMut,
    ) {
        let ports = loop {
            match wire::parse_forward_request(&head) {
                Ok((ports, _)) => break ports,
                Err(braid_proxy::ParseError::Incomplete) if head.len() < 1024 => {}
                Err(e) => {
                    warn!(
                        session = format_args!("{:016x}", self.session),
                        "bad forward request: {e}"
                    );
                    writer.reset(1);
                    return;
                }
            }
            match reader.read().await {
                Some(StreamMsg::Data(b)) => head.extend_from_slice(&b),
                _ => return,
            }
        };
        let mut results = Vec::with_capacity(ports.len());
        for port in ports {
            let r = match self.ports.claim(self.key, self.session, port) {
                Ok(sock) => self.serve(port, sock),
                Err(r) => r,
            };
            results.push((port, r));
        }
        let mut out = Vec::new();
        if wire::emit_forward_reply(&results, &mut out).is_ok() {
            let _ = writer.write(Bytes::from(out)).await;
        }
        writer.finish();
    }

    /// Start serving `port` on `sock` (a duplicate registered with this runtime).
    fn serve(self: &Arc<Self>, port: PublicPort, sock: Sock) -> ForwardResult {
        let me = self.clone();
        let task = match sock {
            Sock::Tcp(l) => match tokio::net::TcpListener::from_std(l) {
                Ok(l) => tokio::spawn(async move { me.accept_tcp(l, port).await }),
                Err(e) => return self.not_served(port, e),
            },
            Sock::Udp(u) => match tokio::net::UdpSocket::from_std(u) {
                Ok(u) => {
                    let u = Arc::new(u);
                    if let Ok(mut m) = self.udp.lock() {
                        m.insert(port.port, u.clone());
                    }
                    tokio::spawn(async move { me.recv_udp(u, port.port).await })
                }
                Err(e) => return self.not_served(port, e),
            },
        };
        self.ports.started(port, self.session, task.abort_handle());
        info!(%port, key = %self.key, session = format_args!("{:016x}", self.session),
              "inbound port open: its traffic goes to the agent");
        ForwardResult::Opened
    }

    fn not_served(&self, port: PublicPort, e: std::io::Error) -> ForwardResult {
        warn!(%port, "cannot serve the inbound port: {e}");
        let mut inner = self.ports.lock();
        inner.table.release(port, self.session);
        if inner.table.owner(port).is_none() {
            // Closes the socket.
            inner.open.remove(&port);
        }
        ForwardResult::BindFailed
    }

    async fn accept_tcp(self: Arc<Self>, l: tokio::net::TcpListener, port: PublicPort) {
        loop {
            match l.accept().await {
                Ok((tcp, peer)) => {
                    let me = self.clone();
                    tokio::spawn(async move { me.carry(tcp, peer, port).await });
                }
                Err(e) => {
                    // Out of descriptors and the like: wait, do not spin.
                    debug!(%port, "accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// One connection to a public TCP port: a stream to the agent, its header, the relay.
    async fn carry(&self, tcp: tokio::net::TcpStream, peer: SocketAddr, port: PublicPort) {
        let (tx, rx) = oneshot::channel();
        if self.cmd.send(Cmd::Open(tx)).is_err() {
            return;
        }
        let h = match rx.await {
            Ok(Ok(h)) => h,
            Ok(Err(e)) => {
                debug!(%port, %peer, "inbound connection dropped: no stream to the agent ({e})");
                return;
            }
            Err(_) => return,
        };
        let mut head = Vec::new();
        let peer = crate::udp::canonical(peer);
        wire::emit_inbound_header(&InboundHeader { port, peer }, &mut head);
        if h.writer.write(Bytes::from(head)).await.is_err() {
            return;
        }
        debug!(%port, %peer, stream = h.id, "inbound connection");
        crate::splice::splice(tcp, h.reader, h.writer, Bytes::new(), self.idle).await;
    }

    /// Datagrams to a public UDP port go to the agent on the port's flow, named by sender.
    async fn recv_udp(self: Arc<Self>, s: Arc<tokio::net::UdpSocket>, port: u16) {
        let flow = wire::inbound_flow(port);
        let mut buf = vec![0u8; 65536];
        loop {
            let (n, from) = match s.recv_from(&mut buf).await {
                Ok(r) => r,
                Err(e) => {
                    debug!(port, "inbound UDP receive failed: {e}");
                    continue;
                }
            };
            let mut out = Vec::with_capacity(n + 32);
            let from = TargetAddr::Ip(crate::udp::canonical(from));
            if datagram::emit(flow, &from, &buf[..n], &mut out).is_err() {
                continue;
            }
            let Some(d) = self.budget.admit(out) else {
                continue;
            };
            let f = datagram::session_flow(&d);
            if self.cmd.send(Cmd::Datagram(f, d)).is_err() {
                return;
            }
        }
    }

    /// The agent's answer on public UDP port `port` goes back to `to` from that port.
    pub async fn send_back(&self, port: u16, to: &TargetAddr, payload: &[u8]) {
        let s = self.udp.lock().ok().and_then(|m| m.get(&port).cloned());
        let (Some(s), TargetAddr::Ip(to)) = (s, to) else {
            debug!(
                port,
                "an inbound answer for a port this session does not hold: dropped"
            );
            return;
        };
        let v6 = s.local_addr().is_ok_and(|a| a.is_ipv6());
        if let Err(e) = s
            .send_to(payload, crate::udp::reachable_from(v6, *to))
            .await
        {
            debug!(port, %to, "inbound answer not sent: {e}");
        }
    }
}
