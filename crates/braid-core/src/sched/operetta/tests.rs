//! Tests of the OPERETTA allocation, estimates and limits.

use super::*;
use crate::sched::tests::info;
use std::time::Duration;

const MBIT: f64 = 125_000.0; // bytes per second

/// The paper's Table III at IF1 = `if1` Mbit/s: IF1 634 mW, IF2 0.7 Mbit/s 95 mW,
/// IF3 2 Mbit/s 900 mW.
fn table3(if1: f64) -> Vec<CostedPath> {
    vec![
        CostedPath {
            id: 1,
            rate: if1 * MBIT,
            power_mw: Some(634),
        },
        CostedPath {
            id: 2,
            rate: 0.7 * MBIT,
            power_mw: Some(95),
        },
        CostedPath {
            id: 3,
            rate: 2.0 * MBIT,
            power_mw: Some(900),
        },
    ]
}

fn mbit(limit: RateLimit) -> Option<f64> {
    limit.map(|b| (b as f64 / MBIT * 1000.0).round() / 1000.0)
}

#[test]
fn table_iii_at_each_alpha() {
    // Order IF2 (136 mW per Mbit/s) < IF3 (450) < IF1 (634).
    let cases = [
        (0.0, 0.7, [None, Some(0.0), Some(0.0)]),
        (0.25, 1.45, [None, Some(0.75), Some(0.0)]),
        (0.5, 2.2, [None, Some(1.5), Some(0.0)]),
        (0.75, 2.95, [None, None, Some(0.25)]),
        (1.0, 3.7, [None, None, None]),
    ];
    for (alpha, target, limits) in cases {
        let a = allocate(alpha, &table3(1.0));
        assert!((a.target / MBIT - target).abs() < 1e-9, "{alpha}: {a:?}");
        let ids: Vec<PathId> = a.order.iter().map(|o| o.0).collect();
        assert_eq!(ids, vec![2, 3, 1]);
        let got: Vec<Option<f64>> = a.order.iter().map(|o| mbit(o.1)).collect();
        assert_eq!(got, limits.to_vec(), "alpha {alpha}");
    }
}

#[test]
fn order_follows_energy_per_bit_as_rates_change() {
    // IF1 at 1.5 Mbit/s: 423 mW per Mbit/s, now cheaper than IF3 (450): it comes
    // before IF3, as the paper's Fig. 4 discussion says.
    let a = allocate(0.5, &table3(1.5));
    let ids: Vec<PathId> = a.order.iter().map(|o| o.0).collect();
    assert_eq!(ids, vec![2, 1, 3]);
    // T = 0.7 + 0.5 * 3.5 = 2.45: IF2 full, IF1 full, IF3 limited to 0.25.
    assert_eq!(mbit(a.order[2].1), Some(0.25));
    assert_eq!(a.order[1].1, None);
    // IF1 at 0.25 Mbit/s: 2536 mW per Mbit/s, last.
    let a = allocate(0.5, &table3(0.25));
    let ids: Vec<PathId> = a.order.iter().map(|o| o.0).collect();
    assert_eq!(ids, vec![2, 3, 1]);
}

#[test]
fn unknown_power_goes_last_and_bad_input_is_harmless() {
    let mut ps = table3(1.0);
    ps[1].power_mw = None; // IF2's power unknown
    let a = allocate(0.0, &ps);
    assert_eq!(a.order[0].0, 3); // IF3 is now the cheapest known path
    assert_eq!(a.order.last().map(|o| o.0), Some(2));
    assert!((a.target / MBIT - 2.0).abs() < 1e-9);
    // Zero, NaN and infinite rates are left out; NaN alpha means 1.
    ps[0].rate = f64::NAN;
    ps[2].rate = 0.0;
    let a = allocate(f64::NAN, &ps);
    assert_eq!(a.order, vec![(2, None)]);
    assert_eq!(allocate(0.5, &[]), Allocation::default());
}

fn costed_info(id: PathId, power: u64, hint_mbit: Option<f64>) -> PathInfo {
    let mut p = info(id, 20, true);
    p.power_mw = Some(power);
    p.rate_hint = hint_mbit.map(|m| (m * MBIT) as u64);
    p
}

#[test]
fn limits_enforce_the_share_and_select_skips_unused_paths() {
    let mut s = Operetta::new(0.5);
    let ps = [
        costed_info(1, 634, Some(1.0)),
        costed_info(2, 95, Some(0.7)),
        costed_info(3, 900, Some(2.0)),
    ];
    let mut out = Vec::new();
    s.rate_limits(Instant(0), &ps, &mut out);
    assert_eq!(out[0], (2, None));
    assert_eq!(mbit(out[1].1), Some(1.5));
    assert_eq!(out[2], (1, Some(0)));
    let ctx = SchedContext::default();
    // IF2 first while ready, then IF3; IF1 never.
    assert_eq!(s.select(Instant(0), &ps, &ctx), Some(2));
    let mut busy = ps;
    busy[1].send_ready = false;
    assert_eq!(s.select(Instant(0), &busy, &ctx), Some(3));
    busy[2].send_ready = false;
    assert_eq!(s.select(Instant(0), &busy, &ctx), None);
}

