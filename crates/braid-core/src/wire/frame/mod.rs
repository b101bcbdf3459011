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
    /// The sender's name for one of its paths (sent only to a peer whose HELLO carries
    /// [`super::features::PATH_NAMES`]).
    pub const PATH_NAME: u64 = 0x21;
    /// How often the receiver of a path's packets should acknowledge them
    /// (draft-ietf-quic-ack-frequency; sent only to a peer whose HELLO carries
    /// [`super::features::ACK_FREQUENCY`]).
    pub const ACK_FREQUENCY: u64 = 0x22;
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
    /// A capability, like `ACK_TIMESTAMPS`: the sender of HELLO reads PATH_NAME frames, so
    /// its peer may name its paths (an older peer never sets it and is never sent one).
    pub const PATH_NAMES: u64 = 64;
    /// A capability, like `ACK_TIMESTAMPS`: the sender of HELLO follows ACK_FREQUENCY
    /// frames, so its peer may ask it to acknowledge less often.
    pub const ACK_FREQUENCY: u64 = 128;
}

/// Longest path name PATH_NAME carries, in bytes (UTF-8).
pub const MAX_PATH_NAME: usize = 32;

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
    /// The sender's name for its path `path` (UTF-8, 1 to [`MAX_PATH_NAME`] bytes, checked
    /// when parsed), for the peer's status and logs.
    PathName { path: u8, name: &'a str },
    /// Acknowledge the packets received on `path` after `threshold` ack-eliciting packets
    /// or `max_delay_us` microseconds, whichever comes first (a gap in the packet numbers
    /// is still acknowledged at once). `seq` orders requests: an older one is ignored.
    AckFrequency {
        path: u8,
        seq: u64,
        threshold: u64,
        max_delay_us: u64,
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

/// Iterates over the frames of a packet payload; stops at the first error. A run of
/// PADDING bytes is one [`Frame::Padding`] (a padded packet of 1200 bytes would otherwise
/// be a thousand frames for the receiver to collect).
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
        match f {
            Err(_) => self.failed = true,
            Ok(Frame::Padding) => {
                let run = self.r.buf[self.r.pos..]
                    .iter()
                    .take_while(|&&b| b == 0)
                    .count();
                self.r.pos += run;
            }
            Ok(_) => {}
        }
        Some(f)
    }
}

fn path_id(r: &mut Reader<'_>) -> Result<u8, WireError> {
    r.u8()
}

/// A PATH_NAME's name: length-prefixed, 1 to [`MAX_PATH_NAME`] bytes of UTF-8.
fn path_name<'a>(r: &mut Reader<'a>) -> Result<&'a str, WireError> {
    let n = r.varint()?;
    if n == 0 || n > MAX_PATH_NAME as u64 {
        return Err(WireError::Invalid("path name length"));
    }
    let b = r.bytes(n as usize)?;
    std::str::from_utf8(b).map_err(|_| WireError::Invalid("path name is not UTF-8"))
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
        ty::PATH_NAME => Frame::PathName {
            path: path_id(r)?,
            name: path_name(r)?,
        },
        ty::ACK_FREQUENCY => Frame::AckFrequency {
            path: path_id(r)?,
            seq: r.varint()?,
            threshold: r.varint()?,
            max_delay_us: r.varint()?,
        },
        ty::DATAGRAM => Frame::Datagram(r.len_prefixed()?),
        ty::DATAGRAM_SEQ => Frame::DatagramSeq {
            seq: r.varint()?,
            data: r.len_prefixed()?,
        },
        other => return Err(WireError::UnknownFrame(other)),
    })
}

pub mod emit;

#[cfg(test)]
mod tests;
