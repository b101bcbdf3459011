//! Direct mode's SOCKS5 UDP ASSOCIATE: the association gets one path for its life (chosen
//! like a TCP connection, its destination `udp`), a UDP socket bound to that path, and
//! relays between the client's datagrams and their destinations; names are resolved
//! through the path (the latest few kept).
//!
//! Owns: the association's relay loop. Must not touch: the SOCKS5 wire (braid-proxy), the
//! scheduler's state (`direct`).

use super::direct::Direct;
use super::report::StatusBoard;
use braid_proxy::socks5;
use braid_proxy::target::ReplyCode;
use braid_proxy::TargetAddr;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpStream, UdpSocket};
use tracing::debug;

/// Names kept resolved per association.
const NAMES: usize = 64;

/// Run a direct UDP association on the client's control connection `tcp`; its relay socket
/// is bound next to `bound` (the proxy's address the client reached).
pub(super) async fn associate(
    mut tcp: TcpStream,
    direct: &Arc<Direct>,
    board: &Arc<StatusBoard>,
    bound: SocketAddr,
) -> Result<(), String> {
    // Dual-stack where the path allows (an interface path; an address path has its
    // address's family): the client may send to IPv4 and IPv6 destinations alike.
    let Some((path, id, sock)) = direct.udp_path(crate::udp::ipv6_available()) else {
        let _ = socks5::reply(&mut tcp, ReplyCode::NetworkUnreachable, bound).await;
        return Err("UDP ASSOCIATE: no path can take a flow now".into());
    };
    let _guard = direct.guard(id);
    let v6_socket = sock.local_addr().is_ok_and(|a| a.is_ipv6());
    let relay = UdpSocket::bind(SocketAddr::new(bound.ip(), 0))
        .await
        .map_err(|e| e.to_string())?;
    let relay_addr = relay.local_addr().map_err(|e| e.to_string())?;
    socks5::reply(&mut tcp, ReplyCode::Succeeded, relay_addr)
        .await
        .map_err(|e| e.to_string())?;
    let peer = tcp
        .peer_addr()
        .map_or_else(|_| "?".into(), |a| a.to_string());
    let conn = board.open("socks5", peer, String::new(), Some(0));
    conn.set_path(direct.name(path).to_string());
    direct.watch(id, conn.shared_counters());
    let mut names: HashMap<String, SocketAddr> = HashMap::new();
    let mut client: Option<SocketAddr> = None;
    let mut buf = vec![0u8; 65536];
    let mut back = vec![0u8; 65536];
    let mut ctl = [0u8; 64];
    loop {
        tokio::select! {
            r = tcp.read(&mut ctl) => match r {
                Ok(0) | Err(_) => return Ok(()),
                Ok(_) => {}
            },
            r = relay.recv_from(&mut buf) => {
                let Ok((n, from)) = r else { return Err("relay socket failed".into()) };
                if tcp.peer_addr().map(|p| p.ip()).ok() != Some(from.ip()) {
                    continue;
                }
                client = Some(from);
                let Ok(p) = socks5::parse_udp(&buf[..n]) else {
                    debug!("dropped a malformed or fragmented SOCKS5 UDP datagram");
                    continue;
                };
                let dest = p.addr.to_target_addr();
                conn.set_destination(dest.to_string());
                let to = match &dest {
                    TargetAddr::Ip(a) => Some(*a),
                    TargetAddr::Domain(name, _) => match names.get(name) {
                        Some(a) => Some(*a),
                        None => {
                            let a = direct.resolve(path, &dest).await.ok().and_then(|v| v.first().copied());
                            if let Some(a) = a {
                                if names.len() >= NAMES {
                                    names.clear();
                                }
                                names.insert(name.clone(), a);
                            }
                            a
                        }
                    },
                };
                if let Some(to) = to {
                    conn.counters().up.fetch_add(p.payload.len() as u64, Ordering::Relaxed);
                    let to = crate::udp::reachable_from(v6_socket, to);
                    let _ = sock.send_to(p.payload, to).await;
                }
            }
            r = sock.recv_from(&mut back) => {
                let Ok((n, from)) = r else { return Err("the path's UDP socket failed".into()) };
                let Some(c) = client else { continue };
                let mut out = Vec::with_capacity(n + 24);
                conn.counters().down.fetch_add(n as u64, Ordering::Relaxed);
                let from = crate::udp::canonical(from);
                if socks5::emit_udp(&TargetAddr::Ip(from), &back[..n], &mut out).is_ok() {
                    let _ = relay.send_to(&out, c).await;
                }
            }
        }
    }
}
