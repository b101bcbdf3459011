//! Two sessions in memory (client and server, session [`SID`]), driven against each other
//! through one path with a fixed one-way delay ([`ONE_WAY`]), on simulated time: the
//! core's robustness tests and the `session_datagram` fuzz target. A tamper hook may see
//! every datagram before it is delivered and deliver extra datagrams (garbage, replays) in
//! front of it.
//!
//! Owns: the pair's wire and clock. Must not touch: the sessions' internals (public API of
//! braid-core only). Needs nothing but braid-core: the fuzz targets use it with the kit's
//! default features off.

use braid_core::{Config, Instant, Session, Side};
use bytes::Bytes;
use std::collections::VecDeque;
use std::time::Duration;

/// The pair's session id.
pub const SID: u64 = 0x0123_4567_89ab_cdef;
/// Each datagram's one-way delay.
pub const ONE_WAY: Duration = Duration::from_millis(10);

/// What a tamper hook returns: datagrams to deliver, to the same destination, just before
/// the genuine one.
pub type Tamper<'a> = dyn FnMut(&mut TamperCtx<'_>) -> Vec<Bytes> + 'a;

/// What the tamper hook sees.
pub struct TamperCtx<'a> {
    /// The session receiving the datagram.
    pub dest: Side,
    /// The genuine datagram about to be delivered.
    pub pkt: &'a Bytes,
    /// Genuine datagrams already delivered to `dest`, oldest first.
    pub history: &'a [Bytes],
}

/// The hook that adds nothing.
pub fn no_tamper(_: &mut TamperCtx<'_>) -> Vec<Bytes> {
    Vec::new()
}

/// Step `pair` with `step` (and `tamper`) until `done` or `max_steps`; whether `done` held
/// (the `run` of both pairs, [`Pair`] and the connection pair).
pub(crate) fn run_steps<P>(
    pair: &mut P,
    max_steps: usize,
    tamper: &mut Tamper<'_>,
    done: &mut dyn FnMut(&mut P) -> bool,
    step: fn(&mut P, &mut Tamper<'_>) -> bool,
) -> bool {
    for _ in 0..max_steps {
        if done(pair) {
            return true;
        }
        if !step(pair, tamper) {
            break;
        }
    }
    done(pair)
}

/// A client and a server session and the datagrams between them.
pub struct Pair {
    pub now: Instant,
    pub client: Session,
    pub server: Session,
    /// Datagrams in flight: arrival time, destination, bytes (sorted by arrival).
    wire: VecDeque<(Instant, Side, Bytes)>,
    /// Genuine datagrams delivered to the server, oldest first.
    pub to_server: Vec<Bytes>,
    /// Genuine datagrams delivered to the client, oldest first.
    pub to_client: Vec<Bytes>,
    buf: Vec<u8>,
}

impl Default for Pair {
    fn default() -> Self {
        Self::new()
    }
}

impl Pair {
    /// A fresh pair at time 0, default configuration, the handshake not started.
    pub fn new() -> Pair {
        let now = Instant(0);
        Pair {
            now,
            client: Session::connect(Config::default(), now, SID, 0),
            server: Session::accept(Config::default(), now, SID),
            wire: VecDeque::new(),
            to_server: Vec::new(),
            to_client: Vec::new(),
            buf: vec![0u8; 2048],
        }
    }

    /// A pair whose handshake completed (within 200 steps, or this panics).
    pub fn established() -> Pair {
        let mut pair = Pair::new();
        assert!(pair.establish(200), "handshake did not complete");
        pair
    }

    /// Step until both sessions are established, at most `max_steps`; whether they are.
    pub fn establish(&mut self, max_steps: usize) -> bool {
        self.run(max_steps, &mut no_tamper, &mut |p| {
            p.client.is_established() && p.server.is_established()
        })
    }

    pub fn session(&mut self, side: Side) -> &mut Session {
        match side {
            Side::Client => &mut self.client,
            Side::Server => &mut self.server,
        }
    }

    /// Move everything both sessions want to send now onto the wire: each session until it
    /// has nothing more. One pass each is enough: nothing is delivered here, so one
    /// session's sending cannot give the other anything to send.
    pub fn flush(&mut self) {
        while let Some(t) = self.client.poll_transmit(self.now, &mut self.buf) {
            assert!(t.len <= self.buf.len());
            let b = Bytes::copy_from_slice(&self.buf[..t.len]);
            self.wire.push_back((self.now + ONE_WAY, Side::Server, b));
        }
        while let Some(t) = self.server.poll_transmit(self.now, &mut self.buf) {
            assert!(t.len <= self.buf.len());
            let b = Bytes::copy_from_slice(&self.buf[..t.len]);
            self.wire.push_back((self.now + ONE_WAY, Side::Client, b));
        }
    }

    /// Advance to the next event (arrival or timer) and process it; `false` when there is
    /// none.
    pub fn step(&mut self) -> bool {
        self.step_with(&mut no_tamper)
    }

    /// [`Pair::step`], each datagram shown to `tamper` before it is delivered.
    pub fn step_with(&mut self, tamper: &mut Tamper<'_>) -> bool {
        self.flush();
        let next = [
            self.wire.front().map(|w| w.0),
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
        let now = self.now;
        while self.wire.front().is_some_and(|w| w.0 <= now) {
            let (_, dest, pkt) = self.wire.pop_front().unwrap();
            let history = match dest {
                Side::Server => &self.to_server,
                Side::Client => &self.to_client,
            };
            let extra = tamper(&mut TamperCtx {
                dest,
                pkt: &pkt,
                history,
            });
            for e in extra {
                self.session(dest).handle_datagram(now, e);
            }
            self.session(dest).handle_datagram(now, pkt.clone());
            match dest {
                Side::Server => self.to_server.push(pkt),
                Side::Client => self.to_client.push(pkt),
            }
        }
        if self.client.poll_timeout().is_some_and(|t| t <= now) {
            self.client.handle_timeout(now);
        }
        if self.server.poll_timeout().is_some_and(|t| t <= now) {
            self.server.handle_timeout(now);
        }
        true
    }

    /// Step (with `tamper`) until `done` or `max_steps`; returns whether `done` held.
    pub fn run(
        &mut self,
        max_steps: usize,
        tamper: &mut Tamper<'_>,
        done: &mut dyn FnMut(&mut Pair) -> bool,
    ) -> bool {
        run_steps(self, max_steps, tamper, done, Pair::step_with)
    }

    /// At most `steps` steps, none starting at or after `until`.
    pub fn run_until(&mut self, steps: usize, until: Instant) {
        for _ in 0..steps {
            if self.now >= until || !self.step() {
                break;
            }
        }
    }
}
