//! The path manager's decisions, driven by synthetic link and address events.

use super::*;

const T0: Duration = Duration::ZERO;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn link(index: u32, name: &str, up: bool) -> NetEvent {
    NetEvent::Link {
        index,
        name: name.into(),
        up,
    }
}

fn addr(index: u32, a: &str) -> NetEvent {
    NetEvent::Addr { index, addr: ip(a) }
}

fn mgr() -> PathManager {
    PathManager::new(
        vec![
            PathBind::Interface("wlan0".into()),
            PathBind::Address(ip("10.2.0.1")),
        ],
        true,
    )
}

fn drain(m: &mut PathManager) -> Vec<Action> {
    std::iter::from_fn(|| m.poll_action()).collect()
}

fn started(m: &mut PathManager) {
    let paths: Vec<_> = m
        .available()
        .into_iter()
        .map(|(s, a)| (s, s as PathId, a))
        .collect();
    m.session_started(T0, &paths);
}

#[test]
fn an_absent_path_is_not_offered_and_a_present_one_is() {
    let mut m = mgr();
    m.handle_event(T0, link(2, "eth1", true));
    m.handle_event(T0, addr(2, "10.2.0.1"));
    let av = m.available();
    assert_eq!(av.len(), 1);
    assert_eq!(av[0].0, 1);
    assert_eq!(m.why_unavailable(0), "interface wlan0 does not exist");
    // A link without carrier does not count; neither does one without an address.
    m.handle_event(T0, link(3, "wlan0", false));
    assert!(m.why_unavailable(0).contains("down"));
    m.handle_event(T0, link(3, "wlan0", true));
    assert!(m.why_unavailable(0).contains("no IPv4 address"));
    m.handle_event(T0, addr(3, "fe80::1"));
    assert_eq!(m.available().len(), 1);
    m.handle_event(T0, addr(3, "192.168.1.5"));
    assert_eq!(m.available().len(), 2);
}

#[test]
fn a_late_link_is_added_to_the_running_session() {
    let mut m = mgr();
    m.handle_event(T0, link(2, "eth1", true));
    m.handle_event(T0, addr(2, "10.2.0.1"));
    started(&mut m);
    assert!(drain(&mut m).is_empty());
    m.handle_event(T0, link(3, "wlan0", true));
    assert!(drain(&mut m).is_empty(), "no address yet");
    m.handle_event(T0, addr(3, "192.168.1.5"));
    let a = drain(&mut m);
    assert_eq!(
        a,
        vec![Action::Add {
            slot: 0,
            id: 0,
            attach: Attach {
                index: 3,
                addr: ip("192.168.1.5")
            },
            tcp: false,
        }]
    );
}

#[test]
fn carrier_loss_removes_at_once_and_carrier_return_adds_again() {
    let mut m = mgr();
    m.handle_event(T0, link(3, "wlan0", true));
    m.handle_event(T0, addr(3, "192.168.1.5"));
    started(&mut m);
    m.handle_event(T0, link(3, "wlan0", false));
    assert!(matches!(
        drain(&mut m)[..],
        [Action::Remove { slot: 0, id: 0, .. }]
    ));
    m.handle_event(T0, link(3, "wlan0", true));
    assert!(matches!(
        drain(&mut m)[..],
        [Action::Add { slot: 0, id: 0, .. }]
    ));
}

#[test]
fn a_recreated_interface_is_removed_then_added_on_its_new_index() {
    let mut m = mgr();
    m.handle_event(T0, link(3, "wlan0", true));
    m.handle_event(T0, addr(3, "192.168.1.5"));
    started(&mut m);
    m.handle_event(T0, NetEvent::LinkGone { index: 3 });
    assert!(matches!(drain(&mut m)[..], [Action::Remove { id: 0, .. }]));
    m.handle_event(T0, link(7, "wlan0", true));
    m.handle_event(T0, addr(7, "192.168.1.5"));
    let a = drain(&mut m);
    assert!(
        matches!(
            a[..],
            [Action::Add {
                id: 0,
                attach: Attach { index: 7, .. },
                ..
            }]
        ),
        "{a:?}"
    );
}

