//! The egress decision's rules, without sockets.

use super::*;

const A: PublicKey = PublicKey([1; 32]);
const B: PublicKey = PublicKey([2; 32]);

fn host() -> HostAddrs {
    let own = [
        "127.0.0.1",
        "::1",
        "169.254.169.254",
        "10.0.0.1",
        "2001:db8::1",
    ];
    HostAddrs {
        own: own.iter().map(|a| a.parse().unwrap()).collect(),
        broadcast: vec!["10.0.0.255".parse().unwrap()],
    }
}

fn rule(s: &str) -> Rule {
    s.parse().unwrap()
}

fn decide(p: &EgressPolicy, key: &PublicKey, dest: &str) -> Decision {
    p.decide(key, dest.parse().unwrap(), &host())
}

fn allowed(p: &EgressPolicy, key: &PublicKey, dest: &str) -> bool {
    decide(p, key, dest).allowed
}

#[test]
fn by_default_the_server_itself_link_local_and_special_addresses_are_refused() {
    let p = EgressPolicy::default();
    for (dest, why) in [
        ("127.0.0.1:5432", Builtin::Loopback),
        ("127.8.9.10:80", Builtin::Loopback),
        ("[::1]:22", Builtin::Loopback),
        ("[::ffff:127.0.0.1]:22", Builtin::Loopback),
        ("10.0.0.1:9090", Builtin::ThisServer),
        ("[2001:db8::1]:80", Builtin::ThisServer),
        ("169.254.169.254:80", Builtin::LinkLocal),
        ("[fe80::1]:80", Builtin::LinkLocal),
        ("0.0.0.0:80", Builtin::Unspecified),
        ("[::]:80", Builtin::Unspecified),
        ("224.0.0.251:5353", Builtin::Multicast),
        ("[ff02::1]:5353", Builtin::Multicast),
        ("255.255.255.255:67", Builtin::Broadcast),
        ("10.0.0.255:137", Builtin::Broadcast),
    ] {
        let d = decide(&p, &A, dest);
        assert!(!d.allowed, "{dest}");
        assert!(
            matches!(d.rule, Matched::Builtin(b, _) if b == why),
            "{dest}: {:?}",
            d.rule
        );
    }
    for dest in ["93.184.216.34:443", "[2606:4700::1111]:443"] {
        assert_eq!(decide(&p, &A, dest).rule, Matched::None, "{dest}");
    }
}

#[test]
fn private_ranges_are_allowed_unless_deny_private() {
    let mut p = EgressPolicy::default();
    let private = [
        "10.9.0.2:80",
        "172.20.1.1:80",
        "192.168.1.1:80",
        "100.64.0.1:80",
        "[fd00::1]:80",
    ];
    assert!(private.iter().all(|d| allowed(&p, &A, d)));
    p.deny_private = true;
    for d in private {
        let got = decide(&p, &A, d);
        assert!(
            matches!(got.rule, Matched::Builtin(Builtin::Private, _)),
            "{d}: {got:?}"
        );
        assert!(!got.allowed);
    }
    assert!(allowed(&p, &A, "8.8.8.8:53"));
}

/// `allow 127.0.0.0/8` (what tests and `braid bench` give) opens loopback: it ties with
/// the built-in rule and wins; a broader allow does not.
#[test]
fn an_allow_as_specific_as_a_default_opens_it_and_a_broader_one_does_not() {
    let mut p = EgressPolicy::default();
    p.allow(rule("0.0.0.0/0:443"));
    assert!(!allowed(&p, &A, "127.0.0.1:443"));
    assert!(!allowed(&p, &A, "10.0.0.1:443"), "the server's own address");
    p.allow(rule("127.0.0.0/8"));
    // 127.0.0.1 is also an address of the server's (on lo): the loopback block decides.
    assert!(allowed(&p, &A, "127.0.0.1:443"));
    assert!(!allowed(&p, &A, "[::1]:443"), "IPv6 loopback stays closed");
    p.allow(rule("10.0.0.1:9090"));
    assert!(allowed(&p, &A, "10.0.0.1:9090") && !allowed(&p, &A, "10.0.0.1:22"));
}

#[test]
fn an_agents_rule_applies_to_that_agent_only() {
    let mut p = EgressPolicy {
        deny_private: true,
        ..Default::default()
    };
    p.add_for(A, Action::Allow, rule("10.9.0.0/24"));
    assert!(allowed(&p, &A, "10.9.0.2:80"));
    assert!(!allowed(&p, &B, "10.9.0.2:80"));
    assert!(!allowed(&p, &A, "10.9.1.2:80"), "outside the agent's block");
    let d = decide(&p, &A, "10.9.0.2:80");
    assert_eq!(d.rule.to_string(), "allow 10.9.0.0/24 (this agent's rule)");
    // An agent's rule beats a global one of the same block.
    p.add(Action::Deny, rule("203.0.113.0/24"));
    p.add_for(A, Action::Allow, rule("203.0.113.0/24"));
    assert!(allowed(&p, &A, "203.0.113.9:80") && !allowed(&p, &B, "203.0.113.9:80"));
}

#[test]
fn the_most_specific_rule_decides() {
    let mut p = EgressPolicy::default();
    p.add(Action::Deny, rule("198.51.100.0/24"));
    p.add(Action::Allow, rule("198.51.100.7"));
    p.add(Action::Deny, rule("0.0.0.0/0:25"));
    p.add(Action::Allow, rule("192.0.2.0/24:25"));
    assert!(
        allowed(&p, &A, "198.51.100.7:80"),
        "one host opened in a closed block"
    );
    assert!(!allowed(&p, &A, "198.51.100.8:80"));
    assert!(!allowed(&p, &A, "8.8.8.8:25"));
    assert!(allowed(&p, &A, "192.0.2.1:25"));
    // Ports make a rule more specific than one without at the same prefix.
    p.add(Action::Allow, rule("198.51.100.0/24:443"));
    assert!(allowed(&p, &A, "198.51.100.8:443"));
    // A tie between the operator's own rules: deny wins.
    p.add(Action::Allow, rule("0.0.0.0/0:25"));
    assert!(!allowed(&p, &A, "8.8.8.8:25"));
    assert_eq!(
        decide(&p, &A, "8.8.8.8:25").rule.to_string(),
        "deny 0.0.0.0/0:25 (global rule)"
    );
}

#[test]
fn decisions_name_their_rule() {
    let p = EgressPolicy::default();
    assert_eq!(
        decide(&p, &A, "169.254.169.254:80").rule.to_string(),
        "deny 169.254.0.0/16 (default: link-local)"
    );
    assert_eq!(
        decide(&p, &A, "10.0.0.1:80").rule.to_string(),
        "deny 10.0.0.1/32 (default: this server's address)"
    );
    assert_eq!(
        decide(&p, &A, "1.1.1.1:80").rule.to_string(),
        "no rule (allowed)"
    );
}
