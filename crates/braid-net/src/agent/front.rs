//! The agent's proxy front ends: SOCKS5 (CONNECT and UDP ASSOCIATE) and HTTP (CONNECT and
//! plain-HTTP requests in absolute form).
//! Each proxied TCP connection becomes one stream of the current session, each UDP
//! association one datagram flow; in direct mode (no session up) a direct connection or
//! flow instead (`direct::open_tcp`, `direct_udp`); destinations `--bypass`/`--pin` name
//! go straight to them, session or not (`direct::open_tcp`, `ruled_udp`).
//!
//! Owns: accepting application connections, answering them, and relaying. Must not touch:
//! the session's paths or lifecycle (`run`), opening a session stream (`direct_session`,
//! through `direct::open_tcp`), or the SOCKS/HTTP wire details (braid-proxy).

use super::direct;
use super::flow_entry::{FlowEntry, FlowTable};
use super::report::ConnGuard;
use super::ruled_udp::{next_back, RuledUdp};
use super::Shared;
use crate::bridge::Cmd;
use braid_proxy::http::{self, ProxyRequest};
use braid_proxy::socks5::{self, SocksRequest};
use braid_proxy::target::ReplyCode;
use braid_proxy::{datagram, AcceptBackoff, TargetAddr};
use bytes::{Bytes, BytesMut};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{mpsc, Semaphore};
use tracing::{debug, info, warn};

/// Which proxy protocol a listener speaks.
#[derive(Clone, Copy)]
pub(super) enum Front {
    /// SOCKS5.
    Socks,
    /// The HTTP proxy (CONNECT and plain http:// requests).
    Http,
    /// Connections nftables redirected (`redirect`).
    Redirect,
    /// Another front end's connections (the agent's DNS port), by its own function.
    Other(Handler),
}

/// A front end's work on one connection.
pub(super) type Handler =
    fn(TcpStream, Shared) -> std::pin::Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

pub(super) async fn accept_loop(l: TcpListener, shared: Shared, front: Front) {
    let limits = shared.cfg.proxy_limits;
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut backoff = AcceptBackoff::new();
    let mut turned_away = 0u64;
    loop {
        let (tcp, peer) = match l.accept().await {
            Ok(x) => {
                let n = backoff.succeeded();
                if n > 0 {
                    info!("accepting proxy connections again after {n} failed attempts");
                }
                x
            }
            Err(e) => {
                // Never spin: at the descriptor limit the listener stays readable.
                let (wait, say) = backoff.failed(&e);
                if say {
                    warn!(
                        failures = backoff.failures(),
                        "cannot accept a proxy connection: {e}; waiting {wait:?} before the \
                         next try (at the file-descriptor limit: raise `ulimit -n`, or lower \
                         the number of connections)"
                    );
                }
                tokio::time::sleep(wait).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            turned_away += 1;
            if turned_away == 1 || turned_away.is_multiple_of(64) {
                warn!(%peer, limit = limits.max_connections, turned_away, "too many proxy connections: a new one is closed");
            }
            let _ = socket2::SockRef::from(&tcp).set_linger(Some(Duration::ZERO));
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let r = match front {
                Front::Socks => socks_conn(tcp, &shared).await,
                Front::Http => http_conn(tcp, &shared).await,
                Front::Redirect => super::redirect::conn(tcp, &shared).await,
                Front::Other(handle) => handle(tcp, shared.clone()).await,
            };
            if let Err(e) = r {
                info!(%peer, "proxy connection ended: {e}");
            }
        });
    }
}

