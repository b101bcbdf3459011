//! Frames: the units of information inside a packet (see `docs/protocol.md`, "Frames").
//!
//! Parsing yields [`Frame`] values that borrow from the packet. Every frame type carries
//! everything needed to act on it regardless of the path it arrived on: an ACK names the
//! path whose packets it acknowledges, so acknowledgements of one path may travel on another.

use super::{Reader, WireError, Writer};
use std::ops::Range;

/// Frame type codes.
pub mod ty {
    pub const PADDING: u64 = 0x00;
    pub const PING: u64 = 0x01;
    pub const ACK: u64 = 0x02;
    /// ACK with the receiver's clock when it received the largest packet (ACK_TS).
    pub const ACK_TS: u64 = 0x03;
    pub const RESET_STREAM: u64 = 0x04;
    pub const STOP_SENDING: u64 = 0x05;
    /// STREAM is 0x08, or 0x09 with the FIN bit.
    pub const STREAM: u64 = 0x08;
    pub const STREAM_FIN: u64 = 0x09;
    pub const MAX_DATA: u64 = 0x10;
    pub const MAX_STREAM_DATA: u64 = 0x11;
    pub const MAX_STREAMS: u64 = 0x12;
    pub const HELLO: u64 = 0x18;
    pub const PATH_CHALLENGE: u64 = 0x1a;
    pub const PATH_RESPONSE: u64 = 0x1b;
    pub const CLOSE: u64 = 0x1c;
    pub const PATH_STATUS: u64 = 0x1d;
    pub const PATH_ABANDON: u64 = 0x1e;
    pub const PATH_BLACKOUT: u64 = 0x20;
    pub const PATH_COST: u64 = 0x1f;
    pub const DATAGRAM: u64 = 0x30;
    /// DATAGRAM with a sequence number (redundant datagrams: the receiver drops copies).
    pub const DATAGRAM_SEQ: u64 = 0x31;
}

/// How a peer wants a path used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PathState {
    /// Carry traffic.
    Active,
    /// Use only when no active path is usable.
    Standby,
    /// Send nothing but probes; windows and timers are kept as they are.
    Frozen,
}

impl PathState {
    fn code(self) -> u64 {
        match self {
            PathState::Active => 0,
            PathState::Standby => 1,
            PathState::Frozen => 2,
        }
    }
    fn from_code(c: u64) -> Result<Self, WireError> {
        Ok(match c {
            0 => PathState::Active,
            1 => PathState::Standby,
            2 => PathState::Frozen,
            _ => return Err(WireError::Invalid("path status")),
        })
    }
}

/// Transport parameters exchanged once, in the HELLO frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelloParams {
    /// Connection-level receive window the sender of HELLO grants.
    pub max_data: u64,
    /// Per-stream receive window it grants.
    pub max_stream_data: u64,
    /// Streams the peer may open.
    pub max_streams: u64,
    /// Idle timeout, milliseconds.
    pub idle_timeout_ms: u64,
    /// Congestion controller the client asks both ends to use (its
    /// `CcAlgorithm::wire_id`); the server adopts it. Ignored when the client receives it.
    pub cc: u64,
    /// Scheduler the client asks both ends to use (its `SchedulerKind::wire_id`).
    pub scheduler: u64,
    /// Largest DATAGRAM payload it accepts (0: none).
    pub max_datagram: u64,
    /// Mechanisms the client asks both ends to use, a bit each (see [`features`]); the
    /// server adopts them. Unknown bits are ignored.
    pub features: u64,
    /// The OPERETTA utility alpha in thousandths (0..=1000), adopted by the server.
    pub alpha_milli: u64,
}

