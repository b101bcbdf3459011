//! The [`Connection`]: one session end with its packet protection and path addresses,
//! driven without I/O. Inputs: [`Connection::handle_datagram`] (a received datagram with
//! its addresses and arrival time), [`Connection::handle_timeout`],
//! [`Connection::set_path_addr`] (an address change the pump saw). Outputs:
//! [`Connection::poll_transmit`] (sealed datagrams with destination, source address and
//! GSO segment size), [`Connection::poll_timeout`], [`Connection::poll_event`].
//!
//! At the server end ([`Connection::server`]) the connection follows the agent's
//! addresses: a path's first authenticated packet gives its address, and a packet of the
//! path from another address (a NAT that rebound, a moved link) moves the path there and
//! has the session validate it again. At the agent end ([`Connection::new`]) the pump sets
//! each path's addresses (its own links).
//!
//! Owns: the address of every path, turning protection's key-management requests into
//! datagrams and session calls, sealing batches. Must not touch: sockets, clocks, locks;
//! the session's protocol (public API of braid-core only).

use crate::addr::{datagram_limit, PathAddr, Transport};
use crate::protect::{Control, PacketProtection};
use braid_core::wire::Header;
use braid_core::{Event, Instant, PathId, Session};
use bytes::BytesMut;
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use tracing::info;

/// Most paths whose addresses a server connection learns (more are dropped: an agent
/// cannot make the server keep an address table of any size).
pub const MAX_LEARNED_PATHS: usize = 16;

/// A datagram received for this connection.
#[derive(Debug)]
pub struct Received {
    /// Where it came from.
    pub from: SocketAddr,
    /// The local address it was sent to, where the socket says it.
    pub local: Option<IpAddr>,
    /// UDP or TCP.
    pub transport: Transport,
    /// The whole datagram (opened in place).
    pub data: BytesMut,
    /// Its header, when the receiver parsed it already (the server's worker routes by it).
    pub header: Option<Header>,
}

/// Sealed datagrams to send: `len` bytes at the start of the buffer given to
/// [`Connection::poll_transmit`], `segments` datagrams of `segment_size` bytes back to back
/// (the last may be shorter), one UDP GSO send where the transport can.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// The path they belong to (the agent's pump picks the path's socket by it).
    pub path: PathId,
    /// Where they go.
    pub destination: SocketAddr,
    /// The source address to send from (`None`: the kernel chooses).
    pub src_ip: Option<IpAddr>,
    /// UDP or TCP.
    pub transport: Transport,
    /// The stride of the datagrams.
    pub segment_size: usize,
    /// How many datagrams (at least 1).
    pub segments: usize,
    /// Bytes in the buffer.
    pub len: usize,
}

/// Counters of what the connection dropped.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Drops {
    /// Received datagrams that did not open (forged, corrupted, replayed, truncated, under
    /// another key) or a key-management packet protection consumed.
    pub unopened: u64,
    /// Authenticated datagrams of a path beyond [`MAX_LEARNED_PATHS`].
    pub too_many_paths: u64,
    /// Datagrams the session made for a path with no address yet.
    pub unaddressed: u64,
}

/// One session end with its packet protection and path addresses.
pub struct Connection<P: PacketProtection> {
    session: Session,
    protection: P,
    addrs: HashMap<PathId, PathAddr>,
    /// Server: learn and follow the peer's addresses from authenticated packets.
    follow_peer: bool,
    /// Key-management packets to send (path, bytes).
    control: VecDeque<(PathId, Vec<u8>)>,
    drops: Drops,
}

impl<P: PacketProtection> Connection<P> {
    /// An end whose pump sets each path's addresses ([`Self::set_path_addr`]): the agent
    /// (its own links), the simulator (both ends).
    pub fn new(session: Session, protection: P) -> Self {
        Connection {
            session,
            protection,
            addrs: HashMap::new(),
            follow_peer: false,
            control: VecDeque::new(),
            drops: Drops::default(),
        }
    }

    /// The server's end, whose first path `first_path` came from `first` (the listener
    /// saw its handshake): later paths and moves are learned from authenticated packets.
    pub fn server(
        now: Instant,
        session: Session,
        protection: P,
        first_path: PathId,
        first: PathAddr,
    ) -> Self {
        let mut c = Connection {
            follow_peer: true,
            ..Self::new(session, protection)
        };
        c.addrs.insert(first_path, first);
        c.fit_path(now, first_path, first);
        c
    }

    /// The session (read its state, streams, statistics).
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The session, to call its application API (streams, datagrams, paths).
    pub fn session_mut(&mut self) -> &mut Session {
        &mut self.session
    }

    /// The packet protection.
    pub fn protection(&self) -> &P {
        &self.protection
    }

    /// What was dropped so far.
    pub fn drops(&self) -> Drops {
        self.drops
    }

    /// A path's addresses.
    pub fn path_addr(&self, path: PathId) -> Option<PathAddr> {
        self.addrs.get(&path).copied()
    }

