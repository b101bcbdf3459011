//! The send and receive halves of one reliable, ordered byte stream.
//!
//! Owns: buffering, retransmission ranges, reassembly, FIN and reset state and the
//! stream-level flow-control counters of one stream. Must not touch: packets, paths or the
//! connection-level window (the session accounts for those). Stream data is kept as bytes
//! with absolute offsets; a lost range is resent from the send buffer on whatever path the
//! scheduler picks. The send buffer holds the application's own `Bytes` (no copy on
//! `write_bytes`): frames are copied from them straight into packets.

use crate::ranges::RangeSet;
use bytes::{Buf, Bytes};
use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;

/// A stream identifier: bit 0 is the initiator (0 client, 1 server), the rest a counter.
pub type StreamId = u64;

/// Which end opened a stream.
pub fn initiated_by_client(id: StreamId) -> bool {
    id & 1 == 0
}

/// Errors of stream operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// No such stream (never opened, or finished and forgotten).
    #[error("unknown stream {0}")]
    Unknown(StreamId),
    /// The sending side was already finished or reset.
    #[error("stream {0} is closed for sending")]
    Closed(StreamId),
    /// The peer asked us to stop sending, with this code.
    #[error("peer stopped stream {id} with code {code}")]
    Stopped { id: StreamId, code: u64 },
    /// The peer reset its sending side, with this code.
    #[error("peer reset stream {id} with code {code}")]
    Reset { id: StreamId, code: u64 },
    /// The peer allows no more streams right now.
    #[error("stream limit reached")]
    Limit,
}

/// State of the sending half.
#[derive(Debug, Default)]
pub struct SendStream {
    /// The buffered data, in order: each chunk with its absolute offset.
    buf: VecDeque<(u64, Bytes)>,
    /// Bytes in `buf`.
    buffered: u64,
    /// Offset of the first byte of `buf`; everything below is acknowledged.
    base: u64,
    /// Lowest offset never sent.
    pub next_new: u64,
    /// Ranges declared lost (or reinjected) that must be sent again.
    pub retransmit: RangeSet,
    acked: RangeSet,
    /// The application finished the stream.
    pub fin: bool,
    /// A FIN must be (re)sent.
    pub fin_pending: bool,
    /// The FIN was acknowledged.
    pub fin_acked: bool,
    /// Stream-level limit granted by the peer.
    pub peer_max: u64,
    /// We reset the stream with this code.
    pub reset: Option<u64>,
    /// The peer asked us to stop, with this code.
    pub stopped: Option<u64>,
    /// Most bytes the application may keep buffered.
    pub buffer_limit: u64,
}

impl SendStream {
    /// A sending half the peer lets us send `peer_max` bytes on.
    pub fn new(peer_max: u64, buffer_limit: u64) -> Self {
        SendStream {
            peer_max,
            buffer_limit,
            ..Default::default()
        }
    }

    /// Offset the next application write goes to.
    pub fn write_offset(&self) -> u64 {
        self.base + self.buffered
    }

    /// Bytes the application may still write now: `buffer_limit` bytes may wait unsent.
    /// Bytes sent but not yet acknowledged are bounded by the peer's flow-control window,
    /// so the buffer never exceeds that window plus `buffer_limit`.
    pub fn writable(&self) -> u64 {
        if self.fin || self.reset.is_some() || self.stopped.is_some() {
            return 0;
        }
        let unsent = self.write_offset() - self.next_new;
        self.buffer_limit.saturating_sub(unsent)
    }

    /// Append application data (copied); returns how much was taken.
    pub fn write(&mut self, data: &[u8]) -> usize {
        let n = (self.writable() as usize).min(data.len());
        if n > 0 {
            self.push(Bytes::copy_from_slice(&data[..n]));
        }
        n
    }