/// Bits of [`HelloParams::features`].
pub mod features {
    /// ACK offload: acknowledgements of the primary path travel on a secondary uplink.
    pub const ACK_OFFLOAD: u64 = 1;
    /// Blackout freeze: a path in a confirmed blackout is frozen, not backed off.
    pub const BLACKOUT_FREEZE: u64 = 2;
    /// Random-loss recovery: isolated losses are resent on another path without a cut.
    pub const LOSS_RECOVERY: u64 = 4;
    /// Redundant datagrams: each on the two fastest paths, numbered (DATAGRAM_SEQ).
    pub const DATAGRAM_REDUNDANT: u64 = 8;
    /// Auto datagrams: real-time flows on the fastest path with a budgeted copy
    /// (DATAGRAM_SEQ), bulk flows spread. `DATAGRAM_REDUNDANT` wins when both are set.
    pub const DATAGRAM_AUTO: u64 = 16;
    /// A capability, not a choice: the sender of HELLO reads ACK_TS frames, so its peer
    /// may acknowledge with them (each side announces it; neither adopts it).
    pub const ACK_TIMESTAMPS: u64 = 32;
}

/// An ACK frame: the packets received on `path`, as descending ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckFrame<'a> {
    /// The path whose packet numbers are acknowledged.
    pub path: u8,
    /// Largest packet number acknowledged.
    pub largest: u64,
    /// Microseconds the receiver held the largest before acknowledging.
    pub ack_delay_us: u64,
    /// ACK_TS only: the receiver's clock (microseconds since an epoch of its own) when the
    /// largest arrived; with the sender's send time, the path's one-way delay plus the
    /// clocks' constant offset.
    pub recv_time_us: Option<u64>,
    first_range: u64,
    range_count: u64,
    rest: &'a [u8],
}

impl AckFrame<'_> {
    /// Acknowledged ranges, highest first. Validated at parse time.
    pub fn ranges(&self) -> AckRanges<'_> {
        AckRanges {
            next_end: Some(self.largest + 1),
            pending_first: Some(self.first_range),
            left: self.range_count,
            r: Reader::new(self.rest),
        }
    }
}

/// Iterator over an ACK frame's ranges, highest first.
#[derive(Debug)]
pub struct AckRanges<'a> {
    next_end: Option<u64>,
    pending_first: Option<u64>,
    left: u64,
    r: Reader<'a>,
}

impl Iterator for AckRanges<'_> {
    type Item = Range<u64>;
    fn next(&mut self) -> Option<Range<u64>> {
        let end = self.next_end?;
        if let Some(len) = self.pending_first.take() {
            let start = end - 1 - len;
            self.next_end = Some(start);
            return Some(start..end);
        }
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // Already validated by `parse_ack`.
        let gap = self.r.varint().ok()?;
        let len = self.r.varint().ok()?;
        let hi = end.checked_sub(gap + 2)?;
        let start = hi.checked_sub(len)?;
        self.next_end = Some(start);
        Some(start..hi + 1)
    }
}

/// One frame, borrowing from the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// Zero bytes, ignored.
    Padding,
    /// Elicits an acknowledgement; nothing else.
    Ping,
    /// Acknowledges packets of a path.
    Ack(AckFrame<'a>),
    /// The sender abandons a stream's sending side.
    ResetStream { id: u64, code: u64, final_size: u64 },
    /// The sender asks the peer to stop sending on a stream.
    StopSending { id: u64, code: u64 },
    /// Stream data at `offset`.
    Stream {
        id: u64,
        offset: u64,
        fin: bool,
        data: &'a [u8],
    },
    /// Connection-level flow-control limit.
    MaxData(u64),
    /// Stream-level flow-control limit.
    MaxStreamData { id: u64, max: u64 },
    /// Cumulative limit on streams the peer may open.
    MaxStreams(u64),
    /// Session parameters.
    Hello(HelloParams),
    /// Path validation challenge.
    PathChallenge([u8; 8]),
    /// Path validation response.
    PathResponse([u8; 8]),
    /// The session ends.
    Close { code: u64, reason: &'a [u8] },
    /// How the sender wants a path used.
    PathStatus {
        path: u8,
        seq: u64,
        state: PathState,
    },
    /// The sender stops using a path for good.
    PathAbandon { path: u8 },
    /// The sender of this frame confirmed a blackout of `path`: nothing arrived on it after
    /// the packet numbered `largest` (the largest it received on that path, 0 if none).
    PathBlackout { path: u8, largest: u64 },
    /// What using a path costs: the interface's power draw while active (above idle),
    /// milliwatts, and its rate if known, kbit/s (0: unknown, estimate it). `seq` orders
    /// updates like PATH_STATUS.
    PathCost {
        path: u8,
        seq: u64,
        power_mw: u64,
        rate_kbps: u64,
    },
    /// An unreliable datagram.
    Datagram(&'a [u8]),
    /// An unreliable datagram with its sequence number: a second copy is dropped.
    DatagramSeq { seq: u64, data: &'a [u8] },
}

impl Frame<'_> {
    /// Frames that require an acknowledgement (all but PADDING, ACK and CLOSE).
    pub fn is_ack_eliciting(&self) -> bool {
        !matches!(self, Frame::Padding | Frame::Ack(_) | Frame::Close { .. })
    }
}

/// Iterates over the frames of a packet payload; stops at the first error.
#[derive(Debug)]
pub struct FrameIter<'a> {
    r: Reader<'a>,
    failed: bool,
}

impl<'a> FrameIter<'a> {
    /// Frames of `payload` (the bytes between header and tag).
    pub fn new(payload: &'a [u8]) -> Self {
        FrameIter {
            r: Reader::new(payload),
            failed: false,
        }
    }
}

impl<'a> Iterator for FrameIter<'a> {
    type Item = Result<Frame<'a>, WireError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.r.is_empty() {
            return None;
        }
        let f = parse_one(&mut self.r);
        if f.is_err() {
            self.failed = true;
        }
        Some(f)
    }
}

