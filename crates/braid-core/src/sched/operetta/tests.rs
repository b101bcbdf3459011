//! Tests of the OPERETTA allocation, its use of the paths' capacity estimates, and limits.

use super::*;
use crate::sched::tests::info;
use crate::sched::Capacity;

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

/// A capacity estimate of `mbit` Mbit/s, `full` if the path was seen at its full bandwidth.
fn cap(mbit: f64, full: bool) -> Option<Capacity> {
    Some(Capacity {
        rate: (mbit * MBIT) as u64,
        full,
        bound: false,
    })
}

#[test]
fn the_allocation_follows_the_paths_capacity_estimates() {
    let mut s = Operetta::new(0.0);
    let sec = |n: u64| Instant(n * 1_000_000_000);
    let mut a = costed_info(1, 100, None);
    let mut b = costed_info(2, 300, None);
    // Both paths already seen at their full bandwidth.
    a.capacity = cap(1.0, true);
    b.capacity = cap(2.0, true);
    s.select(sec(1), &[a, b], &SchedContext::default());
    // a: 100 per Mbit/s, b: 150: b unused at alpha 0, and not probed (its estimate is a
    // full-bandwidth one).
    assert_eq!(s.allocation().order, vec![(1, None), (2, Some(0))]);
    let mut out = Vec::new();
    s.rate_limits(sec(1), &[a, b], &mut out);
    assert_eq!(out, vec![(1, None), (2, Some(0))]);
    // a's capacity falls to 0.5 Mbit/s: 200 per Mbit/s now, b 150: b first.
    a.capacity = cap(0.5, true);
    s.select(sec(12), &[a, b], &SchedContext::default());
    assert_eq!(s.allocation().order[0].0, 2);
    // No estimate yet: the window over the RTT stands in (10 000 bytes per 20 ms).
    a.capacity = None;
    s.select(sec(13), &[a, b], &SchedContext::default());
    assert_eq!(s.allocation().order[0].0, 1);
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
    ps[0].capacity = cap(8.0, true);
    ps[1].capacity = cap(4.0, true);
    ps[2].capacity = cap(0.7, false);
    let mut out = Vec::new();
    s.rate_limits(ms(1000), &ps, &mut out);
    // The allocation ranks path 3 last with no share, but its estimate is a lower bound:
    // its limit is lifted.
    assert_eq!(s.allocation().order[2], (3, Some(0)));
    assert_eq!(out.iter().find(|o| o.0 == 3), Some(&(3, None)));
    // Seen at its full 30 Mbit/s: now it is the marginal path, limited to its share of
    // T = 4 + 0.5 * (8 + 30) = 23 Mbit/s.
    ps[2].capacity = cap(30.0, true);
    out.clear();
    s.rate_limits(ms(1040), &ps, &mut out);
    let ids: Vec<PathId> = s.allocation().order.iter().map(|o| o.0).collect();
    assert_eq!(ids, vec![2, 3, 1]);
    assert_eq!(
        out.iter().find(|o| o.0 == 3).map(|o| mbit(o.1)),
        Some(Some(19.0))
    );
}

/// Milliseconds as an instant.
fn ms(n: u64) -> Instant {
    Instant(n * 1_000_000)
}
