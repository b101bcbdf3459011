//! The wire format: packet headers and frames as zero-copy views with parse and emit.
//!
//! The packet header's codec is the `braid-wire` crate, shared with `braid-crypto` so that
//! a header is parsed once per packet by one parser; it is re-exported here.
//!
//! Owns: the frames' byte layout documented in `docs/protocol.md`. Must not touch: session state,
//! timers, congestion control. Parsing borrows from the datagram (no copies); emitting writes
//! into a caller-provided buffer.
//!
//! No-panic contract: every parse function accepts any byte slice and returns
//! `Err(WireError)` on malformed input; no index is taken without a bounds check. Every emit
//! function returns `None` (and leaves the buffer's unwritten tail untouched) when the
//! buffer is too small. The fuzz targets in `fuzz/` exercise these contracts.

pub mod frame;
pub mod varint;

pub use braid_wire::{
    parse_header, Header, HeaderError, PacketType, MAX_HEADER_LEN, MIN_HEADER_LEN, VERSION,
};
pub use frame::{features, AckFrame, Frame, FrameIter, HelloParams, PathState, MAX_PATH_NAME};

/// What is wrong with a received packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The packet ends in the middle of a field.
    #[error("packet truncated")]
    Truncated,
    /// The version byte is not one this build speaks.
    #[error("unsupported protocol version {0}")]
    BadVersion(u8),
    /// A frame type this version does not define.
    #[error("unknown frame type {0:#x}")]
    UnknownFrame(u64),
    /// A field holds a value the protocol forbids.
    #[error("invalid field: {0}")]
    Invalid(&'static str),
}

/// A bounds-checked cursor over a received buffer.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }
    /// Bytes consumed so far.
    pub fn pos(&self) -> usize {
        self.pos
    }
    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    /// True when all bytes were consumed.
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }
    /// One byte.
    pub fn u8(&mut self) -> Result<u8, WireError> {
        let b = *self.buf.get(self.pos).ok_or(WireError::Truncated)?;
        self.pos += 1;
        Ok(b)
    }
    /// A big-endian u64.
    pub fn u64(&mut self) -> Result<u64, WireError> {
        let b = self.bytes(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }
    /// One varint.
    pub fn varint(&mut self) -> Result<u64, WireError> {
        let rest = self.buf.get(self.pos..).ok_or(WireError::Truncated)?;
        let (v, n) = varint::read(rest).ok_or(WireError::Truncated)?;
        self.pos += n;
        Ok(v)
    }
    /// `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self.pos.checked_add(n).ok_or(WireError::Truncated)?;
        let b = self.buf.get(self.pos..end).ok_or(WireError::Truncated)?;
        self.pos = end;
        Ok(b)
    }
    /// A varint length followed by that many bytes.
    pub fn len_prefixed(&mut self) -> Result<&'a [u8], WireError> {
        let n = self.varint()?;
        let n = usize::try_from(n).map_err(|_| WireError::Truncated)?;
        self.bytes(n)
    }
    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        let b = &self.buf[self.pos..];
        self.pos = self.buf.len();
        b
    }
}

/// A bounds-checked cursor for emitting into a buffer.
#[derive(Debug)]
pub struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> Writer<'a> {
    /// A writer at the start of `buf`.
    pub fn new(buf: &'a mut [u8]) -> Self {
        Writer { buf, pos: 0 }
    }
    /// Bytes written so far.
    pub fn pos(&self) -> usize {
        self.pos
    }
    /// Space left.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    /// One byte.
    pub fn u8(&mut self, v: u8) -> Option<()> {
        *self.buf.get_mut(self.pos)? = v;
        self.pos += 1;
        Some(())
    }
    /// A big-endian u64.
    pub fn u64(&mut self, v: u64) -> Option<()> {
        self.bytes(&v.to_be_bytes())
    }
    /// One varint.
    pub fn varint(&mut self, v: u64) -> Option<()> {
        let n = varint::write(v, self.buf.get_mut(self.pos..)?)?;
        self.pos += n;
        Some(())
    }
    /// Raw bytes.
    pub fn bytes(&mut self, b: &[u8]) -> Option<()> {
        let end = self.pos.checked_add(b.len())?;
        self.buf.get_mut(self.pos..end)?.copy_from_slice(b);
        self.pos = end;
        Some(())
    }
    /// The next `n` bytes, for the caller to fill (whatever they held before).
    pub fn slot(&mut self, n: usize) -> Option<&mut [u8]> {
        let end = self.pos.checked_add(n)?;
        let start = self.pos;
        let s = self.buf.get_mut(start..end)?;
        self.pos = end;
        Some(s)
    }
    /// `n` zero bytes.
    pub fn zeros(&mut self, n: usize) -> Option<()> {
        let end = self.pos.checked_add(n)?;
        self.buf.get_mut(self.pos..end)?.fill(0);
        self.pos = end;
        Some(())
    }
    /// Set the write position back to `pos` (to undo a partial frame).
    pub fn truncate(&mut self, pos: usize) {
        self.pos = self.pos.min(pos);
    }
}