fn path_id(r: &mut Reader<'_>) -> Result<u8, WireError> {
    r.u8()
}

fn parse_ack<'a>(r: &mut Reader<'a>, timestamped: bool) -> Result<AckFrame<'a>, WireError> {
    let path = path_id(r)?;
    let largest = r.varint()?;
    let ack_delay_us = r.varint()?;
    let recv_time_us = if timestamped { Some(r.varint()?) } else { None };
    let range_count = r.varint()?;
    let first_range = r.varint()?;
    if first_range > largest {
        return Err(WireError::Invalid("ack range below zero"));
    }
    let start = r.pos();
    let mut low = largest - first_range;
    for _ in 0..range_count {
        let gap = r.varint()?;
        let len = r.varint()?;
        let hi = low
            .checked_sub(gap + 2)
            .ok_or(WireError::Invalid("ack range below zero"))?;
        low = hi
            .checked_sub(len)
            .ok_or(WireError::Invalid("ack range below zero"))?;
    }
    let rest = r.buf.get(start..r.pos()).unwrap_or(&[]);
    Ok(AckFrame {
        path,
        largest,
        ack_delay_us,
        recv_time_us,
        first_range,
        range_count,
        rest,
    })
}

fn parse_one<'a>(r: &mut Reader<'a>) -> Result<Frame<'a>, WireError> {
    let t = r.varint()?;
    Ok(match t {
        ty::PADDING => Frame::Padding,
        ty::PING => Frame::Ping,
        ty::ACK => Frame::Ack(parse_ack(r, false)?),
        ty::ACK_TS => Frame::Ack(parse_ack(r, true)?),
        ty::RESET_STREAM => Frame::ResetStream {
            id: r.varint()?,
            code: r.varint()?,
            final_size: r.varint()?,
        },
        ty::STOP_SENDING => Frame::StopSending {
            id: r.varint()?,
            code: r.varint()?,
        },
        ty::STREAM | ty::STREAM_FIN => {
            let id = r.varint()?;
            let offset = r.varint()?;
            let data = r.len_prefixed()?;
            if offset
                .checked_add(data.len() as u64)
                .is_none_or(|e| e > super::varint::MAX)
            {
                return Err(WireError::Invalid("stream offset"));
            }
            Frame::Stream {
                id,
                offset,
                fin: t == ty::STREAM_FIN,
                data,
            }
        }
        ty::MAX_DATA => Frame::MaxData(r.varint()?),
        ty::MAX_STREAM_DATA => Frame::MaxStreamData {
            id: r.varint()?,
            max: r.varint()?,
        },
        ty::MAX_STREAMS => Frame::MaxStreams(r.varint()?),
        ty::HELLO => Frame::Hello(HelloParams {
            max_data: r.varint()?,
            max_stream_data: r.varint()?,
            max_streams: r.varint()?,
            idle_timeout_ms: r.varint()?,
            max_datagram: r.varint()?,
            cc: r.varint()?,
            scheduler: r.varint()?,
            features: r.varint()?,
            alpha_milli: r.varint()?,
        }),
        ty::PATH_CHALLENGE | ty::PATH_RESPONSE => {
            let mut d = [0u8; 8];
            d.copy_from_slice(r.bytes(8)?);
            if t == ty::PATH_CHALLENGE {
                Frame::PathChallenge(d)
            } else {
                Frame::PathResponse(d)
            }
        }
        ty::CLOSE => Frame::Close {
            code: r.varint()?,
            reason: r.len_prefixed()?,
        },
        ty::PATH_STATUS => Frame::PathStatus {
            path: path_id(r)?,
            seq: r.varint()?,
            state: PathState::from_code(r.varint()?)?,
        },
        ty::PATH_ABANDON => Frame::PathAbandon { path: path_id(r)? },
        ty::PATH_BLACKOUT => Frame::PathBlackout {
            path: path_id(r)?,
            largest: r.varint()?,
        },
        ty::PATH_COST => Frame::PathCost {
            path: path_id(r)?,
            seq: r.varint()?,
            power_mw: r.varint()?,
            rate_kbps: r.varint()?,
        },
        ty::DATAGRAM => Frame::Datagram(r.len_prefixed()?),
        ty::DATAGRAM_SEQ => Frame::DatagramSeq {
            seq: r.varint()?,
            data: r.len_prefixed()?,
        },
        other => return Err(WireError::UnknownFrame(other)),
    })
}

