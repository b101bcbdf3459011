//! Two protected connections in memory (agent and server end of session [`SID`], keys from
//! a Noise handshake or given), driven against each other on simulated time with a fixed
//! one-way delay ([`ONE_WAY`]) through a NAT in front of the agent: each agent path has a
//! public address ([`ConnPair::nat`]) that the server sees as the packets' source, and a
//! datagram the server sends to an address that is no path's public address now is lost
//! ([`ConnPair::lost_to_nat`]). Change a path's public address to rebind it. A tamper hook
//! (that of [`crate::pair`]) sees every sealed datagram before it is delivered and may
//! deliver others in front of it (replays, truncations, other keys' packets).
//!
//! Owns: the pair's wire, NAT and clock. Must not touch: the connections' internals
//! (public API of braid-conn only). Needs no tokio: the `connection` fuzz target uses it.

use crate::pair::{no_tamper, run_steps, Tamper, TamperCtx, ONE_WAY, SID};
use braid_conn::protect::Aead;
use braid_conn::{Connection, PathAddr, Received, Transport};
use braid_core::{Config, Instant, PathId, Session, Side};
use braid_crypto::{
    ClientHandshake, ReplayGuard, Role, ServerHandshake, SessionKeys, StaticKeypair,
};
use bytes::{Bytes, BytesMut};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// The server's address.
pub const SERVER: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), 443);

/// Agent path `p`'s first public address (as the server sees it).
pub fn public_addr(p: PathId) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 51, 100, p + 1)), 40_000)
}

/// Matching agent and server keys made from `seed` without a handshake (cheap: the fuzz
/// target makes a pair per input).
pub fn split_keys(seed: u8) -> (SessionKeys, SessionKeys) {
    let split = ([seed; 32], [seed.wrapping_add(1); 32]);
    (
        SessionKeys::from_split(Role::Client, &split),
        SessionKeys::from_split(Role::Server, &split),
    )
}

/// Agent and server keys from a Noise IK handshake between two keys made from `seed`.
pub fn handshake_keys(seed: u8) -> (SessionKeys, SessionKeys) {
    let agent = StaticKeypair::from_private([seed | 1; 32]).expect("agent key");
    let server = StaticKeypair::from_private([seed | 2; 32]).expect("server key");
    let ts = 1_700_000_000_000;
    let (mut hs, msg1) = ClientHandshake::new(&agent, &server.public(), SID, 0, ts).unwrap();
    let mut guard = ReplayGuard::new();
    let authorized = [agent.public()];
    let (who, server_keys, msg2) =
        ServerHandshake::respond(&server, &authorized, &mut guard, &msg1, ts, 30_000).unwrap();
    assert_eq!(who, agent.public(), "the server knows the agent");
    (hs.finish(&msg2).expect("message 2 accepted"), server_keys)
}

/// A datagram in flight.
struct Flight {
    at: Instant,
    dest: Side,
    from: SocketAddr,
    data: Bytes,
}

/// An agent and a server connection and the datagrams between them.
pub struct ConnPair {
    pub now: Instant,
    pub client: Connection<Aead>,
    pub server: Connection<Aead>,
    /// Each agent path's public address: the source the server sees, and where the server's
    /// datagrams must go to reach that path.
    pub nat: HashMap<PathId, SocketAddr>,
    /// The server's datagrams sent to an address no agent path has.
    pub lost_to_nat: u64,
    /// Where the server's datagrams went, per path, in order.
    pub server_sent_to: Vec<(PathId, SocketAddr)>,
    /// Genuine sealed datagrams delivered to the server, oldest first.
    pub to_server: Vec<Bytes>,
    /// Genuine sealed datagrams delivered to the agent, oldest first.
    pub to_client: Vec<Bytes>,
    wire: VecDeque<Flight>,
    buf: Vec<u8>,
}

impl ConnPair {
    /// A pair at time 0 whose keys came from a Noise handshake, `paths` agent paths
    /// (ids 0..paths) with their addresses set, the core handshake not started.
    pub fn new(paths: u8) -> ConnPair {
        let (c, s) = handshake_keys(7);
        Self::with_keys(c, s, paths)
    }

    /// [`ConnPair::new`] with these keys.
    pub fn with_keys(client_keys: SessionKeys, server_keys: SessionKeys, paths: u8) -> ConnPair {
        let now = Instant(0);
        let mut session = Session::connect(Config::default(), now, SID, 0);
        for p in 1..paths.max(1) {
            let _ = session.add_path(now, p);
        }
        let mut client = Connection::new(session, Aead::new(client_keys));
        let mut nat = HashMap::new();
        for p in 0..paths.max(1) {
            let local = IpAddr::V4(Ipv4Addr::new(10, 0, p, 2));
            let addr = PathAddr {
                remote: SERVER,
                local: Some(local),
                transport: Transport::Udp,
            };
            client.set_path_addr(now, p, addr);
            nat.insert(p, public_addr(p));
        }
        let first = PathAddr {
            remote: public_addr(0),
            local: Some(SERVER.ip()),
            transport: Transport::Udp,
        };
        let session = Session::accept(Config::default(), now, SID);
        let server = Connection::server(now, session, Aead::new(server_keys), 0, first);
        ConnPair {
            now,
            client,
            server,
            nat,
            lost_to_nat: 0,
            server_sent_to: Vec::new(),
            to_server: Vec::new(),
            to_client: Vec::new(),
            wire: VecDeque::new(),
            buf: vec![0u8; 64 * 1024],
        }
    }

