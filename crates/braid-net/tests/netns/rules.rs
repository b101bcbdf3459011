//! Issue 24, item 5: per-destination rules (root, network namespaces; `rules_rig`). With a
//! session up, a destination `--bypass` names is reached straight from a link address of
//! the client, and the braid server carries none of it; a destination `--pin` names goes
//! over its path alone (the other link's byte counter does not move), and fails while
//! that path is down; in TUN mode the same by address and by the name a DNS answer gave,
//! and the server's egress policy refuses TUN mode's connections and datagrams (issue 37).
//! Each test prints why it skips without root or namespaces.

use crate::common::sha;
use crate::nsrig::{agent_cfg, skip, Net};
use crate::rules_rig::*;
use braid_crypto::StaticKeypair;
use braid_net::agent::{Agent, TunSettings};
use braid_net::rules::Rules;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SIZE: usize = 4 << 20;

fn logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("BRAID_TEST_LOG"))
        .with_test_writer()
        .try_init();
}

fn rules(bypass: &[String], pins: &[String]) -> Rules {
    Rules::parse(bypass, pins, &["a", "b"]).unwrap()
}

/// `--bypass 10.0.0.2 --bypass bank.example`, session up: the download from 10.0.0.2 is
/// exact, its peer is a link address of the client, and the server's session carried
/// almost nothing meanwhile (a download of 10.0.0.3, no rule, through the same session
/// shows the count moving); UDP to 10.0.0.2 comes from a link address, UDP to 10.0.0.3
/// through the server; a name under bank.example, resolved through the path, goes
/// straight too, and so do plain-HTTP and CONNECT requests to the HTTP proxy. Failed with the rules ignored: every peer is the server's.
#[test]
fn a_bypassed_destination_is_reached_without_the_server_while_a_session_is_up() {
    if skip() {
        return;
    }
    logs();
    let t0 = Instant::now();
    let net = Net::new();
    let key = Arc::new(StaticKeypair::generate().unwrap());
    let d = serve(&net, SIZE, key.public(), false);
    let mut cfg = agent_cfg(&["a=p0", "b=p1"], key, d.server_pub);
    cfg.rules = rules(&[RULED.to_string(), DOMAIN.into()], &[]);
    cfg.http = Some("127.0.0.1:0".parse().unwrap());
    let (board, resolver) = (d.board.clone(), d.resolver);
    let r = net.client(move || async move {
        let mut agent = Agent::start(cfg).await.unwrap();
        assert!(
            agent.wait_established(Duration::from_secs(5)).await,
            "no session"
        );
        let socks = agent.socks.unwrap();
        let before = session_bytes(&board).await;
        let got = get(socks_connect(socks, Target::Ip(RULED, WEB_PORT))
            .await
            .unwrap())
        .await;
        let carried = session_bytes(&board).await - before;
        // The HTTP proxy: a plain http:// request, then CONNECT (curl -p).
        let (url, proxy) = (format!("http://{RULED}:{WEB_PORT}/"), agent.http.unwrap());
        let mut http = Vec::new();
        for tunnel in [false, true] {
            let mut a = vec![
                "-sS".into(),
                "-x".into(),
                format!("http://{proxy}"),
                url.clone(),
            ];
            if tunnel {
                a.push("-p".into());
            }
            http.push(crate::common::curl(a).await);
        }
        let (_ctl, client, relay) = associate(socks).await;
        let straight = udp_rounds(&client, relay, (RULED, ECHO_PORT).into(), 3, 200).await;
        let through = udp_rounds(&client, relay, (OTHER, ECHO_PORT).into(), 3, 200).await;
        let named = match resolver {
            Some(_) => {
                let s = socks_connect(socks, Target::Name("www.bank.example", WEB_PORT));
                Some(get(s.await.expect("CONNECT www.bank.example")).await)
            }
            None => None,
        };
        let before = session_bytes(&board).await;
        let ctrl = get(socks_connect(socks, Target::Ip(OTHER, WEB_PORT))
            .await
            .unwrap())
        .await;
        let carried_ctrl = session_bytes(&board).await - before;
        let counts = agent.status().snapshot().rules;
        (
            got,
            carried,
            straight,
            through,
            named,
            ctrl,
            carried_ctrl,
            counts,
            http,
        )
    });
    let (got, carried, straight, through, named, ctrl, carried_ctrl, counts, http) = r;
    eprintln!(
        "bypass: session carried {carried} bytes during the bypassed {SIZE}-byte download, \
         {carried_ctrl} during the same download through it; rules {counts:?}"
    );
    assert_eq!(sha(&got), sha(&d.data), "bypassed download");
    assert_eq!(sha(&ctrl), sha(&d.data), "download through the session");
    for h in &http {
        assert_eq!(sha(h), sha(&d.data), "download through the HTTP proxy");
    }
    let peers = peers_at(&d.peers, RULED);
    assert!(
        peers.iter().all(|p| from_client_link(*p)) && peers.len() == 3,
        "{peers:?}"
    );
    assert!(
        carried < SIZE as u64 / 50,
        "the session carried {carried} bytes of it"
    );
    assert!(
        carried_ctrl > SIZE as u64,
        "the session count did not see {carried_ctrl}"
    );
    assert!(peers_at(&d.peers, OTHER)
        .iter()
        .all(|p| !from_client_link(*p)));
    assert_eq!((straight.len(), through.len()), (3, 3), "UDP answers");
    assert!(straight.iter().all(|a| from_client_link(echo_sender(a))));
    assert!(through.iter().all(|a| !from_client_link(echo_sender(a))));
    if let Some(named) = named {
        assert_eq!(sha(&named), sha(&d.data), "bypassed download by name");
        let p = peers_at(&d.peers, NAMED);
        assert!(p.len() == 1 && from_client_link(p[0]), "{p:?}");
    }
    // SOCKS5 CONNECT, plain HTTP, HTTP CONNECT, the association (and by name).
    let bypassed = if resolver.is_some() { 5 } else { 4 };
    assert_eq!(counts.get("bypass"), Some(&bypassed), "{counts:?}");
    assert!(counts.get("session") >= Some(&2), "{counts:?}");
    eprintln!("bypass test took {:.1} s", t0.elapsed().as_secs_f64());
}

