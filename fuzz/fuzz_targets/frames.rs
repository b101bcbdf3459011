//! `FrameIter` over arbitrary bytes, iterated to the end (ACK ranges walked too), and
//! `varint::read` at every offset: never panic, and what parses is consistent.

#![no_main]

use braid_core::wire::{varint, Frame, FrameIter};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for i in 0..data.len().min(16) {
        if let Some((v, n)) = varint::read(&data[i..]) {
            assert!(v <= varint::MAX);
            assert!(n <= data.len() - i);
        }
    }

    let mut it = FrameIter::new(data);
    let mut frames = 0usize;
    let mut failed = false;
    for f in it.by_ref() {
        assert!(!failed, "FrameIter yielded after an error");
        frames += 1;
        assert!(frames <= data.len(), "a frame consumed no byte");
        match f {
            Err(_) => failed = true,
            Ok(Frame::Ack(a)) => {
                let mut prev: Option<u64> = None;
                for r in a.ranges() {
                    assert!(r.start < r.end);
                    assert!(r.end <= a.largest + 1);
                    match prev {
                        Some(p) => assert!(r.end < p, "ack ranges not descending"),
                        None => assert_eq!(r.end, a.largest + 1),
                    }
                    prev = Some(r.start);
                }
                assert!(prev.is_some(), "ACK without ranges");
            }
            Ok(Frame::Stream { offset, data, .. }) => {
                assert!(offset + data.len() as u64 <= varint::MAX);
            }
            Ok(_) => {}
        }
    }
    assert!(it.next().is_none(), "FrameIter is not fused");
});