    /// Append application data without copying it; returns how much was taken (the
    /// front of `data`).
    pub fn write_bytes(&mut self, mut data: Bytes) -> usize {
        let n = (self.writable() as usize).min(data.len());
        if n > 0 {
            data.truncate(n);
            self.push(data);
        }
        n
    }

    fn push(&mut self, data: Bytes) {
        let at = self.write_offset();
        self.buffered += data.len() as u64;
        self.buf.push_back((at, data));
    }

    /// The application finished writing.
    pub fn finish(&mut self) {
        if !self.fin {
            self.fin = true;
            self.fin_pending = true;
        }
    }

    /// Something is waiting to be sent (ignoring flow control for retransmissions).
    pub fn has_pending(&self) -> bool {
        self.reset.is_none()
            && (!self.retransmit.is_empty()
                || self.next_new < self.write_offset()
                || (self.fin_pending && self.next_new == self.write_offset()))
    }

    /// New bytes available now, under the stream limit (connection limit applied by caller).
    pub fn new_sendable(&self) -> u64 {
        self.write_offset()
            .min(self.peer_max)
            .saturating_sub(self.next_new)
    }

    /// Copy the buffered bytes from absolute `offset` into `dst` (all of them must be
    /// buffered), across as many chunks as they span.
    pub fn copy_out(&self, offset: u64, dst: &mut [u8]) {
        let i = self.buf.partition_point(|(at, _)| *at <= offset);
        let mut done = 0;
        let mut off = offset;
        for (at, c) in self.buf.range(i.saturating_sub(1)..) {
            if done == dst.len() {
                break;
            }
            let from = (off - at) as usize;
            let n = (c.len() - from).min(dst.len() - done);
            dst[done..done + n].copy_from_slice(&c[from..from + n]);
            done += n;
            off += n as u64;
        }
        debug_assert_eq!(done, dst.len(), "copy_out beyond the buffered bytes");
    }

    /// Up to `max` buffered bytes from absolute `offset` (which must be buffered), from
    /// at most two successive chunks of the buffer: fewer than `max` when the data ends or
    /// a third chunk would be needed (the caller sends the rest in another frame).
    pub fn slices(&self, offset: u64, max: usize) -> (&[u8], &[u8]) {
        let i = self.buf.partition_point(|(at, _)| *at <= offset);
        let Some(i) = i.checked_sub(1) else {
            return (&[], &[]);
        };
        let (at, c) = &self.buf[i];
        let a = c.get((offset - at) as usize..).unwrap_or(&[]);
        let a = &a[..a.len().min(max)];
        let b = match self.buf.get(i + 1) {
            Some((_, d)) if a.len() < max => &d[..d.len().min(max - a.len())],
            _ => &[][..],
        };
        (a, b)
    }

    /// The first part of `r` that is still buffered and not acknowledged, if any.
    pub fn first_unacked(&self, r: Range<u64>) -> Option<Range<u64>> {
        let r = r.start.max(self.base)..r.end.min(self.write_offset());
        self.acked.gaps_in(r).into_iter().next()
    }

    /// A STREAM frame's range was acknowledged.
    pub fn on_acked(&mut self, r: Range<u64>, fin: bool) {
        if fin {
            self.fin_acked = true;
            self.fin_pending = false;
        }
        if r.start < r.end && r.end > self.base {
            let r = r.start.max(self.base)..r.end;
            self.acked.insert(r.clone());
            self.retransmit.remove(r);
            if let Some(first) = self.acked.first() {
                if first.start <= self.base {
                    self.release_below(first.end);
                    self.acked.pop_first();
                }
            }
        }
    }

    /// Drop the buffered bytes below `end` (acknowledged).
    fn release_below(&mut self, end: u64) {
        let end = end.min(self.write_offset());
        while let Some((at, c)) = self.buf.front_mut() {
            let chunk_end = *at + c.len() as u64;
            if chunk_end <= end {
                self.buf.pop_front();
            } else {
                if *at < end {
                    c.advance((end - *at) as usize);
                    *at = end;
                }
                break;
            }
        }
        self.buffered -= end.saturating_sub(self.base);
        self.base = self.base.max(end);
    }

