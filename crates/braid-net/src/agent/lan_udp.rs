//! UDP from hosts that do not speak SOCKS5 (a LAN behind a router-mode agent): datagrams
//! nftables redirected (`redirect_udp`) and DNS queries to the agent's resolver port
//! (`resolver`). Each client socket (address and port) becomes one datagram flow of the
//! session, as a SOCKS5 UDP association does, with a task of its own; destinations a rule
//! names, and every datagram while no session is up in direct mode, go straight to their
//! destinations (`ruled_udp`). Answers go back to the client by the caller's [`Reply`].
//!
//! Owns: the table of client flows, each flow's task and its idle end. Must not touch:
//! the sockets the datagrams arrive on and leave from (`tproxy`, the callers), the
//! session's wire format (braid-proxy's `datagram`).

use super::report::ConnGuard;
use super::ruled_udp::{next_back, RuledUdp};
use super::Shared;
use crate::bridge::Cmd;
use braid_proxy::{datagram, TargetAddr};
use bytes::Bytes;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::mpsc;
use tracing::debug;

/// A client flow with no datagram either way for this long ends.
pub(super) const FLOW_IDLE: Duration = Duration::from_secs(120);
/// Client flows at once; datagrams of more are dropped.
const MAX_FLOWS: usize = 4096;
/// Datagrams queued toward one flow's task.
const QUEUE: usize = 256;

/// One datagram from a client: where direct mode and rules send it, where the session
/// sends it, and the payload.
pub(super) struct Up {
    pub direct: Option<SocketAddr>,
    pub session: TargetAddr,
    pub payload: Bytes,
}

/// How answers reach the client.
pub(super) trait Reply: Send + 'static {
    /// Send `payload`, which came from `from`, to `client`.
    fn send(
        &mut self,
        from: SocketAddr,
        client: SocketAddr,
        payload: &[u8],
    ) -> impl std::future::Future<Output = ()> + Send;
}

/// The client flows of one front end (`kind`, as `braid status` shows it).
pub(super) struct Flows<R> {
    shared: Shared,
    kind: &'static str,
    /// Learn names from every answer (DNS), not only from port 53's.
    all_dns: bool,
    make_reply: Box<dyn Fn() -> R + Send>,
    clients: HashMap<SocketAddr, mpsc::Sender<Up>>,
}

impl<R: Reply> Flows<R> {
    pub(super) fn new(
        shared: Shared,
        kind: &'static str,
        all_dns: bool,
        make_reply: impl Fn() -> R + Send + 'static,
    ) -> Flows<R> {
        Flows {
            shared,
            kind,
            all_dns,
            make_reply: Box::new(make_reply),
            clients: HashMap::new(),
        }
    }

    /// Hand a client's datagram to its flow (started if new).
    pub(super) fn take(&mut self, client: SocketAddr, up: Up) {
        if let Some(tx) = self.clients.get(&client) {
            match tx.try_send(up) {
                Ok(()) => return,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    debug!(%client, "{}: a flow's queue is full; a datagram dropped", self.kind);
                    return;
                }
                // The flow ended (idle): a new one.
                Err(mpsc::error::TrySendError::Closed(u)) => {
                    self.clients.remove(&client);
                    return self.take(client, u);
                }
            }
        }
        if self.clients.len() >= MAX_FLOWS {
            self.clients.retain(|_, tx| !tx.is_closed());
            if self.clients.len() >= MAX_FLOWS {
                debug!(%client, "{}: too many UDP flows; a datagram dropped", self.kind);
                return;
            }
        }
        let (tx, rx) = mpsc::channel(QUEUE);
        let _ = tx.try_send(up);
        self.clients.insert(client, tx);
        let flow = Flow {
            shared: self.shared.clone(),
            client,
            all_dns: self.all_dns,
            conn: self
                .shared
                .board
                .open(self.kind, client.to_string(), String::new(), None),
        };
        tokio::spawn(flow.run(rx, (self.make_reply)()));
    }
}

struct Flow {
    shared: Shared,
    client: SocketAddr,
    all_dns: bool,
    conn: ConnGuard,
}

impl Flow {
    async fn run(self, mut rx: mpsc::Receiver<Up>, mut reply: impl Reply) {
        let shared = &self.shared;
        let id = shared.next_flow.fetch_add(1, Ordering::Relaxed);
        let (tx, mut from_session) = mpsc::channel::<Bytes>(1024);
        if let Ok(mut m) = shared.flows.lock() {
            m.insert(id, tx);
        }
        let (mut ruled, mut ruled_rx) = match &shared.direct {
            Some(d) => {
                let (r, rx) = RuledUdp::new(d.clone());
                (Some(r), Some(rx))
            }
            None => (None, None),
        };
        if ruled.is_none() {
            self.conn.set_path("session".into());
            self.conn.set_rule("session".into());
        }
        let mut last_dest = None;
        loop {
            tokio::select! {
                m = rx.recv() => {
                    let Some(up) = m else { break };
                    self.up(id, up, ruled.as_mut(), &mut last_dest).await;
                }
                Some(d) = from_session.recv() => {
                    let Ok(p) = datagram::parse(&d) else { continue };
                    let TargetAddr::Ip(from) = p.addr.to_target_addr() else { continue };
                    self.down(&mut reply, from, p.payload).await;
                }
                Some((from, d)) = next_back(&mut ruled_rx) => {
                    self.down(&mut reply, from, &d).await;
                }
                _ = tokio::time::sleep(FLOW_IDLE) => break,
            }
        }
        if let Ok(mut m) = shared.flows.lock() {
            m.remove(&id);
        }
    }

    /// A client's datagram: straight to its destination (rules, direct mode) or into the
    /// session.
    async fn up(
        &self,
        id: u32,
        up: Up,
        ruled: Option<&mut RuledUdp>,
        last_dest: &mut Option<TargetAddr>,
    ) {
        let shared = &self.shared;
        let session = shared.session.borrow().clone();
        if let (Some(r), Some(to)) = (ruled, up.direct) {
            let dest = TargetAddr::Ip(to);
            if r.take(shared, session.is_some(), &self.conn, &dest, &up.payload)
                .await
            {
                *last_dest = None;
                return;
            }
        }
        let Some(cmd) = session else {
            debug!(client = %self.client, "no session: a datagram dropped");
            return;
        };
        if last_dest.as_ref() != Some(&up.session) {
            self.conn.set_destination(up.session.to_string());
            *last_dest = Some(up.session.clone());
        }
        self.conn
            .counters()
            .up
            .fetch_add(up.payload.len() as u64, Ordering::Relaxed);
        let mut out = Vec::with_capacity(up.payload.len() + 32);
        if datagram::emit(id, &up.session, &up.payload, &mut out).is_ok() {
            let flow = datagram::session_flow(&out);
            let _ = cmd.send(Cmd::Datagram(flow, Bytes::from(out)));
        }
    }

    /// An answer from `from` to the client (names learned from DNS answers first).
    async fn down(&self, reply: &mut impl Reply, from: SocketAddr, payload: &[u8]) {
        if self.all_dns || from.port() == 53 {
            self.shared.learn(payload);
        }
        self.conn
            .counters()
            .down
            .fetch_add(payload.len() as u64, Ordering::Relaxed);
        reply.send(from, self.client, payload).await;
    }
}