/// Issue 38, item 5: the default `path = ["auto"]` (both links have a default route, as a
/// router's do) with `--bypass 10.0.0.2`, session up: the download from 10.0.0.2 comes
/// from a link address, the one from 10.0.0.3 through the server. The command refused the
/// rule before ("auto paths cannot take direct connections yet").
#[test]
fn a_bypass_rule_goes_straight_on_auto_paths() {
    if skip() {
        return;
    }
    let net = Net::with_prefix("rauto");
    let key = Arc::new(StaticKeypair::generate().unwrap());
    let d = serve(&net, 256 << 10, key.public(), true);
    let mut cfg = agent_cfg(&["auto"], key, d.server_pub);
    cfg.rules = Rules::parse(&[RULED.to_string()], &[], &[]).unwrap();
    let (straight, through) = net.client(move || async move {
        let mut agent = Agent::start(cfg).await.unwrap();
        assert!(
            agent.wait_established(Duration::from_secs(5)).await,
            "no session"
        );
        let socks = agent.socks.unwrap();
        let open = |ip| socks_connect(socks, Target::Ip(ip, WEB_PORT));
        let straight = get(open(RULED).await.expect("bypassed")).await;
        let through = get(open(OTHER).await.expect("through the session")).await;
        // Item 6: the auto slots in the session show the interface each took.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut shown: Vec<Option<String>> = (agent.status().snapshot().paths.iter())
            .filter(|p| p.bytes_sent > 0)
            .map(|p| p.interface.clone())
            .collect();
        shown.sort();
        assert_eq!(
            shown,
            [Some("p0".into()), Some("p1".into())],
            "auto slots' interfaces"
        );
        (straight, through)
    });
    assert_eq!(sha(&straight), sha(&d.data));
    assert_eq!(sha(&through), sha(&d.data));
    let (ruled, other) = (peers_at(&d.peers, RULED), peers_at(&d.peers, OTHER));
    assert!(ruled.len() == 1 && from_client_link(ruled[0]), "{ruled:?}");
    assert!(other.len() == 1 && !from_client_link(other[0]), "{other:?}");
}