    /// The first part of `r` still unacknowledged (`None` when all of it was, or the
    /// stream was reset).
    pub fn unacked_within(&self, r: Range<u64>) -> Option<Range<u64>> {
        if self.reset.is_some() {
            return None;
        }
        let r = r.start.max(self.base)..r.end.min(self.write_offset());
        if r.start >= r.end {
            return None;
        }
        self.acked.gaps_in(r).into_iter().next()
    }

    /// A STREAM frame's range must be sent again (lost, or reinjected onto another path).
    /// Returns true when anything was queued.
    pub fn on_lost(&mut self, r: Range<u64>, fin: bool) -> bool {
        if self.reset.is_some() {
            return false;
        }
        let mut queued = false;
        if fin && !self.fin_acked {
            self.fin_pending = true;
            queued = true;
        }
        let r = r.start.max(self.base)..r.end;
        for gap in self.acked.gaps_in(r) {
            queued |= self.retransmit.insert(gap);
        }
        queued
    }

    /// Every byte and the FIN were acknowledged (or the stream was reset).
    pub fn is_done(&self) -> bool {
        self.reset.is_some() || (self.fin && self.fin_acked && self.buf.is_empty())
    }

    /// Drop all buffered data (after a reset).
    pub fn discard(&mut self) {
        self.base = self.write_offset();
        self.buf.clear();
        self.buffered = 0;
        self.retransmit = RangeSet::new();
        self.acked = RangeSet::new();
        self.fin_pending = false;
    }
}

/// Outcome of receiving a STREAM frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvOutcome {
    /// Accepted; `new_bytes` raised the highest received offset by this much.
    Ok { new_highest: u64, readable: bool },
    /// Beyond the stream's flow-control limit.
    FlowControl,
    /// Contradicts an earlier final size.
    FinalSize,
}

/// State of the receiving half.
#[derive(Debug, Default)]
pub struct RecvStream {
    chunks: BTreeMap<u64, Bytes>,
    received: RangeSet,
    /// Next offset the application reads.
    pub read_offset: u64,
    /// Highest offset received + 1.
    pub highest: u64,
    /// Final size, once known.
    pub final_size: Option<u64>,
    /// Limit we advertised.
    pub max_advertised: u64,
    /// Window size we keep granting.
    pub window: u64,
    /// The peer reset its sending side (code, final size).
    pub reset: Option<u64>,
    /// The application read the FIN.
    pub fin_read: bool,
    /// We asked the peer to stop sending, with this code.
    pub stop_sending: Option<u64>,
}

impl RecvStream {
    /// A receiving half granting `window` bytes.
    pub fn new(window: u64) -> Self {
        RecvStream {
            max_advertised: window,
            window,
            ..Default::default()
        }
    }

    /// Store a STREAM frame's data.
    pub fn on_data(&mut self, offset: u64, data: Bytes, fin: bool) -> RecvOutcome {
        // Before anything changes: a FIN alone makes a stream readable too.
        let was_readable = self.is_readable();
        let end = offset + data.len() as u64;
        if end > self.max_advertised {
            return RecvOutcome::FlowControl;
        }
        if let Some(fs) = self.final_size {
            if end > fs || (fin && end != fs) {
                return RecvOutcome::FinalSize;
            }
        }
        if fin {
            if end < self.highest {
                return RecvOutcome::FinalSize;
            }
            self.final_size = Some(end);
        }
        let new_highest = end.saturating_sub(self.highest);
        self.highest = self.highest.max(end);
        if self.reset.is_some() || self.stop_sending.is_some() {
            // Count for flow control, keep nothing.
            return RecvOutcome::Ok {
                new_highest,
                readable: false,
            };
        }
        let from = offset.max(self.read_offset);
        if from < end {
            for gap in self.received.gaps_in(from..end) {
                let s = (gap.start - offset) as usize;
                let e = (gap.end - offset) as usize;
                self.chunks.insert(gap.start, data.slice(s..e));
            }
            self.received.insert(from..end);
        }
        RecvOutcome::Ok {
            new_highest,
            readable: !was_readable && self.is_readable(),
        }
    }

