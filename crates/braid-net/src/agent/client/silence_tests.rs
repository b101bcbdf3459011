//! The silence watch's decisions without a session: packet counters fed tick by tick.

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const TICK: Duration = Duration::from_millis(200);
const SRTT: Duration = Duration::from_millis(10);

/// A session that received `rx` packets, then sends without an answer from `t0 + 1 s` on.
struct Rig {
    w: Watch,
    t: Instant,
    rx: u64,
    tx: u64,
}

impl Rig {
    fn new() -> Rig {
        let t0 = Instant::now();
        let mut w = Watch::new(t0, 0);
        assert_eq!(w.tick(t0, 10, 10, SRTT, 0), Tick::default());
        Rig {
            w,
            t: t0,
            rx: 10,
            tx: 10,
        }
    }

    /// One tick later, `got` packets received and one sent since the last.
    fn tick(&mut self, got: u64) -> Tick {
        self.t += TICK;
        self.rx += got;
        self.tx += 1;
        self.w.tick(self.t, self.rx, self.tx, SRTT, 0)
    }

    /// Ticks without an answer until the watch asks for a probe; the time that took.
    fn until_probe(&mut self) -> Duration {
        let from = self.t;
        for _ in 0..100 {
            if let Some(p) = self.tick(0).probe {
                assert!(matches!(p, Probe::Silent(_)));
                self.w.probe_started();
                return self.t - from;
            }
        }
        panic!("no probe");
    }
}

#[test]
fn a_dead_server_is_suspected_after_eight_round_trips_within_1_s_and_2_s() {
    // A LAN or a near server: 1 s (was 2 s: issue 24's failover bar is 3 s).
    assert_eq!(suspect_after(ms(1)), ms(1000));
    assert_eq!(suspect_after(Duration::ZERO), ms(1000));
    // A 150 ms path: 1.2 s, no probe while its packets are merely slow.
    assert_eq!(suspect_after(ms(150)), ms(1200));
    // A bloated or satellite path: never more than the old 2 s.
    assert_eq!(suspect_after(ms(900)), ms(2000));
}

#[test]
fn the_old_session_gets_three_round_trips_and_at_least_300_ms_to_answer() {
    assert_eq!(confirm_wait(ms(1)), ms(300));
    assert_eq!(confirm_wait(ms(200)), ms(600));
}

#[test]
fn silence_starts_a_probe_after_suspect_after_and_not_while_packets_arrive() {
    let mut r = Rig::new();
    for _ in 0..20 {
        assert_eq!(r.tick(1).probe, None, "answered: no probe");
    }
    // The first unanswered packet starts the clock (one tick), then 1 s.
    assert_eq!(r.until_probe(), TICK + suspect_after(SRTT));
    for _ in 0..10 {
        assert_eq!(r.tick(0).probe, None, "one probe at a time");
    }
}

#[test]
fn a_probe_answered_while_the_old_session_stays_silent_replaces_it() {
    let mut r = Rig::new();
    r.until_probe();
    let until = r.w.probe_answered(r.t);
    assert_eq!(until - r.t, confirm_wait(SRTT));
    assert_eq!(r.w.poll_timeout(), Some(until));
    assert!(!r.tick(0).keep);
    assert_eq!(r.w.handle_timeout(until - ms(1)), None, "not yet");
    let quiet = r.w.handle_timeout(until).expect("replaced");
    assert!(quiet >= suspect_after(SRTT), "{quiet:?}");
    assert_eq!(r.w.poll_timeout(), None);
}

#[test]
fn a_probe_answered_while_the_old_session_answers_again_keeps_the_old_session() {
    let mut r = Rig::new();
    r.until_probe();
    let until = r.w.probe_answered(r.t);
    let t = r.tick(2);
    assert!(t.keep, "the new session is dropped");
    assert_eq!(r.w.poll_timeout(), None);
    assert_eq!(r.w.handle_timeout(until), None, "kept");
}

#[test]
fn packets_arriving_during_a_probe_stop_it() {
    let mut r = Rig::new();
    r.until_probe();
    let t = r.tick(1);
    assert!(t.stop_probe && !t.keep);
    assert!(!r.w.is_probing());
}

#[test]
fn unanswered_probes_are_repeated_after_half_a_second_then_doubling_to_10_s() {
    let mut r = Rig::new();
    r.until_probe();
    let mut waits = Vec::new();
    for _ in 0..7 {
        r.w.probe_failed(r.t);
        waits.push(r.until_probe().as_millis());
    }
    // Rounded up to whole ticks of 200 ms.
    assert_eq!(waits, [600, 1000, 2000, 4000, 8000, 10_000, 10_000]);
}

#[test]
fn an_unknown_session_hint_probes_at_once_then_not_again_for_2_s() {
    let mut r = Rig::new();
    let t0 = r.t;
    let at = |r: &mut Rig, after: Duration, hints: u64| {
        r.rx += 1;
        r.w.tick(t0 + after, r.rx, r.tx, SRTT, hints)
    };
    assert_eq!(
        at(&mut r, TICK, 1).probe,
        Some(Probe::Hinted),
        "even while packets arrive"
    );
    r.w.probe_started();
    assert!(
        at(&mut r, TICK * 2, 1).stop_probe,
        "answered: probe stopped"
    );
    assert_eq!(
        at(&mut r, ms(1800), 2).probe,
        None,
        "within 2 s of the last"
    );
    assert_eq!(at(&mut r, ms(2200), 3).probe, Some(Probe::Hinted));
}

#[test]
fn a_busy_transfer_that_stops_dead_pings_the_server_once() {
    let mut r = Rig::new();
    r.tick(5);
    let pokes: Vec<bool> = (0..6).map(|_| r.tick(0).poke).collect();
    assert_eq!(pokes, [false, false, true, false, false, false]);
}
