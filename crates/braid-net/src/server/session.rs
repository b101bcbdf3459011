//! Starting a session on the server (when its first transport packet arrives, see
//! `endpoint`): the session task (`driver::SessionTask`) with its packet protection, how
//! the worker asks whether its first exchange completed ([`FirstCheck`]),
//! its path addresses, its streams to TCP targets and its UDP flows, and its entry on the
//! status board.
//!
//! Owns: what one session is made of on the server and the tasks around it. Must not
//! touch: the handshake policy (the endpoint's), the receive loop (the worker's), the
//! session's protocol (braid-core's).

pub(super) use super::path_addr::{PathAddr, PathAddrs};
use super::report::{self, ServerBoard};
use super::{inbound, relay, ServerConfig};
use crate::bridge::{Cmd, SessionFn, StreamHandle};
use crate::driver::{AddressHook, Clock, Incoming, PathSender, SessionTask};
use crate::protect::{Aead, KeyStats, RekeyInbox};
use crate::tcp::{Outbound, TcpPeers};
use braid_core::{PathId, Session};
use braid_crypto::{PublicKey, SessionKeys};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

/// Whether a started session completed its first exchange: the endpoint keeps the due
/// times (one queue, no timer per session) and the worker calls [`FirstCheck::check`]
/// when one is due.
pub(super) struct FirstCheck {
    established: Arc<AtomicBool>,
    cmd: mpsc::UnboundedSender<Cmd>,
}

impl FirstCheck {
    /// Session `id`'s first exchange is due: nothing if the session is established (or
    /// gone); else its task, which has the core, checks, and sends the session id to
    /// `expire` if the core's handshake has not completed.
    pub fn check(&self, id: u64, expire: &mpsc::UnboundedSender<u64>) {
        if self.established.load(Ordering::Relaxed) {
            return;
        }
        let (flag, expire) = (self.established.clone(), expire.clone());
        let f = move |s: &mut Session, _now| {
            if s.is_established() {
                flag.store(true, Ordering::Relaxed);
            } else {
                let _ = expire.send(id);
            }
        };
        let _ = self.cmd.send(Cmd::Session(SessionFn(Box::new(f))));
    }
}

/// What every session of a server needs.
pub(super) struct SessionCtx {
    pub cfg: ServerConfig,
    pub board: Arc<ServerBoard>,
    pub keys: Arc<KeyStats>,
    pub peers: TcpPeers,
    /// The server's inbound ports.
    pub inbound: Arc<inbound::Ports>,
    /// The system's name server (for a server without `resolver`).
    pub system_resolver: relay::SystemResolver,
    /// Where agents' connections and datagrams may go.
    pub egress: Arc<super::egress::Egress>,
    /// Each agent's share: the gate its sessions send through, its streams' meter.
    pub shares: Arc<super::shares::Shares>,
}