    /// Data or the FIN can be read now.
    pub fn is_readable(&self) -> bool {
        self.chunks.contains_key(&self.read_offset)
            || (self.final_size == Some(self.read_offset) && !self.fin_read)
    }

    /// Take the next contiguous chunk, up to `max` bytes. `None` when nothing is ready.
    pub fn read_chunk(&mut self, max: usize) -> Option<Bytes> {
        let (&off, _) = self.chunks.first_key_value()?;
        if off != self.read_offset {
            return None;
        }
        let mut chunk = self.chunks.pop_first()?.1;
        if chunk.len() > max {
            let rest = chunk.split_off(max);
            self.chunks.insert(off + max as u64, rest);
        }
        self.read_offset += chunk.len() as u64;
        self.received.remove_below(self.read_offset);
        Some(chunk)
    }

    /// All data was read and the FIN reached the application (marks it read).
    pub fn take_fin(&mut self) -> bool {
        if !self.fin_read && self.final_size == Some(self.read_offset) && self.chunks.is_empty() {
            self.fin_read = true;
            return true;
        }
        false
    }

    /// A new MAX_STREAM_DATA is worth sending (half the window consumed).
    pub fn window_update(&mut self) -> Option<u64> {
        if self.final_size.is_some() || self.reset.is_some() {
            return None;
        }
        if self.max_advertised - self.read_offset < self.window / 2 {
            self.max_advertised = self.read_offset + self.window;
            return Some(self.max_advertised);
        }
        None
    }

    /// Bytes received but not yet read.
    pub fn buffered(&self) -> u64 {
        self.chunks.values().map(|c| c.len() as u64).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_buffer_retransmits_only_unacked_bytes() {
        let mut s = SendStream::new(1000, 1000);
        assert_eq!(s.write(&[7u8; 300]), 300);
        s.next_new = 300;
        s.on_acked(100..200, false);
        assert!(s.on_lost(0..300, false));
        assert_eq!(
            s.retransmit.iter().collect::<Vec<_>>(),
            vec![0..100, 200..300]
        );
        s.on_acked(0..100, false);
        assert_eq!(s.write_offset(), 300);
        assert_eq!(s.slices(200, 100).0.len() + s.slices(200, 100).1.len(), 100);
        s.on_acked(200..300, false);
        assert!(s.retransmit.is_empty());
        s.finish();
        assert!(s.has_pending());
        s.on_acked(300..300, true);
        assert!(s.is_done());
    }

    /// Every byte of the send buffer read back through `slices`, from any offset, frames
    /// of at most `max` bytes: what the packets would carry.
    fn read_back(s: &SendStream, from: u64, max: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut off = from;
        while off < s.write_offset() {
            let (a, b) = s.slices(off, max);
            assert!(!a.is_empty() && a.len() + b.len() <= max);
            out.extend_from_slice(a);
            out.extend_from_slice(b);
            off += (a.len() + b.len()) as u64;
        }
        out
    }

    #[test]
    fn send_buffer_of_chunks_gives_back_every_byte_across_chunks_and_acks() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut s = SendStream::new(1 << 20, 1 << 20);
        // Chunks of mixed sizes, copied and not.
        let bytes = Bytes::from(data.clone());
        assert_eq!(s.write(&data[..1]), 1);
        assert_eq!(s.write_bytes(bytes.slice(1..700)), 699);
        assert_eq!(s.write(&data[700..703]), 3);
        assert_eq!(s.write_bytes(bytes.slice(703..)), 4297);
        assert_eq!(s.write_offset(), 5000);
        for max in [1, 2, 5, 1200, 1400, 9999] {
            for from in [0, 1, 2, 699, 700, 702, 703, 4000, 4999] {
                assert_eq!(
                    read_back(&s, from, max),
                    &data[from as usize..],
                    "{from} {max}"
                );
                // What packets get: any number of bytes, across any number of chunks.
                let mut out = vec![0u8; (5000 - from as usize).min(max)];
                s.copy_out(from, &mut out);
                let want = &data[from as usize..from as usize + out.len()];
                assert_eq!(out, want, "copy_out {from} {max}");
            }
        }
        // Acknowledged bytes go, in the middle of a chunk too; the rest stays readable.
        s.next_new = 5000;
        s.on_acked(0..650, false);
        assert_eq!(read_back(&s, 650, 1400), &data[650..]);
        s.on_acked(650..702, false);
        assert_eq!(read_back(&s, 702, 1400), &data[702..]);
        assert_eq!(s.write_offset(), 5000);
        s.finish();
        s.on_acked(702..5000, true);
        assert!(s.is_done(), "all acknowledged: the buffer is empty");
    }

