//! The agent as a resolver (`--dns ADDR:PORT`): it answers DNS over UDP and TCP on that
//! address by passing every query through the session to the server's resolver
//! ([`braid_proxy::datagram::SERVER_RESOLVER`]), so hosts of a LAN behind a router-mode
//! agent resolve over the bonded link, from the server's side; the answers teach domain
//! rules (`--bypass`, `--pin`) their addresses, as TUN mode's do. While no session is up in
//! direct mode, queries go to the system's first nameserver that is not on loopback,
//! through a path.
//!
//! Owns: the resolver port's sockets and what a query becomes. Must not touch: the flows
//! (`lan_udp`), the stream-open exchange (`direct::open_stream`), accepting TCP (`front`).

use super::direct::Relay;
use super::dns_tcp::{self, Answers};
use super::lan_udp::{Flows, Reply, Up};
use super::Shared;
use crate::bridge::{StreamMsg, StreamReader, StreamWriter};
use bytes::Bytes;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tracing::{debug, info};

/// Where queries go in direct mode: the system's first nameserver not on loopback (a
/// loopback one may be this agent, or cannot be reached through a path).
fn direct_nameserver() -> Option<SocketAddr> {
    super::dns::system_nameservers()
        .into_iter()
        .find(|a| !a.ip().is_loopback())
}

/// The resolver port's UDP and TCP sockets, bound to `addr` (TCP on the port UDP got, when
/// `addr` asks for any port).
pub(super) async fn bind(addr: SocketAddr) -> std::io::Result<(UdpSocket, TcpListener)> {
    let err = |what: &str, e: std::io::Error| {
        std::io::Error::new(
            e.kind(),
            format!("cannot listen for DNS ({what}) on {addr}: {e}"),
        )
    };
    let udp = UdpSocket::bind(addr).await.map_err(|e| err("UDP", e))?;
    let at = udp.local_addr()?;
    let tcp = TcpListener::bind(at).await.map_err(|e| err("TCP", e))?;
    Ok((udp, tcp))
}

/// Answers from the resolver port.
struct FromPort(Arc<UdpSocket>);

impl Reply for FromPort {
    async fn send(&mut self, _from: SocketAddr, client: SocketAddr, payload: &[u8]) {
        if let Err(e) = self.0.send_to(payload, client).await {
            debug!(%client, "DNS: an answer not sent: {e}");
        }
    }
}

/// Answer queries over UDP until the agent stops.
pub(super) async fn run_udp(sock: UdpSocket, shared: Shared) {
    let sock = Arc::new(sock);
    let reply = sock.clone();
    let mut flows = Flows::new(shared, "dns", true, move || FromPort(reply.clone()));
    let direct = direct_nameserver();
    let mut buf = vec![0u8; 65_536];
    loop {
        let (n, client) = match sock.recv_from(&mut buf).await {
            Ok(x) => x,
            Err(e) => {
                debug!("DNS: a receive failed: {e}");
                continue;
            }
        };
        let up = Up {
            direct,
            session: dns_tcp::server_resolver(),
            payload: Bytes::copy_from_slice(&buf[..n]),
        };
        flows.take(client, up);
    }
}

/// One TCP connection to the resolver port: a stream to the server's resolver.
pub(super) async fn tcp_conn(tcp: TcpStream, shared: &Shared) -> Result<(), String> {
    let peer = tcp.peer_addr().map_err(|e| e.to_string())?;
    let relay = dns_tcp::open(shared, direct_nameserver())
        .await
        .map_err(|code| format!("DNS over TCP: {code}"))?;
    let conn = shared
        .board
        .open("dns", peer.to_string(), "resolver".into(), None);
    let idle = shared.cfg.proxy_limits.idle_timeout;
    match relay {
        // Answers read as they pass, for domain rules.
        Relay::Session(r, w, early) if !shared.cfg.rules.is_empty() => {
            conn.set_path("session".into());
            conn.set_rule("session".into());
            let c = conn.counters();
            relay_learning(tcp, (r, w, early), shared, idle, (&c.up, &c.down)).await;
        }
        relay => relay.run(tcp, &conn, idle).await,
    }
    Ok(())
}

/// Relay a DNS connection and its stream, both ways until both end (or nothing moves for
/// `idle`), learning names from the answers.
async fn relay_learning(
    tcp: TcpStream,
    (mut reader, writer, early): (StreamReader, StreamWriter, Bytes),
    shared: &Shared,
    idle: Duration,
    (up, down): (&std::sync::atomic::AtomicU64, &std::sync::atomic::AtomicU64),
) {
    let (mut rd, mut wr) = tcp.into_split();
    let to_stream = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match tokio::time::timeout(idle, rd.read(&mut buf)).await {
                Ok(Ok(0)) => return writer.finish(),
                Ok(Ok(n)) => {
                    up.fetch_add(n as u64, Ordering::Relaxed);
                    if writer
                        .write(Bytes::copy_from_slice(&buf[..n]))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                _ => return writer.reset(crate::splice::TCP_FAILED),
            }
        }
    };
    let to_client = async {
        let mut answers = Answers::default();
        let mut next = Some(early);
        loop {
            let b = match next.take() {
                Some(b) => b,
                None => match tokio::time::timeout(idle, reader.read()).await {
                    Ok(Some(StreamMsg::Data(b))) => b,
                    Ok(Some(StreamMsg::Fin)) => {
                        return wr.shutdown().await.is_ok();
                    }
                    _ => return false,
                },
            };
            answers.feed(&b, |m| shared.learn(m));
            down.fetch_add(b.len() as u64, Ordering::Relaxed);
            if wr.write_all(&b).await.is_err() {
                return false;
            }
        }
    };
    // A stream that fails ends the client's side too (it is dropped).
    tokio::pin!(to_stream, to_client);
    tokio::select! {
        _ = &mut to_stream => { to_client.await; }
        clean = &mut to_client => if clean { to_stream.await },
    }
}

/// Start the resolver port's tasks.
pub(super) fn start(
    (udp, tcp): (UdpSocket, TcpListener),
    shared: &Shared,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) {
    if let Ok(a) = udp.local_addr() {
        info!(listen = %a, "DNS resolver ready (UDP and TCP), through the server's resolver");
    }
    tasks.push(tokio::spawn(run_udp(udp, shared.clone())));
    tasks.push(tokio::spawn(super::front::accept_loop(
        tcp,
        shared.clone(),
        super::front::Front::Other(|tcp, shared| {
            Box::pin(async move { tcp_conn(tcp, &shared).await })
        }),
    )));
}
