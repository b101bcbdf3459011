//! Session features over simulated paths: many concurrent streams in both directions,
//! no head-of-line blocking between streams, FIN and reset, stop-sending, flow control with a
//! slow reader, and unreliable datagrams.

use braid_core::{Event, Instant, PathId, Session, StreamError, StreamId};
use braid_sim::runner::{build_world, plan, Handshake};
use braid_sim::world::{App, Endpoints, Outcome, World};
use braid_sim::{Nanos, Scenario};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::path::Path;

const LINKS: &str = r#"
name = "sessions"
seed = 5
[[path]]
name = "fast"
rate = "20Mbit"
delay = "10ms"
loss = 0.01
jitter = "2ms"
queue = "60KB"
[[path]]
name = "slow"
rate = "5Mbit"
delay = "40ms"
loss = 0.02
queue = "60KB"
[workload]
size = "1MB"
[[variant]]
name = "v"
"#;

fn world() -> World {
    let scn = Scenario::from_toml_str(LINKS, Path::new("<sessions>")).unwrap();
    let plans = plan(&scn).unwrap();
    let mut w = build_world(&scn, &plans[0], 11);
    assert_eq!(
        w.run(30_000_000_000, &mut Handshake { paths: vec![0, 1] }),
        Outcome::Done
    );
    w
}

fn pattern(stream: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64 * 31 + stream * 7 % 251) as u8)
        .collect()
}

/// Per stream: bytes to send, bytes sent so far, FIN given.
type Outgoing = BTreeMap<StreamId, (Vec<u8>, usize, bool)>;

/// Each side opens `n` streams and sends a different amount on each; each side checks
/// what it reads on every stream.
struct ManyStreams {
    n: usize,
    opened: bool,
    // Per side: stream -> (bytes to send, sent so far, finished)
    out: [Outgoing; 2],
    // Per side: stream -> received bytes, fin seen
    inp: [BTreeMap<StreamId, (Vec<u8>, bool)>; 2],
}

impl ManyStreams {
    fn side(&mut self, s: &mut Session, k: usize) {
        while let Some(ev) = s.poll_event() {
            if let Event::StreamOpened(id) = ev {
                self.inp[k].entry(id).or_default();
                // Only the opener sends on a stream; close our half at once.
                s.stream_finish(id).unwrap();
            }
        }
        for (&id, (data, sent, fin)) in self.out[k].iter_mut() {
            while *sent < data.len() {
                match s.stream_write(id, &data[*sent..]) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => *sent += n,
                }
            }
            if *sent == data.len() && !*fin {
                s.stream_finish(id).unwrap();
                *fin = true;
            }
        }
        // Our own streams: the peer only finishes its (empty) half; read that end.
        for &id in self.out[k].keys() {
            if let Ok(Some(b)) = s.stream_read(id, usize::MAX) {
                assert!(b.is_empty(), "unexpected data on stream {id}");
            }
        }
        let ids: Vec<StreamId> = self.inp[k].keys().copied().collect();
        for id in ids {
            let entry = self.inp[k].get_mut(&id).unwrap();
            while !entry.1 {
                match s.stream_read(id, 5000) {
                    Ok(Some(b)) if b.is_empty() => entry.1 = true,
                    Ok(Some(b)) => entry.0.extend_from_slice(&b),
                    Ok(None) => break,
                    Err(e) => panic!("stream {id}: {e}"),
                }
            }
        }
    }
}

impl App for ManyStreams {
    fn on_wake(&mut self, _now: Nanos, w: &mut Endpoints<'_>) -> bool {
        if !self.opened {
            self.opened = true;
            for i in 0..self.n {
                for (k, s) in [&mut *w.client, &mut *w.server].into_iter().enumerate() {
                    let id = s.open_stream().unwrap();
                    let len = (i * 7919 + k * 104_729) % 200_000;
                    self.out[k].insert(id, (pattern(id, len), 0, false));
                }
            }
        }
        self.side(w.client, 0);
        self.side(w.server, 1);
        // Done when each side read everything the other side sent.
        (0..2).all(|k| {
            let other = 1 - k;
            self.out[other].iter().all(|(id, (data, _, _))| {
                self.inp[k]
                    .get(id)
                    .is_some_and(|(got, fin)| *fin && got == data)
            })
        })
    }
}

