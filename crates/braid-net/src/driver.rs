//! The session task: one braid session driven by tokio.
//!
//! Owns: the loop that feeds a [`Session`] with received datagrams, timer expiries and
//! application commands, sends what it emits (sealed by the packet protection), and moves
//! stream bytes through [`StreamBridge`]s. Must not touch: sockets (it sends through a
//! [`PathSender`] and receives from a channel) or what streams carry (the agent and the
//! server decide that). The session itself stays sans-IO: this is the only place that turns
//! wall-clock time into its `now`.

use crate::bridge::{Cmd, StreamBridge, StreamHandle};
use braid_core::wire::Header;
use braid_core::{Event, Instant, PathId, Session, StreamId};
use bytes::{Bytes, BytesMut};
use std::collections::HashMap;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

pub mod counters;
mod shaper;

/// Sealing, opening and key management, and what they ask of the session task: defined
/// with the sans-IO connection in braid-conn.
pub use braid_conn::{Control, PacketProtection};

/// Sends datagrams on a path.
pub trait PathSender: Send + 'static {
    /// Send one datagram on `path`; errors are logged and the packet counts as lost.
    fn send(&mut self, path: PathId, packet: &[u8]);
    /// Send datagrams of `segment_size` bytes back to back in `packets` (the last may be
    /// shorter) on `path`, as one UDP GSO send where the transport can; by default one
    /// [`Self::send`] each.
    fn send_batch(&mut self, path: PathId, packets: &[u8], segment_size: usize) {
        for p in packets.chunks(segment_size.max(1)) {
            self.send(path, p);
        }
    }
}

/// Holds a session's sending to a rate it shares with others (the server's per-agent rate
/// limits and fair shares, `server::shares`): while it says wait, the session's datagrams
/// wait in a short queue (`shaper`), like at any slower link.
pub trait SendGate: Send + 'static {
    /// When sending may go on (`None`: now).
    fn wait_until(&mut self) -> Option<tokio::time::Instant>;
    /// `bytes` of datagrams went out.
    fn sent(&mut self, bytes: usize);
}

/// A datagram received for this session.
#[derive(Debug)]
pub struct Incoming {
    /// Where it came from (the server uses this to follow the peer's addresses).
    pub from: std::net::SocketAddr,
    /// The local address it was sent to, where the socket says it (a server on a wildcard
    /// address, see `pktinfo`): the server's replies on its path go from there.
    pub local: Option<std::net::IpAddr>,
    /// The whole UDP payload.
    pub data: BytesMut,
    /// Its header, when whoever received it parsed it already (the server's worker): the
    /// session then does not parse it again.
    pub header: Option<Header>,
}

thread_local! {
    /// Where session tasks on this thread build their batches of datagrams (used without
    /// an await in between, so tasks of one thread never share it at once).
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Where the handle of a newly opened stream goes.
type OpenReply = tokio::sync::oneshot::Sender<Result<StreamHandle, braid_core::StreamError>>;

/// Maps tokio's clock onto the core's nanoseconds.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    epoch: tokio::time::Instant,
}

