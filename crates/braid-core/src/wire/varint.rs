//! QUIC-style variable-length integers (RFC 9000 §16): 1, 2, 4 or 8 bytes, the two high
//! bits of the first byte give the length. Values up to 2^62 - 1.
//!
//! No-panic contract: `read` never panics on any input; it returns `None` when the buffer
//! is too short. `write` returns `None` when the value does not fit or the buffer is full.

/// Largest encodable value.
pub const MAX: u64 = (1 << 62) - 1;

/// Encoded length of `v` in bytes (8 for values above `MAX`, which `write` refuses).
pub fn len(v: u64) -> usize {
    if v < 1 << 6 {
        1
    } else if v < 1 << 14 {
        2
    } else if v < 1 << 30 {
        4
    } else {
        8
    }
}

/// Decode one varint from the front of `buf`; returns the value and its length.
pub fn read(buf: &[u8]) -> Option<(u64, usize)> {
    let first = *buf.first()?;
    let n = 1usize << (first >> 6);
    let bytes = buf.get(..n)?;
    let mut v = u64::from(first & 0x3f);
    for b in &bytes[1..] {
        v = (v << 8) | u64::from(*b);
    }
    Some((v, n))
}

/// Encode `v` at the front of `buf`; returns the number of bytes written.
pub fn write(v: u64, buf: &mut [u8]) -> Option<usize> {
    if v > MAX {
        return None;
    }
    let n = len(v);
    let out = buf.get_mut(..n)?;
    let tag: u8 = match n {
        1 => 0x00,
        2 => 0x40,
        4 => 0x80,
        _ => 0xc0,
    };
    for (i, b) in out.iter_mut().enumerate() {
        *b = (v >> (8 * (n - 1 - i))) as u8;
    }
    out[0] |= tag;
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_boundaries() {
        for v in [0, 63, 64, 16383, 16384, (1 << 30) - 1, 1 << 30, MAX] {
            let mut b = [0u8; 8];
            let n = write(v, &mut b).unwrap();
            assert_eq!(n, len(v));
            assert_eq!(read(&b[..n]), Some((v, n)));
            assert_eq!(read(&b[..n - 1]), None);
        }
        assert_eq!(write(MAX + 1, &mut [0u8; 8]), None);
        assert_eq!(write(300, &mut [0u8; 1]), None);
        assert_eq!(read(&[]), None);
    }

    #[test]
    fn rfc9000_examples() {
        assert_eq!(read(&[0x25]), Some((37, 1)));
        assert_eq!(read(&[0x7b, 0xbd]), Some((15293, 2)));
        assert_eq!(read(&[0x9d, 0x7f, 0x3e, 0x7d]), Some((494_878_333, 4)));
        assert_eq!(
            read(&[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c]),
            Some((151_288_809_941_952_652, 8))
        );
    }
}
