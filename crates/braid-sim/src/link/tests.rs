use super::*;
use crate::energy::EnergySpec;
use crate::scenario::{BurstSpec, RateSpec};
use crate::trace::Trace;
use std::sync::Arc;

const MS: Nanos = 1_000_000;
const US: Nanos = 1_000;

fn link(bps: u64, delay: Nanos) -> LinkSpec {
    LinkSpec {
        rate: RateSpec::Constant(bps),
        delay,
        jitter: 0,
        loss: 0.0,
        burst: None,
        duplicate: 0.0,
        queue_bytes: 10_000_000,
        blackouts: vec![],
        blackout_every: None,
    }
}

fn path(l: LinkSpec) -> PathSpec {
    PathSpec {
        name: "p".into(),
        up: l.clone(),
        down: l,
        half_duplex: false,
        frame_overhead: 0,
        wifi: None,
        energy: EnergySpec::default(),
        rate_hint: None,
    }
}

/// Steps through every internal event up to `until`.
fn drain<P: Clone>(m: &mut PathModel<P>, until: Nanos) -> Vec<(Nanos, Dir, P)> {
    let mut out = Vec::new();
    while let Some(t) = m.next_event().filter(|&t| t <= until) {
        m.advance(t, &mut out);
    }
    m.advance(until, &mut out);
    out
}

#[test]
fn saturated_constant_link_is_exact() {
    // 1500 B at 12 Mbit/s = 1 ms per packet.
    let mut m = PathModel::new(&path(link(12_000_000, 10 * MS)), 1);
    for i in 0..100u32 {
        m.send(0, Dir::Down, 1500, i);
    }
    assert_eq!(m.next_event(), Some(MS));
    let out = drain(&mut m, 10_000 * MS);
    assert_eq!(out.len(), 100);
    for (k, (t, d, p)) in out.iter().enumerate() {
        assert_eq!(
            (*t, *d, *p),
            ((k as u64 + 1) * MS + 10 * MS, Dir::Down, k as u32)
        );
    }
    let s = m.stats(Dir::Down);
    assert_eq!((s.delivered_packets, s.delivered_bytes), (100, 150_000));
    assert_eq!(s.airtime_ns, 100 * MS);
    assert_eq!(m.next_event(), None);
    // Rounds up: 1 byte at 3 bit/s takes ceil(8/3 s).
    let mut slow = PathModel::new(&path(link(3, 0)), 1);
    slow.send(0, Dir::Up, 1, ());
    assert_eq!(slow.next_event(), Some(2_666_666_667));
}

#[test]
fn one_big_advance_equals_stepping() {
    let mut l = link(10_000_000, 5 * MS);
    l.jitter = 3 * MS;
    l.loss = 0.1;
    l.duplicate = 0.05;
    let run = |step: bool| {
        let mut m = PathModel::new(&path(l.clone()), 9);
        let mut out = Vec::new();
        for i in 0..2000u32 {
            let now = i as u64 * 500 * US;
            if step {
                out.extend(drain(&mut m, now));
            }
            let dir = if i % 3 == 0 { Dir::Up } else { Dir::Down };
            m.send(now, dir, 1200, i);
        }
        m.advance(u64::MAX - 1, &mut out);
        out
    };
    let (a, b) = (run(true), run(false));
    assert_eq!(a, b);
    assert!(a.windows(2).all(|w| w[0].0 <= w[1].0), "arrival order");
    // Determinism: a second run gives identical results.
    assert_eq!(a, run(true));
}

