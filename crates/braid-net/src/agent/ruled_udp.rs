//! A SOCKS5 UDP association's datagrams that do not go through the session: those whose
//! destination a rule names (`--bypass`: on one path the connection scheduler picks for the
//! association; `--pin`: on the pinned path), and, while no session is up and direct mode
//! is on, every other one (on the scheduler's path, as direct mode's associations do).
//! Each path used gets a UDP socket bound to it (one per address family), opened when its
//! first datagram comes; what comes back on those sockets is handed to the association.
//!
//! Only used when the agent has rules (an agent without rules keeps `direct_udp`).
//!
//! Owns: the association's path sockets and their receive tasks, the names resolved for
//! them. Must not touch: the SOCKS5 wire and the relay socket (`front`), the scheduler's
//! state (`direct`).

use super::direct::{Direct, DirectGuard};
use super::report::ConnGuard;
use super::Shared;
use crate::rules::Route;
use braid_proxy::TargetAddr;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

/// A datagram that came back on a path socket: (its sender, the payload).
pub(super) type Back = (SocketAddr, Vec<u8>);

/// Names kept resolved per association.
const NAMES: usize = 64;

/// One path socket of the association and its receive task.
struct Side {
    sock: Arc<UdpSocket>,
    task: JoinHandle<()>,
    _guard: DirectGuard,
}

impl Drop for Side {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The association's datagrams that go straight to their destinations.
pub(super) struct RuledUdp {
    direct: Arc<Direct>,
    /// By (path, IPv6).
    sides: HashMap<(usize, bool), Side>,
    /// The path the scheduler gave bypassed (and direct) datagrams, once chosen.
    chosen: Option<usize>,
    back: mpsc::Sender<Back>,
    names: HashMap<(usize, String), SocketAddr>,
    /// The way shown for the association (its latest datagram's).
    shown: String,
    /// The latest destination shown.
    last: Option<TargetAddr>,
}

impl RuledUdp {
    /// For an association of an agent with direct state `direct`; answers arrive on the
    /// returned receiver.
    pub(super) fn new(direct: Arc<Direct>) -> (RuledUdp, mpsc::Receiver<Back>) {
        let (back, rx) = mpsc::channel(1024);
        let r = RuledUdp {
            direct,
            sides: HashMap::new(),
            chosen: None,
            back,
            names: HashMap::new(),
            shown: String::new(),
            last: None,
        };
        (r, rx)
    }

    /// Take a datagram for `dest` if it does not go through the session (see the module
    /// doc): send it, count it on `conn`, and return true. False: the session's.
    pub(super) async fn take(
        &mut self,
        shared: &Shared,
        session_up: bool,
        conn: &ConnGuard,
        dest: &TargetAddr,
        payload: &[u8],
    ) -> bool {
        let route = shared.route(dest);
        let (only, label) = match &route {
            Route::Pin(p) => (self.direct.path_index(p), format!("pin {p}")),
            Route::Bypass => (None, "bypass".to_string()),
            // While the agent starts (`startup`) the datagram waits for the session too.
            Route::Default if session_up || !shared.direct_now() => {
                self.show(conn, "session", None);
                self.last = None;
                return false;
            }
            Route::Default => (None, "direct".to_string()),
        };
        if matches!(route, Route::Pin(_)) && only.is_none() {
            return true;
        }
        if self.last.as_ref() != Some(dest) {
            conn.set_destination(dest.to_string());
            self.last = Some(dest.clone());
        }
        conn.counters()
            .up
            .fetch_add(payload.len() as u64, Ordering::Relaxed);
        let v6 = match dest {
            TargetAddr::Ip(a) => a.is_ipv6(),
            TargetAddr::Domain(..) => false,
        };
        let Some(path) = self.side(only, v6) else {
            warn!(%dest, "{label}: no path can take this UDP flow now; a datagram dropped");
            return true;
        };
        self.show(conn, &label, Some(path));
        let Some(to) = self.resolve(path, dest).await else {
            return true;
        };
        // A name may resolve to the other family than the socket guessed.
        let path = if to.is_ipv6() != v6 {
            match self.side(Some(path), to.is_ipv6()) {
                Some(p) => p,
                None => return true,
            }
        } else {
            path
        };
        if let Some(s) = self.sides.get(&(path, to.is_ipv6())) {
            if let Err(e) = s.sock.send_to(payload, to).await {
                debug!(%to, "{label}: a datagram not sent: {e}");
            }
        }
        true
    }

    /// The path for a datagram (`only`, else the association's chosen one), with a socket
    /// of its family open.
    fn side(&mut self, only: Option<usize>, v6: bool) -> Option<usize> {
        let want = only.or(self.chosen);
        if let Some(p) = want {
            if self.sides.contains_key(&(p, v6)) {
                return Some(p);
            }
        }
        let (path, id, sock) = self.direct.udp_path_for(want, v6)?;
        if only.is_none() {
            self.chosen = Some(path);
        }
        let sock = Arc::new(sock);
        let (rx_sock, back) = (sock.clone(), self.back.clone());
        let task = tokio::spawn(async move {
            let mut buf = vec![0u8; 65_536];
            while let Ok((n, from)) = rx_sock.recv_from(&mut buf).await {
                if back.send((from, buf[..n].to_vec())).await.is_err() {
                    return;
                }
            }
        });
        let side = Side {
            sock,
            task,
            _guard: self.direct.guard(id),
        };
        self.sides.insert((path, v6), side);
        Some(path)
    }

    async fn resolve(&mut self, path: usize, dest: &TargetAddr) -> Option<SocketAddr> {
        let TargetAddr::Domain(name, _) = dest else {
            return match dest {
                TargetAddr::Ip(a) => Some(*a),
                TargetAddr::Domain(..) => None,
            };
        };
        let key = (path, name.clone());
        if let Some(a) = self.names.get(&key) {
            return Some(*a);
        }
        let a = self
            .direct
            .resolve(path, dest)
            .await
            .ok()
            .and_then(|v| v.first().copied())?;
        if self.names.len() >= NAMES {
            self.names.clear();
        }
        self.names.insert(key, a);
        Some(a)
    }

    /// Show `label` (and the path) as the association's way when it changed.
    fn show(&mut self, conn: &ConnGuard, label: &str, path: Option<usize>) {
        if self.shown != label {
            label.clone_into(&mut self.shown);
            conn.set_rule(label.to_string());
            conn.set_path(path.map_or("session".into(), |p| self.direct.name(p).to_string()));
        }
    }
}

/// The next datagram back from `r`'s path sockets (never, without rules).
pub(super) async fn next_back(r: &mut Option<mpsc::Receiver<Back>>) -> Option<Back> {
    match r {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}
