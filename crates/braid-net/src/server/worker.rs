//! The server's workers: each receives on its own socket of the SO_REUSEPORT group, asks
//! its [`Endpoint`] what to do with every datagram and does it (deliver to a session task,
//! send, start a session's task at its first packet, hand keys to a session, hand the
//! packet to the worker that owns it), and asks the endpoint to expire the first exchanges
//! that are due. Worker 0 runs on the caller's runtime (inside `Server::run`), the others each
//! on a thread of its own with a current-thread tokio runtime.
//!
//! Owns: the receive loop, the hand-over channels between workers, the worker threads and
//! stopping them, writing the replay guard to its state file, routing the TCP fallback's
//! packets to their worker. Must not touch: the handshake policy (the endpoint's), the
//! sessions' protocol (the session tasks').

use super::endpoint::{Endpoint, Outcome, SessionHandle, Shared};
use super::session::{spawn_session, FirstCheck, PathAddr, SessionCtx};
use super::steer::Steering;
use crate::driver::Incoming;
use crate::protect::RekeyInbox;
use crate::tcp::Outbound;
use braid_crypto::parse_header;
use bytes::BytesMut;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, watch};
use tracing::{info, warn};

/// What one worker did, since the server started. Each on cache lines of its own: the
/// workers count every packet, and must not make each other's cores wait.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct WorkerCounters {
    /// Datagrams received on the worker's own socket.
    pub received: AtomicU64,
    /// Of those, handed over to the worker that owns their session (0 when the kernel
    /// steers by session id).
    pub handed_over: AtomicU64,
    /// Sessions started on this worker (at their first packet after the handshake).
    pub sessions: AtomicU64,
}

/// A packet on its way to a worker, where it came from and the local address it was sent
/// to.
pub(super) type Handoff = Incoming;

/// Control datagrams (handshakes, anything not a transport packet) a worker reads per
/// [`CONTROL_PERIOD`], at most: beyond that (a flood) they wait in the control socket's
/// buffer, where the kernel drops what does not fit, so that a flood costs the worker a
/// bounded share of its core (about 51 000 a second, each an HMAC and a lookup) and its
/// sessions keep the rest. Far above any real handshake rate (each costs a few hundred
/// microseconds of Diffie-Hellman).
pub(super) const CONTROL_PER_PERIOD: usize = 256;

/// See [`CONTROL_PER_PERIOD`].
pub(super) const CONTROL_PERIOD: Duration = Duration::from_millis(5);

/// How many packets may wait in a worker's hand-over channel (dropped beyond, like a full
/// socket buffer).
pub(super) const HANDOFF_QUEUE: usize = 4096;

/// The endpoint's handle of one session.
pub(super) struct Handle {
    pub tx: mpsc::Sender<Incoming>,
    pub inbox: Arc<RekeyInbox>,
    pub addrs: super::path_addr::PathAddrs,
    pub first: FirstCheck,
}

impl SessionHandle for Handle {
    fn has_address(&self, addr: SocketAddr) -> bool {
        self.addrs
            .lock()
            .is_ok_and(|m| m.values().any(|a| a.peer == addr))
    }
}

/// What all workers share.
pub(super) struct Common {
    pub shared: Arc<Shared>,
    pub session: SessionCtx,
    pub steering: Steering,
    pub handoff: Vec<mpsc::Sender<Handoff>>,
    pub stats: Arc<[WorkerCounters]>,
    /// Bumped after each change of the replay guard (only with a state file).
    pub state_tx: Option<watch::Sender<u64>>,
}

/// One worker.
pub(super) struct Worker {
    index: usize,
    /// Its sessions' transport packets arrive here...
    socket: Arc<UdpSocket>,
    /// ...and everything else here (handshakes, floods of them, garbage): see `steer`.
    control: Arc<UdpSocket>,
    out: Outbound,
    endpoint: Endpoint<Handle>,
    common: Arc<Common>,
    warned: bool,
}

