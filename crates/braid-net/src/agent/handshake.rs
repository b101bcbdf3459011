//! The agent's handshake: message 1 goes out on every available path to every configured
//! server at once (each (path, server) pair its own Noise handshake, all for one session
//! id); the first valid answer wins: its server (the one with the lowest RTT that completes
//! a handshake) carries the session and its path becomes the session's first path. A server
//! creates the session from the first message 1 that reaches it and drops the others, so it
//! answers on one path only; servers that lose the race keep a half-open session until
//! their idle timeout. A server that names its own unicast address in its answer (it sits
//! behind a shared name, anycast address or load balancer) gets the whole session there.
//! One that does not is checked: the agent listens a little longer for the other paths'
//! answers, and a second server's answer (a balancer that split the paths) fails the
//! handshake with what to do (`affinity`).
//!
//! Owns: binding the paths' sockets for a new session, and moving the handshake's packets
//! (UDP, TCP connections) and timers. The decisions (rounds, cookies, TCP, the winner) are
//! the sans-IO [`Handshake`]'s (`client::handshake`). Must not touch: the session itself
//! (`run` builds it).

use super::client::handshake::{Handshake, HsPath, Pair, Setup, Transmit, Via, Won};
use super::AgentConfig;
use crate::pathmgr::Attach;
use crate::udp::{bind_path, bind_udp, PathBind};
use braid_core::PathId;
use braid_crypto::SessionKeys;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tracing::debug;

/// A socket bound for a path of the session.
pub(super) struct Bound {
    /// The configured path.
    pub slot: usize,
    /// Where the kernel offered it.
    pub attach: Attach,
    /// The socket.
    pub socket: Arc<UdpSocket>,
    /// Where it sends (the server, or a relay in front of it).
    pub peer: SocketAddr,
    /// How it was bound (for a TCP connection from the same place).
    pub bind: PathBind,
    /// The largest datagram its route to `peer` carries (`crate::pmtu`).
    pub max_datagram: usize,
}

impl Bound {
    /// The same socket, sending to `server` (or the path's relay).
    fn towards(&self, cfg: &AgentConfig, server: SocketAddr) -> Bound {
        let server = cfg.server_for(server, self.attach.addr);
        Bound {
            slot: self.slot,
            attach: self.attach,
            socket: self.socket.clone(),
            peer: cfg.paths[self.slot].peer(server),
            bind: self.bind.clone(),
            max_datagram: crate::pmtu::path_limit(&self.bind, cfg.paths[self.slot].peer(server)),
        }
    }
}

/// A completed handshake.
pub(super) struct Established {
    /// The server that answered first.
    pub server: SocketAddr,
    pub sid: u64,
    pub keys: SessionKeys,
    /// The path whose answer won.
    pub first: PathId,
    /// The TCP connection the answer came on, when UDP got none (docs/protocol.md 18a).
    pub first_tcp: Option<TcpStream>,
    pub paths: Vec<Bound>,
}

/// A path the path manager offers: configured path `slot`, where the kernel offers it, and
/// how to bind it (an auto path as the interface it took).
pub(super) type Avail = (usize, Attach, PathBind);

/// Bind a socket for configured path `slot` as `bind` says, sending to `server`.
pub(super) fn bind(
    cfg: &AgentConfig,
    (slot, attach, bind): &Avail,
    server: SocketAddr,
) -> std::io::Result<Bound> {
    let (slot, attach) = (*slot, *attach);
    let p = &cfg.paths[slot];
    let socket = match bind {
        PathBind::Address(ip) => bind_udp(SocketAddr::new(*ip, 0), None)?,
        b => bind_path(b, server)?,
    };
    Ok(Bound {
        slot,
        attach,
        socket: Arc::new(socket),
        peer: p.peer(server),
        bind: bind.clone(),
        max_datagram: crate::pmtu::path_limit(bind, p.peer(server)),
    })
}

/// An answer: (index of the path, packet, source, the TCP connection it came on). An empty
/// packet with no connection says only that a TCP connection to the source was accepted.
type Reply = (usize, Vec<u8>, SocketAddr, Option<TcpStream>);

