//! `braid_wire::parse_header` (the one header parser of the core and the cryptography) on
//! arbitrary bytes: never panics; a header it accepts re-writes to exactly the bytes it was
//! parsed from, the shortest encoding of its fields parses back to the same fields, and
//! every truncation of it is refused.

#![no_main]

use braid_wire::{parse_header, Header, MAX_HEADER_LEN, VERSION};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(h) = parse_header(data) else {
        return;
    };
    let n = h.header_len;
    assert!(n <= data.len() && n <= MAX_HEADER_LEN);
    assert_eq!(data[0], VERSION);
    let mut buf = [0u8; MAX_HEADER_LEN];
    assert_eq!(h.write_into(&mut buf), Some(n));
    assert_eq!(&buf[..n], &data[..n]);
    // The packet number may use a longer varint encoding than needed.
    let mut short = Header::new(h.ptype, h.session_id, h.path_id, h.packet_number)
        .expect("a parsed packet number fits a varint");
    short.key_phase = h.key_phase;
    assert!(short.header_len <= n);
    let m = short.write_into(&mut buf).expect("a header fits in 19 bytes");
    assert_eq!(parse_header(&buf[..m]), Ok(short));
    for cut in 0..n {
        assert!(parse_header(&data[..cut]).is_err());
    }
});