#[test]
fn many_concurrent_streams_in_both_directions_arrive_exactly() {
    let mut w = world();
    let mut app = ManyStreams {
        n: 40,
        opened: false,
        out: [BTreeMap::new(), BTreeMap::new()],
        inp: [BTreeMap::new(), BTreeMap::new()],
    };
    let deadline = w.now() + 120_000_000_000;
    assert_eq!(w.run(deadline, &mut app), Outcome::Done);
    // Finished streams are forgotten once both halves are done and acknowledged.
    let settle = w.now() + 2_000_000_000;
    struct Idle;
    impl App for Idle {
        fn on_wake(&mut self, _: Nanos, _: &mut Endpoints<'_>) -> bool {
            false
        }
    }
    w.run(settle, &mut Idle);
    assert_eq!(w.client.session_mut().stream_count(), 0);
    assert_eq!(w.server.session_mut().stream_count(), 0);
}

/// A large download is running; a small one opened later must not wait behind it.
struct NoHol {
    big: Option<StreamId>,
    small: Option<StreamId>,
    small_opened_at: Nanos,
    small_done_at: Option<Nanos>,
    big_done: bool,
    server_streams: Vec<StreamId>,
    served: BTreeMap<StreamId, usize>,
}

impl App for NoHol {
    fn on_wake(&mut self, now: Nanos, w: &mut Endpoints<'_>) -> bool {
        if self.big.is_none() {
            let id = w.client.open_stream().unwrap();
            w.client.stream_write(id, b"big").unwrap();
            w.client.stream_finish(id).unwrap();
            self.big = Some(id);
        }
        if self.small.is_none() && now >= self.small_opened_at {
            let id = w.client.open_stream().unwrap();
            w.client.stream_write(id, b"small").unwrap();
            w.client.stream_finish(id).unwrap();
            self.small = Some(id);
        }
        while let Some(ev) = w.server.poll_event() {
            if let Event::StreamOpened(id) = ev {
                self.server_streams.push(id);
            }
        }
        while w.client.poll_event().is_some() {}
        for &id in &self.server_streams {
            // First stream opened is the big one.
            let total = if Some(id) == self.big {
                4_000_000
            } else {
                20_000
            };
            let sent = self.served.entry(id).or_insert(0);
            while *sent < total {
                let chunk = vec![id as u8; (total - *sent).min(65536)];
                match w.server.stream_write(id, &chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => *sent += n,
                }
            }
            if *sent == total {
                let _ = w.server.stream_finish(id);
            }
        }
        for (id, done) in [(self.big, &mut self.big_done)] {
            if let Some(id) = id {
                while let Ok(Some(b)) = w.client.stream_read(id, usize::MAX) {
                    if b.is_empty() {
                        *done = true;
                        break;
                    }
                }
            }
        }
        if let Some(id) = self.small {
            while let Ok(Some(b)) = w.client.stream_read(id, usize::MAX) {
                if b.is_empty() {
                    self.small_done_at.get_or_insert(now);
                    break;
                }
            }
        }
        self.big_done && self.small_done_at.is_some()
    }
    fn next_wake(&self) -> Option<Nanos> {
        self.small.is_none().then_some(self.small_opened_at)
    }
}

#[test]
fn a_small_stream_is_not_blocked_behind_a_large_one() {
    let mut w = world();
    let start = w.now();
    let mut app = NoHol {
        big: None,
        small: None,
        small_opened_at: start + 500_000_000,
        small_done_at: None,
        big_done: false,
        server_streams: Vec::new(),
        served: BTreeMap::new(),
    };
    assert_eq!(w.run(start + 60_000_000_000, &mut app), Outcome::Done);
    let small = (app.small_done_at.unwrap() - app.small_opened_at) as f64 / 1e9;
    // The 4 MB download takes over a second on 25 Mbit/s; the 20 kB one shares the paths
    // round-robin with it and finishes in a few round trips, not after it.
    assert!(small < 0.6, "small stream took {small} s");
}

