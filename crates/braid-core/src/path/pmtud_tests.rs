//! DPLPMTUD without sockets: a path that carries at most `limit` bytes answers each probe
//! (acknowledged or lost), and the search must end within the step of the limit.

use super::*;

const RAISE: Duration = Duration::from_secs(600);

/// Run the search against a path carrying `limit` bytes: every due probe is sent and its
/// fate told at once (acknowledged when it fits, lost otherwise). Returns the probes sent.
fn search(d: &mut Pmtud, limit: usize, now: Instant) -> Vec<usize> {
    let mut sent = Vec::new();
    let mut pn = 100;
    while let Some(size) = d.probe_due() {
        assert!(sent.len() < 64, "the search does not end: {sent:?}");
        d.on_probe_sent(pn, size, now + Duration::from_secs(1));
        sent.push(size);
        if size <= limit {
            d.on_acked(now, pn, size);
        } else {
            assert_eq!(
                d.on_lost(now, pn, size),
                None,
                "a probe's loss is no black hole"
            );
        }
        pn += 1;
    }
    sent
}

#[test]
fn starts_at_the_base_size_and_probes_the_route_limit_first() {
    let mut d = Pmtud::new(1472, RAISE, true);
    assert_eq!(d.current(), BASE_DATAGRAM);
    assert_eq!(d.probe_due(), Some(1472));
    let sent = search(&mut d, 1472, Instant(0));
    assert_eq!(sent, vec![1472], "one probe when the route's limit passes");
    assert_eq!(d.current(), 1472);
    assert!(!d.searching());
    assert_eq!(
        d.deadline(false),
        None,
        "no raise timer at the route's limit"
    );
}

#[test]
fn a_route_below_the_base_size_is_used_as_is() {
    let d = Pmtud::new(1100, RAISE, true);
    assert_eq!(d.current(), 1100);
    assert_eq!(d.probe_due(), None);
}

#[test]
fn binary_search_ends_within_the_step_below_a_smaller_limit() {
    // 1400-byte IP packets: 1372 bytes of UDP payload over IPv4.
    for limit in [1201, 1250, 1372, 1400, 1455, 1471] {
        let mut d = Pmtud::new(1472, RAISE, true);
        let sent = search(&mut d, limit, Instant(0));
        let cur = d.current();
        assert!(cur <= limit, "limit {limit}: {cur} does not pass");
        assert!(
            limit - cur <= SEARCH_STEP,
            "limit {limit}: stopped at {cur} ({sent:?})"
        );
        assert!(sent.len() <= 30, "limit {limit}: {} probes", sent.len());
        assert_eq!(
            d.deadline(false),
            Some(Instant(0) + RAISE),
            "the raise timer is armed"
        );
    }
}

#[test]
fn a_size_fails_only_after_max_probes_losses() {
    let mut d = Pmtud::new(1472, RAISE, true);
    for i in 0..MAX_PROBES as u64 - 1 {
        d.on_probe_sent(i, 1472, Instant(0));
        d.on_lost(Instant(0), i, 1472);
        assert_eq!(
            d.probe_due(),
            Some(1472),
            "still probing 1472 after {} losses",
            i + 1
        );
    }
    d.on_probe_sent(9, 1472, Instant(0));
    d.on_lost(Instant(0), 9, 1472);
    assert_eq!(d.probe_due(), Some((1200 + 1472) / 2));
}

#[test]
fn an_unanswered_probe_fails_at_its_deadline() {
    let mut d = Pmtud::new(1472, RAISE, true);
    let t = Instant(0) + Duration::from_millis(300);
    d.on_probe_sent(1, 1472, t);
    assert_eq!(d.probe_due(), None, "one probe at a time");
    assert_eq!(d.deadline(false), Some(t));
    d.on_timeout(Instant(0) + Duration::from_millis(299), false);
    assert_eq!(d.probe_due(), None);
    d.on_timeout(t, false);
    assert_eq!(d.probe_due(), Some(1472), "probed again");
    assert_eq!(d.current(), 1200, "never raised without an acknowledgement");
}

#[test]
fn black_hole_falls_back_to_the_base_and_searches_again() {
    let mut d = Pmtud::new(1472, RAISE, true);
    search(&mut d, 1472, Instant(0));
    assert_eq!(d.current(), 1472);
    let now = Instant(0) + Duration::from_secs(5);
    // Small packets (ACKs, PINGs) get through, full-size ones are lost.
    for pn in 200..200 + BLACK_HOLE_LOSSES as u64 {
        d.on_acked(now, 1000 + pn, 60);
        assert_eq!(d.on_lost(now, pn, 1472), None);
    }
    // Suspected: probes of the size in use decide, the first one lost by loss detection,
    // the second by its deadline.
    assert!(d.suspect());
    assert_eq!(d.probe_due(), Some(1472));
    d.on_probe_sent(300, 1472, now + Duration::from_millis(100));
    assert_eq!(d.on_lost(now, 300, 1472), None);
    assert_eq!(d.current(), 1472, "one lost probe is not enough");
    assert_eq!(d.probe_due(), Some(1472));
    d.on_probe_sent(301, 1472, now + Duration::from_millis(100));
    let change = d.on_timeout(now + Duration::from_millis(100), false);
    assert_eq!(
        change,
        Some(SizeChange {
            from: 1472,
            to: 1200
        })
    );
    assert_eq!(d.black_holes, 1);
    assert!(d.searching());
    // Packets of the old size still in flight are lost too: no second black hole.
    for pn in 260..270 {
        assert_eq!(d.on_lost(now, pn, 1472), None);
    }
    let sent = search(&mut d, 1372, now);
    assert!(
        sent.iter().all(|&s| s < 1472),
        "the failed size is not probed again: {sent:?}"
    );
    assert!(
        (1372 - SEARCH_STEP..=1372).contains(&d.current()),
        "{}",
        d.current()
    );
}