/// Start session `id`, whose message 1 came on path `path` from `from` (and to the local
/// address in it), on the current runtime, sending through `out`. Its end goes to `done`.
/// Returns where its packets go, its path addresses, where rotated keys go and how to ask
/// whether its first exchange completed.
pub(super) fn spawn_session(
    ctx: &SessionCtx,
    out: &Outbound,
    (id, first_path, from): (u64, PathId, PathAddr),
    (client, keys): (PublicKey, SessionKeys),
    done: mpsc::UnboundedSender<u64>,
) -> (
    mpsc::Sender<Incoming>,
    PathAddrs,
    Arc<RekeyInbox>,
    FirstCheck,
) {
    let cfg = &ctx.cfg;
    let inbox = Arc::new(RekeyInbox::default());
    let mut tcfg = cfg.transport.clone();
    // The seed of the session's challenge tokens: unguessable, like everything else.
    tcfg.seed = braid_crypto::random::random_u64().unwrap_or(tcfg.seed ^ id);
    tcfg.max_streams = cfg.max_streams;
    tcfg.session_window = cfg.max_buffered;
    let clock = Clock::new();
    let mut session = Session::accept(tcfg, clock.now(), id);
    // Each path's datagrams fit its address family's header (`crate::pmtu`).
    let limit = |peer| crate::pmtu::datagram_limit(peer, None);
    session.set_path_max_datagram(clock.now(), first_path, limit(from.peer));
    let (in_tx, in_rx) = mpsc::channel(4096);
    let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
    let (acc_tx, mut acc_rx) = mpsc::unbounded_channel::<StreamHandle>();
    let (dg_tx, dg_rx) = mpsc::channel::<bytes::Bytes>(1024);
    // Whether the core completed its handshake: set by the address hook on an
    // authenticated packet, and by the worker's check when the first exchange is due
    // (`FirstExchange`); no task or channel of its own.
    let established = Arc::new(AtomicBool::new(false));
    let seen = established.clone();
    let addrs: PathAddrs = Arc::new(Mutex::new(HashMap::new()));
    addrs.lock().map(|mut m| m.insert(first_path, from)).ok();
    let hook_addrs = addrs.clone();
    let tcp = ctx.peers.clone();
    let hook: AddressHook = Box::new(move |s: &mut Session, now, path, from, local| {
        if !seen.load(Ordering::Relaxed) && s.is_established() {
            seen.store(true, Ordering::Relaxed);
        }
        let Ok(mut m) = hook_addrs.lock() else {
            return false;
        };
        let addr = PathAddr { peer: from, local };
        match m.get(&path) {
            Some(a) if *a == addr => {}
            // The agent now asks another address of this server (a unicast address after
            // an anycast one): replies follow it.
            Some(a) if a.peer == from => {
                m.insert(path, addr);
            }
            Some(a) => {
                let name = s.peer_path_name(path).unwrap_or("").to_string();
                info!(path, %name, old = %a.peer, new = %from, "path moved; validating the new address");
                m.insert(path, addr);
                s.path_address_changed(now, path);
                s.set_path_max_datagram(now, path, limit(from));
                s.set_path_reliable(now, path, tcp.contains(&from));
            }
            None => {
                if m.len() >= 16 {
                    return false;
                }
                m.insert(path, addr);
                s.set_path_reliable(now, path, tcp.contains(&from));
                s.set_path_max_datagram(now, path, limit(from));
            }
        }
        true
    });
    let open = Arc::new(AtomicUsize::new(0));
    let udp_flows = Arc::new(AtomicUsize::new(0));
    let idle = cfg.stream_idle_timeout;
    let ports = inbound::SessionPorts::new(ctx.inbound.clone(), client, id, cmd_tx.clone(), idle);
    ctx.board.insert(
        id,
        report::Live {
            key: client,
            started: std::time::Instant::now(),
            cmd: cmd_tx.clone(),
            open_streams: open.clone(),
            udp_flows: udp_flows.clone(),
            addrs: addrs.clone(),
            established: established.clone(),
            inbound: ports.clone(),
        },
    );
    let sender = SharedSocketSender {
        out: out.clone(),
        addrs: addrs.clone(),
    };
    let share = ctx.shares.agent(client);
    let task = SessionTask {
        gate: Some(share.gate()),
        session,
        protection: Aead::server(keys, cfg.rekey, inbox.clone(), ctx.keys.clone()),
        sender,
        incoming: in_rx,
        cmd_rx,
        cmd_tx: cmd_tx.clone(),
        accepted: Some(acc_tx),
        datagrams: Some(dg_tx),
        on_packet: Some(hook),
        events: None,
        clock,
        // An agent that opens every stream it may and never reads holds at most this much
        // of the server's memory in its writers (`bridge::SessionCredit`).
        credit: Some(crate::bridge::SessionCredit::new(cfg.max_buffered)),
    };
    let connect_timeout = cfg.connect_timeout;
    let resolver = cfg.resolver.or_else(|| ctx.system_resolver.get());
    let stream_ports = ports.clone();
    let egress = ctx.egress.agent(client);
    let stream_egress = egress.clone();
    let max_streams = cfg.max_streams as usize;
    tokio::spawn(async move {
        while let Some(h) = acc_rx.recv().await {
            let n = open.fetch_add(1, Ordering::Relaxed) + 1;
            if n == max_streams {
                // The session's MAX_STREAMS keeps the agent from opening more.
                warn!(
                    session = format_args!("{id:016x}"),
                    limit = max_streams,
                    "stream limit reached: this agent's new connections are refused until one closes"
                );
            }
            let open = open.clone();
            let (ports, egress) = (stream_ports.clone(), stream_egress.clone());
            let share = share.clone();
            tokio::spawn(async move {
                let to = (&ports, &egress, &share);
                relay::serve_stream(h, (connect_timeout, resolver), idle, to).await;
                open.fetch_sub(1, Ordering::Relaxed);
            });
        }
    });
    let limits = (cfg.max_udp_flows, resolver);
    let flow_ports = ports.clone();
    tokio::spawn(relay::udp_flows(
        dg_rx,
        cmd_tx.clone(),
        limits,
        (id, flow_ports, egress),
        udp_flows,
    ));
    let board = ctx.board.clone();
    // The task's future made here, not inside the spawned block: a `task` captured by the
    // block would keep its own slot beside the future it moves into (twice the bytes
    // allocated for every session).
    let run = task.run();
    tokio::spawn(async move {
        if let Some(e) = run.await {
            info!(session = format_args!("{id:016x}"), "session ended: {e}");
        }
        board.remove(id);
        ports.release();
        let _ = done.send(id);
    });
    let first = FirstCheck {
        established,
        cmd: cmd_tx,
    };
    (in_tx, addrs, inbox, first)
}

/// Sends on the worker's socket (or down a TCP connection) to each path's current peer
/// address, from the local address that path's agent sends to.
struct SharedSocketSender {
    out: Outbound,
    addrs: PathAddrs,
}

impl PathSender for SharedSocketSender {
    fn send(&mut self, path: PathId, packet: &[u8]) {
        let to = self.addrs.lock().ok().and_then(|m| m.get(&path).copied());
        if let Some(to) = to {
            if let Err(e) = self.out.send_to(packet, to.peer, to.local) {
                debug!(path, "send failed: {e}");
            }
        }
    }

    fn send_batch(&mut self, path: PathId, packets: &[u8], segment_size: usize) {
        let to = self.addrs.lock().ok().and_then(|m| m.get(&path).copied());
        let Some(PathAddr { peer, local }) = to else {
            return;
        };
        let r = if self.out.tcp.contains(&peer) {
            (packets.chunks(segment_size.max(1))).try_for_each(|p| self.out.send_to(p, peer, None))
        } else {
            crate::batch::send_from(self.out.udp.as_ref(), peer, local, packets, segment_size)
        };
        if let Err(e) = r {
            debug!(path, "send failed: {e}");
        }
    }
}