    /// Every path's addresses.
    pub fn path_addrs(&self) -> impl Iterator<Item = (PathId, PathAddr)> + '_ {
        self.addrs.iter().map(|(p, a)| (*p, *a))
    }

    /// A path's addresses, new or changed (the agent's pump: a link came up or its address
    /// changed). A changed remote address has the session validate the path again.
    pub fn set_path_addr(&mut self, now: Instant, path: PathId, addr: PathAddr) {
        let old = self.addrs.insert(path, addr);
        if old.is_some_and(|o| o.remote != addr.remote || o.local != addr.local) {
            self.session.path_address_changed(now, path);
        }
    }

    /// Forget a path's addresses (its link went away).
    pub fn remove_path_addr(&mut self, path: PathId) {
        self.addrs.remove(&path);
    }

    /// A datagram arrived at `now`: open it, follow its address (server) and give it to the
    /// session. Returns whether the session took it; a datagram that does not open is
    /// dropped and counted, and changes nothing else.
    pub fn handle_datagram(&mut self, now: Instant, r: Received) -> bool {
        self.drive_protection(now);
        let mut data = r.data;
        let opened = match r.header {
            Some(h) => self.protection.open_parsed(&mut data, h),
            None => self.protection.open(&mut data),
        };
        let Some(hdr) = opened else {
            self.drops.unopened += 1;
            return false;
        };
        let addr = PathAddr {
            remote: r.from,
            local: r.local,
            transport: r.transport,
        };
        if self.follow_peer && !self.follow(now, hdr.path_id, addr) {
            self.drops.too_many_paths += 1;
            return false;
        }
        self.session.handle_packet(now, hdr, data.freeze());
        true
    }

    /// The server's address bookkeeping for an authenticated packet of `path` from `addr`;
    /// false: drop it.
    fn follow(&mut self, now: Instant, path: PathId, addr: PathAddr) -> bool {
        match self.addrs.get(&path).copied() {
            Some(a) if a == addr => {}
            // The agent now asks another address of this server (a unicast address after
            // an anycast one): replies follow it.
            Some(a) if a.remote == addr.remote => {
                self.addrs.insert(path, addr);
            }
            Some(a) => {
                let name = self.session.peer_path_name(path).unwrap_or("").to_string();
                info!(path, %name, old = %a.remote, new = %addr.remote, "path moved; validating the new address");
                self.addrs.insert(path, addr);
                self.session.path_address_changed(now, path);
                self.fit_path(now, path, addr);
            }
            None => {
                if self.addrs.len() >= MAX_LEARNED_PATHS {
                    return false;
                }
                self.addrs.insert(path, addr);
                self.fit_path(now, path, addr);
            }
        }
        true
    }

    /// Size a learned path's datagrams for its address family and say whether it is TCP.
    fn fit_path(&mut self, now: Instant, path: PathId, addr: PathAddr) {
        let tcp = addr.transport == Transport::Tcp;
        self.session.set_path_reliable(now, path, tcp);
        let limit = datagram_limit(addr.remote, None);
        self.session.set_path_max_datagram(now, path, limit);
    }

    /// A timer may have expired: run the session's and protection's timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.drive_protection(now);
        if self.session.poll_timeout().is_some_and(|t| t <= now) {
            self.session.handle_timeout(now);
        }
    }

    /// Do what key management asks at `now`: queue its handshake packets, have the session
    /// speak after a rotation, close it when the keys expired.
    fn drive_protection(&mut self, now: Instant) {
        while let Some(c) = self.protection.poll_control(now) {
            match c {
                Control::Send(path, pkt) => self.control.push_back((path, pkt)),
                Control::Rotated => self.session.ping_paths(now),
                Control::Expired => self.session.close(
                    now,
                    0,
                    "the session keys expired: no key rotation completed in time",
                ),
            }
        }
    }

    /// The next datagrams to send, sealed, written at the start of `buf` (at most
    /// `max_segments` of one path; `buf` holds at least one `max_datagram_size` datagram):
    /// key-management packets first, then the session's. Call it until `None`.
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        max_segments: usize,
    ) -> Option<Transmit> {
        self.drive_protection(now);
        while let Some((path, pkt)) = self.control.pop_front() {
            let Some(addr) = self.addrs.get(&path).copied() else {
                self.drops.unaddressed += 1;
                continue;
            };
            let Some(dst) = buf.get_mut(..pkt.len()) else {
                continue;
            };
            dst.copy_from_slice(&pkt);
            return Some(Self::transmit(path, addr, pkt.len(), 1, pkt.len()));
        }
        loop {
            let b = self.session.poll_transmit_batch(now, buf, max_segments)?;
            let Some(addr) = self.addrs.get(&b.path).copied() else {
                self.drops.unaddressed += b.segments as u64;
                continue;
            };
            let (segments, len) = self.seal_batch(&b, buf);
            if segments > 0 {
                return Some(Self::transmit(b.path, addr, b.segment_size, segments, len));
            }
        }
    }

    fn transmit(path: PathId, a: PathAddr, seg: usize, segments: usize, len: usize) -> Transmit {
        Transmit {
            path,
            destination: a.remote,
            src_ip: a.local,
            transport: a.transport,
            segment_size: seg,
            segments,
            len,
        }
    }

    /// Seal every datagram of a batch in place; one that fails to seal is left out and the
    /// ones after it move up (only the last may be shorter, so the stride holds). Returns
    /// the datagrams and bytes left.
    fn seal_batch(&mut self, b: &braid_core::BatchTransmit, buf: &mut [u8]) -> (usize, usize) {
        let (mut kept, mut len) = (0, 0);
        for i in 0..b.segments {
            let r = b.segment(i);
            if !self.protection.seal(&mut buf[r.clone()]) {
                continue;
            }
            if kept != i {
                buf.copy_within(r.clone(), len);
            }
            kept += 1;
            len += r.len();
        }
        (kept, len)
    }

    /// When [`Self::handle_timeout`] wants to be called next.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        if !self.control.is_empty() {
            // Key-management packets wait to be sent: now.
            return Some(Instant(0));
        }
        match (self.session.poll_timeout(), self.protection.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The session's next event for the application side.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.session.poll_event()
    }
}
