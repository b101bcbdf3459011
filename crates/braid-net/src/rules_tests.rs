use super::*;
use proptest::prelude::*;

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

const PATHS: &[&str] = &["dsl", "lte"];

fn rules(bypass: &[&str], pins: &[&str]) -> Rules {
    Rules::parse(&s(bypass), &s(pins), PATHS).unwrap()
}

fn err(bypass: &[&str], pins: &[&str]) -> String {
    Rules::parse(&s(bypass), &s(pins), PATHS)
        .unwrap_err()
        .to_string()
}

#[test]
fn destinations_parse_as_cidr_address_or_domain() {
    assert_eq!(
        parse_dest("10.0.0.0/8"),
        Ok(Dest::Cidr("10.0.0.0".parse().unwrap(), 8))
    );
    assert_eq!(
        parse_dest("192.0.2.7"),
        Ok(Dest::Cidr("192.0.2.7".parse().unwrap(), 32))
    );
    assert_eq!(
        parse_dest("[2001:db8::1]"),
        Ok(Dest::Cidr("2001:db8::1".parse().unwrap(), 128))
    );
    assert_eq!(
        parse_dest("2001:db8::/32"),
        Ok(Dest::Cidr("2001:db8::".parse().unwrap(), 32))
    );
    assert_eq!(
        parse_dest("Bank.Example.COM."),
        Ok(Dest::Domain("bank.example.com".into()))
    );
}

#[test]
fn bad_destinations_say_what_to_write_instead() {
    let e = |d: &str| parse_dest(d).unwrap_err();
    assert!(
        e("10.1.2.3/8").contains("write 10.0.0.0/8"),
        "{}",
        e("10.1.2.3/8")
    );
    assert!(e("10.0.0.0/33").contains("0 to 32"));
    assert!(e("*.example.com").contains("write example.com"));
    assert!(e(".example.com").contains("write example.com"));
    assert!(e("example.com:443").contains("write example.com"));
    assert!(e("https://example.com/x").contains("write the host name only, like example.com"));
    assert!(e("exa mple.com").contains("not a DNS label"));
    assert!(e("a..b").contains("not a DNS label"));
    assert!(e("").contains("empty"));
    assert!(e("300.1.1.1/8").contains("not an IP address"));
}

#[test]
fn pins_name_a_known_path_and_destinations_have_one_rule() {
    let e = err(&[], &["sip.example.com"]);
    assert!(e.contains("--pin") && e.contains("DEST=PATH"), "{e}");
    let e = err(&[], &["sip.example.com=wifi"]);
    assert!(
        e.contains("no path is named \"wifi\"") && e.contains("dsl, lte"),
        "{e}"
    );
    let e = err(&["example.com"], &["EXAMPLE.com=dsl"]);
    assert!(e.contains("already has a rule (bypass example.com)"), "{e}");
    let e = err(&["10.0.0.0/8", "10.0.0.0/8"], &[]);
    assert!(e.contains("already has a rule"), "{e}");
    let r = rules(&["10.0.0.0/8"], &["sip.example.com=dsl"]);
    assert_eq!(r.rules().len(), 2);
    assert_eq!(describe(&r.rules()[1]), "pin sip.example.com=dsl");
}

#[test]
fn domain_rules_match_the_name_and_names_under_it_longest_first() {
    let r = rules(&["example.com"], &["voip.example.com=dsl"]);
    assert_eq!(r.route_name("example.com"), Route::Bypass);
    assert_eq!(r.route_name("WWW.Example.com."), Route::Bypass);
    assert_eq!(r.route_name("a.voip.example.com"), Route::Pin("dsl".into()));
    assert_eq!(r.route_name("voip.example.com"), Route::Pin("dsl".into()));
    assert_eq!(r.route_name("notexample.com"), Route::Default);
    assert_eq!(r.route_name("example.org"), Route::Default);
    assert_eq!(r.route_name("com"), Route::Default);
}

