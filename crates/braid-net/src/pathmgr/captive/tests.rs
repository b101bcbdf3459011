use super::*;

fn s(x: u64) -> Duration {
    Duration::from_millis(x)
}

#[test]
fn check_urls_parse_with_host_port_and_path_and_bad_ones_say_what_to_give() {
    let u = CheckUrl::parse(DEFAULT_CHECK_URL).unwrap();
    assert_eq!(
        (u.host.as_str(), u.port, u.path.as_str()),
        ("connectivitycheck.gstatic.com", 80, "/generate_204")
    );
    let u = CheckUrl::parse("http://[fd00::1]:8080").unwrap();
    assert_eq!(
        (u.host.as_str(), u.port, u.path.as_str()),
        ("fd00::1", 8080, "/")
    );
    let req = String::from_utf8(u.request()).unwrap();
    assert!(
        req.starts_with("GET / HTTP/1.1\r\nHost: [fd00::1]\r\n"),
        "{req}"
    );
    for bad in [
        "https://example.com/",
        "http://",
        "http://h:99999/",
        "ftp://x",
    ] {
        let e = CheckUrl::parse(bad).unwrap_err().to_string();
        assert!(e.contains(bad) && e.contains("204 No Content"), "{e}");
    }
}

#[test]
fn answers_are_told_apart_open_portal_or_unknown() {
    let open = b"HTTP/1.1 204 No Content\r\nServer: x\r\n\r\n";
    assert_eq!(classify(open), Verdict::Open);
    let empty = b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n";
    assert_eq!(classify(empty), Verdict::Open);
    let redirect = b"HTTP/1.1 302 Found\r\nlocation: http://portal.example/login?x=1\r\n\r\n";
    assert_eq!(
        classify(redirect),
        Verdict::Portal(Some("http://portal.example/login?x=1".into()))
    );
    let page = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n<html>log in</html>";
    assert_eq!(classify(page), Verdict::Portal(None));
    assert_eq!(
        classify(b"HTTP/1.1 511 Network Authentication Required\r\n\r\n"),
        Verdict::Portal(None)
    );
    for other in [
        &b""[..],
        b"garbage",
        b"HTTP/1.1 503 Busy\r\n\r\n",
        b"SSH-2.0-x\r\n",
    ] {
        assert_eq!(classify(other), Verdict::Unknown, "{other:?}");
    }
}

/// A path that never validates is checked after GRACE, then every PROBE_EVERY; a portal's
/// redirect makes it captive once (with the URL); the check URL answering again releases it
/// (the path manager re-binds it at once); a path that validates is never checked.
#[test]
fn an_unvalidated_path_is_checked_shown_captive_once_and_released_when_the_portal_lets_go() {
    let mut w = CaptiveWatch::new(2);
    let carrying = [Some(false), Some(true)];
    w.handle_timeout(s(0), &carrying);
    assert_eq!(w.poll_probe(), None, "not before the grace");
    assert_eq!(w.poll_timeout(), Some(GRACE));
    w.handle_timeout(GRACE, &carrying);
    assert_eq!(w.poll_probe(), Some(0));
    assert_eq!(w.poll_probe(), None, "the validated path is never checked");
    assert_eq!(w.poll_timeout(), None, "one check out at a time");
    // The session ended with the check out: the next one may go.
    w.checks_dropped();
    w.handle_timeout(GRACE, &carrying);
    assert_eq!(w.poll_probe(), Some(0));
    let url = Some("http://portal.example/login".to_string());
    w.handle_verdict(s(1100), 0, Verdict::Portal(url.clone()));
    assert_eq!(
        w.poll_event(),
        Some(CaptiveEvent::Captive {
            slot: 0,
            url: url.clone()
        })
    );
    assert_eq!(w.portal(0), Some(&url));
    assert_eq!(w.portal(1), None);
    assert_eq!(w.poll_timeout(), Some(s(1100) + PROBE_EVERY));
    // The same portal again: no new event; no answer: still captive.
    w.handle_timeout(s(1100) + PROBE_EVERY, &carrying);
    assert_eq!(w.poll_probe(), Some(0));
    w.handle_verdict(s(2700), 0, Verdict::Portal(url.clone()));
    w.handle_timeout(s(4200), &carrying);
    assert_eq!(w.poll_probe(), Some(0));
    w.handle_verdict(s(4300), 0, Verdict::Unknown);
    assert_eq!(w.poll_event(), None);
    assert_eq!(w.portal(0), Some(&url));
    // Logged in: the check URL answers itself.
    w.handle_timeout(s(5800), &carrying);
    assert_eq!(w.poll_probe(), Some(0));
    w.handle_verdict(s(5850), 0, Verdict::Open);
    assert_eq!(w.poll_event(), Some(CaptiveEvent::Released { slot: 0 }));
    assert_eq!(w.portal(0), None);
    // It validates: no more checks.
    w.handle_timeout(s(6500), &[Some(true), Some(true)]);
    assert_eq!(w.poll_timeout(), None);
    assert_eq!(w.poll_event(), None);
}

