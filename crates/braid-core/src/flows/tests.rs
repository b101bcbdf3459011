use super::*;

fn limits() -> FlowLimits {
    FlowLimits {
        max_pps: 200,
        max_bitrate: 300_000,
        table: 16,
    }
}

/// Sends `pps` datagrams of `size` bytes on `flow` from `from` for `secs`; returns the class
/// after each datagram.
fn run(
    c: &mut Classifier,
    flow: u64,
    from: u64,
    pps: u64,
    size: usize,
    secs: u64,
) -> Vec<FlowClass> {
    let gap = 1_000_000_000 / pps;
    (0..pps * secs)
        .map(|i| c.observe(Instant(from + i * gap), flow, size))
        .collect()
}

#[test]
fn a_call_at_50_pps_of_160_bytes_is_real_time() {
    let mut c = Classifier::new(limits());
    let seen = run(&mut c, 7, 0, 50, 160, 10);
    assert!(seen.iter().all(|&k| k == FlowClass::RealTime));
    // A game at 128 packets/s of 120 bytes too.
    let seen = run(&mut c, 8, 0, 128, 120, 10);
    assert!(seen.iter().all(|&k| k == FlowClass::RealTime));
}

#[test]
fn a_5_mbit_stream_is_bulk_within_a_tenth_of_a_second() {
    let mut c = Classifier::new(limits());
    // 1200-byte datagrams at 5 Mbit/s: 520 per second.
    let seen = run(&mut c, 1, 0, 520, 1200, 3);
    assert_eq!(seen[0], FlowClass::RealTime, "a new flow starts real-time");
    let first_bulk = seen.iter().position(|&k| k == FlowClass::Bulk).unwrap();
    assert!(first_bulk <= 52, "bulk after {first_bulk} datagrams");
    assert!(seen[first_bulk..].iter().all(|&k| k == FlowClass::Bulk));
}

#[test]
fn many_small_packets_are_bulk_by_their_rate() {
    let mut c = Classifier::new(limits());
    // 400 packets/s of 20 bytes: 64 kbit/s, under the bit limit, over the packet limit.
    let seen = run(&mut c, 1, 0, 400, 20, 2);
    assert_eq!(*seen.last().unwrap(), FlowClass::Bulk);
}

#[test]
fn a_flow_that_speeds_up_becomes_bulk_and_real_time_again_when_it_slows() {
    let mut c = Classifier::new(limits());
    let calm = run(&mut c, 3, 0, 50, 160, 3);
    assert!(calm.iter().all(|&k| k == FlowClass::RealTime));
    // Now 1000 packets/s of 100 bytes (800 kbit/s).
    let fast = run(&mut c, 3, 3_000_000_000, 1000, 100, 2);
    let first_bulk = fast.iter().position(|&k| k == FlowClass::Bulk).unwrap();
    assert!(first_bulk < 500, "bulk after {first_bulk} datagrams");
    assert_eq!(*fast.last().unwrap(), FlowClass::Bulk);
    assert_eq!(c.class(3), FlowClass::Bulk);
    // Back to 50 packets/s: real-time once the fast second has left the window.
    let calm = run(&mut c, 3, 5_000_000_000, 50, 160, 2);
    assert_eq!(
        calm[0],
        FlowClass::Bulk,
        "the window still holds the fast second"
    );
    assert_eq!(*calm.last().unwrap(), FlowClass::RealTime);
}

#[test]
fn a_new_flows_burst_stays_real_time() {
    let mut c = Classifier::new(limits());
    for _ in 0..20 {
        assert_eq!(c.observe(Instant(0), 9, 200), FlowClass::RealTime);
    }
}

#[test]
fn the_table_is_bounded_and_idle_flows_expire() {
    let mut c = Classifier::new(limits());
    for f in 0..1000u64 {
        c.observe(Instant(f * 1_000_000), f, 100);
        assert!(c.len() <= 16);
    }
    assert_eq!(c.len(), 16);
    // The newest flows are kept.
    let t = Instant(1_000_000_000);
    for f in 984..1000u64 {
        assert!(c.flows.contains_key(&f), "flow {f} kept");
    }
    // A bulk flow, then silence: forgotten, it starts real-time again.
    run(&mut c, 5000, t.as_nanos(), 1000, 1000, 1);
    assert_eq!(c.class(5000), FlowClass::Bulk);
    let later = Instant(t.as_nanos() + 1_000_000_000) + IDLE + SLOT;
    assert_eq!(c.observe(later, 1, 100), FlowClass::RealTime);
    assert_eq!(c.len(), 1, "every silent flow was swept");
    assert_eq!(c.class(5000), FlowClass::RealTime);
}
