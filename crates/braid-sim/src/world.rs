//! The simulated world: a client session and a server session joined by modelled paths,
//! advanced in virtual time by a discrete-event loop. Each session is one end of a
//! braid-conn [`Connection`], as in the agent and the server: with packet protection
//! ([`World::new_protected`]: AEAD with replay windows, keys from the seed) or without
//! (the tag space left as zeros). The world sets both ends' path addresses (path `i` of the
//! client is `10.0.i.2`, the server `192.0.2.1:443`); the server does not follow them.
//!
//! Owns: virtual time, moving datagrams between the connections and the link models, firing
//! the connections' timers, and waking the application model. Must not touch: the protocol
//! (it only calls the public APIs of braid-core and braid-conn) or what applications do
//! (see [`App`]). Same
//! inputs, same seed: the same run, bit for bit — there is no wall clock and no shared
//! randomness anywhere in the loop.

use crate::link::{Dir, PathModel};
use crate::scenario::PathSpec;
use crate::time::Nanos;
use braid_conn::protect::{Aead, Plain};
use braid_conn::{Connection, PacketProtection, PathAddr, Received, Transport};
use braid_core::{Config, Instant, PathId, Session};
use braid_crypto::{Ciphers, Role, SessionKeys};
use bytes::{Bytes, BytesMut};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// IPv4 (20) and UDP (8) headers: counted on every link, on top of the UDP payload.
pub const IP_UDP_OVERHEAD: u32 = 28;

/// What runs on top of the sessions.
pub trait App {
    /// Called after every batch of events at virtual time `now`. Return true when done.
    fn on_wake(&mut self, now: Nanos, world: &mut Endpoints<'_>) -> bool;
    /// A time at which the app wants to be woken even if nothing happens.
    fn next_wake(&self) -> Option<Nanos> {
        None
    }
}

/// The two sessions, as an application sees them.
pub struct Endpoints<'a> {
    /// The agent side.
    pub client: &'a mut Session,
    /// The server side.
    pub server: &'a mut Session,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The application said it was done.
    Done,
    /// The virtual-time limit passed first.
    TimeLimit,
    /// A session ended with an error before the application was done.
    SessionClosed(String),
    /// Nothing was left to happen, yet the application was not done.
    Stalled,
}

/// One end: a session with its protection and path addresses.
pub type End = Connection<Box<dyn PacketProtection>>;

/// The server's address.
const SERVER: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), 443);

/// Client path `i`'s address.
fn client_addr(i: PathId) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, i, 2)), 40_000)
}

/// Client, server and the links between them.
pub struct World {
    now: Nanos,
    /// The agent side.
    pub client: End,
    /// The server side.
    pub server: End,
    links: Vec<Option<PathModel<Bytes>>>,
    buf: Vec<u8>,
    arrivals: Vec<(Nanos, Dir, Bytes)>,
    sampling: Option<Sampling>,
}

/// Periodic samples of what each link delivered, for throughput-over-time plots.
#[derive(Debug, Clone, Default)]
pub struct Sampling {
    /// Interval between samples.
    pub every: Nanos,
    next: Nanos,
    /// (time, per path id: wire bytes delivered so far in (up, down)).
    pub samples: Vec<(Nanos, Vec<(u64, u64)>)>,
}

impl World {
    /// A world whose paths are `paths` (path id = index in the list; `None` for a path
    /// the variant does not use). The client starts its handshake at time 0 on the first
    /// path and adds the others.
    pub fn new(
        paths: &[Option<PathSpec>],
        seed: u64,
        client_cfg: Config,
        server_cfg: Config,
    ) -> World {
        Self::new_protected(paths, seed, client_cfg, server_cfg, false)
    }

    /// [`World::new`], every packet sealed and opened with keys made from `seed` when
    /// `protect` (a scenario's `protection = true`).
    pub fn new_protected(
        paths: &[Option<PathSpec>],
        seed: u64,
        client_cfg: Config,
        server_cfg: Config,
        protect: bool,
    ) -> World {
        let links: Vec<Option<PathModel<Bytes>>> = paths
            .iter()
            .enumerate()
            .map(|(i, p)| {
                p.as_ref().map(|spec| {
                    PathModel::new(
                        spec,
                        braid_core::rng::splitmix64(seed ^ (i as u64 + 1) << 32),
                    )
                })
            })
            .collect();
        let session_id = braid_core::rng::splitmix64(seed ^ 0xb4a1d);
        let now = Instant(0);
        let ids: Vec<PathId> = (0..links.len())
            .filter(|&i| links[i].is_some())
            .map(|i| i as PathId)
            .collect();
        let max = client_cfg.max_datagram_size;
        let mut client = Session::connect(client_cfg, now, session_id, ids[0]);
        for &id in &ids[1..] {
            let _ = client.add_path(now, id);
        }
        let server = Session::accept(server_cfg, now, session_id);
        let (cp, sp) = protection(protect, seed);
        let (mut client, mut server) = (Connection::new(client, cp), Connection::new(server, sp));
        for &id in &ids {
            let udp = |remote: SocketAddr, local: SocketAddr| PathAddr {
                remote,
                local: Some(local.ip()),
                transport: Transport::Udp,
            };
            client.set_path_addr(now, id, udp(SERVER, client_addr(id)));
            server.set_path_addr(now, id, udp(client_addr(id), SERVER));
        }
        World {
            now: 0,
            client,
            server,
            links,
            buf: vec![0u8; max],
            arrivals: Vec::new(),
            sampling: None,
        }
    }

    /// Record every link's delivered bytes every `every` nanoseconds from now on.
    pub fn sample_every(&mut self, every: Nanos) {
        self.sampling = Some(Sampling {
            every,
            next: self.now,
            samples: Vec::new(),
        });
    }