#[test]
fn reset_and_stop_sending_end_one_stream_and_spare_the_others() {
    let mut w = world();
    let t = |w: &World| Instant(w.now());
    struct Step<F: FnMut(Nanos, &mut Endpoints<'_>) -> bool>(F);
    impl<F: FnMut(Nanos, &mut Endpoints<'_>) -> bool> App for Step<F> {
        fn on_wake(&mut self, now: Nanos, w: &mut Endpoints<'_>) -> bool {
            (self.0)(now, w)
        }
    }
    // Client opens two streams and sends on both; then resets the first.
    let a = w.client.session_mut().open_stream().unwrap();
    let b = w.client.session_mut().open_stream().unwrap();
    w.client
        .session_mut()
        .stream_write(a, &[1u8; 100_000])
        .unwrap();
    w.client
        .session_mut()
        .stream_write(b, &[2u8; 50_000])
        .unwrap();
    w.client.session_mut().stream_finish(b).unwrap();
    let _ = t(&w);
    let mut reset_seen = false;
    let mut got_b = Vec::new();
    let mut fin_b = false;
    let mut reset_done = false;
    let deadline = w.now() + 30_000_000_000;
    let out = w.run(
        deadline,
        &mut Step(|_now, e: &mut Endpoints<'_>| {
            if !reset_done {
                e.client.stream_reset(a, 77).unwrap();
                reset_done = true;
            }
            while let Some(ev) = e.server.poll_event() {
                if ev == (Event::StreamReset { id: a, code: 77 }) {
                    reset_seen = true;
                }
            }
            if let Err(err) = e.server.stream_read(a, usize::MAX) {
                assert!(
                    matches!(
                        err,
                        StreamError::Reset { code: 77, .. } | StreamError::Unknown(_)
                    ),
                    "{err}"
                );
            }
            while let Ok(Some(d)) = e.server.stream_read(b, usize::MAX) {
                if d.is_empty() {
                    fin_b = true;
                    break;
                }
                got_b.extend_from_slice(&d);
            }
            reset_seen && fin_b
        }),
    );
    assert_eq!(out, Outcome::Done);
    assert_eq!(got_b, vec![2u8; 50_000]);
    // Writing on a reset stream is refused.
    assert!(w.client.session_mut().stream_write(a, b"x").is_err());

    // Stop-sending: the server asks the client to stop stream c; the client sees it.
    let c = w.client.session_mut().open_stream().unwrap();
    w.client
        .session_mut()
        .stream_write(c, &[3u8; 10_000])
        .unwrap();
    let mut stopped = false;
    let mut asked = false;
    let deadline = w.now() + 30_000_000_000;
    let out = w.run(
        deadline,
        &mut Step(|_now, e: &mut Endpoints<'_>| {
            while let Some(ev) = e.server.poll_event() {
                if ev == Event::StreamOpened(c) && !asked {
                    e.server.stream_stop(c, 9).unwrap();
                    asked = true;
                }
            }
            while let Some(ev) = e.client.poll_event() {
                if ev == (Event::StreamStopped { id: c, code: 9 }) {
                    stopped = true;
                }
            }
            stopped
        }),
    );
    assert_eq!(out, Outcome::Done);
    assert!(matches!(
        w.client.session_mut().stream_write(c, b"more"),
        Err(StreamError::Stopped { code: 9, .. }) | Err(StreamError::Unknown(_))
    ));
    assert!(w.client.session_mut().is_established() && w.server.session_mut().is_established());
}

/// The receiving application reads nothing for a while: the sender must stop at the
/// stream window, never overrun it, and resume when the reader reads.
struct SlowReader {
    id: Option<StreamId>,
    sent: usize,
    total: usize,
    read: usize,
    start_reading_at: Nanos,
    max_buffered_seen: u64,
}

