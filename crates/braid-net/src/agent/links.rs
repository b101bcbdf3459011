//! The transports of the current session's paths: a UDP socket per path, or a TCP
//! connection for a path whose network blocks UDP, and the receive task of each.
//!
//! Owns: the table the session task sends through ([`PathSockets`]), binding a UDP path,
//! connecting a TCP path in the background (a connection that completes after its path was
//! removed is dropped), telling the session which paths are reliable (TCP), and reporting
//! TCP connections that end. Must not touch: the decisions (`pathmgr`), the session's
//! lifecycle (`run`).

use super::handshake::Bound;
use crate::batch;
use crate::driver::{Incoming, PathSender};
use crate::tcp::{self, FrameSender};
use crate::udp::PathBind;
use braid_core::PathId;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::net::{TcpStream, UdpSocket};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

/// How packets of a path leave.
pub(super) enum Route {
    /// A UDP socket, to this peer.
    Udp(Arc<UdpSocket>, SocketAddr),
    /// A TCP connection's writer.
    Tcp(FrameSender),
}

pub(super) type SocketTable = Arc<Mutex<HashMap<PathId, Route>>>;

/// Aborts a task when dropped.
pub(super) struct Task(pub JoinHandle<()>);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Per-path routes, each to its peer (the server, or a relay in front of it).
pub(super) struct PathSockets {
    pub table: SocketTable,
}

impl PathSender for PathSockets {
    fn send(&mut self, path: PathId, packet: &[u8]) {
        let Ok(t) = self.table.lock() else { return };
        match t.get(&path) {
            Some(Route::Udp(s, to)) => {
                let r = match s.try_send_to(packet, *to) {
                    // A socket bound a moment ago has no write readiness from the reactor
                    // yet (tokio learns it on its next turn): send directly, the socket is
                    // non-blocking. Without this a new path's first challenge was dropped
                    // and validation waited a full probe timeout (1 s).
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        socket2::SockRef::from(s.as_ref()).send_to(packet, &(*to).into())
                    }
                    r => r,
                };
                if let Err(e) = r {
                    debug!(path, "send failed: {e}");
                }
            }
            Some(Route::Tcp(tx)) => {
                let _ = tx.send(tcp::frame(packet));
            }
            None => {}
        }
    }

    fn send_batch(&mut self, path: PathId, packets: &[u8], segment_size: usize) {
        let Ok(t) = self.table.lock() else { return };
        match t.get(&path) {
            // Straight to the non-blocking socket (see `send` for why not through tokio).
            Some(Route::Udp(s, to)) => {
                if let Err(e) = batch::send(s.as_ref(), *to, packets, segment_size) {
                    debug!(path, "send failed: {e}");
                }
            }
            Some(Route::Tcp(tx)) => {
                for p in packets.chunks(segment_size.max(1)) {
                    let _ = tx.send(tcp::frame(p));
                }
            }
            None => {}
        }
    }
}

/// A TCP connection attempt that finished: (path id, generation, slot, result).
pub(super) type Connected = (PathId, u64, usize, std::io::Result<TcpStream>);

/// The paths' transports of one session.
pub(super) struct Links {
    pub table: SocketTable,
    readers: HashMap<PathId, Task>,
    in_tx: mpsc::Sender<Incoming>,
    /// TCP connections being made, by path id, with their generation.
    connecting: HashMap<PathId, (u64, Task)>,
    /// The generation of each path id's current TCP connection.
    tcp_gen: HashMap<PathId, u64>,
    next_gen: u64,
    conn_tx: mpsc::UnboundedSender<Connected>,
    /// Finished connection attempts.
    pub conn_rx: mpsc::UnboundedReceiver<Connected>,
    closed_tx: mpsc::UnboundedSender<(PathId, u64)>,
    /// TCP connections that ended: (path id, generation).
    pub closed_rx: mpsc::UnboundedReceiver<(PathId, u64)>,
}

impl Links {
    pub fn new(in_tx: mpsc::Sender<Incoming>) -> Links {
        let (conn_tx, conn_rx) = mpsc::unbounded_channel();
        let (closed_tx, closed_rx) = mpsc::unbounded_channel();
        Links {
            table: Arc::new(Mutex::new(HashMap::new())),
            readers: HashMap::new(),
            in_tx,
            connecting: HashMap::new(),
            tcp_gen: HashMap::new(),
            next_gen: 0,
            conn_tx,
            conn_rx,
            closed_tx,
            closed_rx,
        }
    }