#[test]
fn trace_rate_changes_mid_packet() {
    // 12 Mbit/s until 0.5 ms, then 24 Mbit/s: 12000 bits end at 0.5 + 0.25 ms.
    let tr = Trace::new(vec![(0, 12_000_000), (500 * US, 24_000_000)]).unwrap();
    let mut l = link(0, 0);
    l.rate = RateSpec::Trace(Arc::new(tr));
    let mut m = PathModel::new(&path(l), 1);
    m.send(0, Dir::Up, 1500, ());
    assert_eq!(m.next_event(), Some(750 * US));
    let out = drain(&mut m, MS);
    assert_eq!(out, vec![(750 * US, Dir::Up, ())]);
    // A rate that drops to 0 forever: the frame never finishes.
    let dead = Trace::new(vec![(0, 0)]).unwrap();
    let mut l = link(0, 0);
    l.rate = RateSpec::Trace(Arc::new(dead));
    let mut m = PathModel::new(&path(l), 1);
    m.send(0, Dir::Up, 1500, ());
    assert_eq!(m.next_event(), None);
}

#[test]
fn queue_overflow_drops() {
    let mut l = link(12_000_000, 0);
    l.queue_bytes = 3000;
    let mut m = PathModel::new(&path(l), 1);
    for i in 0..10 {
        m.send(0, Dir::Down, 1500, i);
    }
    assert_eq!(m.queued_bytes(Dir::Down), 3000);
    let s = m.stats(Dir::Down);
    assert_eq!(
        (s.offered_packets, s.queue_drops, s.queue_drop_bytes),
        (10, 7, 10_500)
    );
    let out = drain(&mut m, 10 * MS);
    assert_eq!(out.iter().map(|o| o.2).collect::<Vec<_>>(), vec![0, 1, 2]);
    // Room again once the queue drained.
    m.send(10 * MS, Dir::Down, 1500, 99);
    assert_eq!(drain(&mut m, 20 * MS), vec![(11 * MS, Dir::Down, 99)]);
}

#[test]
fn delay_and_jitter_bounds() {
    let mut l = link(1_000_000_000, 10 * MS);
    l.jitter = 5 * MS;
    let mut m = PathModel::new(&path(l), 3);
    let mut sent = std::collections::HashMap::new();
    for i in 0..5000u64 {
        let now = i * 100 * US;
        sent.insert(i, now + 12 * US); // 1500 B at 1 Gbit/s = 12 us
        m.send(now, Dir::Up, 1500, i);
    }
    let out = drain(&mut m, u64::MAX - 1);
    assert_eq!(out.len(), 5000);
    let (mut lo, mut hi, mut reordered) = (u64::MAX, 0, false);
    for w in out.windows(2) {
        reordered |= w[1].2 < w[0].2;
    }
    for (t, _, i) in &out {
        let d = t - sent[i];
        lo = lo.min(d);
        hi = hi.max(d);
    }
    assert!(lo >= 10 * MS && hi <= 15 * MS, "{lo} {hi}");
    assert!(
        lo < 10 * MS + 100 * US && hi > 15 * MS - 100 * US,
        "{lo} {hi}"
    );
    assert!(reordered);
}

fn delivered_fraction(l: LinkSpec, n: u32) -> f64 {
    let mut m = PathModel::new(&path(l), 11);
    let mut out = Vec::new();
    for i in 0..n {
        m.send(i as u64 * 10 * US, Dir::Down, 100, ());
        if i % 64 == 0 {
            m.advance(i as u64 * 10 * US, &mut out);
        }
    }
    m.advance(u64::MAX - 1, &mut out);
    let s = m.stats(Dir::Down);
    assert_eq!(s.lost_packets + s.delivered_packets, n as u64);
    out.len() as f64 / n as f64
}

#[test]
fn bernoulli_loss_within_binomial_bound() {
    let mut l = link(1_000_000_000, MS);
    l.loss = 0.1;
    let n = 100_000.0;
    let lost = (1.0 - delivered_fraction(l, 100_000)) * n;
    let sd = (n * 0.1 * 0.9f64).sqrt();
    assert!((lost - 10_000.0).abs() < 5.0 * sd, "lost {lost}");
}