#[test]
fn an_address_change_on_a_live_link_is_make_before_break() {
    let mut m = mgr();
    m.handle_event(T0, link(3, "wlan0", true));
    m.handle_event(T0, addr(3, "192.168.1.5"));
    started(&mut m);
    m.handle_validated(T0, 0);
    // The new lease arrives before the old one goes.
    m.handle_event(T0, addr(3, "192.168.1.1"));
    let a = drain(&mut m);
    assert!(
        matches!(a[..], [Action::Add { slot: 0, id: 8, .. }]),
        "{a:?}"
    );
    // The old path keeps carrying data until the new one is validated.
    assert!(drain(&mut m).is_empty());
    m.handle_validated(T0, 8);
    assert!(matches!(drain(&mut m)[..], [Action::Remove { id: 0, .. }]));
    // The next change goes back to id 0.
    m.handle_event(
        T0,
        NetEvent::AddrGone {
            index: 3,
            addr: ip("192.168.1.1"),
        },
    );
    assert!(matches!(drain(&mut m)[..], [Action::Add { id: 0, .. }]));
}

#[test]
fn removing_the_only_address_removes_the_path_and_a_new_one_brings_it_back() {
    let mut m = mgr();
    m.handle_event(T0, link(2, "eth1", true));
    m.handle_event(T0, addr(2, "10.2.0.1"));
    started(&mut m);
    m.handle_event(
        T0,
        NetEvent::AddrGone {
            index: 2,
            addr: ip("10.2.0.1"),
        },
    );
    assert!(matches!(
        drain(&mut m)[..],
        [Action::Remove { slot: 1, id: 1, .. }]
    ));
    // The address-bound path comes back wherever its address appears.
    m.handle_event(T0, link(9, "usb0", true));
    m.handle_event(T0, addr(9, "10.2.0.1"));
    assert!(matches!(
        drain(&mut m)[..],
        [Action::Add {
            slot: 1,
            id: 1,
            attach: Attach { index: 9, .. },
            ..
        }]
    ));
}

#[test]
fn a_black_holed_validation_is_retried_with_backoff_until_it_passes() {
    let mut m = mgr();
    m.handle_event(T0, link(3, "wlan0", true));
    m.handle_event(T0, addr(3, "192.168.1.5"));
    started(&mut m);
    let mut now = T0;
    let mut waits = Vec::new();
    for _ in 0..6 {
        let t = m.poll_timeout().expect("a retry is armed");
        waits.push(t - now);
        now = t;
        m.handle_timeout(now);
        let a = drain(&mut m);
        assert!(
            matches!(
                a[..],
                [Action::Remove { id: 0, .. }, Action::Add { id: 0, .. }]
            ),
            "{a:?}"
        );
    }
    assert_eq!(
        waits,
        [2, 4, 8, 16, 30, 30].map(Duration::from_secs).to_vec(),
        "backoff"
    );
    // The black hole goes: the path validates and nothing more is retried.
    m.handle_validated(now, 0);
    assert_eq!(m.poll_timeout(), None);
    m.handle_timeout(now + VALIDATE_MAX * 2);
    assert!(drain(&mut m).is_empty());
}

#[test]
fn nothing_happens_outside_a_session() {
    let mut m = mgr();
    m.handle_event(T0, link(3, "wlan0", true));
    m.handle_event(T0, addr(3, "192.168.1.5"));
    assert!(drain(&mut m).is_empty());
    assert_eq!(m.poll_timeout(), None);
    started(&mut m);
    m.session_ended();
    m.handle_event(T0, link(3, "wlan0", false));
    assert!(drain(&mut m).is_empty());
}

