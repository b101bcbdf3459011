//! The session's timer table against a path that went silent: what wakes the session.

use crate::{Config, Instant, PathId, Session};
use std::time::Duration;

const SID: u64 = 0x71e5_0001;
const ONE_WAY: Duration = Duration::from_millis(10);

/// A client and a server over paths 0 and 2; path 2 can be cut after the server heard
/// the client's first datagram on it (everything later on it is dropped, both ways).
struct Net {
    now: Instant,
    client: Session,
    server: Session,
    /// Arrival, to the server?, path, bytes.
    wire: Vec<(Instant, bool, PathId, Vec<u8>)>,
    cut: bool,
    heard_on_2: usize,
    /// How many times the server's timer fired (`handle_timeout` called).
    server_wakeups: usize,
}

impl Net {
    fn new() -> Net {
        let now = Instant(0);
        Net {
            now,
            client: Session::connect(Config::default(), now, SID, 0),
            server: Session::accept(Config::default(), now, SID),
            wire: Vec::new(),
            cut: false,
            heard_on_2: 0,
            server_wakeups: 0,
        }
    }

    fn flush(&mut self) {
        let mut buf = vec![0u8; 2048];
        let at = self.now + ONE_WAY;
        while let Some(t) = self.client.poll_transmit(self.now, &mut buf) {
            self.wire.push((at, true, t.path, buf[..t.len].to_vec()));
        }
        while let Some(t) = self.server.poll_transmit(self.now, &mut buf) {
            self.wire.push((at, false, t.path, buf[..t.len].to_vec()));
        }
    }

    /// Run every event until `until`.
    fn run_until(&mut self, until: Instant) {
        loop {
            self.flush();
            let next = self
                .wire
                .iter()
                .map(|w| w.0)
                .chain(self.client.poll_timeout())
                .chain(self.server.poll_timeout())
                .min();
            let Some(next) = next.filter(|&t| t <= until) else {
                self.now = until;
                return;
            };
            self.now = self.now.max(next);
            let now = self.now;
            let (due, later) = std::mem::take(&mut self.wire)
                .into_iter()
                .partition(|w| w.0 <= now);
            self.wire = later;
            for (_, to_server, path, bytes) in due {
                if path == 2 && to_server {
                    self.heard_on_2 += 1;
                }
                if self.cut && path == 2 && !(to_server && self.heard_on_2 == 1) {
                    continue;
                }
                let s = if to_server {
                    &mut self.server
                } else {
                    &mut self.client
                };
                s.handle_datagram(now, bytes.into());
            }
            if self.client.poll_timeout().is_some_and(|t| t <= now) {
                self.client.handle_timeout(now);
            }
            if self.server.poll_timeout().is_some_and(|t| t <= now) {
                self.server.handle_timeout(now);
                self.server_wakeups += 1;
            }
        }
    }
}

/// The bug: a server's path that could not be validated and had spent its
/// anti-amplification budget (the client's path went silent after its first datagram)
/// kept its probe timer, which fired every `max_pto` (2 s) for the life of the session
/// while path 0 kept it alive; each probe timeout could send nothing. Now the timer waits
/// for datagrams on the path, and validation resumes when they come.
#[test]
fn server_path_silent_at_the_amplification_limit_does_not_wake_every_probe_timeout() {
    let mut net = Net::new();
    net.run_until(Instant(0) + Duration::from_secs(1));
    assert!(net.client.is_established() && net.server.is_established());
    net.cut = true;
    let t0 = net.now;
    net.client.add_path(t0, 2).unwrap();
    net.run_until(t0 + Duration::from_secs(5));
    assert!(
        net.server.path_ids().contains(&2),
        "the server opened path 2"
    );
    let ptos_at_5s = net.server.path_stats(2).unwrap().ptos;
    let wakeups_at_5s = net.server_wakeups;

    // A minute with path 2 silent (path 0 keeps the session alive with keepalives).
    net.run_until(t0 + Duration::from_secs(65));
    assert!(net.client.is_established() && net.server.is_established());
    let cond = net.server.path_condition(2).unwrap();
    assert!(!cond.validated && !cond.abandoned);
    let ptos = net.server.path_stats(2).unwrap().ptos - ptos_at_5s;
    assert_eq!(ptos, 0, "probe timeouts on the silent path in a minute");
    assert!(
        net.server
            .timers()
            .iter()
            .all(|(t, _)| *t != super::Timer::Loss(2)),
        "no probe timer on the silent path"
    );
    // Path 0's keepalives and their acknowledgements: a handful of wake-ups a minute,
    // not one every 2 s.
    let wakeups = net.server_wakeups - wakeups_at_5s;
    assert!(wakeups < 20, "{wakeups} server wake-ups in a minute");

    // The path comes back: the client's next challenge arrives and validation resumes.
    net.cut = false;
    net.run_until(t0 + Duration::from_secs(75));
    assert!(net.server.path_condition(2).unwrap().validated);
    assert!(net.client.path_usable(2));
}
