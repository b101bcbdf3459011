//! Issue 24, item 7: a router-mode agent's UDP and DNS (root, network namespaces;
//! `rules_rig`, with `nsrig`'s LAN behind the client namespace). UDP that nftables hands to
//! the agent with `tproxy` is carried through the server and answered from each
//! destination's address; the agent's DNS port (`--dns`) answers over UDP and TCP through
//! the server's resolver; TUN mode carries DNS over TCP to the server's resolver and learns
//! from its answers. Each test prints why it skips without root or namespaces.

use crate::nsrig::{agent_cfg, on, skip, Net, LAN_HOST};
use crate::rules_rig::*;
use braid_crypto::StaticKeypair;
use braid_net::agent::{Agent, TunSettings};
use braid_net::rules::Rules;
use braid_testbed::cmd::{exec_ns, ip_ns};
use simple_dns::{rdata::RData, Name, Packet, PacketFlag, Question, CLASS, QCLASS, QTYPE, TYPE};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

/// The redirect port, TCP and UDP.
const REDIRECT_PORT: u16 = 7171;
/// Queries the LAN host sends, over three destinations and two sockets.
const QUERIES: usize = 120;
const QUERY_LEN: usize = 200;

fn logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("BRAID_TEST_LOG"))
        .with_test_writer()
        .try_init();
}

/// The rules docs/deployment.md gives for a LAN's UDP: tproxy to the redirect port, and
/// the marked packets delivered locally.
fn tproxy_rules(ns: &str) {
    let rules = format!(
        "table ip braid_tproxy {{\n chain prerouting {{\n  type filter hook prerouting \
         priority mangle; policy accept;\n  iifname \"lan0\" meta l4proto udp tproxy to \
         :{REDIRECT_PORT} meta mark set 0x1 accept\n }}\n}}\n"
    );
    let file = std::env::temp_dir().join(format!("udpr-tproxy-{}.nft", std::process::id()));
    std::fs::write(&file, rules).unwrap();
    let r = exec_ns(ns, "nft", &["-f", &file.display().to_string()]);
    let _ = std::fs::remove_file(&file);
    r.unwrap();
    ip_ns(ns, &["rule", "add", "fwmark", "0x1", "lookup", "100"]).unwrap();
    ip_ns(
        ns,
        &[
            "route",
            "add",
            "local",
            "0.0.0.0/0",
            "dev",
            "lo",
            "table",
            "100",
        ],
    )
    .unwrap();
}

/// One LAN host's echo queries (two sockets, three destinations in turn, each asked up to
/// 3 times): (destination, who answered, the answer) for each answered one.
async fn lan_queries() -> Vec<(SocketAddr, SocketAddr, Vec<u8>)> {
    let dests = [OTHER, NAMED, RULED].map(|ip| SocketAddr::from((ip, ECHO_PORT)));
    let socks = [
        UdpSocket::bind("0.0.0.0:0").await.unwrap(),
        UdpSocket::bind("0.0.0.0:0").await.unwrap(),
    ];
    let mut got = Vec::new();
    let mut buf = vec![0u8; 2048];
    for i in 0..QUERIES {
        let (s, to) = (&socks[i % 2], dests[i % 3]);
        let mut q = format!("q{i} ").into_bytes();
        q.resize(QUERY_LEN, b'x');
        for _ in 0..3 {
            s.send_to(&q, to).await.unwrap();
            let wait = tokio::time::timeout(Duration::from_millis(500), s.recv_from(&mut buf));
            if let Ok(Ok((n, from))) = wait.await {
                got.push((to, from, buf[..n].to_vec()));
                break;
            }
        }
    }
    got
}