/// A network that blocks UDP: the first retry goes over TCP, the next over UDP again (in
/// case TCP is the one that is blocked), and so on; a path validated over TCP stays there
/// and comes back over TCP at once when its connection ends.
#[test]
fn a_path_whose_udp_validation_gets_no_answer_falls_back_to_tcp() {
    let mut m = mgr();
    m.handle_event(T0, link(3, "wlan0", true));
    m.handle_event(T0, addr(3, "192.168.1.5"));
    started(&mut m);
    let mut now = T0;
    let mut seen = Vec::new();
    for _ in 0..3 {
        now = m.poll_timeout().unwrap();
        m.handle_timeout(now);
        for a in drain(&mut m) {
            if let Action::Add { tcp, .. } = a {
                seen.push(tcp);
            }
        }
    }
    assert_eq!(seen, [true, false, true]);
    assert!(m.is_tcp(0));
    m.handle_validated(now, 0);
    // A connection that ends re-adds the path over TCP, without waiting.
    m.handle_transport_failed(now, 0);
    let a = drain(&mut m);
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
    // While it validates again, another failure is left to the retry timer.
    m.handle_transport_failed(now, 0);
    assert!(drain(&mut m).is_empty());
    // A re-created interface starts over on UDP.
    m.handle_validated(now, 0);
    m.handle_event(now, NetEvent::LinkGone { index: 3 });
    m.handle_event(now, link(4, "wlan0", true));
    m.handle_event(now, addr(4, "192.168.1.5"));
    let a = drain(&mut m);
    assert!(
        matches!(
            a[..],
            [Action::Remove { .. }, Action::Add { tcp: false, .. }]
        ),
        "{a:?}"
    );
}

fn route(index: u32, v6: bool) -> NetEvent {
    NetEvent::DefaultRoute {
        index,
        v6,
        metric: 0,
    }
}

/// `--path auto`: slots take, in order, the interfaces that are up with a default route of
/// the server's family, except loopback, braid's own devices and interfaces another path
/// names; a slot keeps its interface while it is gone and gets it back.
#[test]
fn auto_paths_take_interfaces_with_a_default_route() {
    let mut m = PathManager::new(
        vec![
            PathBind::Interface("eth0".into()),
            PathBind::Auto,
            PathBind::Auto,
        ],
        true,
    );
    for (i, name) in [
        (1, "lo"),
        (2, "eth0"),
        (3, "braid0"),
        (4, "wwan0"),
        (5, "wlan0"),
    ] {
        m.handle_event(T0, link(i, name, true));
        m.handle_event(T0, addr(i, &format!("10.0.{i}.1")));
    }
    // No default route yet: nothing for the auto slots.
    assert_eq!(m.available().len(), 1);
    assert!(m.why_unavailable(1).contains("default route"));
    for i in [1, 2, 3] {
        m.handle_event(T0, route(i, false));
    }
    m.handle_event(T0, route(5, true)); // IPv6 only: not for an IPv4 server.
    assert_eq!(
        m.available().len(),
        1,
        "lo, eth0 (named) and braid0 are not taken"
    );
    m.handle_event(T0, route(4, false));
    m.handle_event(T0, route(5, false));
    let av: Vec<usize> = m.available().iter().map(|a| a.0).collect();
    assert_eq!(av, [0, 1, 2]);
    assert_eq!(m.bind_of(1), Some(PathBind::Interface("wwan0".into())));
    assert_eq!(m.bind_of(2), Some(PathBind::Interface("wlan0".into())));
    started(&mut m);
    // wwan0's default route goes: its slot leaves the session and stays wwan0's.
    m.handle_event(
        T0,
        NetEvent::DefaultRouteGone {
            index: 4,
            v6: false,
            metric: 0,
        },
    );
    assert!(matches!(
        drain(&mut m)[..],
        [Action::Remove { slot: 1, .. }]
    ));
    m.handle_event(T0, link(6, "usb0", true));
    m.handle_event(T0, addr(6, "10.0.6.1"));
    m.handle_event(T0, route(6, false));
    assert!(drain(&mut m).is_empty(), "no free auto slot for usb0");
    m.handle_event(T0, route(4, false));
    assert!(matches!(drain(&mut m)[..], [Action::Add { slot: 1, .. }]));
    assert_eq!(m.auto_interface(1), Some("wwan0"));
}

