//! Per-path datagram limits (`Session::set_path_max_datagram`): an IPv6 path over a
//! 1500-byte MTU carries at most 1452 bytes of UDP payload, 20 fewer than IPv4's 1472;
//! and the sizes discovery finds (`path/pmtud.rs`) where the network drops more than the
//! route's MTU says, from the start or from the middle of a transfer.

use crate::{Config, Event, Instant, PathId, Session, MIN_PATH_DATAGRAM};
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
    /// When each of `sent` left.
    at: Vec<Instant>,
    dropped: usize,
    /// Every event of either end: (when, the client's?, event).
    events: Vec<(Instant, bool, Event)>,
}

/// Path 0's network: it drops datagrams longer than `cap` sent from `from` on. Each path
/// carries `rate` bytes per second each way (0: no limit; a queue without bound).
#[derive(Clone, Copy)]
struct Hole {
    cap: usize,
    from: Duration,
    rate: u64,
}

/// A session over path 0 (an IPv6 path: the network drops datagrams longer than 1452
/// bytes, as a 1500-byte MTU does with 1520-byte IPv6 packets) and path 1 (IPv4, 1472).
/// `limit` tells both ends' drivers about path 0's size (the server before the path
/// exists). The client sends `bytes` on a stream and the server as many back on it.
/// Returns the bytes received by each end and what crossed the wire.
fn exchange(limit: bool, bytes: usize) -> (usize, usize, Wire) {
    let hole = Hole {
        cap: V6,
        from: Duration::ZERO,
        rate: 0,
    };
    exchange_over(limit, hole, bytes)
}

