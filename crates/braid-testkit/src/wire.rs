//! One wire with a fixed one-way delay between two ends of any session type, on simulated
//! time: the rig of braid-core's own unit tests. In a unit-test build the crate under test
//! is a copy of braid-core distinct from the one this kit depends on, so its `Session` is
//! not the kit's: those tests implement [`End`] for their own `Session` (a few lines, see
//! `braid-core/src/session/test_wire.rs`) and drive it with [`Wire`]. Integration tests,
//! which see the kit's braid-core, use [`crate::pair::Pair`].
//!
//! Owns: the datagrams in flight and the clock (nanoseconds). Must not touch: the ends
//! (only the four calls of [`End`]).

use bytes::Bytes;
use std::time::Duration;

/// What the wire needs of an end.
pub trait End {
    /// The next datagram to send at `now` (ns), written into `buf`: its path and length.
    fn transmit(&mut self, now: u64, buf: &mut [u8]) -> Option<(u8, usize)>;
    /// A datagram arrived at `now`.
    fn receive(&mut self, now: u64, datagram: Bytes);
    /// When the end's timer fires next (ns).
    fn deadline(&mut self) -> Option<u64>;
    /// Its timer expired at `now`.
    fn fire(&mut self, now: u64);
}

/// Which way a datagram goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// From the first end to the second (client to server).
    AtoB,
    /// From the second to the first.
    BtoA,
}

/// What a filter decides for a datagram about to go on the wire (way, path, bytes).
pub type Filter<'a> = dyn FnMut(Way, u8, &[u8]) -> bool + 'a;

/// Datagrams in flight between two ends, and the time.
pub struct Wire {
    /// Now, in nanoseconds.
    pub now: u64,
    delay: u64,
    /// Arrival, way, bytes; in sending order (arrivals are too: one delay for all).
    flight: Vec<(u64, Way, Bytes)>,
    buf: Vec<u8>,
}

impl Wire {
    /// An empty wire at time 0 whose datagrams take `delay`.
    pub fn new(delay: Duration) -> Wire {
        Wire {
            now: 0,
            delay: delay.as_nanos() as u64,
            flight: Vec::new(),
            buf: vec![0u8; 65_536],
        }
    }

    /// Put everything both ends send now on the wire, except what `keep` refuses.
    pub fn flush(&mut self, a: &mut dyn End, b: &mut dyn End, keep: &mut Filter<'_>) {
        self.send(a, Way::AtoB, keep);
        self.send(b, Way::BtoA, keep);
    }

    fn send(&mut self, end: &mut dyn End, way: Way, keep: &mut Filter<'_>) {
        let at = self.now + self.delay;
        while let Some((path, len)) = end.transmit(self.now, &mut self.buf) {
            let d = &self.buf[..len];
            if keep(way, path, d) {
                self.flight.push((at, way, Bytes::copy_from_slice(d)));
            }
        }
    }

    /// Send what is due, move to the next arrival or timer, deliver and fire what is due
    /// then; `false` when nothing is left to happen.
    pub fn step(&mut self, a: &mut dyn End, b: &mut dyn End, keep: &mut Filter<'_>) -> bool {
        self.flush(a, b, keep);
        let next = [self.flight.first().map(|f| f.0), a.deadline(), b.deadline()]
            .into_iter()
            .flatten()
            .min();
        let Some(next) = next else {
            return false;
        };
        self.now = self.now.max(next);
        let due = self.flight.iter().take_while(|f| f.0 <= self.now).count();
        for (_, way, d) in self.flight.drain(..due) {
            match way {
                Way::AtoB => b.receive(self.now, d),
                Way::BtoA => a.receive(self.now, d),
            }
        }
        if a.deadline().is_some_and(|t| t <= self.now) {
            a.fire(self.now);
        }
        if b.deadline().is_some_and(|t| t <= self.now) {
            b.fire(self.now);
        }
        true
    }
}

/// The filter that keeps every datagram.
pub fn keep_all(_: Way, _: u8, _: &[u8]) -> bool {
    true
}