#[test]
fn gilbert_elliott_average_loss() {
    let mut l = link(1_000_000_000, MS);
    l.burst = Some(BurstSpec {
        p: 0.01,
        r: 0.3,
        loss_bad: 1.0,
    });
    let loss = 1.0 - delivered_fraction(l, 300_000);
    let expect = 0.01 / 0.31;
    assert!(
        (loss - expect).abs() < 0.004,
        "loss {loss} expected {expect}"
    );
}

#[test]
fn duplicates_arrive_twice_without_airtime() {
    let mut l = link(12_000_000, MS);
    l.duplicate = 1.0;
    let mut m = PathModel::new(&path(l), 1);
    m.send(0, Dir::Up, 1500, 7);
    m.send(0, Dir::Up, 1500, 8);
    let out = drain(&mut m, 100 * MS);
    let expect = [(2, 7), (2, 7), (3, 8), (3, 8)];
    let got: Vec<_> = out.iter().map(|o| (o.0, o.2)).collect();
    let want: Vec<_> = expect
        .iter()
        .enumerate()
        .map(|(k, &(t, p))| (t * MS + (k as u64 % 2) * DUPLICATE_GAP, p))
        .collect();
    assert_eq!(got, want);
    assert_eq!(m.stats(Dir::Up).duplicated, 2);
    assert_eq!(m.stats(Dir::Up).airtime_ns, 2 * MS);
}

#[test]
fn blackouts_drop_and_resume() {
    let mut l = link(12_000_000, 0);
    l.blackouts = vec![(10 * MS, 20 * MS)];
    let mut m = PathModel::new(&path(l), 1);
    // Five packets at 8 ms: the first is on the air 8-9 ms and the second 9-10 ms; the
    // rest would start during the blackout and are dropped.
    for i in 0..5 {
        m.send(8 * MS, Dir::Down, 1500, i);
    }
    let mut out = drain(&mut m, 15 * MS);
    m.send(15 * MS, Dir::Down, 1500, 10); // offered during the blackout
    m.send(20 * MS, Dir::Down, 1500, 11); // after it
    out.extend(drain(&mut m, 30 * MS));
    let got: Vec<_> = out.iter().map(|o| (o.0, o.2)).collect();
    assert_eq!(got, vec![(9 * MS, 0), (10 * MS, 1), (21 * MS, 11)]);
    assert_eq!(m.stats(Dir::Down).blackout_drops, 4);
    assert!(m.is_blacked_out(10 * MS) && m.is_blacked_out(20 * MS - 1));
    assert!(!m.is_blacked_out(20 * MS) && !m.is_blacked_out(10 * MS - 1));
}

#[test]
fn periodic_blackouts() {
    let mut l = link(8_000_000, 0);
    l.blackout_every = Some((100 * MS, 10 * MS));
    let m: PathModel<()> = PathModel::new(&path(l), 1);
    assert!(!m.is_blacked_out(5 * MS)); // k starts at 1
    assert!(!m.is_blacked_out(100 * MS - 1));
    assert!(m.is_blacked_out(100 * MS));
    assert!(m.is_blacked_out(110 * MS - 1));
    assert!(!m.is_blacked_out(110 * MS));
    assert!(m.is_blacked_out(1_205 * MS));
    // 1 s at 8 Mbit/s minus ten blackouts of 10 ms.
    assert_eq!(
        m.capacity_bits(Dir::Up, 0, 1_000 * MS),
        8e6 * 0.9 + 8e6 * 0.01
    );
    assert_eq!(
        m.capacity_bits(Dir::Up, 0, 1_010 * MS),
        8e6 * 0.9 + 8e6 * 0.01
    );
}