/// A flight's tail lost to congestion (a probe timeout's PING acknowledged, the full-size
/// packets before it declared lost) looked like a black hole and dropped the size of a
/// path that carried it (seen on a 16 Mbit/s link with no MTU limit): the probe of the
/// size in use passes, and the size stays.
#[test]
fn a_tail_lost_to_congestion_is_cleared_by_a_probe_of_the_size_in_use() {
    let mut d = Pmtud::new(1472, RAISE, true);
    search(&mut d, 1472, Instant(0));
    for pn in 200..220 {
        assert_eq!(d.on_lost(Instant(0), pn, 1472), None);
    }
    assert!(d.suspect());
    assert_eq!(d.probe_due(), Some(1472));
    d.on_probe_sent(230, 1472, Instant(0) + Duration::from_millis(100));
    d.on_acked(Instant(0), 230, 1472);
    assert!(!d.suspect());
    assert_eq!(d.probe_due(), None);
    assert_eq!((d.current(), d.black_holes), (1472, 0));
}

#[test]
fn congestion_losses_between_acknowledged_full_packets_are_no_black_hole() {
    let mut d = Pmtud::new(1472, RAISE, true);
    search(&mut d, 1472, Instant(0));
    for round in 1..10u64 {
        for i in 0..BLACK_HOLE_LOSSES as u64 - 1 {
            assert_eq!(d.on_lost(Instant(0), 1000 * round + i, 1472), None);
        }
        d.on_acked(Instant(0), 1000 * round + 9, 1472);
    }
    // Losses declared (by the time threshold) after a later full packet was acknowledged.
    d.on_acked(Instant(0), 50_000, 1472);
    for pn in 49_900..50_000 {
        assert_eq!(d.on_lost(Instant(0), pn, 1472), None);
    }
    assert_eq!(d.current(), 1472);
    assert_eq!(d.black_holes, 0);
}

#[test]
fn the_raise_timer_searches_upward_again() {
    let mut d = Pmtud::new(1472, Duration::from_secs(30), true);
    search(&mut d, 1300, Instant(0));
    let low = d.current();
    assert!(low <= 1300);
    let at = d.deadline(false).expect("raise timer");
    assert_eq!(at, Instant(0) + Duration::from_secs(30));
    d.on_timeout(at, false);
    assert!(d.searching());
    search(&mut d, 1472, at);
    assert_eq!(d.current(), 1472, "the path carries more now");
}

#[test]
fn disabled_uses_the_ceiling_and_never_probes() {
    let mut d = Pmtud::new(1472, RAISE, true);
    d.set_enabled(false);
    assert_eq!(d.current(), 1472);
    assert_eq!(d.probe_due(), None);
    assert_eq!(d.deadline(false), None);
    assert_eq!(d.on_lost(Instant(0), 1, 1472), None);
    d.set_enabled(true);
    assert_eq!(d.current(), 1200);
    assert_eq!(d.probe_due(), Some(1472));
}

#[test]
fn a_new_ceiling_restarts_from_the_base() {
    let mut d = Pmtud::new(1472, RAISE, true);
    search(&mut d, 1472, Instant(0));
    d.set_ceiling(1452);
    assert_eq!(d.current(), 1200);
    assert_eq!(d.probe_due(), Some(1452));
    // A late acknowledgement larger than the ceiling is capped.
    d.on_acked(Instant(0), 7, 1472);
    assert_eq!(d.current(), 1452);
}

#[test]
fn not_configured_stays_off_whatever_the_transport() {
    let mut d = Pmtud::new(1472, RAISE, false);
    assert_eq!(d.current(), 1472);
    d.set_enabled(true);
    assert_eq!(d.current(), 1472);
    assert_eq!(d.probe_due(), None);
    d.set_ceiling(1452);
    assert_eq!(d.current(), 1452);
}

/// A downloading agent sends only small packets: a hole that opens later would go unseen
/// and its status would show a size that no longer passes. A path that receives checks its
/// size after CONFIRM_AFTER without a full packet acknowledged; an idle one does not.
#[test]
fn a_path_that_only_receives_checks_its_size_now_and_then() {
    let mut d = Pmtud::new(1472, RAISE, true);
    search(&mut d, 1472, Instant(0));
    assert_eq!(d.deadline(false), None, "idle: nothing to check");
    let at = d.deadline(true).expect("a check while receiving");
    assert_eq!(at, Instant(0) + CONFIRM_AFTER);
    assert_eq!(d.on_timeout(at, true), None);
    assert_eq!(d.probe_due(), Some(1472), "the size in use is probed");
    for (i, t) in [1u64, 2].into_iter().enumerate() {
        let deadline = at + Duration::from_millis(100 * t);
        d.on_probe_sent(500 + t, 1472, deadline);
        let drop = d.on_timeout(deadline, true);
        if i == 0 {
            assert_eq!(drop, None);
        } else {
            assert_eq!(
                drop,
                Some(SizeChange {
                    from: 1472,
                    to: 1200
                })
            );
        }
    }
}