impl Worker {
    /// Worker `index` on its transport and control sockets (call on the runtime that will
    /// run it).
    pub fn new(
        index: usize,
        (socket, control): (std::net::UdpSocket, std::net::UdpSocket),
        common: Arc<Common>,
    ) -> io::Result<Self> {
        let socket = Arc::new(UdpSocket::from_std(socket)?);
        let control = Arc::new(UdpSocket::from_std(control)?);
        let out = Outbound {
            udp: socket.clone(),
            tcp: common.session.peers.clone(),
        };
        let endpoint = Endpoint::new(
            common.shared.clone(),
            common.steering,
            index,
            super::unix_ms(),
        )
        .map_err(io::Error::other)?;
        Ok(Worker {
            index,
            socket,
            control,
            out,
            endpoint,
            common,
            warned: false,
        })
    }

    /// Serve until dropped; `inbox` brings packets handed over by other workers and the
    /// TCP fallback.
    pub async fn run(mut self, mut inbox: mpsc::Receiver<Handoff>) -> io::Result<()> {
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<u64>();
        let (expire_tx, mut expire_rx) = mpsc::unbounded_channel::<u64>();
        let ends = (done_tx, expire_tx);
        let mut tick = tokio::time::interval(super::DropLog::PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // GRO: one receive may hold several datagrams of one sender, and one `recvmmsg`
        // up to `batch::MESSAGES` receives (datagrams of several senders and sizes, or a
        // device without GRO); each datagram is handed on in an allocation of its own.
        crate::batch::enable_gro(self.socket.as_ref());
        let mut rb = crate::batch::RecvBatch::new();
        // One datagram at a time from the control socket: a flood there waits in its own
        // buffer (and is dropped there when it is full), while each turn of this loop may
        // take the transport socket's next batch.
        let mut cbuf = BytesMut::new();
        let (socket, control) = (self.socket.clone(), self.control.clone());
        let mut control_left = CONTROL_PER_PERIOD;
        let mut refill = tokio::time::Instant::now() + CONTROL_PERIOD;
        // One timer for every session's first exchange, set to the earliest due.
        let far = || tokio::time::Instant::now() + Duration::from_secs(86_400);
        let first_due = tokio::time::sleep_until(far());
        tokio::pin!(first_due);
        let mut armed = None;
        loop {
            let next = self.endpoint.next_due();
            if next != armed {
                armed = next;
                let at = next.map(tokio::time::Instant::from_std);
                first_due.as_mut().reset(at.unwrap_or_else(far));
            }
            tokio::select! {
                r = crate::batch::recv_batch_async(&socket, &mut rb) => if r.is_ok() {
                    for (r, datagrams) in rb.messages() {
                        for data in datagrams {
                            let pkt = Incoming { from: r.from, local: r.local, data, header: None };
                            self.packet(pkt, true, &ends);
                        }
                    }
                },
                _ = tokio::time::sleep_until(refill), if control_left == 0 => {
                    control_left = CONTROL_PER_PERIOD;
                    refill = tokio::time::Instant::now() + CONTROL_PERIOD;
                }
                r = crate::batch::recv_async(&control, &mut cbuf), if control_left > 0 => match r {
                    Ok(r) => {
                        control_left -= 1;
                        if control_left == 0 && tokio::time::Instant::now() >= refill {
                            control_left = CONTROL_PER_PERIOD;
                            refill = tokio::time::Instant::now() + CONTROL_PERIOD;
                        }
                        for data in crate::batch::split(&mut cbuf, r.segment_size) {
                            let pkt = Incoming { from: r.from, local: r.local, data, header: None };
                            self.packet(pkt, true, &ends);
                        }
                    }
                    Err(_) => cbuf.clear(),
                },
                Some(pkt) = inbox.recv() => self.packet(pkt, false, &ends),
                // Ends and expiries come in bursts as long as handshakes do: all that
                // wait are taken at once (one a turn fell behind a flood of handshakes,
                // and the sessions they end lived on).
                Some(id) = done_rx.recv() => {
                    self.ended(id);
                    while let Ok(id) = done_rx.try_recv() {
                        self.ended(id);
                    }
                }
                Some(id) = expire_rx.recv() => {
                    self.endpoint.session_expired(id);
                    while let Ok(id) = expire_rx.try_recv() {
                        self.endpoint.session_expired(id);
                    }
                }
                _ = &mut first_due, if armed.is_some() => {
                    let now = std::time::Instant::now();
                    self.endpoint.expire_due(now, |id, h| h.first.check(id, &ends.1));
                }
                _ = tick.tick() => self.endpoint.tick(std::time::Instant::now()),
            }
        }
    }

    /// One datagram: received on this worker's socket (`own`), or handed over. Every reply
    /// goes from the local address it was sent to (where the socket says it).
    fn packet(
        &mut self,
        mut pkt: Incoming,
        own: bool,
        ends: &(mpsc::UnboundedSender<u64>, mpsc::UnboundedSender<u64>),
    ) {
        let stats = &self.common.stats[self.index];
        if own {
            stats.received.fetch_add(1, Ordering::Relaxed);
        }
        let (from, local) = (pkt.from, pkt.local);
        let now = std::time::Instant::now();
        // The header is parsed once (or was, by the TCP fallback or the worker that handed
        // the packet over) and travels with the packet to the session.
        if pkt.header.is_none() {
            pkt.header = parse_header(&pkt.data).ok();
        }
        let header = pkt.header;
        let at = (from, local);
        match (self.endpoint).handle_parsed(now, super::unix_ms(), at, &pkt.data, header) {
            Outcome::Deliver(h) => {
                let _ = h.tx.try_send(pkt);
            }
            Outcome::Send { to, bytes } => {
                let _ = self.out.send_to(&bytes, to, local);
            }
            Outcome::Accepted {
                id,
                client,
                cipher,
                reply,
                to,
            } => {
                let _ = self.out.send_to(reply, to, local);
                info!(%from, agent = %super::fingerprint(&client), key = %client.to_base64(), session = format_args!("{id:016x}"), worker = self.index, %cipher, "agent authenticated");
                if self.common.session.peers.contains(&from) {
                    // Said only now, of an agent that authenticated: a TCP connection alone
                    // may be an agent whose key is wrong (issue 38 item 4).
                    info!(%from, "agent connected over TCP (its network blocks UDP)");
                }
                self.persist_guard();
            }
            Outcome::Start { session, keys } => {
                stats.sessions.fetch_add(1, Ordering::Relaxed);
                let id = session.id;
                let first = (
                    id,
                    session.path,
                    PathAddr {
                        peer: session.from,
                        local: session.local,
                    },
                );
                let (tx, addrs, inbox, first) = spawn_session(
                    &self.common.session,
                    &self.out,
                    first,
                    (session.client, keys),
                    ends.0.clone(),
                );
                let _ = tx.try_send(pkt);
                let handle = Handle {
                    tx,
                    inbox,
                    addrs,
                    first,
                };
                self.endpoint.started(id, handle);
            }
            Outcome::Rotate { session, reply, to } => {
                tracing::debug!(%from, "session keys rotated");
                // The new keys reach the session task before message 2 goes out.
                if let Some((h, keys)) = session {
                    h.inbox.put(keys);
                }
                let _ = self.out.send_to(&reply, to, local);
                self.persist_guard();
            }
            Outcome::Forward(owner) if own => {
                stats.handed_over.fetch_add(1, Ordering::Relaxed);
                if !self.warned {
                    self.warned = true;
                    warn!(worker = self.index, owner, "a packet reached a worker that does not own its session: handing such packets over (slower); counted per worker");
                }
                if let Some(tx) = self.common.handoff.get(owner) {
                    let _ = tx.try_send(pkt);
                }
            }
            // Handed over to the wrong worker: cannot happen (one steering for all).
            Outcome::Forward(_) | Outcome::Drop(_) => {}
        }
    }

    /// Session `id`'s task ended.
    fn ended(&mut self, id: u64) {
        if self.endpoint.session_ended(id) {
            let active = self.common.shared.sessions();
            info!(
                session = format_args!("{id:016x}"),
                active,
                worker = self.index,
                "session ended"
            );
        }
    }

    /// Tell the task that writes the replay guard to its state file that it changed.
    fn persist_guard(&self) {
        if let Some(tx) = &self.common.state_tx {
            tx.send_modify(|n| *n += 1);
        }
    }
}

/// Run worker `w` as a task of the current runtime, not inside the caller's future: the
/// runtime polls the future it blocks on before every 61 tasks (tokio's `event_interval`),
/// so a worker run there, busy with a stream of packets, held its own sessions' tasks to
/// 61 polls per turn of its receive loop. Under 4000 handshakes a second their first
/// exchange checks ran at a sixth of that rate, and every session lived until the load
/// stopped (30 KiB each). A task of its own, it takes its turn with them. The task is
/// aborted when the returned future is dropped.
pub(super) async fn spawn(w: Worker, inbox: mpsc::Receiver<Handoff>) -> io::Result<()> {
    struct AbortOnDrop(tokio::task::JoinHandle<io::Result<()>>);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let mut task = AbortOnDrop(tokio::spawn(w.run(inbox)));
    match (&mut task.0).await {
        Ok(r) => r,
        Err(e) => Err(io::Error::other(format!("the worker task failed: {e}"))),
    }
}

/// Hands each packet of the TCP fallback to the worker that owns its session (packets that
/// are not braid go to worker 0, which drops them).
pub(super) async fn route_tcp(
    mut rx: mpsc::Receiver<Handoff>,
    steering: Steering,
    workers: Vec<mpsc::Sender<Handoff>>,
) {
    while let Some(mut pkt) = rx.recv().await {
        pkt.header = parse_header(&pkt.data).ok();
        let w = pkt.header.map_or(0, |h| steering.worker_of(h.session_id));
        if workers[w].send(pkt).await.is_err() {
            return;
        }
    }
}

/// The worker threads: told to stop and joined when dropped (with `Server::run`).
pub(super) struct Threads {
    stop: Vec<tokio::sync::oneshot::Sender<()>>,
    joins: Vec<std::thread::JoinHandle<()>>,
    /// A worker thread that ended sends its index.
    pub died: mpsc::UnboundedReceiver<usize>,
    died_tx: mpsc::UnboundedSender<usize>,
}

impl Threads {
    pub fn new() -> Threads {
        let (died_tx, died) = mpsc::unbounded_channel();
        Threads {
            stop: Vec::new(),
            joins: Vec::new(),
            died,
            died_tx,
        }
    }

