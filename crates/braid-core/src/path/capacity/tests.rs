//! Tests of the capacity estimate: which samples count, slow start, ageing.

use super::*;

const MBIT: f64 = 125_000.0; // bytes per second

/// Milliseconds as an instant.
fn ms(n: u64) -> Instant {
    Instant(n * 1_000_000)
}

fn rtt(srtt: u64, min: u64) -> Rtt {
    Rtt {
        smoothed: Duration::from_millis(srtt),
        min: Duration::from_millis(min),
    }
}

fn mbit(c: &PathCapacity) -> f64 {
    c.view().map_or(0.0, |c| c.rate as f64 / MBIT)
}

#[test]
fn a_slow_start_sample_is_a_lower_bound_until_the_rate_stops_growing() {
    let rtt = |srtt: u64| rtt(srtt, 100);
    // Slow start: the rate doubles every round trip; each sample raises the estimate.
    let mut e = Estimate::new(ms(100), 0.1 * MBIT);
    for (i, r) in [0.2, 0.4, 0.8].iter().enumerate() {
        e.fold(
            ms(200 + 100 * i as u64),
            r * MBIT,
            Sample::Free,
            false,
            rtt(100),
        );
        assert!(!e.full());
        assert_eq!(e.rate(), r * MBIT);
    }
    // A lower sample while still unsettled (a round without growth) does not lower it.
    e.fold(ms(500), 0.7 * MBIT, Sample::Free, false, rtt(100));
    assert_eq!(e.rate(), 0.8 * MBIT);
    assert!(!e.full());
    // FULL_ROUNDS round trips in a row without GROWTH, no queue: full bandwidth.
    e.fold(ms(600), 0.8 * MBIT, Sample::Free, false, rtt(100));
    assert!(!e.full());
    e.fold(ms(700), 0.9 * MBIT, Sample::Free, false, rtt(100));
    assert!(e.full());
    assert_eq!(e.rate(), 0.9 * MBIT);
    // With a standing queue (the RTT 1.5 times its floor) one sample without growth is
    // enough; held-back or application-limited samples never settle it.
    let mut e = Estimate::new(ms(100), 1.0 * MBIT);
    e.fold(ms(150), 1.1 * MBIT, Sample::AtLeast, true, rtt(300));
    assert!(!e.full());
    e.fold(ms(160), 1.1 * MBIT, Sample::Free, false, rtt(140));
    assert!(!e.full());
    e.fold(ms(170), 1.1 * MBIT, Sample::Free, false, rtt(160));
    assert!(e.full());
}

/// A path seen at its full `mbit` at 100 ms (a standing queue settles it at once).
fn settled(mbit: f64) -> PathCapacity {
    let mut c = PathCapacity::default();
    c.observe(ms(0), mbit * MBIT, false, None, false, rtt(20, 20));
    c.observe(ms(100), mbit * MBIT, false, None, false, rtt(40, 20));
    assert!(c.view().unwrap().full);
    c
}

#[test]
fn samples_held_back_by_the_limit_or_the_application_do_not_lower_the_capacity() {
    let mut c = PathCapacity::default();
    // Application-limited samples do not start an estimate.
    c.observe(ms(0), 0.05 * MBIT, true, None, false, rtt(20, 20));
    assert_eq!(c.view(), None);
    let mut c = settled(2.0);
    // At the limit (1 Mbit/s), long after the estimate: a lower bound, and marked bound.
    let limit = Some(MBIT as u64);
    c.observe(ms(20_000), 0.95 * MBIT, false, limit, false, rtt(20, 20));
    assert_eq!(mbit(&c), 2.0);
    assert!(c.view().unwrap().bound);
    // A path given no share: its keepalives say nothing.
    c.observe(ms(20_100), 0.01 * MBIT, false, Some(0), false, rtt(20, 20));
    assert_eq!(mbit(&c), 2.0);
    // Clearly below the limit: the network holds it back, a capacity sample, believed once
    // the old estimate is older than the window.
    c.observe(ms(21_000), 0.5 * MBIT, false, limit, false, rtt(20, 20));
    assert_eq!(mbit(&c), 0.5);
    assert!(!c.view().unwrap().bound);
}

#[test]
fn a_probe_rtt_sample_does_not_lower_the_capacity() {
    // Regression (issue 34, OPERETTA's "cheap-middle" set at alpha 0.5 under bbrq): a 30
    // Mbit/s path limited to 18.6 Mbit/s sent only held-back samples for 10 s; then bbrq's
    // ProbeRTT halved its window, and its 9.3 Mbit/s samples, free by every other sign,
    // replaced the estimate. The allocation then limited the path to 0.7 Mbit/s, and the
    // transfer ran at 0.57 of its target.
    let mut c = settled(29.4);
    let limit = Some((18.6 * MBIT) as u64);
    for t in (200..=11_000).step_by(100) {
        c.observe(ms(t), 18.6 * MBIT, false, limit, false, rtt(160, 160));
    }
    assert_eq!(mbit(&c), 29.4);
    // ProbeRTT: the controller holds back for 200 ms; its samples and those of the two round
    // trips after it are lower bounds.
    for t in (11_100..=11_300).step_by(50) {
        c.observe(ms(t), 9.3 * MBIT, false, limit, true, rtt(160, 160));
    }
    c.observe(ms(11_600), 9.3 * MBIT, false, limit, false, rtt(160, 160));
    assert_eq!(mbit(&c), 29.4);
    // Two round trips later, a sample that low is the network's: the capacity fell.
    c.observe(ms(11_700), 9.3 * MBIT, false, limit, false, rtt(160, 160));
    assert_eq!(mbit(&c), 9.3);
}