/// Router mode without a TUN device: a LAN host's UDP to three destinations, which nftables
/// hands to the agent (`tproxy`), is carried by the session (the server's sessions carried
/// every byte of it; the client namespace does not forward and the destinations have no
/// route to the LAN, so there is no other way) and every answer reaches the host from the
/// address it asked. Failed with answers sent from the agent's own socket: the sources
/// were wrong.
#[test]
fn a_lans_udp_handed_over_by_tproxy_goes_through_the_server_and_is_answered_from_each_destination()
{
    if skip() {
        return;
    }
    logs();
    let t0 = Instant::now();
    let net = Net::with_prefix("udpr");
    let lan = net.lan();
    let key = Arc::new(StaticKeypair::generate().unwrap());
    let d = serve(&net, 1024, key.public(), false);
    tproxy_rules(&net.c);
    let mut cfg = agent_cfg(&["a=p0", "b=p1"], key, d.server_pub);
    cfg.socks = None;
    cfg.redirect = Some(SocketAddr::from(([0, 0, 0, 0], REDIRECT_PORT)));
    let (board, lan_ns) = (d.board.clone(), lan.ns.clone());
    let (got, carried, took) = net.client(move || async move {
        let mut agent = Agent::start(cfg).await.unwrap();
        assert!(
            agent.wait_established(Duration::from_secs(5)).await,
            "no session"
        );
        let before = session_bytes(&board).await;
        let t = Instant::now();
        let got = tokio::task::spawn_blocking(move || on(&lan_ns, lan_queries))
            .await
            .unwrap();
        let took = t.elapsed();
        // The server's status counts what its sessions carried.
        tokio::time::sleep(Duration::from_millis(300)).await;
        (got, session_bytes(&board).await - before, took)
    });
    eprintln!(
        "redirected UDP: {} of {QUERIES} answered in {:.2} s; the server's sessions carried {carried} bytes",
        got.len(),
        took.as_secs_f64()
    );
    assert_eq!(got.len(), QUERIES, "every query answered");
    for (asked, from, answer) in &got {
        assert_eq!(from, asked, "an answer from the address asked");
        assert_eq!(answer.len(), QUERY_LEN);
        let sender = echo_sender(answer);
        assert!(
            !from_client_link(sender) && sender != LAN_HOST.parse::<IpAddr>().unwrap(),
            "the destination was reached from the braid server, not by {sender}"
        );
    }
    assert!(
        carried >= (2 * QUERIES * QUERY_LEN) as u64,
        "the server carried {carried} bytes"
    );
    eprintln!("tproxy test took {:.1} s", t0.elapsed().as_secs_f64());
}

/// An A query for `name` with id `id`.
fn query(id: u16, name: &str) -> Vec<u8> {
    let mut q = Packet::new_query(id);
    q.set_flags(PacketFlag::RECURSION_DESIRED);
    q.questions.push(Question::new(
        Name::new(name).unwrap(),
        QTYPE::TYPE(TYPE::A),
        QCLASS::CLASS(CLASS::IN),
        false,
    ));
    q.build_bytes_vec().unwrap()
}

/// An answer's id, whether it is truncated, and its addresses.
fn read_answer(a: &[u8]) -> (u16, bool, Vec<Ipv4Addr>) {
    let p = Packet::parse(a).expect("a DNS answer");
    let ips = p
        .answers
        .iter()
        .filter_map(|r| match &r.rdata {
            RData::A(x) => Some(Ipv4Addr::from(x.address)),
            _ => None,
        })
        .collect();
    (p.id(), p.has_flags(PacketFlag::TRUNCATION), ips)
}

/// `name` asked over UDP at `to` (up to 3 times): the answer.
async fn udp_ask(to: SocketAddr, id: u16, name: &str) -> (u16, bool, Vec<Ipv4Addr>) {
    let s = UdpSocket::bind("0.0.0.0:0").await.unwrap();
    let mut buf = vec![0u8; 4096];
    for attempt in 0..3 {
        s.send_to(&query(id, name), to).await.unwrap();
        let wait = tokio::time::timeout(Duration::from_secs(1), s.recv_from(&mut buf));
        if let Ok(Ok((n, from))) = wait.await {
            assert_eq!(from, to, "the answer comes from the address asked");
            return read_answer(&buf[..n]);
        }
        eprintln!(
            "no answer within 1 s from {to} for {name} (try {})",
            attempt + 1
        );
    }
    panic!("no answer over UDP from {to} for {name}");
}

/// `names` asked over one TCP connection to `to`, all queries sent first: the answers.
async fn tcp_ask(to: SocketAddr, names: &[&str]) -> Vec<(u16, bool, Vec<Ipv4Addr>)> {
    let mut s = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(to))
        .await
        .expect("TCP connect timed out")
        .expect("TCP connect");
    let mut out = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let q = query(100 + i as u16, n);
        out.extend_from_slice(&(q.len() as u16).to_be_bytes());
        out.extend_from_slice(&q);
    }
    s.write_all(&out).await.unwrap();
    let mut answers = Vec::new();
    for _ in names {
        let read = async {
            let mut len = [0u8; 2];
            s.read_exact(&mut len).await.unwrap();
            let mut a = vec![0u8; usize::from(u16::from_be_bytes(len))];
            s.read_exact(&mut a).await.unwrap();
            a
        };
        let a = tokio::time::timeout(Duration::from_secs(5), read)
            .await
            .expect("a TCP answer within 5 s");
        answers.push(read_answer(&a));
    }
    answers
}

fn big_answer() -> Vec<Ipv4Addr> {
    (0..BIG_COUNT)
        .map(|i| (u32::from(BIG_FIRST) + i).into())
        .collect()
}

