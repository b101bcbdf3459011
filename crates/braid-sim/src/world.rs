//! The simulated world: a client session and a server session joined by modelled paths,
//! advanced in virtual time by a discrete-event loop.
//!
//! Owns: virtual time, moving datagrams between the sessions and the link models, firing
//! the sessions' timers, and waking the application model. Must not touch: the protocol
//! (it only calls the core's public API) or what applications do (see [`App`]). Same
//! inputs, same seed: the same run, bit for bit — there is no wall clock and no shared
//! randomness anywhere in the loop.

use crate::link::{Dir, PathModel};
use crate::scenario::PathSpec;
use crate::time::Nanos;
use braid_core::{Config, Instant, PathId, Session};
use bytes::Bytes;

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

/// Client, server and the links between them.
pub struct World {
    now: Nanos,
    /// The agent side.
    pub client: Session,
    /// The server side.
    pub server: Session,
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
        while let Some(t) = self.client.poll_transmit(now, &mut self.buf) {
            if let Some(Some(link)) = self.links.get_mut(t.path as usize) {
                let pkt = Bytes::copy_from_slice(&self.buf[..t.len]);
                link.send(self.now, Dir::Up, t.len as u32 + IP_UDP_OVERHEAD, pkt);
            }
        }
        while let Some(t) = self.server.poll_transmit(now, &mut self.buf) {
            if let Some(Some(link)) = self.links.get_mut(t.path as usize) {
                let pkt = Bytes::copy_from_slice(&self.buf[..t.len]);
                link.send(self.now, Dir::Down, t.len as u32 + IP_UDP_OVERHEAD, pkt);
            }
        }
    }

    /// Run until the application is done, the time `deadline` passes, or a session ends.
    pub fn run(&mut self, deadline: Nanos, app: &mut dyn App) -> Outcome {
        let mut same_time = 0u32;
        loop {
            let mut ends = Endpoints {
                client: &mut self.client,
                server: &mut self.server,
            };
            if app.on_wake(self.now, &mut ends) {
                return Outcome::Done;
            }
            self.pump();
            if let Some(e) = self.client.error().or(self.server.error()) {
                if self.client.is_closed() || self.server.is_closed() {
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
            for (_, dir, pkt) in self.arrivals.drain(..) {
                match dir {
                    Dir::Up => self.server.handle_datagram(Instant(now), pkt),
                    Dir::Down => self.client.handle_datagram(Instant(now), pkt),
                }
            }
            if self
                .client
                .poll_timeout()
                .is_some_and(|t| t.as_nanos() <= now)
            {
                self.client.handle_timeout(Instant(now));
            }
            if self
                .server
                .poll_timeout()
                .is_some_and(|t| t.as_nanos() <= now)
            {
                self.server.handle_timeout(Instant(now));
            }
        }
    }
}
