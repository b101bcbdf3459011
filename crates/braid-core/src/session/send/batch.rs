//! Batches of datagrams for one path, for drivers that hand several datagrams to the
//! kernel at once (UDP GSO: one buffer, a fixed segment size, the last segment may be
//! shorter).
//!
//! Owns: [`Session::poll_transmit_batch`] and the one packet it made but could not add to
//! its batch (the stash, returned first by the next `poll_transmit` or
//! `poll_transmit_batch`). Must not touch: what goes into packets or which path they take
//! (`send.rs` decides, packet by packet, exactly as for `poll_transmit`): a batch is the
//! same sequence of datagrams, only grouped.

use super::super::{Session, Transmit};
use crate::ids::PathId;
use crate::time::Instant;

/// Successive datagrams for one path, written into the caller's buffer at a fixed stride.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchTransmit {
    /// The path every datagram of the batch leaves on.
    pub path: PathId,
    /// The stride: every datagram but the last is exactly this long (the first datagram's
    /// length).
    pub segment_size: usize,
    /// How many datagrams (at least 1).
    pub segments: usize,
    /// Bytes written into the buffer: `(segments - 1) * segment_size` plus the last
    /// datagram's length (at most `segment_size`).
    pub len: usize,
}

impl BatchTransmit {
    /// The byte range of datagram `i` in the buffer.
    pub fn segment(&self, i: usize) -> std::ops::Range<usize> {
        let start = i * self.segment_size;
        start..(start + self.segment_size).min(self.len)
    }
}

/// A datagram made while filling a batch that did not fit it (another path, or longer
/// than the batch's segment size).
#[derive(Debug, Default)]
pub(in crate::session) struct Stash {
    held: Option<Transmit>,
    bytes: Vec<u8>,
}

impl Stash {
    /// A datagram is waiting.
    pub(in crate::session) fn is_some(&self) -> bool {
        self.held.is_some()
    }

    /// Copy the waiting datagram into `buf` (at least `max_datagram_size` bytes).
    pub(in crate::session) fn take(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        let t = self.held.take()?;
        buf[..t.len].copy_from_slice(&self.bytes[..t.len]);
        Some(t)
    }

    fn put(&mut self, t: Transmit, data: &[u8]) {
        self.bytes.clear();
        self.bytes.extend_from_slice(data);
        self.held = Some(t);
    }
}

impl Session {
    /// Say that the driver sends batches of up to `packets` datagrams (UDP GSO) on timers
    /// of [`crate::time::TIMER_GRANULARITY`]: each path's pacer then releases what 2 ms at
    /// its pacing rate allow (at least 10 packets, the default burst), so that neither a
    /// batch nor a late timer cuts the rate. Paths added later get it too.
    pub fn set_max_burst(&mut self, now: Instant, packets: usize) {
        self.max_burst = packets as u64;
        for p in self.paths.values_mut() {
            p.set_max_burst(now, self.max_burst);
        }
    }

    /// Up to `max_segments` successive datagrams for one path, written into `buf` one after
    /// the other: every one is `segment_size` long except possibly the last, which is
    /// shorter. The datagrams, their bytes and their paths are exactly those successive
    /// [`Session::poll_transmit`] calls would return; the batch ends where the next one
    /// would go to another path or be longer than the first, or where `buf` has no room for
    /// a full `max_datagram_size` more. `None` when nothing may be sent now (or `buf` is
    /// shorter than `max_datagram_size`).
    ///
    /// Call it until it returns `None`, as `poll_transmit`: a datagram made but left out
    /// of a batch is returned first by the next call (`poll_timeout` says "now" meanwhile).
    pub fn poll_transmit_batch(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        max_segments: usize,
    ) -> Option<BatchTransmit> {
        let mds = self.cfg.max_datagram_size;
        let first = self.poll_transmit(now, buf)?;
        let seg = first.len;
        let mut b = BatchTransmit {
            path: first.path,
            segment_size: seg,
            segments: 1,
            len: seg,
        };
        while b.segments < max_segments && buf.len() - b.len >= mds {
            let off = b.len;
            let Some(t) = self.produce(now, &mut buf[off..]) else {
                break;
            };
            if t.path != b.path || t.len > seg {
                self.stash.put(t, &buf[off..off + t.len]);
                break;
            }
            b.segments += 1;
            b.len += t.len;
            if t.len < seg {
                break;
            }
        }
        Some(b)
    }
}

#[cfg(test)]
mod tests;
