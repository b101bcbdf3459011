use super::*;

fn ms(x: u64) -> Duration {
    Duration::from_millis(x)
}

fn at_ms(x: u64) -> Instant {
    Instant(x * 1_000_000)
}

/// Paths of 20 and 60 ms RTT: one-way 10 and 30 ms.
fn two() -> Vec<View> {
    vec![View { id: 0, owd: ms(10) }, View { id: 1, owd: ms(30) }]
}

fn b(n: usize) -> Bytes {
    Bytes::from(vec![0u8; n])
}

#[test]
fn the_first_copy_leaves_at_once_on_the_fastest_path_the_second_on_the_next() {
    let v = two();
    let mut q = RtQueue::new(64);
    q.push(at_ms(0), b(160), 7);
    assert_eq!(q.pick(at_ms(0), &v, 1), None, "not first on the slow path");
    let p = q.pick(at_ms(0), &v, 0).expect("at once on the fast path");
    assert_eq!(p.role, Role::First);
    assert_eq!(q.data(p).1, 7);
    q.sent(p, 0, true);
    assert_eq!(
        q.pick(at_ms(0), &v, 0),
        None,
        "no second copy on the same path"
    );
    let c = q.pick(at_ms(0), &v, 1).expect("the copy on the slow path");
    assert_eq!(c.role, Role::Copy);
    assert_eq!(q.data(c).1, 7, "the copy has the same number");
    q.sent(c, 1, false);
    assert!(q.is_empty());
}

#[test]
fn without_a_copy_the_datagram_is_done_after_its_first() {
    let v = two();
    let mut q = RtQueue::new(64);
    q.push(at_ms(0), b(160), 0);
    let p = q.pick(at_ms(0), &v, 0).unwrap();
    q.sent(p, 0, false);
    assert!(q.is_empty());
    assert_eq!(q.pick(at_ms(0), &v, 1), None);
}

#[test]
fn the_slow_path_takes_a_first_copy_only_after_the_delay_difference() {
    let v = two();
    let mut q = RtQueue::new(64);
    q.push(at_ms(0), b(160), 0);
    assert_eq!(q.next_due(&v), Some(at_ms(20)));
    assert_eq!(q.pick(at_ms(19), &v, 1), None);
    let p = q
        .pick(at_ms(20), &v, 1)
        .expect("it arrives no later than on the fast path");
    assert_eq!(p.role, Role::First);
    q.sent(p, 1, true);
    let c = q
        .pick(at_ms(20), &v, 0)
        .expect("the copy then goes on the fast path");
    assert_eq!(c.role, Role::Copy);
    // One path: nothing is ever held for another.
    let one = [v[0]];
    let mut q = RtQueue::new(64);
    q.push(at_ms(0), b(160), 0);
    assert_eq!(q.next_due(&one), None);
    assert!(q.pick(at_ms(0), &one, 0).is_some());
    assert_eq!(
        q.pick(at_ms(0), &one, 1),
        None,
        "a path outside the views carries nothing"
    );
}

#[test]
fn older_datagrams_go_first_and_late_ones_are_dropped() {
    let v = two();
    let mut q = RtQueue::new(2);
    assert!(!q.push(at_ms(0), b(1), 0));
    assert!(!q.push(at_ms(1), b(1), 1));
    assert!(q.push(at_ms(2), b(1), 2), "full: the oldest makes room");
    assert_eq!(q.len(), 2);
    let p = q.pick(at_ms(2), &v, 0).unwrap();
    assert_eq!(q.data(p).1, 1);
    q.sent(p, 0, true);
    // Allowed wait: 25 ms + the 20 ms difference. The sent one is forgotten uncounted.
    assert_eq!(q.maintain(at_ms(46), &v, ms(25)), 0);
    assert_eq!(q.len(), 2);
    assert_eq!(
        q.maintain(at_ms(47), &v, ms(25)),
        0,
        "the one sent goes uncounted"
    );
    assert_eq!(q.len(), 1);
    assert_eq!(q.maintain(at_ms(48), &v, ms(25)), 1, "seq 2 never left");
    assert!(q.is_empty());
}