impl Clock {
    /// A clock whose epoch is now.
    pub fn new() -> Self {
        Clock {
            epoch: tokio::time::Instant::now(),
        }
    }
    /// The core's `now`.
    pub fn now(&self) -> Instant {
        Instant(self.epoch.elapsed().as_nanos() as u64)
    }
    /// The tokio instant of a core instant.
    pub fn to_tokio(&self, t: Instant) -> tokio::time::Instant {
        self.epoch + std::time::Duration::from_nanos(t.as_nanos())
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// Called for every authenticated packet before the session sees it, with where it came
/// from and the local address it was sent to (`Incoming`); the server uses it to learn and
/// re-validate peer addresses. Returns false to drop the packet.
pub type AddressHook = Box<
    dyn FnMut(&mut Session, Instant, PathId, std::net::SocketAddr, Option<std::net::IpAddr>) -> bool
        + Send,
>;

/// Everything a session task needs.
pub struct SessionTask<P: PacketProtection, S: PathSender> {
    /// The session.
    pub session: Session,
    /// Packet protection.
    pub protection: P,
    /// Where datagrams go.
    pub sender: S,
    /// Datagrams for this session.
    pub incoming: mpsc::Receiver<Incoming>,
    /// Application commands.
    pub cmd_rx: mpsc::UnboundedReceiver<Cmd>,
    /// A sender for the same commands (given to new stream handles).
    pub cmd_tx: mpsc::UnboundedSender<Cmd>,
    /// Streams the peer opens are handed here.
    pub accepted: Option<mpsc::UnboundedSender<StreamHandle>>,
    /// Received datagrams are handed here.
    pub datagrams: Option<mpsc::Sender<Bytes>>,
    /// Path address bookkeeping (server).
    pub on_packet: Option<AddressHook>,
    /// Session events the owner wants to see (established, paths, closed).
    pub events: Option<mpsc::UnboundedSender<Event>>,
    /// The clock.
    pub clock: Clock,
    /// What holds its sending to a shared rate, if anything.
    pub gate: Option<Box<dyn SendGate>>,
    /// What all its streams' writers may hold together (the server's `max_buffered`).
    pub credit: Option<crate::bridge::SessionCredit>,
}

impl<P: PacketProtection, S: PathSender> SessionTask<P, S> {
    /// Run until the session closes. Returns why it closed.
    pub async fn run(mut self) -> Option<braid_core::SessionError> {
        let mut bridges: HashMap<StreamId, StreamBridge> = HashMap::new();
        // Streams asked for before the session finished its handshake.
        let mut pending_opens: Vec<OpenReply> = Vec::new();
        let mds = self.session.config().max_datagram_size;
        let max_segments = crate::batch::max_segments(mds);
        // Pacers may release a whole batch at once where the rate allows.
        self.session.set_max_burst(self.clock.now(), max_segments);
        let mut sleep = Box::pin(tokio::time::sleep_until(tokio::time::Instant::now()));
        let mut shaper = self.gate.take().map(shaper::Shaper::new);
        loop {
            let now = self.clock.now();
            while let Some(c) = self.protection.poll_control(now) {
                match c {
                    Control::Send(path, pkt) => self.sender.send(path, &pkt),
                    Control::Rotated => self.session.ping_paths(now),
                    Control::Expired => self.session.close(
                        now,
                        0,
                        "the session keys expired: no key rotation completed in time",
                    ),
                }
            }
            // Send everything the session has, in batches of one path's datagrams, built in
            // the thread's scratch buffer (one per thread, not one per session: a thousand
            // idle sessions must not each keep a batch's worth of memory).
            SCRATCH.with_borrow_mut(|buf| {
                buf.resize(mds * max_segments, 0);
                while let Some(b) = self.session.poll_transmit_batch(now, buf, max_segments) {
                    self.seal_and_send(b, buf, &mut shaper);
                }
            });
            let held = shaper.as_mut().and_then(|s| s.flush(&mut self.sender));
            // Events.
            let mut closed = false;
            while let Some(ev) = self.session.poll_event() {
                match &ev {
                    Event::StreamOpened(id) => {
                        let (bridge, handle) = StreamBridge::with_credit(
                            *id,
                            self.cmd_tx.clone(),
                            self.credit.clone(),
                        );
                        bridges.insert(*id, bridge);
                        match &self.accepted {
                            Some(acc) if acc.send(handle).is_ok() => {}
                            _ => {
                                let _ = self.session.stream_reset(*id, 1);
                                let _ = self.session.stream_stop(*id, 1);
                            }
                        }
                    }
                    Event::StreamReadable(id) => {
                        if let Some(b) = bridges.get_mut(id) {
                            b.pump_read(&mut self.session);
                        }
                    }
                    Event::StreamWritable(id) => {
                        if let Some(b) = bridges.get_mut(id) {
                            b.flush(&mut self.session);
                        }
                    }
                    Event::StreamReset { id, code } => {
                        if let Some(b) = bridges.get_mut(id) {
                            b.pump_read(&mut self.session);
                            b.abort(*code);
                        }
                    }
                    Event::StreamStopped { id, .. } => {
                        if let Some(b) = bridges.get_mut(id) {
                            b.abort(0);
                        }
                    }
                    Event::DatagramReceived => {
                        while let Some(d) = self.session.recv_datagram() {
                            if let Some(tx) = &self.datagrams {
                                let _ = tx.try_send(d);
                            }
                        }
                    }
                    Event::Established => {
                        for reply in pending_opens.drain(..) {
                            self.open(reply, &mut bridges);
                        }
                    }
                    Event::Closed(e) => {
                        info!(
                            session = format_args!("{:016x}", self.session.id()),
                            "session closed: {e}"
                        );
                        closed = true;
                    }
                    Event::PathValidated(p) => debug!(path = p, "path validated"),
                    Event::PathClosed(p) => debug!(path = p, "path closed"),
                    Event::PathDatagramSizeDropped { path, from, to } => {
                        let name = self.session.path_name(*path).unwrap_or("").to_string();
                        warn!(
                            path,
                            %name,
                            "datagrams of {from} bytes are lost on this path while smaller \
                             ones arrive (an MTU black hole, no ICMP): sending {to}-byte \
                             datagrams and searching upward again"
                        );
                    }
                    _ => {}
                }
                if let Some(tx) = &self.events {
                    let _ = tx.send(ev);
                }
            }
            bridges.retain(|_, b| !b.is_done());
            if closed || (self.session.is_closed() && self.session.poll_timeout().is_none()) {
                for b in bridges.values_mut() {
                    b.abort(u64::MAX);
                }
                return self.session.error().cloned();
            }
            let wake = match (self.session.poll_timeout(), self.protection.poll_timeout()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            // Datagrams waiting for the gate: wake when it opens.
            let wake = match (wake.map(|t| self.clock.to_tokio(t)), held) {
                (Some(w), Some(h)) => Some(w.min(h)),
                (w, h) => w.or(h),
            };
            if let Some(t) = wake {
                sleep.as_mut().reset(t);
            } else {
                sleep
                    .as_mut()
                    .reset(tokio::time::Instant::now() + std::time::Duration::from_secs(3600));
            }
            tokio::select! {
                biased;
                pkt = self.incoming.recv() => {
                    let Some(pkt) = pkt else { return self.session.error().cloned() };
                    self.receive(pkt);
                    // Take what else is waiting, without going back to sleep.
                    for _ in 0..64 {
                        match self.incoming.try_recv() {
                            Ok(pkt) => self.receive(pkt),
                            Err(_) => break,
                        }
                    }
                }
                cmd = self.cmd_rx.recv() => {
                    let Some(cmd) = cmd else { continue };
                    self.command(cmd, &mut bridges, &mut pending_opens);
                    for _ in 0..256 {
                        match self.cmd_rx.try_recv() {
                            Ok(cmd) => self.command(cmd, &mut bridges, &mut pending_opens),
                            Err(_) => break,
                        }
                    }
                }
                _ = &mut sleep => {
                    self.session.handle_timeout(self.clock.now());
                }
            }
            counters::wakeup(self.session.side());
        }
    }

    /// Seal every datagram of a batch in place and send the batch; a datagram that fails
    /// to seal is left out (the datagrams around it go as two batches).
    /// ... through `shaper` when the session has one.
    fn seal_and_send(
        &mut self,
        b: braid_core::BatchTransmit,
        buf: &mut [u8],
        shaper: &mut Option<shaper::Shaper>,
    ) {
        counters::sent(self.session.side(), b.segments);
        let seg = b.segment_size;
        let mut out = |sender: &mut S, packets: &[u8]| match shaper.as_mut() {
            Some(s) => s.offer(sender, b.path, packets, seg),
            None => sender.send_batch(b.path, packets, seg),
        };
        let mut start = 0;
        for i in 0..b.segments {
            if self.protection.seal(&mut buf[b.segment(i)]) {
                continue;
            }
            if i > start {
                out(&mut self.sender, &buf[start * seg..i * seg]);
            }
            start = i + 1;
        }
        if start < b.segments {
            out(&mut self.sender, &buf[start * seg..b.len]);
        }
    }

    fn receive(&mut self, mut pkt: Incoming) {
        let opened = match pkt.header {
            Some(h) => self.protection.open_parsed(&mut pkt.data, h),
            None => self.protection.open(&mut pkt.data),
        };
        let Some(hdr) = opened else {
            debug!(from = %pkt.from, "dropped a packet that failed authentication");
            return;
        };
        let now = self.clock.now();
        if let Some(hook) = self.on_packet.as_mut() {
            if !hook(&mut self.session, now, hdr.path_id, pkt.from, pkt.local) {
                return;
            }
        }
        self.session.handle_packet(now, hdr, pkt.data.freeze());
    }

    fn open(&mut self, reply: OpenReply, bridges: &mut HashMap<StreamId, StreamBridge>) {
        let r = self.session.open_stream().map(|id| {
            let (bridge, handle) =
                StreamBridge::with_credit(id, self.cmd_tx.clone(), self.credit.clone());
            bridges.insert(id, bridge);
            handle
        });
        let _ = reply.send(r);
    }

    fn command(
        &mut self,
        cmd: Cmd,
        bridges: &mut HashMap<StreamId, StreamBridge>,
        pending_opens: &mut Vec<OpenReply>,
    ) {
        let s = &mut self.session;
        match cmd {
            Cmd::Write(id, data) => match bridges.get_mut(&id) {
                Some(b) => b.write(s, data),
                None => {
                    if let Some(c) = &self.credit {
                        c.give_back(data.len());
                    }
                    warn!(stream = id, "write on a stream that is gone")
                }
            },
            Cmd::Finish(id) => {
                if let Some(b) = bridges.get_mut(&id) {
                    b.finish(s);
                }
            }
            Cmd::Reset(id, code) => {
                let _ = s.stream_reset(id, code);
                let _ = s.stream_stop(id, code);
                if let Some(b) = bridges.get_mut(&id) {
                    b.abort(code);
                }
            }
            Cmd::Wake(id) => {
                if let Some(b) = bridges.get_mut(&id) {
                    b.pump_read(s);
                }
            }
            Cmd::Datagram(flow, d) => {
                if let Err(e) = s.send_flow_datagram(self.clock.now(), flow, d) {
                    debug!("datagram dropped: {e}");
                }
            }
            Cmd::Open(reply) => {
                if s.is_established() || s.is_closed() {
                    self.open(reply, bridges);
                } else {
                    pending_opens.push(reply);
                }
            }
            Cmd::Session(f) => (f.0)(s, self.clock.now()),
            Cmd::Close => {
                let now = self.clock.now();
                s.close(now, 0, "closed by the application");
            }
        }
    }
}
