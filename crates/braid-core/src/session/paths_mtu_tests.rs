//! Per-path datagram limits (`Session::set_path_max_datagram`): an IPv6 path over a
//! 1500-byte MTU carries at most 1452 bytes of UDP payload, 20 fewer than IPv4's 1472.

use crate::{Config, Instant, PathId, Session, MIN_PATH_DATAGRAM};
use std::collections::VecDeque;
use std::time::Duration;

const SID: u64 = 0x1d6_0001;
/// 1500 less IPv6's 40-byte header and UDP's 8.
const V6: usize = 1452;

/// What crossed each path: (path, client to server?, length) of every datagram sent, and
/// how many a path's MTU dropped.
#[derive(Default)]
struct Wire {
    sent: Vec<(PathId, bool, usize)>,
    dropped: usize,
}

/// A session over path 0 (an IPv6 path: the network drops datagrams longer than 1452
/// bytes, as a 1500-byte MTU does with 1520-byte IPv6 packets) and path 1 (IPv4, 1472).
/// `limit` tells both ends' drivers about path 0's size (the server before the path
/// exists). The client sends `bytes` on a stream and the server as many back on it.
/// Returns the bytes received by each end and what crossed the wire.
fn exchange(limit: bool, bytes: usize) -> (usize, usize, Wire) {
    let cfg = Config::default();
    let mds = cfg.max_datagram_size;
    let mut now = Instant(0);
    let mut client = Session::connect(cfg.clone(), now, SID, 0);
    let mut server = Session::accept(cfg, now, SID);
    if limit {
        client.set_path_max_datagram(now, 0, V6);
        server.set_path_max_datagram(now, 0, V6);
    }
    let mtu = |path: PathId| if path == 0 { V6 } else { mds };
    let mut wire: VecDeque<(Instant, bool, PathId, Vec<u8>)> = VecDeque::new();
    let mut log = Wire::default();
    let mut buf = vec![0u8; mds];
    let data: Vec<u8> = (0..bytes).map(|i| (i * 13 + i / 241) as u8).collect();
    let (mut stream, mut up, mut down, mut echoed) = (None, 0, 0, 0);
    let (mut got_up, mut got_down, mut path1) = (0, 0, false);
    for _ in 0..400_000 {
        if client.is_established() && !path1 {
            client.add_path(now, 1).unwrap();
            path1 = true;
        }
        if client.is_established() && stream.is_none() {
            stream = Some(client.open_stream().unwrap());
        }
        if let Some(id) = stream {
            if up < data.len() {
                up += client.stream_write(id, &data[up..]).unwrap();
            }
            while let Ok(Some(b)) = server.stream_read(id, usize::MAX) {
                got_up += b.len();
            }
            if echoed < got_up.min(data.len()) {
                echoed += server
                    .stream_write(id, &data[echoed..got_up.min(data.len())])
                    .unwrap_or(0);
            }
            while let Ok(Some(b)) = client.stream_read(id, usize::MAX) {
                down += b.len();
                got_down = down;
            }
            if got_down == bytes && got_up == bytes {
                return (got_up, got_down, log);
            }
        }
        for (s, to_server) in [(&mut client, true), (&mut server, false)] {
            while let Some(t) = s.poll_transmit(now, &mut buf) {
                log.sent.push((t.path, to_server, t.len));
                if t.len > mtu(t.path) {
                    log.dropped += 1;
                    continue;
                }
                let at = now + Duration::from_millis(if t.path == 0 { 10 } else { 15 });
                wire.push_back((at, to_server, t.path, buf[..t.len].to_vec()));
            }
        }
        wire.make_contiguous().sort_by_key(|w| w.0);
        let next = [
            wire.front().map(|w| w.0),
            client.poll_timeout(),
            server.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
        .expect("something is due");
        now = now.max(next);
        while wire.front().is_some_and(|w| w.0 <= now) {
            let (_, to_server, _, pkt) = wire.pop_front().unwrap();
            let s = if to_server { &mut server } else { &mut client };
            s.handle_datagram(now, pkt.into());
        }
        for s in [&mut client, &mut server] {
            if s.poll_timeout().is_some_and(|t| t <= now) {
                s.handle_timeout(now);
            }
        }
        if now > Instant(0) + Duration::from_secs(60) {
            break;
        }
    }
    (got_up, got_down, log)
}

/// Regression: braid sent 1472-byte datagrams on every path, 1520 bytes on the wire over
/// IPv6, more than a 1500-byte MTU takes (IPv6 downloads ran at ~3 Mbit/s). With path 0
/// limited to 1452 bytes on both ends, nothing longer goes out on it (either way), path 1
/// still sends full 1472-byte datagrams, and the exchange completes with no drop.
#[test]
fn an_ipv6_path_sends_no_datagram_longer_than_its_mtu_allows() {
    let bytes = 2 << 20;
    let (up, down, w) = exchange(true, bytes);
    assert_eq!((up, down), (bytes, bytes), "the exchange completes");
    assert_eq!(w.dropped, 0, "no datagram was too long for its path");
    for dir in [true, false] {
        let longest = |path| {
            w.sent
                .iter()
                .filter(|s| s.0 == path && s.1 == dir)
                .map(|s| s.2)
                .max()
                .unwrap_or(0)
        };
        assert_eq!(longest(0), V6, "path 0 carries full IPv6-sized datagrams");
        assert_eq!(longest(1), 1472, "path 1 keeps IPv4's size");
    }
}

/// Without the limit the same network drops path 0's full-size datagrams: the check above
/// is what the limit buys, not a property of the rig.
#[test]
fn without_the_limit_an_ipv6_path_loses_its_full_size_datagrams() {
    let (_, _, w) = exchange(false, 1 << 20);
    assert!(w.dropped > 0, "the rig drops datagrams too long for path 0");
}

/// Limits are clamped to what a session can use: at least IPv6's minimum, at most
/// `max_datagram_size`; 0 forgets the limit.
#[test]
fn a_path_datagram_limit_is_clamped_and_can_be_forgotten() {
    let now = Instant(0);
    let mut c = Session::connect(Config::default(), now, SID, 0);
    c.set_path_max_datagram(now, 0, 100);
    assert_eq!(c.path_max_datagram(0), MIN_PATH_DATAGRAM);
    c.set_path_max_datagram(now, 0, 9000);
    assert_eq!(c.path_max_datagram(0), 1472);
    c.set_path_max_datagram(now, 0, V6);
    assert_eq!(c.path_max_datagram(0), V6);
    c.set_path_max_datagram(now, 0, 0);
    assert_eq!(c.path_max_datagram(0), 1472);
}