/// A relayed path (a UDP relay or link emulator in front of the server) re-binds over UDP
/// only: TCP to the server would go around the relay. Regression: soak tests with cut
/// emulated paths ran at loopback speed over a TCP fallback.
#[test]
fn a_udp_only_path_never_falls_back_to_tcp() {
    let mut m = mgr();
    m.set_udp_only(0);
    m.handle_event(T0, link(3, "wlan0", true));
    m.handle_event(T0, addr(3, "192.168.1.5"));
    started(&mut m);
    let mut seen = Vec::new();
    for _ in 0..3 {
        let now = m.poll_timeout().unwrap();
        m.handle_timeout(now);
        for a in drain(&mut m) {
            if let Action::Add { tcp, .. } = a {
                seen.push(tcp);
            }
        }
    }
    assert_eq!(seen, [false, false, false]);
    assert!(!m.is_tcp(0));
}

/// Regression (issue 24): an interface with only IPv6 (an IPv6-only mobile network) was
/// never a path to a server known by IPv4. With the server's IPv6 address known too
/// (`set_both_families`), it is, from its global address (not the link-local one); a
/// dual-stack interface keeps the server's family.
#[test]
fn an_ipv6_only_interface_is_a_path_when_the_server_has_both_families() {
    let mut m = mgr();
    m.handle_event(T0, link(3, "wlan0", true));
    m.handle_event(T0, addr(3, "fe80::1"));
    m.handle_event(T0, addr(3, "2001:db8::7"));
    assert!(m.attach(0).is_none(), "IPv4 server, IPv6-only link");
    m.set_both_families();
    m.handle_event(T0, addr(3, "fe80::2"));
    assert_eq!(m.attach(0).map(|a| a.addr), Some(ip("2001:db8::7")));
    m.handle_event(T0, addr(3, "192.0.2.9"));
    assert_eq!(
        m.attach(0).map(|a| a.addr),
        Some(ip("192.0.2.9")),
        "dual-stack: IPv4"
    );
}

/// Regression (issue 24, item 6): "its network blocks UDP" was logged for every path over
/// TCP, also when UDP was never tried on it (the handshake's answer came over TCP first)
/// and on every reconnect. Only a path whose UDP validation went unanswered says so.
#[test]
fn only_a_path_whose_udp_went_unanswered_counts_as_blocking_udp() {
    let mut m = mgr();
    m.handle_event(T0, link(3, "wlan0", true));
    m.handle_event(T0, addr(3, "192.168.1.5"));
    m.handle_event(T0, link(2, "eth1", true));
    m.handle_event(T0, addr(2, "10.2.0.1"));
    started(&mut m);
    // Path 1's handshake was answered over TCP: no UDP test on it, also after reconnects.
    m.mark_tcp(1);
    m.handle_validated(T0, 1);
    assert!(m.is_tcp(1) && !m.udp_failed(1));
    m.handle_transport_failed(T0, 1);
    drain(&mut m);
    assert!(m.is_tcp(1) && !m.udp_failed(1), "a reconnect tests nothing");
    // Path 0's UDP validation went unanswered: it switches to TCP, and says why.
    assert!(!m.udp_failed(0));
    let now = m.poll_timeout().unwrap();
    m.handle_timeout(now);
    drain(&mut m);
    assert!(m.is_tcp(0) && m.udp_failed(0));
}