/// Message 1 over a TCP connection from path `i` (bound by `bind`) to `server`, the
/// connection's acceptance told to `rtx` (an empty packet); the first packet back (message
/// 2, or a cookie reply: see [`again_over_tcp`]) and the connection.
async fn hello_over_tcp(
    (i, bind): (usize, &PathBind),
    server: SocketAddr,
    msg1: &[u8],
    rtx: &mpsc::Sender<Reply>,
) -> Option<(Vec<u8>, TcpStream)> {
    let s = match crate::tcp::connect(bind, server).await {
        Ok(s) => s,
        Err(e) => {
            debug!(%server, "handshake over TCP: {e}");
            return None;
        }
    };
    let _ = rtx.send((i, Vec::new(), server, None)).await;
    again_over_tcp(s, msg1).await
}

/// Message 1 down a connected TCP stream (first, or again with mac2 after a cookie reply
/// that came down it: the cookie is bound to the connection's address, so the retry goes
/// on the same connection); the first packet back and the stream.
async fn again_over_tcp(mut s: TcpStream, msg1: &[u8]) -> Option<(Vec<u8>, TcpStream)> {
    s.write_all(&crate::tcp::frame(msg1)).await.ok()?;
    let mut buf = bytes::BytesMut::new();
    let pkt = tokio::time::timeout(
        Duration::from_secs(10),
        crate::tcp::read_frame(&mut s, &mut buf),
    )
    .await
    .ok()?
    .ok()??;
    Some((pkt.to_vec(), s))
}

/// Send message 1 on every path in `avail` (bound now) to every server and wait for the
/// first answer; `attempts` rounds, as [`client::handshake`] decides (0.5 s, 1 s, 2 s, then
/// 4 s apart; from the second round on over TCP too: an answer there makes the first path a
/// TCP path). This function only binds, sends, receives and waits.
pub(super) async fn handshake(
    cfg: &AgentConfig,
    avail: &[Avail],
    attempts: u32,
) -> Result<Established, String> {
    let mut paths = Vec::new();
    let mut errors = Vec::new();
    for a in avail {
        match bind(cfg, a, cfg.server_for(cfg.servers[0], a.1.addr)) {
            Ok(b) => paths.push(b),
            Err(e) => errors.push(format!("path {}: {e}", cfg.paths[a.0].name)),
        }
    }
    if paths.is_empty() {
        return Err(errors.join("; "));
    }
    // Unguessable (issue 14): a session id from the system CSPRNG.
    let sid = braid_crypto::random::session_id().map_err(|_| {
        "the system's random number generator failed; cannot start a session".to_string()
    })?;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let setup = setup(cfg, &paths, sid, now_ms, attempts);
    let mut h = Handshake::new(setup, tokio::time::Instant::now().into_std())?;
    let won = drive(&mut h, cfg, &paths).await;
    let (won, first_tcp) = won?;
    Ok(Established {
        server: won.server,
        sid,
        keys: won.keys,
        first: paths[won.path].slot as PathId,
        first_tcp,
        paths: paths.iter().map(|b| b.towards(cfg, won.server)).collect(),
    })
}

/// The handshake's paths and (path, server) pairs: every path to every server, a relayed
/// path to the first only (a relay leads to one server).
fn setup(cfg: &AgentConfig, paths: &[Bound], sid: u64, now_ms: u64, rounds: u32) -> Setup {
    let mut pairs = Vec::new();
    for (i, b) in paths.iter().enumerate() {
        let relayed = cfg.paths[b.slot].via.is_some();
        for &server in &cfg.servers {
            let server = cfg.server_for(server, b.attach.addr);
            let peer = cfg.paths[b.slot].peer(server);
            pairs.push(Pair {
                path: i,
                server,
                peer,
            });
            if relayed {
                break;
            }
        }
    }
    Setup {
        key: cfg.key.clone(),
        server_pub: cfg.server_pub,
        ciphers: cfg.ciphers.clone(),
        sid,
        now_ms,
        paths: (paths.iter())
            .map(|b| HsPath {
                name: cfg.paths[b.slot].name.clone(),
                id: b.slot as PathId,
                relayed: cfg.paths[b.slot].via.is_some(),
            })
            .collect(),
        pairs,
        servers: cfg.servers.clone(),
        rounds,
    }
}