impl App for SlowReader {
    fn on_wake(&mut self, now: Nanos, w: &mut Endpoints<'_>) -> bool {
        let id = *self
            .id
            .get_or_insert_with(|| w.client.open_stream().unwrap());
        while self.sent < self.total {
            match w
                .client
                .stream_write(id, &vec![5u8; (self.total - self.sent).min(65536)])
            {
                Ok(0) | Err(_) => break,
                Ok(n) => self.sent += n,
            }
        }
        if self.sent == self.total {
            let _ = w.client.stream_finish(id);
        }
        while w.server.poll_event().is_some() {}
        while w.client.poll_event().is_some() {}
        if now >= self.start_reading_at {
            while let Ok(Some(b)) = w.server.stream_read(id, usize::MAX) {
                if b.is_empty() {
                    return true;
                }
                self.read += b.len();
            }
        }
        let _ = &mut self.max_buffered_seen;
        false
    }
    fn next_wake(&self) -> Option<Nanos> {
        Some(self.start_reading_at)
    }
}

#[test]
fn a_reader_that_does_not_read_stops_the_sender_at_the_window() {
    let mut w = world();
    let start = w.now();
    let window = w.server.session_mut().config().stream_window as usize;
    let mut app = SlowReader {
        id: None,
        sent: 0,
        total: window * 2,
        read: 0,
        start_reading_at: start + 20_000_000_000,
        max_buffered_seen: 0,
    };
    // Before the reader reads, the sender cannot push more than the window plus its own
    // send buffer into the session.
    let out = w.run(start + 19_000_000_000, &mut app);
    assert_eq!(out, Outcome::TimeLimit);
    let buffer = w.client.session_mut().config().send_buffer as usize;
    assert!(
        app.sent <= window + buffer,
        "sent {} > window {window} + buffer {buffer}",
        app.sent
    );
    assert!(app.sent >= window, "sender stalled early at {}", app.sent);
    let out = w.run(start + 200_000_000_000, &mut app);
    if out != Outcome::Done {
        eprintln!(
            "client timers {:?}\nserver timers {:?}\nclient {:?} {:?}\nserver {:?} {:?}",
            w.client.session_mut().timers(),
            w.server.session_mut().timers(),
            w.client.session_mut().path_stats(0),
            w.client.session_mut().path_stats(1),
            w.server.session_mut().path_stats(0),
            w.server.session_mut().path_stats(1)
        );
    }
    assert_eq!(out, Outcome::Done);
    assert_eq!(app.read, window * 2);
}

#[test]
fn datagrams_arrive_intact_or_not_at_all() {
    let mut w = world();
    let mut sent = 0u32;
    let mut received: Vec<Bytes> = Vec::new();
    struct Dg<'a> {
        sent: &'a mut u32,
        received: &'a mut Vec<Bytes>,
        until: Nanos,
        next: Nanos,
    }
    impl App for Dg<'_> {
        fn on_wake(&mut self, now: Nanos, w: &mut Endpoints<'_>) -> bool {
            if now >= self.next && now < self.until && *self.sent < 2000 {
                self.next = now + 30_000_000;
                for _ in 0..20 {
                    let n = *self.sent;
                    let mut d = n.to_be_bytes().to_vec();
                    d.resize(100 + (n as usize * 13) % 1100, n as u8);
                    w.client
                        .send_datagram(Instant(now), Bytes::from(d))
                        .unwrap();
                    *self.sent += 1;
                }
            }
            while let Some(d) = w.server.recv_datagram() {
                self.received.push(d);
            }
            while w.server.poll_event().is_some() {}
            while w.client.poll_event().is_some() {}
            now >= self.until + 2_000_000_000
        }
        fn next_wake(&self) -> Option<Nanos> {
            Some(if *self.sent < 2000 {
                self.next
            } else {
                self.until + 2_000_000_000
            })
        }
    }
    let until = w.now() + 3_200_000_000;
    let out = w.run(
        until + 5_000_000_000,
        &mut Dg {
            sent: &mut sent,
            received: &mut received,
            until,
            next: 0,
        },
    );
    assert_eq!(out, Outcome::Done);
    assert_eq!(sent, 2000);
    // 1-2 % loss per path: most arrive; none is corrupted.
    assert!(
        received.len() > 1700,
        "only {} of 2000 arrived",
        received.len()
    );
    for d in &received {
        let n = u32::from_be_bytes([d[0], d[1], d[2], d[3]]);
        assert_eq!(d.len(), 100 + (n as usize * 13) % 1100);
        assert!(d[4..].iter().all(|&b| b == n as u8));
    }
    // Too large for one packet: refused with a clear error.
    let now = Instant(w.now());
    let err = w
        .client
        .session_mut()
        .send_datagram(now, Bytes::from(vec![0u8; 5000]))
        .unwrap_err();
    assert!(err.to_string().contains("exceeds the limit"));
    let _: PathId = 0;
}