/// Issue 24, item 7: a path that fell back to TCP never returned to UDP. Now a validated
/// TCP path probes UDP under its other id after `Recheck::first`, again with a doubled wait
/// after each unanswered probe (up to `max`), and moves back to UDP when a probe validates:
/// the probe becomes the path and the TCP path is removed.
#[test]
fn a_path_that_fell_back_to_tcp_returns_to_udp_when_a_probe_validates() {
    let mut m = mgr();
    m.set_recheck(
        0,
        Recheck {
            first: Duration::from_secs(5),
            max: Duration::from_secs(12),
        },
    );
    m.handle_event(T0, link(3, "wlan0", true));
    m.handle_event(T0, addr(3, "192.168.1.5"));
    started(&mut m);
    // UDP unanswered: over TCP after 2 s, validated there at 3 s.
    let now = m.poll_timeout().unwrap();
    m.handle_timeout(now);
    drain(&mut m);
    assert!(m.is_tcp(0));
    let mut now = now + Duration::from_secs(1);
    m.handle_validated(now, 0);
    // Probes: 5 s after validation, then 10 and 12 (capped) after each unanswered one.
    let mut starts = Vec::new();
    for _ in 0..3 {
        let start = m.poll_timeout().unwrap();
        m.handle_timeout(start);
        let a = drain(&mut m);
        assert!(
            matches!(a[..], [Action::Probe { slot: 0, id: 8, .. }]),
            "{a:?}"
        );
        assert!(m.is_probe(8) && m.is_tcp(0) && m.slot_of(8) == Some(0));
        starts.push(start - now);
        now = m.poll_timeout().unwrap();
        assert_eq!(now, start + PROBE_WINDOW);
        m.handle_timeout(now);
        let a = drain(&mut m);
        assert!(
            matches!(a[..], [Action::DropProbe { slot: 0, id: 8, .. }]),
            "{a:?}"
        );
        assert!(!m.is_probe(8) && m.is_tcp(0));
    }
    let s = Duration::from_secs;
    assert_eq!(starts, [s(5), s(10), s(12)]);
    // The next probe validates: path 8 is the path, over UDP; path 0 (TCP) goes.
    let start = m.poll_timeout().unwrap();
    m.handle_timeout(start);
    drain(&mut m);
    m.handle_validated(start + Duration::from_millis(30), 8);
    let a = drain(&mut m);
    assert!(
        matches!(a[..], [Action::Remove { slot: 0, id: 0, .. }]),
        "{a:?}"
    );
    assert!(!m.is_tcp(8) && !m.udp_failed(8) && !m.is_probe(8));
    assert_eq!(m.slot_of(8), Some(0));
    assert_eq!(m.poll_timeout(), None, "a UDP path probes nothing");
}

/// A probe runs only on a validated TCP path, and a link change takes it out.
#[test]
fn a_udp_path_never_probes_and_a_link_change_drops_the_probe() {
    let mut m = mgr();
    m.set_recheck(
        0,
        Recheck {
            first: Duration::from_secs(1),
            max: Duration::from_secs(1),
        },
    );
    m.handle_event(T0, link(3, "wlan0", true));
    m.handle_event(T0, addr(3, "192.168.1.5"));
    started(&mut m);
    m.handle_validated(T0, 0);
    assert_eq!(m.poll_timeout(), None);
    // Over TCP (the handshake's answer came there), validated: a probe after 1 s.
    m.mark_tcp(0);
    m.handle_validated(T0, 0);
    let t = m.poll_timeout().unwrap();
    m.handle_timeout(t);
    assert!(matches!(drain(&mut m)[..], [Action::Probe { id: 8, .. }]));
    m.handle_event(
        t,
        NetEvent::AddrGone {
            index: 3,
            addr: ip("192.168.1.5"),
        },
    );
    let a = drain(&mut m);
    assert!(
        matches!(
            a[..],
            [
                Action::DropProbe { id: 8, .. },
                Action::Remove { id: 0, .. }
            ]
        ),
        "{a:?}"
    );
}