    /// Start worker `index` on a thread of its own.
    pub fn spawn(
        &mut self,
        index: usize,
        socket: (std::net::UdpSocket, std::net::UdpSocket),
        inbox: mpsc::Receiver<Handoff>,
        common: Arc<Common>,
    ) -> io::Result<()> {
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let died = DiesWith(index, self.died_tx.clone());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let join = std::thread::Builder::new()
            .name(format!("braid-worker-{index}"))
            .spawn(move || {
                let _died = died;
                rt.block_on(async move {
                    let w = match Worker::new(index, socket, common) {
                        Ok(w) => w,
                        Err(e) => return warn!(worker = index, "cannot start: {e}"),
                    };
                    tokio::select! {
                        r = spawn(w, inbox) => if let Err(e) = r {
                            warn!(worker = index, "stopped: {e}");
                        },
                        _ = stop_rx => {}
                    }
                });
                // Sessions and relays end with the runtime; a blocking DNS lookup does
                // not hold the thread up.
                rt.shutdown_timeout(Duration::from_millis(200));
            })?;
        self.stop.push(stop_tx);
        self.joins.push(join);
        Ok(())
    }
}

/// Tells `Server::run` that its worker thread ended.
struct DiesWith(usize, mpsc::UnboundedSender<usize>);

impl Drop for DiesWith {
    fn drop(&mut self) {
        let _ = self.1.send(self.0);
    }
}

impl Drop for Threads {
    fn drop(&mut self) {
        for s in self.stop.drain(..) {
            let _ = s.send(());
        }
        for j in self.joins.drain(..) {
            let _ = j.join();
        }
    }
}

/// Writes the replay guard to its state file whenever it changed (coalescing changes that
/// come faster than the disk: each write takes a snapshot of the guard as it is then).
pub(super) async fn persist_guard(
    path: PathBuf,
    mut rx: watch::Receiver<u64>,
    shared: Arc<Shared>,
) {
    let mut failures = 0u64;
    while rx.changed().await.is_ok() {
        rx.borrow_and_update();
        let g = shared.with_guard(|g| g.clone());
        let p = path.clone();
        match tokio::task::spawn_blocking(move || g.save(&p)).await {
            Ok(Ok(())) => failures = 0,
            Ok(Err(e)) => {
                failures += 1;
                if failures == 1 || failures.is_power_of_two() {
                    warn!("{e} (failure {failures}); a restarted server could accept a replayed handshake of the last minutes once");
                }
            }
            Err(_) => return,
        }
    }
}
