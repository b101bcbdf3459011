//! Golden bytes: the numbers braid puts on the wire, pinned (issue 27 item 2).
//!
//! Owns: the protocol's numbering as seen from outside the crate: the scheduler and
//! congestion-controller ids in HELLO, HELLO's feature bits, and the type number and layout
//! of every frame. Must not touch: the core's internals (public API only).
//!
//! A change that makes one of these tests fail changes the protocol: reordering a list of
//! names, renumbering a frame or a bit. That needs a new protocol version, not a new golden
//! value. A new scheduler, controller, bit or frame adds a line here.

use braid_core::cc::CcAlgorithm;
use braid_core::ranges::RangeSet;
use braid_core::session::DatagramMode;
use braid_core::wire::frame::{emit, ty};
use braid_core::wire::{features, parse_header, Frame, FrameIter, HelloParams, PathState, Writer};
use braid_core::{Config, Instant, SchedulerKind, Session};
use bytes::Bytes;
use std::time::Duration;

/// Every scheduler by name with its HELLO id.
const SCHEDULER_IDS: &[(&str, u64)] = &[
    ("minrtt", 0),
    ("rr", 1),
    ("wrr", 2),
    ("ecf", 3),
    ("blest", 4),
    ("super", 5),
    ("operetta", 6),
    ("redundant", 7),
];

/// Every congestion controller by name with its HELLO id.
const CC_IDS: &[(&str, u64)] = &[
    ("reno", 0),
    ("cubic", 1),
    ("bbr", 2),
    ("lia", 3),
    ("balia", 4),
    ("olia", 5),
    ("bbrq", 6),
];

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn scheduler_wire_ids_are_pinned() {
    assert_eq!(
        SchedulerKind::ALL.len(),
        SCHEDULER_IDS.len(),
        "a scheduler without a pinned id"
    );
    for &(name, id) in SCHEDULER_IDS {
        let k: SchedulerKind = name.parse().unwrap();
        assert_eq!(k.wire_id(), id, "{name}");
        assert_eq!(SchedulerKind::from_wire_id(id), Some(k), "{name}");
    }
    assert_eq!(
        SchedulerKind::from_wire_id(SCHEDULER_IDS.len() as u64),
        None
    );
    assert_eq!(SchedulerKind::from_wire_id(u64::MAX), None);
}

#[test]
fn congestion_controller_wire_ids_are_pinned() {
    assert_eq!(
        CcAlgorithm::ALL.len(),
        CC_IDS.len(),
        "a controller without a pinned id"
    );
    for &(name, id) in CC_IDS {
        let a: CcAlgorithm = name.parse().unwrap();
        assert_eq!(a.wire_id(), id, "{name}");
        assert_eq!(CcAlgorithm::from_wire_id(id), Some(a), "{name}");
    }
    assert_eq!(CcAlgorithm::from_wire_id(CC_IDS.len() as u64), None);
    assert_eq!(CcAlgorithm::from_wire_id(u64::MAX), None);
}

#[test]
fn hello_feature_bits_are_pinned() {
    assert_eq!(
        [
            features::ACK_OFFLOAD,
            features::BLACKOUT_FREEZE,
            features::LOSS_RECOVERY,
            features::DATAGRAM_REDUNDANT,
            features::DATAGRAM_AUTO,
            features::ACK_TIMESTAMPS,
            features::PATH_NAMES,
            features::ACK_FREQUENCY,
        ],
        [1, 2, 4, 8, 16, 32, 64, 128]
    );
}

/// A client configuration with every HELLO field set away from its default.
fn client_config(cc: CcAlgorithm, scheduler: SchedulerKind) -> Config {
    Config {
        cc,
        scheduler,
        stream_window: 300_000,
        session_window: 5_000_000,
        max_streams: 77,
        idle_timeout: Duration::from_millis(12_345),
        max_datagram_payload: 1_200,
        alpha: 0.25,
        ack_offload: true,
        blackout_freeze: false,
        loss_recovery: true,
        datagram_mode: DatagramMode::Redundant,
        ..Config::default()
    }
}