/// Move the handshake's packets and timers until it decides: UDP from the paths' sockets,
/// TCP connections it asks for (numbered for it), answers back in.
async fn drive(
    h: &mut Handshake,
    cfg: &AgentConfig,
    paths: &[Bound],
) -> Result<(Won, Option<TcpStream>), String> {
    // One receiver per socket, all into one channel.
    let (rtx, mut rrx) = mpsc::channel::<Reply>(64);
    let _readers: Vec<_> = (paths.iter().enumerate())
        .map(|(i, b)| {
            let (s, rtx) = (b.socket.clone(), rtx.clone());
            crate::tcp::AbortOnDrop(tokio::spawn(async move {
                let mut buf = vec![0u8; 2048];
                while let Ok((n, from)) = s.recv_from(&mut buf).await {
                    // (An empty packet means "TCP connected": never from UDP.)
                    if n > 0 && rtx.send((i, buf[..n].to_vec(), from, None)).await.is_err() {
                        return;
                    }
                }
            }))
        })
        .collect();
    let mut over_tcp = Vec::new();
    let mut streams: HashMap<u64, TcpStream> = HashMap::new();
    let mut next_stream = 0u64;
    let outcome = loop {
        while let Some(t) = h.poll_transmit() {
            send(cfg, paths, t, &rtx, &mut streams, &mut over_tcp).await;
        }
        if let Some(o) = h.outcome() {
            break o;
        }
        let Some(deadline) = h.poll_timeout() else {
            break Err("the handshake stopped without a decision".to_string());
        };
        let deadline = tokio::time::Instant::from_std(deadline);
        match tokio::time::timeout_at(deadline, rrx.recv()).await {
            Ok(Some((_, pkt, from, None))) if pkt.is_empty() => h.handle_tcp_connected(from),
            Ok(Some((i, pkt, from, stream))) => {
                let tcp = stream.map(|s| {
                    next_stream += 1;
                    streams.insert(next_stream, s);
                    next_stream
                });
                let now = tokio::time::Instant::now().into_std();
                h.handle_answer(now, i, from, &pkt, tcp);
            }
            _ => h.handle_timeout(tokio::time::Instant::now().max(deadline).into_std()),
        }
    };
    outcome.map(|won| {
        let stream = won.tcp.and_then(|c| streams.remove(&c));
        (won, stream)
    })
}

/// Send one packet as the handshake says: from a path's socket, over a new TCP connection,
/// or down a connection an answer came on; answers over TCP come back through `rtx`.
async fn send(
    cfg: &AgentConfig,
    paths: &[Bound],
    t: Transmit,
    rtx: &mpsc::Sender<Reply>,
    streams: &mut HashMap<u64, TcpStream>,
    over_tcp: &mut Vec<crate::tcp::AbortOnDrop<()>>,
) {
    let b = &paths[t.path];
    let (i, to, rtx) = (t.path, t.to, rtx.clone());
    match t.via {
        Via::Udp => {
            if let Err(e) = b.socket.send_to(&t.packet, to).await {
                debug!(path = %cfg.paths[b.slot].name, peer = %to, "handshake not sent: {e}");
            }
        }
        Via::TcpConnect => {
            let bind = b.bind.clone();
            over_tcp.push(crate::tcp::AbortOnDrop(tokio::spawn(async move {
                if let Some((pkt, stream)) = hello_over_tcp((i, &bind), to, &t.packet, &rtx).await {
                    let _ = rtx.send((i, pkt, to, Some(stream))).await;
                }
            })));
        }
        Via::Tcp(c) => {
            let Some(stream) = streams.remove(&c) else {
                return;
            };
            over_tcp.push(crate::tcp::AbortOnDrop(tokio::spawn(async move {
                if let Some((pkt, stream)) = again_over_tcp(stream, &t.packet).await {
                    let _ = rtx.send((i, pkt, to, Some(stream))).await;
                }
            })));
        }
    }
}

#[cfg(test)]
#[path = "handshake_tests.rs"]
mod tests;