/// Regression: a flow-control update (MAX_STREAM_DATA) sent on a path that then went dark
/// was never resent — a dead path never acknowledges, so the frame was never declared
/// lost — and the transfer stopped at the stream window. Found by the end-to-end test
/// that cuts a path mid-transfer.
#[test]
fn window_updates_lost_on_a_path_that_died_are_resent() {
    // The fast path goes dark at a range of moments, so that in some runs the last window
    // update before the stall is on it.
    for k in 0..40u64 {
        let text = format!(
            r#"
name = "dead"
[[path]]
name = "fast"
rate = "20Mbit"
delay = "5ms"
blackouts = [{{ at = "{}us", duration = "1000s" }}]
[[path]]
name = "slow"
rate = "5Mbit"
delay = "20ms"
[workload]
size = "1MB"
[[variant]]
name = "v"
"#,
            1_000_000 + k * 1_700
        );
        let scn = Scenario::from_toml_str(&text, Path::new("<dead>")).unwrap();
        let plans = plan(&scn).unwrap();
        let mut cfg = braid_sim::runner::session_config(&scn, &plans[0], 1);
        // Small windows: the transfer needs many updates, some of them on the dying path.
        cfg.stream_window = 64 * 1024;
        cfg.session_window = 1 << 30;
        let paths: Vec<Option<braid_sim::PathSpec>> = scn.paths.iter().cloned().map(Some).collect();
        let mut w = World::new(&paths, 1, cfg.clone(), cfg);
        assert_eq!(
            w.run(30_000_000_000, &mut Handshake { paths: vec![0, 1] }),
            Outcome::Done
        );
        let start = w.now();
        let mut t = braid_sim::runner::Transfer::new(braid_sim::Direction::Down, 4_000_000, 5);
        let out = w.run(start + 60_000_000_000, &mut t);
        assert_eq!(out, Outcome::Done, "blackout variant {k}");
        assert_eq!(
            t.checker.digest(),
            braid_sim::payload::expected_digest(t.seed, 4_000_000)
        );
    }
}

/// The agent's owner picks the congestion controller and scheduler: the server adopts
/// them from HELLO, so a download (sent by the server) uses what the agent was told.
#[test]
fn the_server_adopts_the_clients_controller_and_scheduler() {
    let scn = Scenario::from_toml_str(LINKS, Path::new("<sessions>")).unwrap();
    let plans = plan(&scn).unwrap();
    let mut client = braid_sim::runner::session_config(&scn, &plans[0], 1);
    client.cc = braid_core::CcAlgorithm::Bbr;
    client.scheduler = braid_core::SchedulerKind::RoundRobin;
    let server = braid_sim::runner::session_config(&scn, &plans[0], 2);
    assert_eq!(server.cc, braid_core::CcAlgorithm::Bbrq);
    let paths: Vec<Option<braid_sim::PathSpec>> = scn.paths.iter().cloned().map(Some).collect();
    let mut w = World::new(&paths, 1, client, server);
    assert_eq!(
        w.run(30_000_000_000, &mut Handshake { paths: vec![0, 1] }),
        Outcome::Done
    );
    assert_eq!(
        w.server.session_mut().config().cc,
        braid_core::CcAlgorithm::Bbr
    );
    assert_eq!(
        w.server.session_mut().config().scheduler,
        braid_core::SchedulerKind::RoundRobin
    );
}