/// [`exchange`] with path 0's network dropping what `hole` says.
fn exchange_over(limit: bool, hole: Hole, bytes: usize) -> (usize, usize, Wire) {
    let cfg = Config::default();
    let mds = cfg.max_datagram_size;
    let mut now = Instant(0);
    let mut client = Session::connect(cfg.clone(), now, SID, 0);
    let mut server = Session::accept(cfg, now, SID);
    if limit {
        client.set_path_max_datagram(now, 0, V6);
        server.set_path_max_datagram(now, 0, V6);
    }
    let mtu = |path: PathId, now: Instant| {
        if path == 0 && now >= Instant(0) + hole.from {
            hole.cap
        } else {
            mds
        }
    };
    let mut wire: VecDeque<(Instant, bool, PathId, Vec<u8>)> = VecDeque::new();
    let mut busy = [Instant(0); 4];
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
            while let Some(e) = s.poll_event() {
                log.events.push((now, to_server, e));
            }
            while let Some(t) = s.poll_transmit(now, &mut buf) {
                log.sent.push((t.path, to_server, t.len));
                log.at.push(now);
                if t.len > mtu(t.path, now) {
                    log.dropped += 1;
                    continue;
                }
                let mut at = now + Duration::from_millis(if t.path == 0 { 10 } else { 15 });
                if hole.rate > 0 {
                    // Serialised behind what the link still carries in this direction.
                    let busy = &mut busy[usize::from(to_server) * 2 + t.path.min(1) as usize];
                    let tx = Duration::from_secs_f64(t.len as f64 / hole.rate as f64);
                    *busy = (*busy).max(now) + tx;
                    at = *busy + (at - now);
                }
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
    assert_eq!(c.path_datagram_limit(0), MIN_PATH_DATAGRAM);
    c.set_path_max_datagram(now, 0, 9000);
    assert_eq!(c.path_datagram_limit(0), 1472);
    c.set_path_max_datagram(now, 0, V6);
    assert_eq!(c.path_datagram_limit(0), V6);
    c.set_path_max_datagram(now, 0, 0);
    assert_eq!(c.path_datagram_limit(0), 1472);
    // Discovery starts every path at the size that always passes.
    assert_eq!(c.path_max_datagram(0), crate::path::BASE_DATAGRAM);
}

/// 1400-byte IPv4 packets: what a cellular or PPPoE path often carries.
const SMALL: usize = 1400 - 28;

/// Bytes path `path` carried in direction `dir` (client to server: true) sent in `span`.
fn carried(w: &Wire, path: PathId, dir: bool, span: std::ops::Range<Instant>) -> usize {
    (0..w.sent.len())
        .filter(|&i| w.sent[i].0 == path && w.sent[i].1 == dir && span.contains(&w.at[i]))
        .map(|i| w.sent[i].2)
        .sum()
}

/// The black hole from the start: path 0 drops datagrams over 1372 bytes (1400-byte
/// IP packets) and nobody says so (the route's MTU is 1500, no ICMP). Before discovery it
/// carried almost nothing; now both ends find a size within the search step below 1372 and
/// path 0 carries its share both ways.
#[test]
fn discovery_finds_a_path_mtu_smaller_than_the_route_says() {
    let bytes = 2 << 20;
    let hole = Hole {
        cap: SMALL,
        from: Duration::ZERO,
        rate: 0,
    };
    let (up, down, w) = exchange_over(false, hole, bytes);
    assert_eq!((up, down), (bytes, bytes), "the exchange completes");
    let end = *w.at.last().unwrap();
    for dir in [true, false] {
        let delivered: Vec<usize> = (0..w.sent.len())
            .filter(|&i| w.sent[i].0 == 0 && w.sent[i].1 == dir && w.sent[i].2 <= SMALL)
            .map(|i| w.sent[i].2)
            .collect();
        let largest = delivered.iter().copied().max().unwrap_or(0);
        assert!(
            (SMALL - crate::path::pmtud::SEARCH_STEP..=SMALL).contains(&largest),
            "dir {dir}: path 0's largest datagram {largest}"
        );
        let (p0, p1) = (
            carried(&w, 0, dir, Instant(0)..end),
            carried(&w, 1, dir, Instant(0)..end),
        );
        assert!(
            p0 * 5 >= p0 + p1,
            "dir {dir}: path 0 carried {p0} of {}",
            p0 + p1
        );
    }
    let drops = w.sent.iter().filter(|s| s.0 == 0 && s.2 > SMALL).count();
    assert!(drops <= 20, "only probes were too large ({drops})");
}

/// The black hole opens in the middle of the transfer: within a second the size drops
/// (reported once per end), the path is kept and carries data at the smaller size, and the
/// data lost in the hole is delivered (the exchange completes byte for byte).
#[test]
fn a_black_hole_mid_transfer_drops_the_size_within_a_second_and_keeps_the_path() {
    let bytes = 6 << 20;
    let from = Duration::from_millis(300);
    let hole = Hole {
        cap: SMALL,
        from,
        rate: 2_000_000,
    };
    let (up, down, w) = exchange_over(false, hole, bytes);
    assert_eq!((up, down), (bytes, bytes), "the exchange completes");
    let opened = Instant(0) + from;
    assert!(
        carried(&w, 0, false, Instant(0)..opened) > 0,
        "the server sent full-size datagrams on path 0 before the hole"
    );
    for client in [true, false] {
        let drops: Vec<_> = w
            .events
            .iter()
            .filter(|(_, c, e)| {
                *c == client && matches!(e, Event::PathDatagramSizeDropped { path: 0, .. })
            })
            .collect();
        let Some((at, _, _)) = drops.first() else {
            panic!(
                "client {client}: no drop reported ({} events)",
                w.events.len()
            );
        };
        assert!(
            at.saturating_since(opened) <= Duration::from_secs(1),
            "client {client}: dropped {:?} after the hole opened",
            at.saturating_since(opened)
        );
        assert!(
            drops.len() <= 2,
            "client {client}: reported {} times",
            drops.len()
        );
        assert!(!w
            .events
            .iter()
            .any(|(_, c, e)| *c == client && *e == Event::PathClosed(0)));
    }
    let end = *w.at.last().unwrap();
    let after = opened + Duration::from_secs(1);
    assert!(
        end > after + Duration::from_millis(200),
        "the transfer outlasts the drop"
    );
    let p0 = carried(&w, 0, false, after..end);
    let p1 = carried(&w, 1, false, after..end);
    assert!(
        p0 * 5 >= p0 + p1,
        "path 0 still carries data: {p0} of {}",
        p0 + p1
    );
}
