//! Transparent redirection of UDP: datagrams nftables handed to the agent with `tproxy`
//! (in prerouting, for a LAN) are carried to their original destinations, each LAN socket
//! one datagram flow of the session (`lan_udp`); answers reach the LAN host from the
//! address that answered (a transparent socket bound to it), as if no agent were between.
//! docs/deployment.md has the rules.
//!
//! Owns: the receive loop on the tproxy socket and the reply sockets. Must not touch: the
//! socket options (`tproxy`), the flows (`lan_udp`), TCP redirection (`redirect`).

use super::lan_udp::{Flows, Reply, Up};
use super::tproxy;
use super::Shared;
use braid_proxy::TargetAddr;
use bytes::Bytes;
use std::collections::HashMap;
use std::net::SocketAddr;
use tokio::net::UdpSocket;
use tracing::{debug, info, warn};

/// Reply sockets one flow keeps (one per address that answered it).
const REPLY_SOCKETS: usize = 64;

/// Answers sent from the address that answered, through a transparent socket bound to it.
#[derive(Default)]
struct FromOrigin {
    socks: HashMap<SocketAddr, UdpSocket>,
}

impl Reply for FromOrigin {
    async fn send(&mut self, from: SocketAddr, client: SocketAddr, payload: &[u8]) {
        if !self.socks.contains_key(&from) {
            if self.socks.len() >= REPLY_SOCKETS {
                self.socks.clear();
            }
            match tproxy::reply_from(from) {
                Ok(s) => {
                    self.socks.insert(from, s);
                }
                Err(e) => {
                    debug!(%from, %client, "redirected UDP: cannot answer from {from}: {e}");
                    return;
                }
            }
        }
        if let Some(s) = self.socks.get(&from) {
            if let Err(e) = s.send_to(payload, client).await {
                debug!(%from, %client, "redirected UDP: an answer not sent: {e}");
            }
        }
    }
}

/// Listen for UDP on `--redirect ADDR` (the TCP port's number) with a tproxy socket; without
/// one (no CAP_NET_ADMIN) TCP alone is redirected, and the log says so.
pub(super) fn start(
    addr: SocketAddr,
    shared: &Shared,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) {
    match tproxy::listen(addr) {
        Ok(s) => tasks.push(tokio::spawn(run(s, shared.clone()))),
        Err(e) => warn!(
            "UDP is not redirected: cannot listen for UDP handed over by nftables (tproxy) \
             on {addr}: {e} (a transparent socket needs CAP_NET_ADMIN); TCP is"
        ),
    }
}

/// Receive redirected datagrams until the agent stops.
pub(super) async fn run(sock: UdpSocket, shared: Shared) {
    let local = sock.local_addr().ok();
    info!(listen = ?local, "accepting UDP redirected by nftables (tproxy)");
    let mut flows = Flows::new(shared, "redirect-udp", false, FromOrigin::default);
    let mut buf = vec![0u8; 65_536];
    let mut straight = 0u64;
    loop {
        let (n, client, orig) = match tproxy::recv(&sock, &mut buf).await {
            Ok(x) => x,
            Err(e) => {
                debug!("redirected UDP: a receive failed: {e}");
                continue;
            }
        };
        // A datagram sent to the port itself was not redirected: nowhere to carry it.
        let Some(to) = orig.filter(|o| !to_this_port(*o, local)) else {
            straight += 1;
            if straight == 1 || straight.is_multiple_of(1024) {
                warn!(%client, "a datagram straight to the UDP redirect port, not redirected by nftables (tproxy; see docs/deployment.md); dropped");
            }
            continue;
        };
        let up = Up {
            direct: Some(to),
            session: TargetAddr::Ip(to),
            payload: Bytes::copy_from_slice(&buf[..n]),
        };
        flows.take(client, up);
    }
}

/// True when `orig` is the redirect port itself (`local`) at an address of this machine:
/// a datagram sent to the port, not one nftables redirected.
fn to_this_port(orig: SocketAddr, local: Option<SocketAddr>) -> bool {
    let Some(local) = local else { return false };
    if orig.port() != local.port() || orig.port() == 0 {
        return orig.port() == 0;
    }
    // An address of this machine is one a plain socket may bind.
    std::net::UdpSocket::bind(SocketAddr::new(orig.ip(), 0)).is_ok()
}
