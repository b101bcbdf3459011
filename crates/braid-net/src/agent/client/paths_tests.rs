//! The client's path decisions as the agent sets them up ([`PathSetting`]): the TCP
//! fallback of a path whose UDP goes unanswered in the session, and its return to UDP.

use super::*;
use crate::pathmgr::{Action, NetEvent};

const T0: Duration = Duration::ZERO;

fn s(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A client with path wifi on wlan0 (`relayed`, rechecking UDP 5 s after a fallback),
/// wlan0 present, and a session started on it.
fn client(relayed: bool) -> Client {
    let wifi = PathSetting {
        bind: PathBind::Interface("wlan0".into()),
        relayed,
        udp_recheck: Some(Recheck {
            first: s(5),
            max: s(12),
        }),
    };
    let mut c = Client::new(false, &[wifi], (true, false), Instant::now());
    let m = &mut c.paths;
    m.handle_event(
        T0,
        NetEvent::Link {
            index: 3,
            name: "wlan0".into(),
            up: true,
        },
    );
    m.handle_event(
        T0,
        NetEvent::Addr {
            index: 3,
            addr: "192.168.1.5".parse().unwrap(),
        },
    );
    let paths: Vec<_> = (m.available().into_iter())
        .map(|(slot, a)| (slot, slot as braid_core::PathId, a))
        .collect();
    m.session_started(T0, &paths);
    c
}

/// Let the path manager's next timer fire; its actions.
fn expire(c: &mut Client) -> (Duration, Vec<Action>) {
    let now = c.paths.poll_timeout().expect("a timer");
    c.paths.handle_timeout(now);
    (now, std::iter::from_fn(|| c.paths.poll_action()).collect())
}

#[test]
fn a_path_whose_udp_goes_unanswered_is_tried_over_tcp_then_over_udp_again() {
    let mut c = client(false);
    // UDP validation unanswered: the path is added again over TCP.
    let (now, a) = expire(&mut c);
    assert!(
        matches!(
            a[..],
            [
                Action::Remove { id: 0, .. },
                Action::Add {
                    id: 0,
                    tcp: true,
                    ..
                }
            ]
        ),
        "{a:?}"
    );
    assert!(c.paths.is_tcp(0) && c.paths.udp_failed(0));
    // Validated over TCP: UDP is tried again after the path's recheck time (5 s).
    c.paths.handle_validated(now, 0);
    let (at, a) = expire(&mut c);
    assert_eq!(at - now, s(5));
    assert!(
        matches!(a[..], [Action::Probe { slot: 0, id: 8, .. }]),
        "{a:?}"
    );
    // UDP answers: the path returns to UDP, the TCP one goes.
    c.paths.handle_validated(at, 8);
    let a: Vec<_> = std::iter::from_fn(|| c.paths.poll_action()).collect();
    assert!(matches!(a[..], [Action::Remove { id: 0, .. }]), "{a:?}");
    assert!(!c.paths.is_tcp(8));
}

#[test]
fn a_relayed_path_never_goes_over_tcp_around_its_relay() {
    let mut c = client(true);
    for _ in 0..3 {
        let (_, a) = expire(&mut c);
        assert!(
            a.iter()
                .all(|a| !matches!(a, Action::Add { tcp: true, .. })),
            "{a:?}"
        );
    }
}