async fn socks_conn(mut tcp: TcpStream, shared: &Shared) -> Result<(), String> {
    let limits = shared.cfg.proxy_limits;
    let req =
        socks5::accept_with_timeout(&mut tcp, &shared.cfg.socks_auth, limits.handshake_timeout)
            .await
            .map_err(|e| e.to_string())?;
    let bound = tcp.local_addr().map_err(|e| e.to_string())?;
    match req {
        SocksRequest::Connect(target) => match direct::open_tcp(shared, &target).await {
            Ok(relay) => {
                socks5::reply(&mut tcp, ReplyCode::Succeeded, bound)
                    .await
                    .map_err(|e| e.to_string())?;
                let conn = shared
                    .board
                    .open("socks5", peer_of(&tcp), target.to_string(), None);
                relay.run(tcp, &conn, limits.idle_timeout).await;
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

/// An HTTP proxy connection: CONNECT (answered 200, then relayed) or a plain-HTTP request
/// in absolute form (its rewritten head sent to the origin, then relayed: the origin's
/// response is the answer).
async fn http_conn(mut tcp: TcpStream, shared: &Shared) -> Result<(), String> {
    let req = http::accept(&mut tcp, &shared.cfg.http_limits)
        .await
        .map_err(|e| e.to_string())?;
    let (target, head) = match req {
        ProxyRequest::Connect(target) => (target, None),
        ProxyRequest::Forward { target, head } => (target, Some(head)),
    };
    let what = if head.is_some() {
        "plain HTTP to"
    } else {
        "CONNECT"
    };
    let mut relay = match direct::open_tcp(shared, &target).await {
        Ok(relay) => relay,
        Err(code) => {
            let _ = http::respond_error(&mut tcp, code).await;
            return Err(format!("{what} {target}: {code}"));
        }
    };
    match &head {
        Some(head) => relay.send(head).await?,
        None => http::respond_ok(&mut tcp)
            .await
            .map_err(|e| e.to_string())?,
    }
    let conn = shared
        .board
        .open("http", peer_of(&tcp), target.to_string(), None);
    relay
        .run(tcp, &conn, shared.cfg.proxy_limits.idle_timeout)
        .await;
    Ok(())
}

/// SOCKS5 UDP ASSOCIATE: a relay socket for the client, one datagram flow of the session;
/// it lasts as long as the client's TCP control connection.
async fn udp_associate(
    mut tcp: TcpStream,
    shared: &Shared,
    bound: SocketAddr,
) -> Result<(), String> {
    if let Some(d) = shared.fallback() {
        shared.wait_start().await;
        if shared.direct_now() && shared.cfg.rules.is_empty() {
            return super::direct_udp::associate(tcp, d, &shared.board, bound).await;
        }
    }
    // With rules, some datagrams go straight to their destinations (`ruled_udp`).
    let (ruled, mut ruled_rx) = match &shared.direct {
        Some(d) if !shared.cfg.rules.is_empty() => {
            let (r, rx) = RuledUdp::new(d.clone());
            (Some(r), Some(rx))
        }
        _ => (None, None),
    };
    let relay = relay_socket(bound).await?;
    let relay_addr = relay.local_addr().map_err(|e| e.to_string())?;
    let (entry, mut rx) =
        answer_associate(&mut tcp, &shared.flows, &shared.next_flow, relay_addr).await?;
    let flow = entry.id;
    let conn = shared
        .board
        .open("socks5", peer_of(&tcp), String::new(), Some(flow));
    conn.set_path("session".into());
    if ruled.is_none() {
        conn.set_rule("session".into());
    }
    let mut a = Assoc {
        shared,
        relay,
        flow,
        conn,
        ruled,
        client: None,
        last_dest: None,
        rbuf: BytesMut::new(),
    };
    let mut ctl = [0u8; 64];
    let result = loop {
        tokio::select! {
            r = tcp.read(&mut ctl) => match r {
                Ok(0) | Err(_) => break Ok(()),
                Ok(_) => {}
            },
            r = a.relay.readable() => {
                if r.is_err() {
                    break Err("relay socket failed".to_string());
                }
                a.up(tcp.peer_addr().map(|p| p.ip()).ok()).await;
            }
            Some((from, d)) = next_back(&mut ruled_rx) => {
                a.down(&TargetAddr::Ip(from), &d).await;
            }
            Some(d) = rx.recv() => {
                if let Ok(p) = datagram::parse(&d) {
                    a.down(&p.addr.to_target_addr(), p.payload).await;
                }
            }
        }
    };
    drop(entry);
    result
}

/// The flow of a UDP association, and the success reply to the application. The flow's
/// entry goes when the association ends, and at once when the reply fails (the
/// application left): no entry is left behind.
async fn answer_associate<W: tokio::io::AsyncWrite + Unpin>(
    tcp: &mut W,
    flows: &FlowTable,
    next: &AtomicU32,
    relay_addr: SocketAddr,
) -> Result<(FlowEntry, mpsc::Receiver<Bytes>), String> {
    let (tx, rx) = mpsc::channel::<Bytes>(1024);
    let entry = FlowEntry::open(flows, next, tx);
    socks5::reply(tcp, ReplyCode::Succeeded, relay_addr)
        .await
        .map_err(|e| format!("the UDP ASSOCIATE reply to the application failed: {e}"))?;
    Ok((entry, rx))
}

/// A UDP association's relay socket, on the address the client reached the proxy at.
async fn relay_socket(bound: SocketAddr) -> Result<UdpSocket, String> {
    let relay = UdpSocket::bind(SocketAddr::new(bound.ip(), 0))
        .await
        .map_err(|e| e.to_string())?;
    // Room for a burst of small datagrams while the session task is busy.
    let _ = socket2::SockRef::from(&relay).set_recv_buffer_size(crate::udp::SOCKET_BUFFER);
    crate::batch::enable_gro(&relay);
    Ok(relay)
}

/// A SOCKS5 UDP association while it relays (`udp_associate`).
struct Assoc<'a> {
    shared: &'a Shared,
    relay: UdpSocket,
    flow: u32,
    conn: ConnGuard,
    /// Datagrams `--bypass`/`--pin` send straight to their destinations.
    ruled: Option<RuledUdp>,
    /// The client's address, once it sent.
    client: Option<SocketAddr>,
    last_dest: Option<TargetAddr>,
    rbuf: BytesMut,
}

impl Assoc<'_> {
    /// Take what waits on the relay socket (up to a batch; one receive may hold many
    /// datagrams of an application that sends with GSO) and hand the session all of it at
    /// once; only the client that asked (`peer`, its control connection's IP) may use it.
    async fn up(&mut self, peer: Option<IpAddr>) {
        let session = self.shared.session.borrow().clone();
        for _ in 0..crate::batch::MAX_SEGMENTS {
            let got = match self.relay.try_io(tokio::io::Interest::READABLE, || {
                crate::batch::recv(&self.relay, &mut self.rbuf)
            }) {
                Ok(got) => got,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    self.rbuf.clear();
                    continue;
                }
            };
            if peer != Some(got.from.ip()) {
                self.rbuf.clear();
                continue;
            }
            self.client = Some(got.from);
            for d in crate::batch::split(&mut self.rbuf, got.segment_size) {
                if let (Some(r), Ok(p)) = (self.ruled.as_mut(), socks5::parse_udp(&d)) {
                    let dest = p.addr.to_target_addr();
                    let up = session.is_some();
                    if r.take(self.shared, up, &self.conn, &dest, p.payload).await {
                        self.last_dest = None;
                        continue;
                    }
                }
                if let Some(d) = from_client(self.flow, &d, &self.conn, &mut self.last_dest) {
                    if let Some(cmd) = &session {
                        let flow = datagram::session_flow(&d);
                        let _ = cmd.send(Cmd::Datagram(flow, d));
                    }
                }
            }
        }
    }

    /// `payload` from `from` back to the client (once it sent), counted on its connection.
    async fn down(&self, from: &TargetAddr, payload: &[u8]) {
        let Some(c) = self.client else { return };
        let mut out = Vec::with_capacity(payload.len() + 24);
        self.conn
            .counters()
            .down
            .fetch_add(payload.len() as u64, Ordering::Relaxed);
        if socks5::emit_udp(from, payload, &mut out).is_ok() {
            let _ = self.relay.send_to(&out, c).await;
        }
    }
}

/// A SOCKS5 UDP datagram from the application as the session's DATAGRAM payload, counted on
/// its connection; `None` (dropped) when it is malformed or fragmented.
fn from_client(
    flow: u32,
    pkt: &[u8],
    conn: &ConnGuard,
    last_dest: &mut Option<TargetAddr>,
) -> Option<Bytes> {
    let Ok(p) = socks5::parse_udp(pkt) else {
        debug!("dropped a malformed or fragmented SOCKS5 UDP datagram");
        return None;
    };
    let mut out = Vec::with_capacity(pkt.len() + 8);
    let dest = p.addr.to_target_addr();
    if last_dest.as_ref() != Some(&dest) {
        conn.set_destination(dest.to_string());
        *last_dest = Some(dest.clone());
    }
    conn.counters()
        .up
        .fetch_add(p.payload.len() as u64, Ordering::Relaxed);
    datagram::emit(flow, &dest, p.payload, &mut out).ok()?;
    Some(Bytes::from(out))
}

/// The application's address, for the status board.
fn peer_of(tcp: &TcpStream) -> String {
    tcp.peer_addr()
        .map_or_else(|_| "?".into(), |a| a.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression for "a SOCKS5 UDP ASSOCIATE whose reply fails leaves its flow's entry
    /// behind": the application gone before the reply, the flow table is empty again; an
    /// association answered keeps its entry until it ends.
    #[tokio::test]
    async fn a_udp_associate_whose_reply_fails_leaves_no_flow_entry() {
        let flows = FlowTable::default();
        let next = AtomicU32::new(1);
        let relay: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let (mut ours, app) = tokio::io::duplex(64);
        drop(app);
        let e = answer_associate(&mut ours, &flows, &next, relay)
            .await
            .err()
            .expect("the reply cannot be written");
        assert!(e.contains("UDP ASSOCIATE reply"), "{e}");
        assert!(flows.lock().unwrap().is_empty(), "an entry was left behind");

        let (mut ours, _app) = tokio::io::duplex(64);
        let (entry, _rx) = answer_associate(&mut ours, &flows, &next, relay)
            .await
            .unwrap();
        assert!(flows.lock().unwrap().contains_key(&entry.id));
        drop(entry);
        assert!(flows.lock().unwrap().is_empty());
    }
}
