//! A batch is the same datagrams `poll_transmit` would have made, grouped.

use crate::{Config, Instant, PathId, Session};
use std::collections::VecDeque;
use std::time::Duration;

const SID: u64 = 0x0bad_cafe;

/// How the client's datagrams are taken.
#[derive(Clone, Copy)]
enum Mode {
    Single,
    Batch(usize),
}

/// What a run produced: every datagram the client sent, in order, and the batches.
#[derive(Default)]
struct Log {
    sent: Vec<(PathId, Vec<u8>)>,
    /// (path, segment size, segments, len) of each batch (batch mode only).
    batches: Vec<(PathId, usize, usize, usize)>,
    received: usize,
}

/// Path 0 is fast (5 ms one way), path 1 slow (20 ms): minRTT fills path 0's window and
/// spills onto path 1, so the client's sends switch paths in the middle of bursts.
fn one_way(path: PathId) -> Duration {
    if path == 0 {
        Duration::from_millis(5)
    } else {
        Duration::from_millis(20)
    }
}

fn run(mode: Mode, bytes: usize, max_burst: usize) -> Log {
    // Full-size datagrams on both paths from the start (these tests are about batches, not
    // about the datagram size discovery finds: `paths_mtu_tests.rs`).
    let cfg = Config {
        pmtu_discovery: false,
        ..Config::default()
    };
    let mds = cfg.max_datagram_size;
    let mut now = Instant(0);
    let mut client = Session::connect(cfg.clone(), now, SID, 0);
    let mut server = Session::accept(cfg, now, SID);
    client.set_max_burst(now, max_burst);
    // (arrival, to the server?, bytes)
    let mut wire: VecDeque<(Instant, bool, Vec<u8>)> = VecDeque::new();
    let mut buf = vec![0u8; mds * 16];
    let mut log = Log::default();
    let mut stream = None;
    let mut written = 0;
    let data: Vec<u8> = (0..bytes).map(|i| (i * 7 + i / 251) as u8).collect();
    let mut path1 = false;
    for _ in 0..200_000 {
        if client.is_established() && !path1 {
            client.add_path(now, 1).unwrap();
            path1 = true;
        }
        if client.is_established() && stream.is_none() {
            stream = Some(client.open_stream().unwrap());
        }
        if let Some(id) = stream {
            if written < data.len() {
                written += client.stream_write(id, &data[written..]).unwrap();
                if written == data.len() {
                    client.stream_finish(id).unwrap();
                }
            }
        }
        // The client's datagrams, one by one or in batches.
        loop {
            let got: Vec<(PathId, Vec<u8>)> = match mode {
                Mode::Single => match client.poll_transmit(now, &mut buf) {
                    Some(t) => vec![(t.path, buf[..t.len].to_vec())],
                    None => break,
                },
                Mode::Batch(max) => match client.poll_transmit_batch(now, &mut buf, max) {
                    Some(b) => {
                        log.batches
                            .push((b.path, b.segment_size, b.segments, b.len));
                        (0..b.segments)
                            .map(|i| (b.path, buf[b.segment(i)].to_vec()))
                            .collect()
                    }
                    None => break,
                },
            };
            for (path, pkt) in got {
                wire.push_back((now + one_way(path), true, pkt.clone()));
                log.sent.push((path, pkt));
            }
        }
        while let Some(t) = server.poll_transmit(now, &mut buf) {
            wire.push_back((now + one_way(t.path), false, buf[..t.len].to_vec()));
        }
        if let Some(id) = stream {
            while let Ok(Some(b)) = server.stream_read(id, usize::MAX) {
                if b.is_empty() {
                    return log;
                }
                log.received += b.len();
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
            let (_, to_server, pkt) = wire.pop_front().unwrap();
            let s = if to_server { &mut server } else { &mut client };
            s.handle_datagram(now, pkt.into());
        }
        for s in [&mut client, &mut server] {
            if s.poll_timeout().is_some_and(|t| t <= now) {
                s.handle_timeout(now);
            }
        }
    }
    panic!("the transfer did not finish");
}

#[test]
fn a_batch_is_what_poll_transmit_would_send_across_path_changes() {
    let mds = Config::default().max_datagram_size;
    let single = run(Mode::Single, 3 << 20, 10);
    let max = 7;
    let batched = run(Mode::Batch(max), 3 << 20, 10);
    assert_eq!(single.received, 3 << 20);
    assert_eq!(batched.received, 3 << 20);
    assert_eq!(single.sent.len(), batched.sent.len(), "as many datagrams");
    for (i, (a, b)) in single.sent.iter().zip(&batched.sent).enumerate() {
        assert_eq!(a.0, b.0, "datagram {i}: same path");
        assert!(a.1 == b.1, "datagram {i}: same bytes");
    }
    // The run did exercise what it names: full batches, both paths, and full-size
    // datagrams back to back on different paths (a batch cut by a path change).
    for &(path, seg, n, len) in &batched.batches {
        assert!((1..=max).contains(&n), "batch of {n} on path {path}");
        assert!(seg <= mds);
        assert!(
            len > (n - 1) * seg && len <= n * seg,
            "only the last is shorter"
        );
    }
    assert!(batched.batches.iter().any(|b| b.2 == max));
    assert!(batched.batches.iter().any(|b| b.0 == 1 && b.2 > 1));
    let switches = batched
        .sent
        .windows(2)
        .filter(|w| w[0].0 != w[1].0 && w[0].1.len() == mds && w[1].1.len() == mds)
        .count();
    assert!(switches > 0, "no path change between full-size datagrams");
}

#[test]
fn a_larger_pacer_burst_lets_batches_grow_past_10_datagrams() {
    let mds = Config::default().max_datagram_size;
    let largest = |l: &Log| l.batches.iter().map(|b| b.2).max().unwrap_or(0);
    let ten = run(Mode::Batch(16), 8 << 20, 10);
    let more = run(Mode::Batch(16), 8 << 20, 16);
    assert_eq!(ten.received, 8 << 20);
    assert_eq!(more.received, 8 << 20);
    assert!(largest(&ten) <= 10, "the default burst is 10 packets");
    let full = more
        .batches
        .iter()
        .filter(|b| b.2 > 10 && b.1 == mds)
        .count();
    assert!(
        full > 0,
        "no batch of more than 10 full datagrams ({})",
        largest(&more)
    );
}