/// The first packet a client sends, and the HELLO parameters in it.
fn first_packet(cfg: Config) -> (Vec<u8>, HelloParams) {
    let mut client = Session::connect(cfg, Instant(0), 0x1234, 0);
    let mut buf = vec![0u8; 2048];
    let t = client
        .poll_transmit(Instant(0), &mut buf)
        .expect("a first packet");
    let packet = buf[..t.len].to_vec();
    let header_len = parse_header(&packet).expect("a valid header").header_len;
    let hello = FrameIter::new(&packet[header_len..])
        .map_while(Result::ok)
        .find_map(|f| match f {
            Frame::Hello(p) => Some(p),
            _ => None,
        })
        .expect("HELLO in the first packet");
    (packet, hello)
}

#[test]
fn a_client_hello_has_golden_bytes() {
    let (packet, hello) = first_packet(client_config(CcAlgorithm::Olia, SchedulerKind::Blest));
    let mut buf = [0u8; 64];
    let mut w = Writer::new(&mut buf);
    emit::hello(&mut w, &hello).unwrap();
    let n = w.pos();
    let bytes = &buf[..n];
    // Varints: type 18, max_data 804c4b40 (5_000_000), max_stream_data 800493e0 (300_000),
    // max_streams 404d (77), idle 7039 (12_345 ms), max_datagram 44b0 (1_200), cc 05 (olia),
    // scheduler 04 (blest), features 40ed (ACK_OFFLOAD | LOSS_RECOVERY | DATAGRAM_REDUNDANT |
    // ACK_TIMESTAMPS | PATH_NAMES | ACK_FREQUENCY), alpha 40fa (250 thousandths).
    assert_eq!(hex(bytes), "18804c4b40800493e0404d703944b0050440ed40fa");
    assert!(
        packet.windows(n).any(|w| w == bytes),
        "the HELLO emitted from the parsed parameters is not the one in the packet"
    );
}

#[test]
fn every_choice_goes_on_the_wire_by_its_id_and_the_server_adopts_it() {
    for &(sched_name, sched_id) in SCHEDULER_IDS {
        for &(cc_name, cc_id) in CC_IDS {
            let (sched, cc) = (sched_name.parse().unwrap(), cc_name.parse().unwrap());
            let (packet, hello) = first_packet(client_config(cc, sched));
            assert_eq!(
                (hello.scheduler, hello.cc),
                (sched_id, cc_id),
                "{sched_name} {cc_name}"
            );
            let mut server = Session::accept(Config::default(), Instant(0), 0x1234);
            server.handle_datagram(Instant(1_000), Bytes::from(packet));
            let got = server.config();
            assert_eq!(
                (got.scheduler, got.cc),
                (sched, cc),
                "{sched_name} {cc_name}"
            );
            assert_eq!(got.datagram_mode, DatagramMode::Redundant);
        }
    }
}

#[test]
fn every_datagram_mode_goes_on_the_wire_as_its_feature_bits_and_the_server_adopts_it() {
    let modes = [
        ("auto", features::DATAGRAM_AUTO),
        ("spread", 0),
        ("redundant", features::DATAGRAM_REDUNDANT),
    ];
    assert_eq!(
        DatagramMode::ALL.len(),
        modes.len(),
        "a datagram mode without pinned bits"
    );
    let mode_bits = features::DATAGRAM_AUTO | features::DATAGRAM_REDUNDANT;
    for (name, bits) in modes {
        let (_, mode) = *DatagramMode::ALL.iter().find(|(n, _)| *n == name).unwrap();
        let cfg = Config {
            datagram_mode: mode,
            ..client_config(CcAlgorithm::Reno, SchedulerKind::MinRtt)
        };
        let (packet, hello) = first_packet(cfg);
        assert_eq!(hello.features & mode_bits, bits, "{name}");
        let server_cfg = Config {
            datagram_mode: if mode == DatagramMode::Spread {
                DatagramMode::Auto
            } else {
                DatagramMode::Spread
            },
            ..Config::default()
        };
        let mut server = Session::accept(server_cfg, Instant(0), 0x1234);
        server.handle_datagram(Instant(1_000), Bytes::from(packet));
        assert_eq!(server.config().datagram_mode, mode, "{name}");
    }
}