    /// Use a bound UDP socket for path `id`.
    pub fn add_udp(&mut self, id: PathId, b: &Bound) {
        self.readers.insert(id, udp_reader(b, self.in_tx.clone()));
        if let Ok(mut t) = self.table.lock() {
            t.insert(id, Route::Udp(b.socket.clone(), b.peer));
        }
    }

    /// Start connecting path `id` (configured path `slot`, bound as `bind`) to `server` over TCP; the
    /// result arrives on `conn_rx`.
    pub fn connect_tcp(&mut self, slot: usize, bind: PathBind, id: PathId, server: SocketAddr) {
        self.next_gen += 1;
        let generation = self.next_gen;
        let tx = self.conn_tx.clone();
        let task = Task(tokio::spawn(async move {
            let r = tcp::connect(&bind, server).await;
            let _ = tx.send((id, generation, slot, r));
        }));
        self.connecting.insert(id, (generation, task));
    }

    /// A connection attempt finished: true (and the path's route set) when it is still
    /// wanted and connected.
    pub fn tcp_connected(&mut self, c: Connected, name: &str, server: SocketAddr) -> bool {
        let (id, generation, _, r) = c;
        if self.connecting.get(&id).map(|x| x.0) != Some(generation) {
            return false; // The path was removed or re-added meanwhile.
        }
        self.connecting.remove(&id);
        let stream = match r {
            Ok(s) => s,
            Err(e) => {
                warn!(path = %name, %server, "TCP fallback failed: {e}; the path is retried later");
                return false;
            }
        };
        self.add_tcp(id, generation, stream, name, server);
        true
    }

    /// Use a connected TCP stream for path `id` (a new generation if `generation` is 0).
    pub fn add_tcp(
        &mut self,
        id: PathId,
        generation: u64,
        stream: TcpStream,
        name: &str,
        server: SocketAddr,
    ) {
        let generation = if generation == 0 {
            self.next_gen += 1;
            self.next_gen
        } else {
            generation
        };
        let (tx, task) = tcp::agent_link(
            stream,
            server,
            self.in_tx.clone(),
            (id, generation),
            self.closed_tx.clone(),
        );
        self.readers.insert(id, Task(task));
        self.tcp_gen.insert(id, generation);
        if let Ok(mut t) = self.table.lock() {
            t.insert(id, Route::Tcp(tx));
        }
        info!(path = %name, %server, "TCP connection up: the path's packets go over TCP");
    }

    /// True when path `id` goes over TCP now.
    pub fn is_tcp(&self, id: PathId) -> bool {
        self.tcp_gen.contains_key(&id)
    }

    /// True when the ended connection `(id, generation)` is the path's current one.
    pub fn is_current(&self, id: PathId, generation: u64) -> bool {
        self.tcp_gen.get(&id) == Some(&generation)
    }

    /// Close path `id`'s transport (socket or connection, or the attempt to connect).
    pub fn remove(&mut self, id: PathId) {
        self.readers.remove(&id);
        self.connecting.remove(&id);
        self.tcp_gen.remove(&id);
        if let Ok(mut t) = self.table.lock() {
            t.remove(&id);
        }
    }
}

/// The receive task of a path's UDP socket: GRO on, and up to `batch::MESSAGES` receives
/// per system call (`recvmmsg`), each possibly several datagrams the kernel coalesced;
/// each datagram is handed on in an allocation of its own.
fn udp_reader(b: &Bound, in_tx: mpsc::Sender<Incoming>) -> Task {
    let (s, peer) = (b.socket.clone(), b.peer);
    Task(tokio::spawn(async move {
        batch::enable_gro(s.as_ref());
        let mut rb = batch::RecvBatch::new();
        while batch::recv_batch_async(&s, &mut rb).await.is_ok() {
            for (r, datagrams) in rb.messages() {
                if r.from != peer {
                    continue;
                }
                for data in datagrams {
                    let incoming = Incoming {
                        from: r.from,
                        local: None,
                        data,
                        header: None,
                    };
                    if in_tx.send(incoming).await.is_err() {
                        return;
                    }
                }
            }
        }
    }))
}