/// `--pin 10.0.0.2=b` (b on p1, the link with the higher metric), session up: a download
/// from 10.0.0.2 and 300 UDP echoes come over p1 alone (p0's receive counter moves by
/// less than 2 % of it), from p1's address; with p1 down, a connection to 10.0.0.2 fails
/// with "network unreachable" and is not carried by p0 or the session. Failed with the
/// rule ignored: the session spreads the download over both links.
#[test]
fn a_pinned_destination_goes_over_its_path_only() {
    if skip() {
        return;
    }
    logs();
    let t0 = Instant::now();
    let net = Arc::new(Net::new());
    let key = Arc::new(StaticKeypair::generate().unwrap());
    let d = serve(&net, SIZE, key.public(), false);
    let mut cfg = agent_cfg(&["a=p0", "b=p1"], key, d.server_pub);
    cfg.rules = rules(&[], &[format!("{RULED}=b")]);
    let n = net.clone();
    let r = net.client(move || async move {
        let mut agent = Agent::start(cfg).await.unwrap();
        assert!(
            agent.wait_established(Duration::from_secs(5)).await,
            "no session"
        );
        let socks = agent.socks.unwrap();
        let rx = |n: &Net| [n.rx_bytes(0), n.rx_bytes(1)];
        let r0 = rx(&n);
        let got = get(socks_connect(socks, Target::Ip(RULED, WEB_PORT))
            .await
            .unwrap())
        .await;
        let r1 = rx(&n);
        let (_ctl, client, relay) = associate(socks).await;
        let echoes = udp_rounds(&client, relay, (RULED, ECHO_PORT).into(), 300, 1200).await;
        let r2 = rx(&n);
        n.ip_c(&["link", "set", "p1", "down"]);
        let t = Instant::now();
        let down = socks_connect(socks, Target::Ip(RULED, WEB_PORT))
            .await
            .err();
        let took = t.elapsed();
        let status = agent.status().snapshot();
        (got, [r0, r1, r2], echoes, down, took, status.rules)
    });
    let (got, [r0, r1, r2], echoes, down, took, counts) = r;
    let (tcp0, tcp1) = (r1[0] - r0[0], r1[1] - r0[1]);
    let (udp0, udp1) = (r2[0] - r1[0], r2[1] - r1[1]);
    eprintln!(
        "pin: download of {SIZE} bytes: p0 received {tcp0}, p1 {tcp1}; 300 x 1200-byte echoes: \
         p0 {udp0}, p1 {udp1}; with p1 down: {down:?} after {} ms; rules {counts:?}",
        took.as_millis()
    );
    assert_eq!(sha(&got), sha(&d.data), "pinned download");
    assert!(tcp1 >= SIZE as u64, "p1 carried {tcp1}");
    assert!(
        tcp0 < SIZE as u64 / 50,
        "p0 carried {tcp0} of the pinned download"
    );
    assert!(echoes.len() >= 295, "{} of 300 echoes", echoes.len());
    assert!(echoes
        .iter()
        .all(|a| echo_sender(a) == "10.2.0.1".parse::<IpAddr>().unwrap()));
    assert!(udp1 >= 300 * 1200, "p1 carried {udp1} of the echoes");
    assert!(udp0 < 300 * 1200 / 20, "p0 carried {udp0} of the echoes");
    let peers = peers_at(&d.peers, RULED);
    assert_eq!(
        peers,
        vec!["10.2.0.1".parse::<IpAddr>().unwrap()],
        "from p1's address"
    );
    assert_eq!(
        down,
        Some(3),
        "with its path down a pinned connection fails: unreachable"
    );
    assert!(took < Duration::from_secs(5), "failing took {took:?}");
    // The download and the association; the refused connection opened nothing.
    assert_eq!(counts.get("pin b"), Some(&2), "{counts:?}");
    eprintln!("pin test took {:.1} s", t0.elapsed().as_secs_f64());
}

