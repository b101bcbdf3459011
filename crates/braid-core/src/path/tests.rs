//! Unit tests of a path: loss detection on a reliable (TCP) transport, and its pacer.

use super::*;
use crate::wire::frame::emit;
use crate::wire::{Frame, FrameIter, Writer};
use std::ops::Range;

fn at(ms: u64) -> Instant {
    Instant(ms * 1_000_000)
}

/// An ACK frame for path 0 covering `ranges` (highest first), run through the parser.
fn ack(ranges: &[Range<u64>], f: impl FnOnce(&AckFrame<'_>)) {
    let mut buf = [0u8; 128];
    let mut w = Writer::new(&mut buf);
    emit::ack(&mut w, 0, ranges.iter().cloned(), 0, None, 32).unwrap();
    let n = w.pos();
    match FrameIter::new(&buf[..n]).next() {
        Some(Ok(Frame::Ack(a))) => f(&a),
        other => panic!("{other:?}"),
    }
}

/// Ten packets sent at 0..10 ms; packets 0 and 9 acknowledged at 400 ms while 1..8 are
/// held up (as behind a segment TCP retransmits), then the loss timer at 2 s.
fn late_acks(reliable: bool) -> (Path, Vec<SentPacket>) {
    let cfg = Config::default();
    let mut p = Path::new(0, &cfg, cfg.cc, at(0));
    p.validated = true;
    p.set_reliable(reliable, cfg.cc, at(0));
    for i in 0..10 {
        p.on_sent(at(i), 1200, true, false, SmallVec::new());
    }
    let (mut acked, mut lost) = (Vec::new(), Vec::new());
    ack(&[9..10, 0..1], |a| {
        p.on_ack_frame(at(400), a, cfg.max_ack_delay, false, &mut acked, &mut lost);
    });
    p.on_loss_timer(at(2000), &mut lost);
    (p, lost)
}

#[test]
fn a_reliable_path_declares_nothing_lost_when_acknowledgements_are_late() {
    let (p, lost) = late_acks(true);
    assert!(lost.is_empty(), "declared lost: {:?}", lost.len());
    assert_eq!(p.in_flight, 8 * 1200, "the held-up packets stay in flight");
    assert_eq!(p.cc.name(), "bbr");
    // The same on a datagram path: the packet threshold declares 1..7 lost at once.
    let (p, lost) = late_acks(false);
    assert!(lost.len() >= 6, "{}", lost.len());
    assert_ne!(p.cc.name(), "bbr");
}

#[test]
fn a_path_leaving_tcp_gets_the_sessions_controller_back() {
    let cfg = Config::default();
    let mut p = Path::new(0, &cfg, cfg.cc, at(0));
    p.set_reliable(true, cfg.cc, at(0));
    assert_eq!(p.cc.name(), "bbr");
    p.set_reliable(false, cfg.cc, at(1));
    assert_eq!(p.cc.name(), cfg.cc.build(1200, 12000, at(1)).name());
}

/// A call alone on the session: one small packet every 20 ms, each acknowledged before the
/// next leaves. Every one of them was sent with nothing else to send, so every rate sample
/// must say so; before the fix only the first did (the mark ended when its packet was
/// acknowledged), BBR took the call's rate for a full pipe and left startup at it, and a
/// download that followed crept up for seconds.
#[test]
fn sparse_packets_sent_from_an_idle_path_are_app_limited() {
    let cfg = Config::default();
    let mut p = Path::new(0, &cfg, cfg.cc, at(0));
    p.validated = true;
    for i in 0..10u64 {
        p.mark_app_limited();
        p.on_sent(at(20 * i), 200, true, false, SmallVec::new());
        let (mut acked, mut lost) = (Vec::new(), Vec::new());
        #[allow(clippy::single_range_in_vec_init)] // one ACK range: this packet alone
        ack(&[i..i + 1], |a| {
            p.on_ack_frame(
                at(20 * i + 5),
                a,
                cfg.max_ack_delay,
                false,
                &mut acked,
                &mut lost,
            );
        });
        assert_eq!(acked.len(), 1);
        assert!(
            acked[0].stamp.is_app_limited,
            "packet {i} not marked app-limited"
        );
    }
}

/// Issue 34: a driver that sends GSO batches on a 1 ms timer had the pacer's bucket capped
/// at one batch (64 datagrams): a path paced above 94 kB per millisecond was held to that
/// wherever only the timer woke it (750 Mbit/s on a gigabit link). The bucket now holds
/// two timer granularities at the pacing rate.
#[test]
fn the_pacer_of_a_batching_driver_lets_out_two_timer_ticks_at_the_rate() {
    let cfg = Config {
        cc: CcAlgorithm::Cubic,
        initial_window_packets: 2000,
        ..Config::default()
    };
    let mut p = Path::new(0, &cfg, cfg.cc, at(0));
    p.validated = true;
    p.set_max_burst(at(0), 64);
    // A window of 2000 packets over the initial 333 ms RTT at slow start's gain 2: about
    // 17.7 MB/s, 35 kB per 2 ms; a faster rate needs a smaller RTT.
    p.rtt.update(Duration::from_millis(2), Duration::ZERO);
    p.refresh_pacer(at(0));
    let rate = p.cc.pacing_rate(&p.rtt);
    assert!(rate > 1_000_000_000, "pacing rate {rate}");
    // Empty the bucket, then let one late timer's worth of time pass: 1 ms.
    let mut t = at(0);
    while p.pacer_ready_at(t) <= t {
        p.on_sent(t, 1472, true, false, SmallVec::new());
    }
    let mut sent = 0u64;
    t = at(1);
    while p.pacer_ready_at(t) <= t && p.window_open() {
        p.on_sent(t, 1472, true, false, SmallVec::new());
        sent += 1472;
    }
    // What 1 ms at the rate allows leaves at once (not 64 datagrams, 94 kB).
    assert!(
        sent as f64 >= 0.95 * rate as f64 / 1000.0,
        "{sent} bytes of {rate} B/s"
    );
}