    #[test]
    fn write_bytes_keeps_the_applications_bytes_without_a_copy() {
        let mut s = SendStream::new(1 << 20, 100);
        let data = Bytes::from(vec![9u8; 300]);
        assert_eq!(
            s.write_bytes(data.clone()),
            100,
            "only what the buffer limit allows"
        );
        let (a, _) = s.slices(0, 50);
        assert_eq!(a.as_ptr(), data.as_ptr(), "the same memory");
    }

    #[test]
    fn reassembles_out_of_order_and_overlapping_data() {
        let mut r = RecvStream::new(100);
        let data: Vec<u8> = (0..50).collect();
        let b = Bytes::from(data.clone());
        assert!(matches!(
            r.on_data(10, b.slice(10..30), false),
            RecvOutcome::Ok {
                readable: false,
                ..
            }
        ));
        assert!(matches!(
            r.on_data(0, b.slice(0..15), false),
            RecvOutcome::Ok { readable: true, .. }
        ));
        r.on_data(25, b.slice(25..50), true);
        r.on_data(5, b.slice(5..40), false);
        let mut out = Vec::new();
        while let Some(c) = r.read_chunk(7) {
            out.extend_from_slice(&c);
        }
        assert_eq!(out, data);
        assert!(r.take_fin());
        assert!(!r.take_fin());
    }

    #[test]
    fn fin_alone_after_all_data_was_read_makes_the_stream_readable() {
        // Regression: readability was judged after the final size was recorded, so a FIN
        // arriving on its own after the application had read everything raised no
        // readable signal and the end of the stream was never delivered.
        let mut r = RecvStream::new(100);
        assert!(matches!(
            r.on_data(0, Bytes::from_static(b"ok"), false),
            RecvOutcome::Ok { readable: true, .. }
        ));
        assert_eq!(r.read_chunk(10).as_deref(), Some(&b"ok"[..]));
        assert!(matches!(
            r.on_data(2, Bytes::new(), true),
            RecvOutcome::Ok { readable: true, .. }
        ));
        assert!(r.take_fin());
    }

    #[test]
    fn flow_control_and_final_size_are_enforced() {
        let mut r = RecvStream::new(10);
        assert_eq!(
            r.on_data(5, Bytes::from_static(&[0; 6]), false),
            RecvOutcome::FlowControl
        );
        assert!(matches!(
            r.on_data(0, Bytes::from_static(&[0; 4]), true),
            RecvOutcome::Ok { .. }
        ));
        assert_eq!(
            r.on_data(4, Bytes::from_static(&[0; 1]), false),
            RecvOutcome::FinalSize
        );
        assert_eq!(
            r.on_data(0, Bytes::from_static(&[0; 3]), true),
            RecvOutcome::FinalSize
        );
    }
}