/// Emitters. Each returns `None` without a partial frame when `w` lacks space.
pub mod emit {
    use super::*;

    fn atomic(w: &mut Writer<'_>, f: impl FnOnce(&mut Writer<'_>) -> Option<()>) -> Option<()> {
        let start = w.pos();
        let r = f(w);
        if r.is_none() {
            w.truncate(start);
        }
        r
    }

    /// A PING frame.
    pub fn ping(w: &mut Writer<'_>) -> Option<()> {
        w.varint(ty::PING)
    }

    /// `n` bytes of padding.
    pub fn padding(w: &mut Writer<'_>, n: usize) -> Option<()> {
        w.zeros(n)
    }

    /// An ACK frame for `path` covering `ranges` (disjoint, non-adjacent, highest first;
    /// at most `max_ranges` are written), an ACK_TS frame when `recv_time_us` is given.
    /// Returns the largest packet number acknowledged.
    pub fn ack(
        w: &mut Writer<'_>,
        path: u8,
        ranges: impl Iterator<Item = Range<u64>>,
        ack_delay_us: u64,
        recv_time_us: Option<u64>,
        max_ranges: usize,
    ) -> Option<u64> {
        let start = w.pos();
        let mut it = ranges.filter(|r| r.start < r.end);
        let r = (|| {
            let top = it.next()?;
            let largest = top.end - 1;
            let rest: Vec<Range<u64>> = it.take(max_ranges.saturating_sub(1)).collect();
            w.varint(if recv_time_us.is_some() {
                ty::ACK_TS
            } else {
                ty::ACK
            })?;
            w.u8(path)?;
            w.varint(largest)?;
            w.varint(ack_delay_us)?;
            if let Some(t) = recv_time_us {
                w.varint(t)?;
            }
            w.varint(rest.len() as u64)?;
            w.varint(top.end - 1 - top.start)?;
            let mut low = top.start;
            for r in rest {
                // gap: unacked packets between ranges, minus one.
                w.varint(low - r.end - 1)?;
                w.varint(r.end - 1 - r.start)?;
                low = r.start;
            }
            Some(largest)
        })();
        if r.is_none() {
            w.truncate(start);
        }
        r
    }

    /// RESET_STREAM.
    pub fn reset_stream(w: &mut Writer<'_>, id: u64, code: u64, final_size: u64) -> Option<()> {
        atomic(w, |w| {
            w.varint(ty::RESET_STREAM)?;
            w.varint(id)?;
            w.varint(code)?;
            w.varint(final_size)
        })
    }

    /// STOP_SENDING.
    pub fn stop_sending(w: &mut Writer<'_>, id: u64, code: u64) -> Option<()> {
        atomic(w, |w| {
            w.varint(ty::STOP_SENDING)?;
            w.varint(id)?;
            w.varint(code)
        })
    }

    /// Bytes a STREAM frame header needs, for sizing the data.
    pub fn stream_header_len(id: u64, offset: u64, len: usize) -> usize {
        1 + crate::wire::varint::len(id)
            + crate::wire::varint::len(offset)
            + crate::wire::varint::len(len as u64)
    }

    /// A STREAM frame.
    pub fn stream(w: &mut Writer<'_>, id: u64, offset: u64, fin: bool, data: &[u8]) -> Option<()> {
        atomic(w, |w| {
            w.varint(if fin { ty::STREAM_FIN } else { ty::STREAM })?;
            w.varint(id)?;
            w.varint(offset)?;
            w.varint(data.len() as u64)?;
            w.bytes(data)
        })
    }

    /// A STREAM frame whose data comes in two pieces (a ring buffer's two halves).
    pub fn stream2(
        w: &mut Writer<'_>,
        id: u64,
        offset: u64,
        fin: bool,
        a: &[u8],
        b: &[u8],
    ) -> Option<()> {
        atomic(w, |w| {
            w.varint(if fin { ty::STREAM_FIN } else { ty::STREAM })?;
            w.varint(id)?;
            w.varint(offset)?;
            w.varint((a.len() + b.len()) as u64)?;
            w.bytes(a)?;
            w.bytes(b)
        })
    }

    /// A STREAM frame of `len` bytes that `fill` writes straight into the packet (from a
    /// send buffer of several chunks, with no copy in between).
    pub fn stream_with(
        w: &mut Writer<'_>,
        id: u64,
        offset: u64,
        fin: bool,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Option<()> {
        atomic(w, |w| {
            w.varint(if fin { ty::STREAM_FIN } else { ty::STREAM })?;
            w.varint(id)?;
            w.varint(offset)?;
            w.varint(len as u64)?;
            fill(w.slot(len)?);
            Some(())
        })
    }

    /// MAX_DATA.
    pub fn max_data(w: &mut Writer<'_>, max: u64) -> Option<()> {
        atomic(w, |w| {
            w.varint(ty::MAX_DATA)?;
            w.varint(max)
        })
    }

    /// MAX_STREAM_DATA.
    pub fn max_stream_data(w: &mut Writer<'_>, id: u64, max: u64) -> Option<()> {
        atomic(w, |w| {
            w.varint(ty::MAX_STREAM_DATA)?;
            w.varint(id)?;
            w.varint(max)
        })
    }

    /// MAX_STREAMS.
    pub fn max_streams(w: &mut Writer<'_>, max: u64) -> Option<()> {
        atomic(w, |w| {
            w.varint(ty::MAX_STREAMS)?;
            w.varint(max)
        })
    }

    /// HELLO.
    pub fn hello(w: &mut Writer<'_>, p: &HelloParams) -> Option<()> {
        atomic(w, |w| {
            w.varint(ty::HELLO)?;
            w.varint(p.max_data)?;
            w.varint(p.max_stream_data)?;
            w.varint(p.max_streams)?;
            w.varint(p.idle_timeout_ms)?;
            w.varint(p.max_datagram)?;
            w.varint(p.cc)?;
            w.varint(p.scheduler)?;
            w.varint(p.features)?;
            w.varint(p.alpha_milli)
        })
    }

    /// PATH_CHALLENGE or PATH_RESPONSE.
    pub fn path_token(w: &mut Writer<'_>, response: bool, data: &[u8; 8]) -> Option<()> {
        atomic(w, |w| {
            w.varint(if response {
                ty::PATH_RESPONSE
            } else {
                ty::PATH_CHALLENGE
            })?;
            w.bytes(data)
        })
    }

    /// CLOSE.
    pub fn close(w: &mut Writer<'_>, code: u64, reason: &[u8]) -> Option<()> {
        atomic(w, |w| {
            w.varint(ty::CLOSE)?;
            w.varint(code)?;
            w.varint(reason.len() as u64)?;
            w.bytes(reason)
        })
    }

    /// PATH_STATUS.
    pub fn path_status(w: &mut Writer<'_>, path: u8, seq: u64, state: PathState) -> Option<()> {
        atomic(w, |w| {
            w.varint(ty::PATH_STATUS)?;
            w.u8(path)?;
            w.varint(seq)?;
            w.varint(state.code())
        })
    }

    /// PATH_ABANDON.
    pub fn path_abandon(w: &mut Writer<'_>, path: u8) -> Option<()> {
        atomic(w, |w| {
            w.varint(ty::PATH_ABANDON)?;
            w.u8(path)
        })
    }

    /// PATH_BLACKOUT.
    pub fn path_blackout(w: &mut Writer<'_>, path: u8, largest: u64) -> Option<()> {
        atomic(w, |w| {
            w.varint(ty::PATH_BLACKOUT)?;
            w.u8(path)?;
            w.varint(largest)
        })
    }

    /// PATH_COST.
    pub fn path_cost(
        w: &mut Writer<'_>,
        path: u8,
        seq: u64,
        power_mw: u64,
        rate_kbps: u64,
    ) -> Option<()> {
        atomic(w, |w| {
            w.varint(ty::PATH_COST)?;
            w.u8(path)?;
            w.varint(seq)?;
            w.varint(power_mw)?;
            w.varint(rate_kbps)
        })
    }

    /// DATAGRAM.
    pub fn datagram(w: &mut Writer<'_>, data: &[u8]) -> Option<()> {
        atomic(w, |w| {
            w.varint(ty::DATAGRAM)?;
            w.varint(data.len() as u64)?;
            w.bytes(data)
        })
    }

    /// DATAGRAM_SEQ.
    pub fn datagram_seq(w: &mut Writer<'_>, seq: u64, data: &[u8]) -> Option<()> {
        atomic(w, |w| {
            w.varint(ty::DATAGRAM_SEQ)?;
            w.varint(seq)?;
            w.varint(data.len() as u64)?;
            w.bytes(data)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ranges::RangeSet;

    fn one(buf: &[u8]) -> Frame<'_> {
        let mut it = FrameIter::new(buf);
        let f = it.next().unwrap().unwrap();
        assert!(it.next().is_none());
        f
    }

    #[test]
    fn ack_round_trip_with_gaps() {
        let mut set = RangeSet::new();
        set.insert(0..3);
        set.insert(5..6);
        set.insert(10..20);
        let mut buf = [0u8; 64];
        let mut w = Writer::new(&mut buf);
        assert_eq!(
            emit::ack(&mut w, 2, set.iter().rev(), 123, None, 16),
            Some(19)
        );
        let n = w.pos();
        match one(&buf[..n]) {
            Frame::Ack(a) => {
                assert_eq!((a.path, a.largest, a.ack_delay_us), (2, 19, 123));
                assert_eq!(a.ranges().collect::<Vec<_>>(), vec![10..20, 5..6, 0..3]);
            }
            f => panic!("{f:?}"),
        }
        // Truncated anywhere: an error, never a panic.
        for cut in 1..n {
            assert!(FrameIter::new(&buf[..cut]).any(|f| f.is_err()));
        }
    }

    #[test]
    fn ack_limits_ranges_to_newest() {
        let mut set = RangeSet::new();
        for i in 0..10 {
            set.insert(i * 3..i * 3 + 1);
        }
        let mut buf = [0u8; 128];
        let mut w = Writer::new(&mut buf);
        emit::ack(&mut w, 0, set.iter().rev(), 0, None, 3).unwrap();
        let n = w.pos();
        let Frame::Ack(a) = one(&buf[..n]) else {
            panic!()
        };
        assert_eq!(a.ranges().collect::<Vec<_>>(), vec![27..28, 24..25, 21..22]);
    }

    #[test]
    fn ack_below_zero_is_refused() {
        // largest 1, first range 5
        let buf = [0x02, 0, 1, 0, 0, 5];
        assert!(matches!(
            FrameIter::new(&buf).next(),
            Some(Err(WireError::Invalid(_)))
        ));
    }

    #[test]
    fn all_frames_round_trip() {
        let mut buf = vec![0u8; 512];
        let mut w = Writer::new(&mut buf);
        emit::ping(&mut w).unwrap();
        emit::reset_stream(&mut w, 4, 7, 100).unwrap();
        emit::stop_sending(&mut w, 4, 8).unwrap();
        emit::stream(&mut w, 8, 1 << 40, true, b"hello").unwrap();
        emit::stream2(&mut w, 8, 5, false, b"ab", b"cd").unwrap();
        emit::max_data(&mut w, 1 << 30).unwrap();
        emit::max_stream_data(&mut w, 8, 99).unwrap();
        emit::max_streams(&mut w, 100).unwrap();
        let hp = HelloParams {
            max_data: 1,
            max_stream_data: 2,
            max_streams: 3,
            idle_timeout_ms: 4,
            max_datagram: 5,
            cc: 2,
            scheduler: 1,
            features: 5,
            alpha_milli: 250,
        };
        emit::hello(&mut w, &hp).unwrap();
        emit::path_token(&mut w, false, &[1; 8]).unwrap();
        emit::path_token(&mut w, true, &[2; 8]).unwrap();
        emit::close(&mut w, 3, b"bye").unwrap();
        emit::path_status(&mut w, 1, 9, PathState::Frozen).unwrap();
        emit::path_abandon(&mut w, 6).unwrap();
        emit::path_blackout(&mut w, 2, 77).unwrap();
        emit::datagram(&mut w, b"dg").unwrap();
        emit::datagram_seq(&mut w, 300, b"sq").unwrap();
        emit::path_cost(&mut w, 2, 3, 634, 1000).unwrap();
        emit::padding(&mut w, 3).unwrap();
        let n = w.pos();
        let frames: Vec<_> = FrameIter::new(&buf[..n]).map(|f| f.unwrap()).collect();
        assert_eq!(
            &frames[..18],
            &[
                Frame::Ping,
                Frame::ResetStream {
                    id: 4,
                    code: 7,
                    final_size: 100
                },
                Frame::StopSending { id: 4, code: 8 },
                Frame::Stream {
                    id: 8,
                    offset: 1 << 40,
                    fin: true,
                    data: b"hello"
                },
                Frame::Stream {
                    id: 8,
                    offset: 5,
                    fin: false,
                    data: b"abcd"
                },
                Frame::MaxData(1 << 30),
                Frame::MaxStreamData { id: 8, max: 99 },
                Frame::MaxStreams(100),
                Frame::Hello(hp),
                Frame::PathChallenge([1; 8]),
                Frame::PathResponse([2; 8]),
                Frame::Close {
                    code: 3,
                    reason: b"bye"
                },
                Frame::PathStatus {
                    path: 1,
                    seq: 9,
                    state: PathState::Frozen
                },
                Frame::PathAbandon { path: 6 },
                Frame::PathBlackout {
                    path: 2,
                    largest: 77
                },
                Frame::Datagram(b"dg"),
                Frame::DatagramSeq {
                    seq: 300,
                    data: b"sq"
                },
                Frame::PathCost {
                    path: 2,
                    seq: 3,
                    power_mw: 634,
                    rate_kbps: 1000
                },
            ]
        );
        assert!(frames[18..].iter().all(|f| *f == Frame::Padding));
    }

    #[test]
    fn emit_into_small_buffer_leaves_no_partial_frame() {
        let mut buf = [0u8; 6];
        let mut w = Writer::new(&mut buf);
        assert!(emit::stream(&mut w, 1, 0, false, b"too long").is_none());
        assert_eq!(w.pos(), 0);
    }

    #[test]
    fn unknown_frame_type_is_an_error() {
        assert_eq!(
            FrameIter::new(&[0x3f]).next(),
            Some(Err(WireError::UnknownFrame(0x3f)))
        );
    }
}