/// PATH_COST: the agent's power and rate for a path reach the server (which schedules
/// downloads) even over an uplink that loses 40 % of packets, so a lost frame must have been
/// resent; a later setting replaces the earlier one at the server.
#[test]
fn path_costs_reach_the_server_through_loss_and_updates_win() {
    struct Wait;
    impl App for Wait {
        fn on_wake(&mut self, _now: Nanos, w: &mut Endpoints<'_>) -> bool {
            while w.client.poll_event().is_some() {}
            while w.server.poll_event().is_some() {}
            false
        }
    }
    let text = LINKS.replace(
        "queue = \"60KB\"\n",
        "queue = \"60KB\"\n[path.up]\nloss = 0.4\n",
    );
    let scn = Scenario::from_toml_str(&text, Path::new("<costs>")).unwrap();
    let plans = plan(&scn).unwrap();
    for seed in 0..10u64 {
        let mut w = build_world(&scn, &plans[0], seed);
        assert_eq!(
            w.run(60_000_000_000, &mut Handshake { paths: vec![0, 1] }),
            Outcome::Done
        );
        for (round, power) in [(0u64, 634u64), (1, 95)] {
            let now = Instant(w.now());
            for id in [0, 1] {
                w.client
                    .session_mut()
                    .set_path_cost(now, id, power + id as u64, 1000 * (round + 1))
                    .unwrap();
            }
            let until = w.now() + 10_000_000_000;
            w.run(until, &mut Wait);
            for id in [0, 1] {
                let c = w
                    .server
                    .session_mut()
                    .path_cost(id)
                    .expect("cost at the server");
                assert_eq!(
                    (c.power_mw, c.rate_kbps),
                    (power + id as u64, 1000 * (round + 1)),
                    "seed {seed} round {round} path {id}"
                );
            }
        }
        let now = Instant(w.now());
        assert_eq!(
            w.client.session_mut().set_path_cost(now, 7, 1, 1),
            Err(braid_core::PathError::Unknown(7))
        );
    }
}

/// Issue 34, ACK frequency: on a gigabit path the sender asks the receiver (ACK_FREQUENCY)
/// to acknowledge once per 1/16 of the window instead of every second packet: the
/// receiver's packets per data packet fall to a fraction, and the transfer keeps its speed.
/// Asked of nobody when the sender's configuration turns it off.
#[test]
fn a_gigabit_download_is_acknowledged_a_fraction_as_often() {
    let text = r#"
name = "ackfreq"
seed = 34
[[path]]
name = "gig"
rate = "1Gbit"
delay = "2ms"
queue = "5ms"
[workload]
size = "1MB"
[[variant]]
name = "v"
"#;
    let scn = Scenario::from_toml_str(text, Path::new("<ackfreq>")).unwrap();
    let plans = plan(&scn).unwrap();
    let paths: Vec<Option<braid_sim::PathSpec>> = scn.paths.iter().cloned().map(Some).collect();
    let run = |ask: bool| {
        let client = braid_sim::runner::session_config(&scn, &plans[0], 1);
        let mut server = braid_sim::runner::session_config(&scn, &plans[0], 2);
        server.ack_frequency = ask;
        let mut w = World::new(&paths, 1, client, server);
        assert_eq!(
            w.run(30_000_000_000, &mut Handshake { paths: vec![0] }),
            Outcome::Done
        );
        let start = w.now();
        let size = 200_000_000;
        let mut t = braid_sim::runner::Transfer::new(braid_sim::Direction::Down, size, 7);
        assert_eq!(w.run(start + 60_000_000_000, &mut t), Outcome::Done);
        let secs = (t.completed.unwrap() - start) as f64 / 1e9;
        let (c, s) = (
            w.client.session_mut().path_stats(0).unwrap(),
            w.server.session_mut().path_stats(0).unwrap(),
        );
        let acks = c.packets_sent as f64 / s.packets_sent as f64;
        (acks, size as f64 * 8.0 / secs / 1e9)
    };
    let (every_second, gbit_default) = run(false);
    let (asked, gbit) = run(true);
    eprintln!(
        "receiver packets per data packet: {every_second:.3} unasked ({gbit_default:.3} Gbit/s), \
         {asked:.3} asked ({gbit:.3} Gbit/s)"
    );
    assert!(every_second >= 0.4, "unasked: {every_second}");
    assert!(asked <= every_second / 4.0, "asked: {asked}");
    assert!(
        gbit >= 0.97 * gbit_default,
        "{gbit} vs {gbit_default} Gbit/s"
    );
}
