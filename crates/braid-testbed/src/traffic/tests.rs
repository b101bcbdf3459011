use super::*;

#[test]
fn request_round_trips_and_rejects_junk() {
    let r = Request {
        direction: Direction::Up,
        size: 123_456,
        seed: 99,
        cc: "bbr".into(),
    };
    let d = Request::decode(&r.encode()).unwrap();
    assert_eq!(
        (d.direction, d.size, d.seed, d.cc.as_str()),
        (Direction::Up, 123_456, 99, "bbr")
    );
    let mut bad = r.encode();
    bad[0] = b'X';
    assert!(Request::decode(&bad).is_none());
    let mut bad = r.encode();
    bad[5] = 7;
    assert!(Request::decode(&bad).is_none());
    let mut bad = r.encode();
    bad[24] = 0xff;
    assert!(Request::decode(&bad).is_none());
}