/// TUN mode, `--bypass 10.0.0.2 --pin bank.example=b`, session up: a plain connection to
/// 10.0.0.2 (no proxy setting) comes from a link address; one to 10.0.0.3 through the
/// server; after a DNS query (carried to the server's resolver) answered www.bank.example
/// = 10.0.0.4, a connection to 10.0.0.4 comes from p1's address (the name the answer gave
/// matched the pin). Failed without the names learned from DNS: 10.0.0.4 was reached
/// through the server.
#[test]
fn tun_mode_applies_rules_by_address_and_by_the_name_dns_gave() {
    if skip() {
        return;
    }
    logs();
    let t0 = Instant::now();
    let net = Net::new();
    let key = Arc::new(StaticKeypair::generate().unwrap());
    let d = serve(&net, 1 << 20, key.public(), true);
    let Some(resolver) = d.resolver else {
        eprintln!("skipped: no nameserver the rig can stand in for");
        return;
    };
    let mut cfg = agent_cfg(&["a=p0", "b=p1"], key, d.server_pub);
    cfg.socks = None;
    cfg.tun = Some(TunSettings {
        name: "rules0".into(),
        routes: Vec::new(),
        exclude: Vec::new(),
    });
    cfg.rules = rules(&[RULED.to_string()], &[format!("{DOMAIN}=b")]);
    let board = d.board.clone();
    let r = net.client(move || async move {
        let mut agent = Agent::start(cfg).await.unwrap();
        assert!(
            agent.wait_established(Duration::from_secs(5)).await,
            "no session"
        );
        let connect = |ip| tokio::net::TcpStream::connect(SocketAddr::from((ip, WEB_PORT)));
        let straight = get(connect(RULED).await.unwrap()).await;
        let through = get(connect(OTHER).await.unwrap()).await;
        let answer = dns_query(resolver, "www.bank.example").await;
        let named = get(connect(NAMED).await.unwrap()).await;
        let refused = egress_refused_through_tun().await;
        let egress = board.snapshot().await.egress;
        (
            (straight, through, answer, named),
            agent.status().snapshot().rules,
            (refused, egress),
        )
    });
    let ((straight, through, answer, named), counts, ((tcp_got, udp_got), egress)) = r;
    // Issue 37: TUN mode's connections and flows obey the server's egress policy.
    assert!(
        tcp_got.is_empty(),
        "{} bytes from {METADATA} through TUN",
        tcp_got.len()
    );
    assert!(!udp_got, "an echo from {METADATA} through TUN");
    assert_eq!(
        (egress.refused_connections, egress.refused_datagrams),
        (1, 1),
        "{egress:?}"
    );
    eprintln!("TUN: DNS answered {answer:?}; rules {counts:?}");
    for (what, got) in [
        ("bypassed", &straight),
        ("session", &through),
        ("pinned", &named),
    ] {
        assert_eq!(sha(got), sha(&d.data), "{what} download");
    }
    assert_eq!(answer, Some(NAMED.into()));
    let at = |ip| peers_at(&d.peers, ip);
    assert!(
        at(RULED).len() == 1 && from_client_link(at(RULED)[0]),
        "{:?}",
        at(RULED)
    );
    assert!(
        at(OTHER).len() == 1 && !from_client_link(at(OTHER)[0]),
        "{:?}",
        at(OTHER)
    );
    assert_eq!(
        at(NAMED),
        vec!["10.2.0.1".parse::<IpAddr>().unwrap()],
        "pinned to p1"
    );
    assert_eq!(counts.get("bypass"), Some(&1), "{counts:?}");
    assert_eq!(counts.get("pin b"), Some(&1), "{counts:?}");
    eprintln!("TUN rules test took {:.1} s", t0.elapsed().as_secs_f64());
}

/// A GET and a datagram to [`METADATA`]'s services (on the server's loopback, refused by
/// its egress policy) through the TUN device: the bytes the GET read, and whether the
/// datagram was answered within 500 ms.
async fn egress_refused_through_tun() -> (Vec<u8>, bool) {
    let mut got = Vec::new();
    let to = SocketAddr::from((METADATA, WEB_PORT));
    if let Ok(Ok(mut s)) =
        tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(to)).await
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got)).await;
    }
    let u = tokio::net::UdpSocket::bind("0.0.0.0:0").await.unwrap();
    u.send_to(b"ping", (METADATA, ECHO_PORT)).await.unwrap();
    let mut buf = [0u8; 64];
    let answered = tokio::time::timeout(Duration::from_millis(500), u.recv(&mut buf)).await;
    (got, answered.is_ok())
}

/// An A query for `name` to `resolver` (through whatever routes the namespace has: here
/// the TUN device); the first address answered.
async fn dns_query(resolver: SocketAddr, name: &str) -> Option<IpAddr> {
    use simple_dns::{rdata::RData, Name, Packet, Question, CLASS, QCLASS, QTYPE, TYPE};
    let mut q = Packet::new_query(77);
    q.questions.push(Question::new(
        Name::new(name).unwrap(),
        QTYPE::TYPE(TYPE::A),
        QCLASS::CLASS(CLASS::IN),
        false,
    ));
    let s = tokio::net::UdpSocket::bind("0.0.0.0:0").await.unwrap();
    let mut buf = vec![0u8; 1500];
    for _ in 0..3 {
        s.send_to(&q.build_bytes_vec().unwrap(), resolver)
            .await
            .unwrap();
        if let Ok(Ok((n, _))) =
            tokio::time::timeout(Duration::from_secs(1), s.recv_from(&mut buf)).await
        {
            let p = Packet::parse(&buf[..n]).ok()?;
            return p.answers.iter().find_map(|a| match &a.rdata {
                RData::A(x) => Some(std::net::Ipv4Addr::from(x.address).into()),
                _ => None,
            });
        }
    }
    None
}