#[test]
fn estimates_ignore_samples_held_back_by_the_limit() {
    let mut s = Operetta::new(0.0);
    let sec = |n: u64| Instant(n * 1_000_000_000);
    let mut a = costed_info(1, 100, None);
    let mut b = costed_info(2, 300, None);
    // Both paths already seen at their full bandwidth.
    s.estimates.insert(1, Estimate::settled(sec(1), 1.0 * MBIT));
    s.estimates.insert(2, Estimate::settled(sec(1), 2.0 * MBIT));
    s.select(sec(1), &[a, b], &SchedContext::default());
    // a: 100 per Mbit/s, b: 150: b unused at alpha 0, and not probed (its estimate is a
    // full-bandwidth one).
    assert_eq!(s.allocation().order, vec![(1, None), (2, Some(0))]);
    let mut out = Vec::new();
    s.rate_limits(sec(1), &[a, b], &mut out);
    assert_eq!(out, vec![(1, None), (2, Some(0))]);
    // a's capacity falls to 0.5 Mbit/s: believed once the old maximum has aged.
    a.delivery_rate = Some((sec(3), (0.5 * MBIT) as u64, false));
    s.select(sec(3), &[a, b], &SchedContext::default());
    assert_eq!(s.allocation().order[0].0, 1);
    a.delivery_rate = Some((sec(12), (0.5 * MBIT) as u64, false));
    s.select(sec(12), &[a, b], &SchedContext::default());
    // a: 200 per Mbit/s now, b (estimate kept while unused): 150. b first.
    assert_eq!(s.allocation().order[0].0, 2);
    // A sample held back by the limit does not lower the estimate.
    let mut s = Operetta::new(0.5);
    b.delivery_rate = Some((sec(20), (0.95 * MBIT) as u64, false));
    b.rate_cap = Some(MBIT as u64);
    s.estimates.insert(2, Estimate::settled(sec(1), 2.0 * MBIT));
    s.observe(&b);
    assert_eq!(s.estimates[&2].rate(), 2.0 * MBIT);
    // Clearly below the limit: the network holds it back, a capacity sample.
    b.delivery_rate = Some((sec(21), (0.5 * MBIT) as u64, false));
    s.observe(&b);
    assert_eq!(s.estimates[&2].rate(), 0.5 * MBIT);
}

/// Milliseconds as an instant.
fn ms(n: u64) -> Instant {
    Instant(n * 1_000_000)
}

#[test]
fn a_slow_start_sample_is_a_lower_bound_until_the_rate_stops_growing() {
    let rtt = |srtt: u64| estimate::Rtt {
        smoothed: Duration::from_millis(srtt),
        min: Duration::from_millis(100),
    };
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

#[test]
fn a_path_first_seen_in_slow_start_is_measured_before_it_is_left_unused() {
    // Regression (issue 25, "cheap-middle" at alpha 0.5): a 30 Mbit/s path's first sample,
    // 0.7 Mbit/s in slow start, became its capacity estimate; at 2.8 W that looked like 4000
    // nJ/bit, the allocation gave the path limit 0, and it was never measured again.
    let mut s = Operetta::new(0.5);
    let mut ps = [
        costed_info(1, 800, None),
        costed_info(2, 300, None),
        costed_info(3, 2800, None),
    ];
    for p in &mut ps {
        p.min_rtt = Duration::from_millis(20);
    }
    let sample = |p: &mut PathInfo, t: Instant, mbit: f64| {
        p.delivery_rate = Some((t, (mbit * MBIT) as u64, false));
    };
    sample(&mut ps[0], ms(1000), 8.0);
    sample(&mut ps[1], ms(1000), 4.0);
    sample(&mut ps[2], ms(1000), 0.7);
    let mut out = Vec::new();
    s.rate_limits(ms(1000), &ps, &mut out);
    // The allocation ranks path 3 last with no share, but its estimate is a lower bound:
    // its limit is lifted.
    assert_eq!(s.allocation().order[2], (3, Some(0)));
    assert_eq!(out.iter().find(|o| o.0 == 3), Some(&(3, None)));
    // It grows to 30 Mbit/s and stops growing with a queue: now it is the marginal path,
    // limited to its share of T = 4 + 0.5 * (8 + 30) = 23 Mbit/s.
    let mut t = 1000;
    for mbit in [1.4, 2.8, 5.6, 11.2, 22.4, 30.0, 30.0] {
        t += 40;
        sample(&mut ps[2], ms(t), mbit);
        ps[2].srtt = Duration::from_millis(if mbit >= 30.0 { 40 } else { 20 });
        out.clear();
        s.rate_limits(ms(t), &ps, &mut out);
    }
    let ids: Vec<PathId> = s.allocation().order.iter().map(|o| o.0).collect();
    assert_eq!(ids, vec![2, 3, 1]);
    assert_eq!(
        out.iter().find(|o| o.0 == 3).map(|o| mbit(o.1)),
        Some(Some(19.0))
    );
}
