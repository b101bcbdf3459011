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

#[test]
fn path_name_round_trips_and_bad_names_are_refused() {
    let mut buf = [0u8; 64];
    let mut w = Writer::new(&mut buf);
    emit::path_name(&mut w, 9, "lte").unwrap();
    let n = w.pos();
    assert_eq!(
        one(&buf[..n]),
        Frame::PathName {
            path: 9,
            name: "lte"
        }
    );
    for cut in 1..n {
        assert!(FrameIter::new(&buf[..cut]).any(|f| f.is_err()));
    }
    // Too long: cut to MAX_PATH_NAME bytes at a character boundary (31 here: "é" is 2).
    let long = format!("a{}", "é".repeat(20));
    let mut w = Writer::new(&mut buf);
    emit::path_name(&mut w, 1, &long).unwrap();
    let n = w.pos();
    assert_eq!(
        one(&buf[..n]),
        Frame::PathName {
            path: 1,
            name: &long[..31]
        }
    );
    // Empty: nothing written.
    let mut w = Writer::new(&mut buf);
    assert!(emit::path_name(&mut w, 1, "").is_none());
    assert_eq!(w.pos(), 0);
    // Received: empty, longer than MAX_PATH_NAME, not UTF-8.
    let mut over = vec![0x21, 1, 33];
    over.extend_from_slice(&[b'a'; 33]);
    for bad in [&[0x21, 1, 0][..], &over[..], &[0x21, 1, 2, 0xc3, 0x28][..]] {
        assert!(
            matches!(FrameIter::new(bad).next(), Some(Err(WireError::Invalid(_)))),
            "{bad:?}"
        );
    }
}

#[test]
fn a_padded_packet_is_not_a_thousand_padding_frames() {
    // A PATH_CHALLENGE padded to 1200 bytes: the receiver collects its frames, and each
    // padding byte as a frame of its own spilled that collection onto the heap (tens of
    // KiB per packet).
    let mut buf = vec![0u8; 1200];
    let mut w = Writer::new(&mut buf);
    emit::ping(&mut w).unwrap();
    emit::padding(&mut w, 600).unwrap();
    emit::max_data(&mut w, 7).unwrap();
    let n = w.pos();
    emit::padding(&mut w, 1200 - n).unwrap();
    let frames: Vec<_> = FrameIter::new(&buf).map(Result::unwrap).collect();
    assert_eq!(
        frames,
        vec![
            Frame::Ping,
            Frame::Padding,
            Frame::MaxData(7),
            Frame::Padding
        ]
    );
}
