//! The test kit's wire ([`braid_testkit::wire`]) for this crate's unit tests: its `End` for
//! this build's `Session` (a unit-test build's braid-core is not the kit's).
//!
//! Owns: that implementation. Must not touch: the session's internals.

use crate::{Instant, Session};
use braid_testkit::wire::End;
use bytes::Bytes;

impl End for Session {
    fn transmit(&mut self, now: u64, buf: &mut [u8]) -> Option<(u8, usize)> {
        self.poll_transmit(Instant(now), buf)
            .map(|t| (t.path, t.len))
    }
    fn receive(&mut self, now: u64, datagram: Bytes) {
        self.handle_datagram(Instant(now), datagram);
    }
    fn deadline(&mut self) -> Option<u64> {
        self.poll_timeout().map(|t| t.as_nanos())
    }
    fn fire(&mut self, now: u64) {
        self.handle_timeout(Instant(now));
    }
}