#[test]
fn frame_type_numbers_and_layouts_are_pinned() {
    let types = [
        ty::PADDING,
        ty::PING,
        ty::ACK,
        ty::ACK_TS,
        ty::RESET_STREAM,
        ty::STOP_SENDING,
        ty::STREAM,
        ty::STREAM_FIN,
        ty::MAX_DATA,
        ty::MAX_STREAM_DATA,
        ty::MAX_STREAMS,
        ty::HELLO,
        ty::PATH_CHALLENGE,
        ty::PATH_RESPONSE,
        ty::CLOSE,
        ty::PATH_STATUS,
        ty::PATH_ABANDON,
        ty::PATH_COST,
        ty::PATH_BLACKOUT,
        ty::PATH_NAME,
        ty::ACK_FREQUENCY,
        ty::DATAGRAM,
        ty::DATAGRAM_SEQ,
    ];
    let expected = [
        0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x08, 0x09, 0x10, 0x11, 0x12, 0x18, 0x1a, 0x1b, 0x1c,
        0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x30, 0x31,
    ];
    assert_eq!(types, expected);

    let mut acked = RangeSet::new();
    acked.insert(0..3);
    acked.insert(10..20);
    let mut buf = vec![0u8; 512];
    let mut w = Writer::new(&mut buf);
    emit::ping(&mut w).unwrap();
    emit::ack(&mut w, 2, acked.iter().rev(), 123, None, 16).unwrap();
    emit::ack(&mut w, 1, acked.iter().rev(), 5, Some(1_000_000), 16).unwrap();
    emit::reset_stream(&mut w, 4, 7, 100).unwrap();
    emit::stop_sending(&mut w, 4, 8).unwrap();
    emit::stream(&mut w, 8, 1 << 20, false, b"hi").unwrap();
    emit::stream(&mut w, 8, 0, true, b"!").unwrap();
    emit::max_data(&mut w, 1 << 30).unwrap();
    emit::max_stream_data(&mut w, 8, 99).unwrap();
    emit::max_streams(&mut w, 100).unwrap();
    emit::path_token(&mut w, false, &[1; 8]).unwrap();
    emit::path_token(&mut w, true, &[2; 8]).unwrap();
    emit::close(&mut w, 3, b"bye").unwrap();
    emit::path_status(&mut w, 1, 9, PathState::Active).unwrap();
    emit::path_status(&mut w, 1, 10, PathState::Standby).unwrap();
    emit::path_status(&mut w, 1, 11, PathState::Frozen).unwrap();
    emit::path_abandon(&mut w, 6).unwrap();
    emit::path_cost(&mut w, 2, 3, 634, 1000).unwrap();
    emit::path_blackout(&mut w, 2, 77).unwrap();
    emit::path_name(&mut w, 9, "lte").unwrap();
    emit::ack_frequency(&mut w, 3, 7, 20, 10_000).unwrap();
    emit::datagram(&mut w, b"dg").unwrap();
    emit::datagram_seq(&mut w, 300, b"sq").unwrap();
    emit::padding(&mut w, 2).unwrap();
    let n = w.pos();
    let golden = concat!(
        "01",                               // PING
        "02 02 13 407b 01 09 06 02",        // ACK path 2, largest 19, delay 123, 10..20, 0..3
        "03 01 13 05 800f4240 01 09 06 02", // ACK_TS path 1, delay 5, at 1_000_000 us
        "04 04 07 4064",                    // RESET_STREAM 4, code 7, final size 100
        "050408",                           // STOP_SENDING 4, code 8
        "08 08 80100000 02 6869",           // STREAM 8 at 1 << 20, "hi"
        "09 08 00 01 21",                   // STREAM_FIN 8 at 0, "!"
        "10 c000000040000000",              // MAX_DATA 1 << 30
        "11 08 4063",                       // MAX_STREAM_DATA 8, 99
        "12 4064",                          // MAX_STREAMS 100
        "1a0101010101010101",               // PATH_CHALLENGE
        "1b0202020202020202",               // PATH_RESPONSE
        "1c0303627965",                     // CLOSE 3 "bye"
        "1d010900 1d010a01 1d010b02",       // PATH_STATUS active, standby, frozen
        "1e06",                             // PATH_ABANDON 6
        "1f0203427a43e8",                   // PATH_COST path 2, seq 3, 634 mW, 1000 kbit/s
        "2002404d",                         // PATH_BLACKOUT path 2, largest 77
        "2109036c7465",                     // PATH_NAME path 9, "lte"
        "22 03 07 14 6710",                 // ACK_FREQUENCY path 3, seq 7, 20 packets, 10 ms
        "30026467",                         // DATAGRAM "dg"
        "31412c027371",                     // DATAGRAM_SEQ 300 "sq"
        "0000",                             // PADDING 2
    )
    .replace(' ', "");
    assert_eq!(hex(&buf[..n]), golden);
}
