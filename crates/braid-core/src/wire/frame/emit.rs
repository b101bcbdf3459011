//! Emitters: each frame's bytes written into a caller's buffer. Each returns `None` without
//! a partial frame when `w` lacks space.
//!
//! Owns: the frames' byte layout on the way out (the parser in `mod.rs` reads the same
//! layout). Must not touch: session state or what the frames mean.

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

/// PATH_NAME. `name` is cut to [`MAX_PATH_NAME`] bytes at a character boundary; `None`
/// (nothing written) for an empty name, as for a full buffer.
pub fn path_name(w: &mut Writer<'_>, path: u8, name: &str) -> Option<()> {
    let name = clip_name(name);
    if name.is_empty() {
        return None;
    }
    atomic(w, |w| {
        w.varint(ty::PATH_NAME)?;
        w.u8(path)?;
        w.varint(name.len() as u64)?;
        w.bytes(name.as_bytes())
    })
}

/// ACK_FREQUENCY: the peer should acknowledge `path`'s packets after `threshold`
/// ack-eliciting packets or `max_delay_us` microseconds.
pub fn ack_frequency(
    w: &mut Writer<'_>,
    path: u8,
    seq: u64,
    threshold: u64,
    max_delay_us: u64,
) -> Option<()> {
    atomic(w, |w| {
        w.varint(ty::ACK_FREQUENCY)?;
        w.u8(path)?;
        w.varint(seq)?;
        w.varint(threshold)?;
        w.varint(max_delay_us)
    })
}

/// `name` cut to at most [`MAX_PATH_NAME`] bytes, at a character boundary.
pub fn clip_name(name: &str) -> &str {
    let mut end = name.len().min(MAX_PATH_NAME);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
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