#[test]
fn capacity_with_blackouts_and_traces() {
    let tr = Trace::new(vec![(0, 10_000_000), (1_000 * MS, 20_000_000)]).unwrap();
    let mut l = link(0, 0);
    l.rate = RateSpec::Trace(Arc::new(tr));
    // Overlapping list entries and a periodic blackout overlapping one of them.
    l.blackouts = vec![
        (500 * MS, 700 * MS),
        (600 * MS, 800 * MS),
        (1_500 * MS, 1_600 * MS),
    ];
    l.blackout_every = Some((1_550 * MS, 100 * MS));
    let m: PathModel<()> = PathModel::new(&path(l), 1);
    let c = m.capacity_bits(Dir::Down, 0, 2_000 * MS);
    // 0-0.5 s at 10M, 0.8-1 s at 10M, 1-1.5 s at 20M, 1.65-2 s at 20M.
    let expect = 5e6 + 2e6 + 10e6 + 7e6;
    assert!((c - expect).abs() < 1e-6, "{c}");
    assert_eq!(m.capacity_bits(Dir::Down, 600 * MS, 650 * MS), 0.0);
    assert_eq!(m.capacity_bits(Dir::Down, 5, 5), 0.0);
}

#[test]
fn half_duplex_alternates_and_charges_overhead() {
    let mut p = path(link(12_000_000, 0));
    p.half_duplex = true;
    p.up.rate = RateSpec::Constant(1_000); // ignored: the medium runs at the down rate
    p.frame_overhead = 100 * US;
    let mut m = PathModel::new(&p, 1);
    for i in 0..200 {
        m.send(0, Dir::Down, 1500, i);
        m.send(0, Dir::Up, 1500, i);
    }
    let out = drain(&mut m, 110 * MS);
    let ups = out.iter().filter(|o| o.1 == Dir::Up).count();
    let downs = out.len() - ups;
    assert!(
        out.len() >= 99 && (ups as i64 - downs as i64).abs() <= 1,
        "{ups} {downs}"
    );
    assert!(
        out.windows(2).all(|w| w[0].1 != w[1].1),
        "alternates frame by frame"
    );
    assert_eq!(out[0].0, 1_100 * US);
    // A 40-byte frame: 100 us of overhead plus 26.67 us of bytes.
    let mut m = PathModel::new(&p, 1);
    m.send(0, Dir::Up, 40, 0);
    assert_eq!(m.next_event(), Some(100 * US + 26_667));
    assert_eq!(m.capacity_bits(Dir::Up, 0, 1_000 * MS), 12e6);
}

#[test]
fn energy_follows_airtime() {
    let mut p = path(link(12_000_000, 0));
    p.energy = EnergySpec {
        active_w: 1.0,
        idle_w: 0.0,
        ramp_j: 2.5,
        tail_s: 0.5,
    };
    let mut m = PathModel::new(&p, 1);
    // Both directions busy 0-10 ms (overlapping: counted once).
    for i in 0..10 {
        m.send(0, Dir::Up, 1500, i);
        m.send(0, Dir::Down, 1500, i);
    }
    drain(&mut m, 2_000 * MS);
    let e = m.energy_j_until(2_000 * MS);
    assert!((e - (2.5 + 0.010 + 0.5)).abs() < 1e-9, "{e}");
}

/// Every packet of a million, both directions interleaved, comes out. (This test also timed
/// itself once; speed is not a unit test's to judge, and under CI's idle-priority run a
/// wall-clock bound fails on a busy host, not on a slow model.)
#[test]
fn a_million_packets_in_both_directions_are_all_delivered() {
    let mut m = PathModel::new(&path(link(10_000_000_000, MS)), 1);
    let mut out = Vec::with_capacity(1024);
    let mut delivered = 0usize;
    for i in 0..1_000_000u64 {
        let now = i * 1_300;
        m.send(now, if i % 2 == 0 { Dir::Up } else { Dir::Down }, 1500, i);
        if i % 16 == 0 {
            m.advance(now, &mut out);
            delivered += out.len();
            out.clear();
        }
    }
    m.advance(u64::MAX - 1, &mut out);
    delivered += out.len();
    assert_eq!(delivered, 1_000_000);
}