#[test]
fn a_captive_path_that_validates_on_its_own_is_released_and_one_that_goes_is_forgotten() {
    let mut w = CaptiveWatch::new(1);
    w.handle_timeout(s(0), &[Some(false)]);
    w.handle_timeout(GRACE, &[Some(false)]);
    assert_eq!(w.poll_probe(), Some(0));
    w.handle_verdict(GRACE, 0, Verdict::Portal(None));
    assert!(matches!(
        w.poll_event(),
        Some(CaptiveEvent::Captive { url: None, .. })
    ));
    w.handle_timeout(s(2000), &[Some(true)]);
    assert_eq!(w.poll_event(), Some(CaptiveEvent::Released { slot: 0 }));
    // Captive again, then the path goes away: no release, not shown.
    w.handle_timeout(s(3000), &[Some(false)]);
    w.handle_timeout(s(4000), &[Some(false)]);
    assert_eq!(w.poll_probe(), Some(0));
    w.handle_verdict(s(4000), 0, Verdict::Portal(None));
    let _ = w.poll_event();
    w.handle_timeout(s(4100), &[None]);
    assert_eq!(w.poll_event(), None);
    assert_eq!(w.portal(0), None);
    // A verdict that comes after the path went is dropped.
    w.handle_verdict(s(4200), 0, Verdict::Portal(None));
    assert_eq!(w.poll_event(), None);
    assert_eq!(w.portal(0), None);
}

/// A path backed off to its longest retries (behind the portal for a while) is re-bound on
/// UDP at once when the portal lets go, its wait starting over; a validated one is not.
#[test]
fn a_released_path_is_rebound_on_udp_at_once_and_a_validated_one_is_left_alone() {
    use crate::udp::PathBind;
    use std::net::IpAddr;
    let ip: IpAddr = "10.2.0.1".parse().unwrap();
    let mut m = PathManager::new(vec![PathBind::Address(ip)], true);
    m.handle_event(
        s(0),
        super::super::NetEvent::Link {
            index: 2,
            name: "p1".into(),
            up: true,
        },
    );
    m.handle_event(s(0), super::super::NetEvent::Addr { index: 2, addr: ip });
    let paths: Vec<_> = m
        .available()
        .into_iter()
        .map(|(sl, a)| (sl, sl as u8, a))
        .collect();
    m.session_started(s(0), &paths);
    let mut now = s(0);
    for _ in 0..5 {
        now = m.poll_timeout().unwrap();
        m.handle_timeout(now);
    }
    std::iter::from_fn(|| m.poll_action()).for_each(drop);
    assert_eq!(m.carrying(), [Some(false)]);
    let next = m.poll_timeout().unwrap();
    assert!(
        next - now >= Duration::from_secs(16),
        "backed off: {:?}",
        next - now
    );
    m.retry_now(now, 0);
    let a: Vec<_> = std::iter::from_fn(|| m.poll_action()).collect();
    assert!(
        matches!(
            a[..],
            [
                super::super::Action::Remove { id: 0, .. },
                super::super::Action::Add {
                    id: 0,
                    tcp: false,
                    ..
                }
            ]
        ),
        "{a:?}"
    );
    assert_eq!(m.poll_timeout(), Some(now + super::super::VALIDATE_FIRST));
    m.handle_validated(now, 0);
    assert_eq!(m.carrying(), [Some(true)]);
    m.retry_now(now, 0);
    assert_eq!(m.poll_action(), None);
}