#[test]
fn cidr_rules_match_addresses_longest_prefix_first() {
    let r = rules(&["10.0.0.0/8", "2001:db8::/32"], &["10.9.0.0/16=lte"]);
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    assert_eq!(r.route_ip(ip("10.1.2.3")), Route::Bypass);
    assert_eq!(r.route_ip(ip("10.9.2.3")), Route::Pin("lte".into()));
    assert_eq!(r.route_ip(ip("11.0.0.1")), Route::Default);
    assert_eq!(r.route_ip(ip("2001:db8:1::5")), Route::Bypass);
    assert_eq!(r.route_ip(ip("2001:db9::5")), Route::Default);
    assert_eq!(
        r.route_ip(ip("::ffff:10.1.2.3")),
        Route::Bypass,
        "v4-mapped"
    );
    // An address written as a name (SOCKS5 clients do this) is matched as the address.
    assert_eq!(r.route_name("10.1.2.3"), Route::Bypass);
    let all = rules(&["0.0.0.0/0"], &[]);
    assert_eq!(all.route_ip(ip("203.0.113.1")), Route::Bypass);
    assert_eq!(
        all.route_ip(ip("2001:db8::1")),
        Route::Default,
        "v4 rule, v6 address"
    );
}

#[test]
fn names_learned_from_dns_answers_are_those_rules_match() {
    use simple_dns::{rdata, Name, Packet, Question, ResourceRecord, CLASS, QCLASS, QTYPE, TYPE};
    let r = rules(&["bank.example"], &[]);
    let answer = |q: &str, ip: [u8; 4]| {
        let mut p = Packet::new_reply(7);
        p.questions.push(Question::new(
            Name::new(q).unwrap(),
            QTYPE::TYPE(TYPE::A),
            QCLASS::CLASS(CLASS::IN),
            false,
        ));
        p.answers.push(ResourceRecord::new(
            Name::new(q).unwrap(),
            CLASS::IN,
            60,
            RData::A(rdata::A {
                address: u32::from(std::net::Ipv4Addr::from(ip)),
            }),
        ));
        p.build_bytes_vec().unwrap()
    };
    let mut l = LearnedNames::default();
    l.learn(&r, &answer("www.bank.example", [192, 0, 2, 9]));
    l.learn(&r, &answer("other.example", [192, 0, 2, 10]));
    l.learn(&r, b"not dns at all");
    assert_eq!(
        l.name_of("192.0.2.9".parse().unwrap()),
        Some("www.bank.example")
    );
    assert_eq!(l.name_of("192.0.2.10".parse().unwrap()), None);
}

proptest! {
    /// Any text: parsing never panics, and what parses matches itself.
    #[test]
    fn any_text_parses_or_errs_without_panic(t in "\\PC{0,40}", p in "\\PC{0,8}") {
        if let Ok(d) = parse_dest(&t) {
            let r = Rules::parse(std::slice::from_ref(&t), &[], PATHS).unwrap();
            let route = match d {
                Dest::Cidr(ip, _) => r.route_ip(ip),
                Dest::Domain(n) => r.route_name(&n),
            };
            prop_assert_eq!(route, Route::Bypass);
        }
        let _ = Rules::parse(&[], &[format!("{t}={p}")], PATHS);
    }

    /// Every address inside a prefix matches it; the first one past its end does not.
    #[test]
    fn a_prefix_matches_exactly_its_addresses(a in any::<u32>(), len in 0u8..=32, x in any::<u32>()) {
        let net = mask(IpAddr::V4(a.into()), len);
        let r = Rules::parse(&[format!("{net}/{len}")], &[], PATHS).unwrap();
        let host_bits = u32::MAX.checked_shr(u32::from(len)).unwrap_or(0);
        let IpAddr::V4(n) = net else { unreachable!() };
        let inside = u32::from(n) | (x & host_bits);
        prop_assert_eq!(r.route_ip(IpAddr::V4(inside.into())), Route::Bypass);
        if let Some(past) = (u32::from(n) | host_bits).checked_add(1) {
            if len > 0 {
                prop_assert_eq!(r.route_ip(IpAddr::V4(past.into())), Route::Default);
            }
        }
    }

    /// A domain rule matches the name with any labels in front, and not the name with
    /// letters glued to its first label.
    #[test]
    fn a_domain_rule_matches_names_under_it(d in "[a-z][a-z0-9-]{0,10}(\\.[a-z]{1,6}){1,3}", pre in "([a-z0-9]{1,5}\\.){0,3}", glue in "[a-z]{1,3}") {
        let r = Rules::parse(std::slice::from_ref(&d), &[], PATHS).unwrap();
        prop_assert_eq!(r.route_name(&format!("{pre}{d}")), Route::Bypass);
        prop_assert_eq!(r.route_name(&format!("{glue}{d}")), Route::Default);
    }
}