    /// Samples taken so far.
    pub fn sampling(&self) -> Option<&Sampling> {
        self.sampling.as_ref()
    }

    fn take_sample(&mut self) {
        let Some(s) = self.sampling.as_mut() else {
            return;
        };
        while s.next <= self.now {
            let row = self
                .links
                .iter()
                .map(|l| {
                    l.as_ref().map_or((0, 0), |l| {
                        (
                            l.stats(Dir::Up).delivered_bytes,
                            l.stats(Dir::Down).delivered_bytes,
                        )
                    })
                })
                .collect();
            s.samples.push((s.next, row));
            s.next += s.every.max(1);
        }
    }

    /// Virtual time now.
    pub fn now(&self) -> Nanos {
        self.now
    }

    /// The link model of a path.
    pub fn link(&self, id: PathId) -> Option<&PathModel<Bytes>> {
        self.links.get(id as usize).and_then(|l| l.as_ref())
    }

    /// The link model of a path, mutable (for energy readings).
    pub fn link_mut(&mut self, id: PathId) -> Option<&mut PathModel<Bytes>> {
        self.links.get_mut(id as usize).and_then(|l| l.as_mut())
    }

    fn pump(&mut self) {
        let now = Instant(self.now);
        for (end, dir) in [(&mut self.client, Dir::Up), (&mut self.server, Dir::Down)] {
            while let Some(t) = end.poll_transmit(now, &mut self.buf, 1) {
                if let Some(Some(link)) = self.links.get_mut(t.path as usize) {
                    let pkt = Bytes::copy_from_slice(&self.buf[..t.len]);
                    link.send(self.now, dir, t.len as u32 + IP_UDP_OVERHEAD, pkt);
                }
            }
        }
    }

    /// Hand a datagram that crossed a link to the end it goes to.
    fn deliver(&mut self, now: Instant, dir: Dir, pkt: Bytes) {
        let (end, from, local) = match dir {
            Dir::Up => (&mut self.server, client_addr(0), SERVER.ip()),
            Dir::Down => (&mut self.client, SERVER, client_addr(0).ip()),
        };
        let r = Received {
            from,
            local: Some(local),
            transport: Transport::Udp,
            data: pkt
                .try_into_mut()
                .unwrap_or_else(|b| BytesMut::from(&b[..])),
            header: None,
        };
        end.handle_datagram(now, r);
    }

    /// Run until the application is done, the time `deadline` passes, or a session ends.
    pub fn run(&mut self, deadline: Nanos, app: &mut dyn App) -> Outcome {
        let mut same_time = 0u32;
        loop {
            let mut ends = Endpoints {
                client: self.client.session_mut(),
                server: self.server.session_mut(),
            };
            if app.on_wake(self.now, &mut ends) {
                return Outcome::Done;
            }
            self.pump();
            let (c, s) = (self.client.session(), self.server.session());
            if let Some(e) = c.error().or(s.error()) {
                if c.is_closed() || s.is_closed() {
                    return Outcome::SessionClosed(e.to_string());
                }
            }
            let mut next: Option<Nanos> = None;
            let mut consider = |t: Option<Nanos>| {
                if let Some(t) = t {
                    next = Some(next.map_or(t, |n: Nanos| n.min(t)));
                }
            };
            consider(self.client.poll_timeout().map(|t| t.as_nanos()));
            consider(self.server.poll_timeout().map(|t| t.as_nanos()));
            // The app is woken after every batch anyway; only future wake-ups count.
            consider(app.next_wake().filter(|&t| t > self.now));
            consider(self.sampling.as_ref().map(|s| s.next));
            for l in self.links.iter().flatten() {
                consider(l.next_event());
            }
            let Some(next) = next else {
                return Outcome::Stalled;
            };
            if next > deadline {
                self.now = deadline.max(self.now);
                return Outcome::TimeLimit;
            }
            if next <= self.now {
                same_time += 1;
                if same_time > 100_000 {
                    return Outcome::SessionClosed(format!(
                        "simulator made no progress at t = {} ns (a bug: please report it with the scenario)",
                        self.now
                    ));
                }
            } else {
                same_time = 0;
                self.now = next;
            }
            let now = self.now;
            for l in self.links.iter_mut().flatten() {
                l.advance(now, &mut self.arrivals);
            }
            self.take_sample();
            self.arrivals.sort_by_key(|a| a.0);
            let mut arrivals = std::mem::take(&mut self.arrivals);
            for (_, dir, pkt) in arrivals.drain(..) {
                self.deliver(Instant(now), dir, pkt);
            }
            self.arrivals = arrivals;
            self.client.handle_timeout(Instant(now));
            self.server.handle_timeout(Instant(now));
        }
    }
}

/// Each end's protection: AEAD with keys made from `seed` (no rotation), or none.
fn protection(protect: bool, seed: u64) -> (Box<dyn PacketProtection>, Box<dyn PacketProtection>) {
    if !protect {
        return (Box::new(Plain), Box::new(Plain));
    }
    let key = |salt: u64| {
        let mut k = [0u8; 32];
        for (i, c) in k.chunks_mut(8).enumerate() {
            let x = braid_core::rng::splitmix64(seed ^ salt ^ (i as u64 + 1) << 40);
            c.copy_from_slice(&x.to_le_bytes());
        }
        k
    };
    let split = (key(0xc1), key(0x5e));
    // The cipher a real agent and server would agree on this CPU.
    let cipher = Ciphers::auto().first();
    let keys = |role| SessionKeys::from_split_with(role, cipher, &split);
    (
        Box::new(Aead::new(keys(Role::Client))),
        Box::new(Aead::new(keys(Role::Server))),
    )
}
