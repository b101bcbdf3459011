//! `PacketHeader::parse` on arbitrary bytes: never panics; a header it accepts re-emits to
//! the same bytes' meaning and every truncation of it is refused.

#![no_main]

use braid_core::wire::{PacketHeader, Writer, VERSION};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok((h, n)) = PacketHeader::parse(data) else {
        return;
    };
    assert!(n <= data.len());
    // The packet number may use a longer varint encoding than needed.
    assert!(n >= h.len() && n - h.len() < 8);
    assert_eq!(data[0], VERSION);
    let mut buf = [0u8; 32];
    let mut w = Writer::new(&mut buf);
    h.emit(&mut w).expect("a parsed header fits in 32 bytes");
    let m = w.pos();
    assert_eq!(PacketHeader::parse(&buf[..m]), Ok((h, m)));
    for cut in 0..n {
        assert!(PacketHeader::parse(&data[..cut]).is_err());
    }
});