/// `--dns`, with `--pin bank.example=b`: a query over UDP to the agent's DNS port is
/// answered by the server's resolver (the client namespace has no route to it); a large
/// answer comes truncated over UDP, as a resolver sends it, and whole over TCP, two queries
/// in one connection. The agent learns from both: a SOCKS5 CONNECT to the address the UDP
/// answer gave, and one to the first the TCP answer gave, go over p1 alone. Failed before
/// the server passed streams to its resolver: the TCP connection was closed unanswered.
#[test]
fn the_agents_dns_port_answers_over_udp_and_tcp_through_the_servers_resolver() {
    if skip() {
        return;
    }
    logs();
    let t0 = Instant::now();
    let net = Net::with_prefix("udpr");
    let key = Arc::new(StaticKeypair::generate().unwrap());
    let d = serve(&net, 1024, key.public(), false);
    net.ip_c(&["route", "add", &format!("{BIG_FIRST}/32"), "dev", "p1"]);
    let mut cfg = agent_cfg(&["a=p0", "b=p1"], key, d.server_pub);
    cfg.dns = Some("127.0.0.1:0".parse().unwrap());
    cfg.rules = Rules::parse(&[], &[format!("{DOMAIN}=b")], &["a", "b"]).unwrap();
    let (udp, big_udp, tcp) = net.client(move || async move {
        let mut agent = Agent::start(cfg).await.unwrap();
        assert!(
            agent.wait_established(Duration::from_secs(5)).await,
            "no session"
        );
        let (at, socks) = (agent.dns.expect("the DNS port"), agent.socks.unwrap());
        let udp = udp_ask(at, 7, "www.bank.example").await;
        let big_udp = udp_ask(at, 8, BIG).await;
        get(socks_connect(socks, Target::Ip(NAMED, WEB_PORT))
            .await
            .unwrap())
        .await;
        let tcp = tcp_ask(at, &["www.bank.example", BIG]).await;
        get(socks_connect(socks, Target::Ip(BIG_FIRST, WEB_PORT))
            .await
            .unwrap())
        .await;
        (udp, big_udp, tcp)
    });
    assert_eq!(udp, (7, false, vec![NAMED]), "over UDP");
    assert_eq!(big_udp, (8, true, Vec::new()), "truncated over UDP");
    assert_eq!(
        tcp,
        vec![(100, false, vec![NAMED]), (101, false, big_answer())],
        "over TCP"
    );
    let p1 = vec!["10.2.0.1".parse::<IpAddr>().unwrap()];
    assert_eq!(peers_at(&d.peers, NAMED), p1, "pinned by the UDP answer");
    assert_eq!(
        peers_at(&d.peers, BIG_FIRST),
        p1,
        "pinned by the TCP answer"
    );
    eprintln!("--dns test took {:.1} s", t0.elapsed().as_secs_f64());
}

/// TUN mode with `--pin bank.example=b`: a large answer comes truncated over UDP; asked
/// again over TCP, of an address with no DNS server (10.0.0.3), the server's resolver
/// answers it whole, and the agent learns from it: a connection to the first address
/// answered goes over p1 alone. Failed with TCP to port 53 carried to the address asked:
/// the connection was refused.
#[test]
fn tun_mode_carries_dns_over_tcp_to_the_servers_resolver_and_learns_from_it() {
    if skip() {
        return;
    }
    logs();
    let t0 = Instant::now();
    let net = Net::with_prefix("udpr");
    let key = Arc::new(StaticKeypair::generate().unwrap());
    let d = serve(&net, 1 << 16, key.public(), true);
    let mut cfg = agent_cfg(&["a=p0", "b=p1"], key, d.server_pub);
    cfg.socks = None;
    cfg.tun = Some(TunSettings {
        name: "udpr0".into(),
        routes: Vec::new(),
        exclude: Vec::new(),
    });
    cfg.rules = Rules::parse(&[], &[format!("{DOMAIN}=b")], &["a", "b"]).unwrap();
    let asked = SocketAddr::from((OTHER, 53));
    let (udp, tcp, body) = net.client(move || async move {
        let mut agent = Agent::start(cfg).await.unwrap();
        assert!(
            agent.wait_established(Duration::from_secs(5)).await,
            "no session"
        );
        let udp = udp_ask(asked, 9, BIG).await;
        let tcp = tcp_ask(asked, &[BIG]).await;
        let web = TcpStream::connect(SocketAddr::from((BIG_FIRST, WEB_PORT)))
            .await
            .unwrap();
        (udp, tcp, get(web).await)
    });
    assert_eq!(udp, (9, true, Vec::new()), "truncated over UDP");
    assert_eq!(tcp, vec![(100, false, big_answer())], "whole over TCP");
    assert_eq!(body.len(), d.data.len());
    assert_eq!(
        peers_at(&d.peers, BIG_FIRST),
        vec!["10.2.0.1".parse::<IpAddr>().unwrap()],
        "pinned to p1 by the name the TCP answer gave"
    );
    eprintln!(
        "TUN DNS-over-TCP test took {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}