    /// A pair whose core handshake completed (within 200 steps, or this panics).
    pub fn established(paths: u8) -> ConnPair {
        let mut pair = ConnPair::new(paths);
        let done = pair.run(200, &mut no_tamper, &mut |p| {
            p.client.session().is_established() && p.server.session().is_established()
        });
        assert!(done, "handshake did not complete");
        pair
    }

    /// Move everything both connections want to send now onto the wire (the server's
    /// through the NAT: to a path's public address, or lost).
    pub fn flush(&mut self) {
        let at = self.now + ONE_WAY;
        while let Some(t) = self.client.poll_transmit(self.now, &mut self.buf, 8) {
            assert_eq!(t.destination, SERVER, "the agent sends to the server");
            let from = self.nat[&t.path];
            for seg in self.buf[..t.len].chunks(t.segment_size) {
                let data = Bytes::copy_from_slice(seg);
                let dest = Side::Server;
                self.wire.push_back(Flight {
                    at,
                    dest,
                    from,
                    data,
                });
            }
        }
        while let Some(t) = self.server.poll_transmit(self.now, &mut self.buf, 8) {
            self.server_sent_to.push((t.path, t.destination));
            if !self.nat.values().any(|a| *a == t.destination) {
                self.lost_to_nat += t.segments as u64;
                continue;
            }
            for seg in self.buf[..t.len].chunks(t.segment_size) {
                let data = Bytes::copy_from_slice(seg);
                let (dest, from) = (Side::Client, SERVER);
                self.wire.push_back(Flight {
                    at,
                    dest,
                    from,
                    data,
                });
            }
        }
    }

    /// Deliver `data` now, as if it came from the peer's (first path's) address: forged,
    /// replayed or cut datagrams.
    pub fn inject(&mut self, dest: Side, data: Bytes) {
        let from = match dest {
            Side::Server => self.nat[&0],
            Side::Client => SERVER,
        };
        self.deliver(dest, from, data);
    }

    fn deliver(&mut self, dest: Side, from: SocketAddr, data: Bytes) {
        let r = Received {
            from,
            // The server is on a wildcard address and reads where each datagram went.
            local: (dest == Side::Server).then_some(SERVER.ip()),
            transport: Transport::Udp,
            data: BytesMut::from(&data[..]),
            header: None,
        };
        match dest {
            Side::Server => self.server.handle_datagram(self.now, r),
            Side::Client => self.client.handle_datagram(self.now, r),
        };
    }

    /// Advance to the next event (arrival or timer) and process it, each datagram shown to
    /// `tamper` first; `false` when there is none.
    pub fn step_with(&mut self, tamper: &mut Tamper<'_>) -> bool {
        self.flush();
        let next = [
            self.wire.front().map(|w| w.at),
            self.client.poll_timeout(),
            self.server.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(next) = next else {
            return false;
        };
        self.now = self.now.max(next);
        while self.wire.front().is_some_and(|w| w.at <= self.now) {
            let f = self.wire.pop_front().unwrap();
            let history = match f.dest {
                Side::Server => &self.to_server,
                Side::Client => &self.to_client,
            };
            let (dest, pkt) = (f.dest, &f.data);
            let extra = tamper(&mut TamperCtx { dest, pkt, history });
            for e in extra {
                self.deliver(f.dest, f.from, e);
            }
            self.deliver(f.dest, f.from, f.data.clone());
            match f.dest {
                Side::Server => self.to_server.push(f.data),
                Side::Client => self.to_client.push(f.data),
            }
        }
        self.client.handle_timeout(self.now);
        self.server.handle_timeout(self.now);
        true
    }

    /// Step (with `tamper`) until `done` or `max_steps`; returns whether `done` held.
    pub fn run(
        &mut self,
        max_steps: usize,
        tamper: &mut Tamper<'_>,
        done: &mut dyn FnMut(&mut ConnPair) -> bool,
    ) -> bool {
        run_steps(self, max_steps, tamper, done, ConnPair::step_with)
    }

    /// Send `data` on a new agent stream (finished after it) and read it at the server,
    /// stepping with `tamper` at most `max_steps`; what the server read (all of `data`
    /// when the transfer completed).
    pub fn transfer(&mut self, data: &[u8], max_steps: usize, tamper: &mut Tamper<'_>) -> Vec<u8> {
        let Ok(id) = self.client.session_mut().open_stream() else {
            return Vec::new();
        };
        let (mut written, mut finished, mut done) = (0, false, false);
        let mut got = Vec::new();
        self.run(max_steps, tamper, &mut |p| {
            let c = p.client.session_mut();
            while written < data.len() {
                match c.stream_write(id, &data[written..]) {
                    Ok(n) if n > 0 => written += n,
                    _ => break,
                }
            }
            if written == data.len() && !finished {
                finished = c.stream_finish(id).is_ok();
            }
            let s = p.server.session_mut();
            while let Ok(Some(b)) = s.stream_read(id, usize::MAX) {
                if b.is_empty() {
                    done = true;
                    break;
                }
                got.extend_from_slice(&b);
            }
            while p.server.poll_event().is_some() {}
            while p.client.poll_event().is_some() {}
            done
        });
        got
    }
}
