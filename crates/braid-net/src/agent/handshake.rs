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
//! Owns: binding the paths' sockets for a new session, retransmitting message 1 with
//! backoff, and choosing the winner. Must not touch: the session itself (`run` builds it).

use super::affinity;
use super::AgentConfig;
use crate::pathmgr::Attach;
use crate::udp::{bind_path, bind_udp, PathBind};
use braid_core::PathId;
use braid_crypto::{
    parse_header, read_cipher_refusal, Cipher, ClientHandshake, PacketType, SessionKeys,
};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

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

/// An answer: (index of the path, packet, source, the TCP connection it came on).
type Reply = (usize, Vec<u8>, SocketAddr, Option<TcpStream>);

/// Message 1 over a TCP connection from `bind` to `server`; the first packet back (message
/// 2, or a cookie reply: see [`again_over_tcp`]) and the connection.
async fn hello_over_tcp(
    bind: &PathBind,
    server: SocketAddr,
    msg1: &[u8],
) -> Option<(Vec<u8>, TcpStream)> {
    let s = match crate::tcp::connect(bind, server).await {
        Ok(s) => s,
        Err(e) => {
            debug!(%server, "handshake over TCP: {e}");
            return None;
        }
    };
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
/// first answer; `attempts` rounds, 0.5 s, 1 s, 2 s, then 4 s apart. From the second round
/// on, message 1 also goes over TCP (networks that block UDP); an answer there makes the
/// first path a TCP path.
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
    // One handshake per (path, server): (index in `paths`, server, peer, state, message 1).
    let mut hs = Vec::new();
    for (i, b) in paths.iter().enumerate() {
        let relayed = cfg.paths[b.slot].via.is_some();
        for &server in &cfg.servers {
            let server = cfg.server_for(server, b.attach.addr);
            let (h, msg1) = ClientHandshake::offering(
                &cfg.key,
                &cfg.server_pub,
                sid,
                b.slot as PathId,
                now_ms,
                &cfg.ciphers,
            )
            .map_err(|e| format!("handshake: {e}"))?;
            hs.push((i, server, cfg.paths[b.slot].peer(server), h, msg1));
            if relayed {
                break; // A relay leads to one server.
            }
        }
    }
    // One receiver per socket, all into one channel: (index in `paths`, packet, source, the
    // TCP connection it came on).
    let (rtx, mut rrx) = mpsc::channel::<Reply>(64);
    let readers: Vec<_> = paths
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let (s, rtx) = (b.socket.clone(), rtx.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 2048];
                while let Ok((n, from)) = s.recv_from(&mut buf).await {
                    if rtx.send((i, buf[..n].to_vec(), from, None)).await.is_err() {
                        return;
                    }
                }
            })
        })
        .collect();
    let mut won = None;
    // The first valid answer, and the valid answers after it (see `affinity`).
    let mut winner: Option<affinity::Answer> = None;
    let mut later: Vec<affinity::Answer> = Vec::new();
    let mut over_tcp = Vec::new();
    // Servers that said they are at their session limit, or that they accept none of the
    // ciphers offered (unauthenticated: only reported).
    let mut full: Vec<SocketAddr> = Vec::new();
    let mut no_cipher: Vec<(SocketAddr, Vec<Cipher>)> = Vec::new();
    let servers = {
        let mut v: Vec<SocketAddr> = hs.iter().map(|x| x.1).collect();
        v.sort();
        v.dedup();
        v.len()
    };
    'attempts: for attempt in 0..attempts {
        if attempt == 1 {
            // No answer over UDP within 0.5 s: the network may block UDP. Message 1 over
            // TCP too, from each path to each server's port (not through a relay).
            for (i, server, _, _, msg1) in &hs {
                let b = &paths[*i];
                if cfg.paths[b.slot].via.is_none() {
                    let (bind, rtx) = (b.bind.clone(), rtx.clone());
                    let (i, server, msg1) = (*i, *server, msg1.clone());
                    over_tcp.push(crate::tcp::AbortOnDrop(tokio::spawn(async move {
                        if let Some((pkt, stream)) = hello_over_tcp(&bind, server, &msg1).await {
                            let _ = rtx.send((i, pkt, server, Some(stream))).await;
                        }
                    })));
                }
            }
        }
        for (i, _, peer, _, msg1) in &hs {
            let b = &paths[*i];
            if let Err(e) = b.socket.send_to(msg1, *peer).await {
                debug!(path = %cfg.paths[b.slot].name, %peer, "handshake not sent: {e}");
            }
        }
        let sent = tokio::time::Instant::now();
        let mut deadline = sent + Duration::from_millis(500) * (1 << attempt.min(3));
        while let Ok(Some((i, pkt, from, stream))) =
            tokio::time::timeout_at(deadline, rrx.recv()).await
        {
            let ptype = match parse_header(&pkt) {
                Ok(h) if h.session_id == sid => h.ptype,
                _ => continue,
            };
            let Some(k) = hs.iter().position(|x| x.0 == i && x.2 == from) else {
                continue;
            };
            let server = hs[k].1;
            match ptype {
                PacketType::SessionLimit if !full.contains(&server) => full.push(server),
                PacketType::CipherRefused if no_cipher.iter().all(|x| x.0 != server) => {
                    if let Some((_, accepted)) = read_cipher_refusal(&pkt) {
                        warn!(%server, accepted = %names(&accepted), offered = %names(cfg.ciphers.as_slice()),
                            "the server accepts none of the packet ciphers this agent offers");
                        no_cipher.push((server, accepted));
                    }
                }
                PacketType::Handshake | PacketType::Cookie => {}
                _ => continue,
            }
            if matches!(ptype, PacketType::SessionLimit | PacketType::CipherRefused) {
                if full.len() + no_cipher.len() >= servers {
                    break 'attempts;
                }
                continue;
            }
            if ptype == PacketType::Cookie {
                // The server is under load and wants proof that we receive at our address:
                // message 1 again, now with mac2 from its cookie, at once (and in every
                // later round). A forged reply fails to open and changes nothing.
                match hs[k].3.handle_cookie_reply(&pkt) {
                    Ok(()) => {
                        hs[k].4 = hs[k].3.message1();
                        let (b, peer) = (&paths[i], hs[k].2);
                        debug!(path = %cfg.paths[b.slot].name, %peer, tcp = stream.is_some(), "cookie reply: message 1 again with mac2");
                        if let Some(stream) = stream {
                            // It came over TCP: the retry goes down the same connection.
                            let (rtx, msg1) = (rtx.clone(), hs[k].4.clone());
                            over_tcp.push(crate::tcp::AbortOnDrop(tokio::spawn(async move {
                                if let Some((pkt, stream)) = again_over_tcp(stream, &msg1).await {
                                    let _ = rtx.send((i, pkt, from, Some(stream))).await;
                                }
                            })));
                        } else if let Err(e) = b.socket.send_to(&hs[k].4, peer).await {
                            debug!(path = %cfg.paths[b.slot].name, %peer, "handshake not sent: {e}");
                        }
                    }
                    Err(e) => debug!("ignored a bad cookie reply: {e}"),
                }
                continue;
            }
            if won.is_some() {
                // A valid answer after the first: another server behind the address.
                if hs[k].3.finish(&pkt).is_ok() {
                    let (asked, own) = (hs[k].1, hs[k].3.server_address());
                    later.push(affinity::Answer {
                        path: i,
                        asked,
                        own,
                    });
                }
                continue;
            }
            match hs[k].3.finish(&pkt) {
                Ok(keys) => {
                    info!(cipher = %keys.cipher(), "packet cipher chosen by the server");
                    // A server behind a shared address (anycast, a load balancer) names
                    // its own: every path of the session goes there.
                    let server = match hs[k].3.server_address() {
                        Some(own) if own.is_ipv4() == hs[k].1.is_ipv4() => {
                            if own != hs[k].1 {
                                info!(asked = %hs[k].1, server = %own, "the server named its own address: the session goes there");
                            }
                            own
                        }
                        Some(own) => {
                            debug!(%own, "ignored a server address of the other family");
                            hs[k].1
                        }
                        None => hs[k].1,
                    };
                    if stream.is_some() {
                        warn!(path = %cfg.paths[paths[i].slot].name, server = %hs[k].1,
                            "the handshake was answered over TCP only: the network blocks UDP; the path carries braid over TCP");
                    }
                    let (asked, own) = (hs[k].1, hs[k].3.server_address());
                    let first = affinity::Answer {
                        path: i,
                        asked,
                        own,
                    };
                    // Other paths that asked this address directly could be answered by
                    // another server behind it: listen a little longer for them.
                    let others = hs
                        .iter()
                        .filter(|x| {
                            x.0 != i && x.1 == asked && cfg.paths[paths[x.0].slot].via.is_none()
                        })
                        .count();
                    won = Some((i, server, keys, stream));
                    winner = Some(first);
                    match affinity::grace(&first, others, sent.elapsed()) {
                        Some(g) => deadline = deadline.min(tokio::time::Instant::now() + g),
                        None => break 'attempts,
                    }
                }
                Err(e) => debug!("ignored a bad handshake reply: {e}"),
            }
        }
        if won.is_some() {
            break;
        }
    }
    for r in readers {
        r.abort();
    }
    drop(over_tcp);
    if won.is_none() && !no_cipher.is_empty() {
        let said: Vec<String> = no_cipher
            .iter()
            .map(|(s, list)| format!("{s} accepts only [{}]", names(list)))
            .collect();
        return Err(format!(
            "no common packet cipher: {}, and this agent offers [{}]. Give agent and server the \
             same --cipher, or auto on both",
            said.join("; "),
            names(cfg.ciphers.as_slice())
        ));
    }
    if won.is_none() && !full.is_empty() {
        return Err(format!(
            "the server(s) {full:?} refused the session: at their session limit (`braid server \
             --max-sessions`); existing sessions go on there. Ask its operator to raise the \
             limit, or wait"
        ));
    }
    let (i, server, keys, first_tcp) = won.ok_or_else(|| {
        let names: Vec<&str> = paths.iter().map(|b| cfg.paths[b.slot].name.as_str()).collect();
        format!(
            "no handshake answer from {:?} on any of the paths {names:?}: check the address, that `braid server` runs there, \
             that its key matches --server-pub and that this agent's key is in its authorized file",
            cfg.servers
        )
    })?;
    if let Some(w) = winner {
        let split = affinity::split(&w, &later);
        if !split.is_empty() {
            let name = |i: usize| cfg.paths[paths[i].slot].name.as_str();
            let others: Vec<&str> = split.iter().map(|i| name(*i)).collect();
            return Err(affinity::split_error(w.asked, name(w.path), &others));
        }
    }
    Ok(Established {
        server,
        sid,
        keys,
        first: paths[i].slot as PathId,
        first_tcp,
        paths: paths.iter().map(|b| b.towards(cfg, server)).collect(),
    })
}

#[cfg(test)]
#[path = "handshake_tests.rs"]
mod tests;

/// Cipher names for a message: `aes-256-gcm, chacha20-poly1305`.
fn names(list: &[Cipher]) -> String {
    list.iter().map(|c| c.name()).collect::<Vec<_>>().join(", ")
}
