//! TUN mode's UDP flows while no session is up (direct mode): each flow (one application
//! UDP socket, or one DNS query's resolver) gets one path for its life, chosen like a TCP
//! connection (destination `udp`), and a UDP socket bound to that path. Its datagrams go
//! from that socket to their destinations; what comes back goes into the stack as from its
//! sender. DNS goes to the resolver the application asked, through the path (there is no
//! server's resolver without a server). A flow that started direct stays direct when a
//! session comes up, as a direct TCP connection does; it ends when the TUN task forgets it.
//!
//! Owns: the flow's socket and its relay task. Must not touch: the stack and the flow table
//! (`tun`), the scheduler's state (`direct`).

use super::direct::Direct;
use super::report::StatusBoard;
use crate::rules::Route;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::debug;

/// Datagrams queued toward one direct flow's socket; more are dropped (UDP).
const QUEUE: usize = 256;

/// A datagram that came back on a direct flow: (the application's socket, the sender,
/// the payload).
pub(super) type Back = (SocketAddr, SocketAddr, Vec<u8>);

/// One direct flow: its queue toward the path's socket; the relay task ends with it.
pub(super) struct DirectFlow {
    tx: mpsc::Sender<(SocketAddr, Vec<u8>)>,
    task: JoinHandle<()>,
}

impl Drop for DirectFlow {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl DirectFlow {
    /// A flow for the application socket `app` (its family is the flow's), on a path the
    /// scheduler chooses (or, for a destination pinned by `route`, the pinned path); `None`
    /// when no path can take a flow now. Answers go to `back`.
    pub(super) fn start(
        direct: &Arc<Direct>,
        board: &Arc<StatusBoard>,
        app: SocketAddr,
        flow: u32,
        back: mpsc::Sender<Back>,
        route: &Route,
    ) -> Option<DirectFlow> {
        // `--pin`: on its path only (`None` when it cannot take the flow).
        let only = match route {
            Route::Pin(p) => Some(direct.path_index(p)?),
            _ => None,
        };
        let (path, id, sock) = direct.udp_path_for(only, app.is_ipv6())?;
        let guard = direct.guard(id);
        let conn = board.open("tun", app.to_string(), String::new(), Some(flow));
        conn.set_path(direct.name(path).to_string());
        conn.set_rule(route.label().unwrap_or_else(|| "direct".into()));
        direct.watch(id, conn.shared_counters());
        let (tx, mut rx) = mpsc::channel::<(SocketAddr, Vec<u8>)>(QUEUE);
        let task = tokio::spawn(async move {
            let _guard = guard;
            let mut buf = vec![0u8; 65_536];
            loop {
                tokio::select! {
                    m = rx.recv() => {
                        let Some((to, payload)) = m else { return };
                        conn.set_destination(to.to_string());
                        conn.counters().up.fetch_add(payload.len() as u64, Ordering::Relaxed);
                        if let Err(e) = sock.send_to(&payload, to).await {
                            debug!(%to, "TUN, direct: a datagram not sent: {e}");
                        }
                    }
                    r = sock.recv_from(&mut buf) => {
                        let Ok((n, from)) = r else { return };
                        conn.counters().down.fetch_add(n as u64, Ordering::Relaxed);
                        let b = buf[..n].to_vec();
                        if back.try_send((app, from, b)).is_err() && back.is_closed() {
                            return;
                        }
                    }
                }
            }
        });
        Some(DirectFlow { tx, task })
    }

    /// Queue a datagram for `to` (dropped when the queue is full, as UDP may).
    pub(super) fn send(&self, to: SocketAddr, payload: Vec<u8>) {
        if self.tx.try_send((to, payload)).is_err() {
            debug!(%to, "TUN, direct: a flow's queue is full; a datagram dropped");
        }
    }
}
