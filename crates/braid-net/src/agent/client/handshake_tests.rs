//! The agent's handshake decisions without sockets: each test plays the servers with
//! braid-crypto's responder and feeds their answers (or none) at chosen instants.

use super::*;
use braid_crypto::{
    key_refusal, session_limit_refusal, CookieChecker, ReplayGuard, ServerHandshake,
};

const NOW_MS: u64 = 1_700_000_000_000;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A server: its key and replay guard.
struct Server {
    key: StaticKeypair,
    guard: ReplayGuard,
}

impl Server {
    fn answer(&mut self, agent: &StaticKeypair, msg1: &[u8]) -> Vec<u8> {
        let (k, g) = (&self.key, &mut self.guard);
        ServerHandshake::respond(k, &[agent.public()], g, msg1, NOW_MS, 60_000)
            .unwrap()
            .2
    }
}

/// An agent with `paths` (name, relayed) shaking hands with `servers` (all with one key,
/// as servers of one deployment share it); every path to every server.
struct Rig {
    agent: Arc<StaticKeypair>,
    server: Server,
    h: Handshake,
    t0: Instant,
}

fn rig(paths: &[(&str, bool)], servers: &[&str], rounds: u32) -> Rig {
    let server = Server {
        key: StaticKeypair::generate().unwrap(),
        guard: ReplayGuard::new(),
    };
    let agent = Arc::new(StaticKeypair::generate().unwrap());
    let servers: Vec<SocketAddr> = servers.iter().map(|s| addr(s)).collect();
    let mut pairs = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        for &server in &servers {
            let peer = if p.1 { addr("127.0.0.9:9") } else { server };
            pairs.push(Pair {
                path: i,
                server,
                peer,
            });
        }
    }
    let setup = Setup {
        key: agent.clone(),
        server_pub: server.key.public(),
        ciphers: braid_crypto::Ciphers::auto(),
        sid: 0x5eed,
        now_ms: NOW_MS,
        paths: (paths.iter().enumerate())
            .map(|(i, p)| HsPath {
                name: p.0.to_string(),
                id: i as u8,
                relayed: p.1,
            })
            .collect(),
        pairs,
        servers,
        rounds,
    };
    let t0 = Instant::now();
    let h = Handshake::new(setup, t0).unwrap();
    Rig {
        agent,
        server,
        h,
        t0,
    }
}

impl Rig {
    fn sent(&mut self) -> Vec<Transmit> {
        std::iter::from_fn(|| self.h.poll_transmit()).collect()
    }

    /// Let time run to the next deadline.
    fn expire(&mut self) -> Instant {
        let d = self.h.poll_timeout().expect("a deadline");
        self.h.handle_timeout(d);
        d
    }
}

#[test]
fn a_handshake_answered_on_one_path_and_not_the_other_wins_on_the_answered_path() {
    let mut r = rig(&[("wifi", false), ("lte", false)], &["10.0.0.1:4433"], 6);
    let sent = r.sent();
    assert_eq!(sent.len(), 2, "message 1 on both paths: {sent:?}");
    assert!(sent.iter().all(|t| t.via == Via::Udp));
    // Only lte's message 1 reaches the server; its answer comes back 20 ms later.
    let lte = sent.iter().find(|t| t.path == 1).unwrap();
    let answer = r.server.answer(&r.agent, &lte.packet);
    r.h.handle_answer(r.t0 + ms(20), 1, lte.to, &answer, None);
    // Wifi asked the same address: the agent listens a little longer for its answer (a
    // balancer could have sent it to another server), then decides.
    assert!(!r.h.is_done(), "decided before wifi had its grace");
    let grace = r.expire() - (r.t0 + ms(20));
    assert_eq!(grace, ms(80), "four times the answer's 20 ms");
    let won = r.h.outcome().expect("decided").expect("won");
    assert_eq!((won.path, won.server, won.tcp), (1, lte.to, None));
}

#[test]
fn a_cookie_reply_is_answered_at_once_with_mac2_and_then_the_handshake_succeeds() {
    let mut r = rig(&[("wifi", false)], &["10.0.0.1:4433"], 6);
    let server_pub = r.server.key.public();
    let mut cookies = CookieChecker::new(&server_pub, NOW_MS).unwrap();
    let m1 = r.sent().remove(0);
    let from = addr("192.0.2.7:5000"); // the agent as the server sees it
    assert!(!cookies.check_mac2(&m1.packet, from, NOW_MS), "no mac2 yet");
    let reply = cookies.cookie_reply(&m1.packet, from, NOW_MS).unwrap();
    r.h.handle_answer(r.t0 + ms(5), 0, m1.to, &reply, None);
    let again = r.sent();
    assert_eq!(
        again.len(),
        1,
        "message 1 again at once, not at the next round"
    );
    assert_eq!((again[0].via, again[0].to), (Via::Udp, m1.to));
    assert!(
        cookies.check_mac2(&again[0].packet, from, NOW_MS),
        "with mac2"
    );
    let answer = r.server.answer(&r.agent, &again[0].packet);
    r.h.handle_answer(r.t0 + ms(10), 0, m1.to, &answer, None);
    let won =
        r.h.outcome()
            .expect("decided at once: no other path")
            .expect("won");
    assert_eq!(won.path, 0);
}

#[test]
fn a_cookie_reply_over_tcp_is_followed_down_the_same_connection() {
    let mut r = rig(&[("wifi", false)], &["10.0.0.1:4433"], 6);
    let server_pub = r.server.key.public();
    r.sent();
    r.expire(); // round 1: TCP too
    let tcp = r
        .sent()
        .into_iter()
        .find(|t| t.via == Via::TcpConnect)
        .unwrap();
    let mut cookies = CookieChecker::new(&server_pub, NOW_MS).unwrap();
    let from = addr("192.0.2.7:5000");
    let reply = cookies.cookie_reply(&tcp.packet, from, NOW_MS).unwrap();
    r.h.handle_answer(r.t0 + ms(600), 0, tcp.to, &reply, Some(7));
    let again = r.sent();
    assert_eq!(again.len(), 1);
    assert_eq!((again[0].via, again[0].to), (Via::Tcp(7), tcp.to));
    let answer = r.server.answer(&r.agent, &again[0].packet);
    r.h.handle_answer(r.t0 + ms(610), 0, tcp.to, &answer, Some(7));
    let won = r.h.outcome().unwrap().unwrap();
    assert_eq!(
        won.tcp,
        Some(7),
        "the session's first path is that connection"
    );
}

/// Two servers answer on path wifi; the one whose answer comes first (the lower RTT) carries
/// the session, and the slower one's, within the wait for lte's answer, changes nothing.
fn two_servers_answering(fast: &str, slow: &str) -> SocketAddr {
    let servers = ["10.0.0.1:4433", "10.0.0.2:4433"];
    let mut r = rig(&[("wifi", false), ("lte", false)], &servers, 6);
    let sent = r.sent();
    assert_eq!(sent.len(), 4, "message 1 to each server on each path");
    let to = |s: &str| {
        (sent.iter())
            .find(|t| t.path == 0 && t.to == addr(s))
            .unwrap()
            .clone()
    };
    let (f, s) = (to(fast), to(slow));
    let af = r.server.answer(&r.agent, &f.packet);
    r.server.guard = ReplayGuard::new(); // the other server's own
    let as_ = r.server.answer(&r.agent, &s.packet);
    r.h.handle_answer(r.t0 + ms(5), 0, f.to, &af, None);
    r.h.handle_answer(r.t0 + ms(15), 0, s.to, &as_, None);
    r.h.handle_timeout(r.t0 + ms(500));
    r.h.outcome().expect("decided").expect("won").server
}

#[test]
fn of_two_servers_answering_the_one_with_the_lower_rtt_is_chosen() {
    let (a, b) = ("10.0.0.1:4433", "10.0.0.2:4433");
    assert_eq!(two_servers_answering(a, b), addr(a));
    assert_eq!(two_servers_answering(b, a), addr(b));
}

#[test]
fn udp_unanswered_tries_tcp_from_the_second_round_and_rounds_double_to_4_s() {
    let mut r = rig(&[("wifi", false), ("relayed", true)], &["10.0.0.1:4433"], 6);
    let first = r.sent();
    assert!(first.iter().all(|t| t.via == Via::Udp), "round 0: UDP only");
    let mut t = r.t0;
    let mut waits = Vec::new();
    let mut tcp_rounds = Vec::new();
    for round in 1..6 {
        let d = r.expire();
        waits.push((d - t).as_millis());
        t = d;
        let sent = r.sent();
        let tcp: Vec<_> = sent.iter().filter(|x| x.via == Via::TcpConnect).collect();
        if !tcp.is_empty() {
            tcp_rounds.push(round);
            assert_eq!(tcp.len(), 1, "never over TCP around a relay");
            assert_eq!((tcp[0].path, tcp[0].to), (0, addr("10.0.0.1:4433")));
        }
        assert_eq!(sent.iter().filter(|x| x.via == Via::Udp).count(), 2);
    }
    assert_eq!(
        tcp_rounds,
        [1],
        "one TCP connection per pair, opened in round 1"
    );
    let d = r.expire();
    waits.push((d - t).as_millis());
    assert_eq!(waits, [500, 1000, 2000, 4000, 4000, 4000]);
    let e = r.h.outcome().unwrap().err().expect("no answer");
    assert!(
        e.contains("no handshake answer") && e.contains("wifi"),
        "{e}"
    );
}

#[test]
fn every_server_at_its_session_limit_ends_the_handshake_at_once() {
    let mut r = rig(&[("wifi", false)], &["10.0.0.1:4433"], 6);
    let m1 = r.sent().remove(0);
    let refusal = session_limit_refusal(&parse_header(&m1.packet).unwrap());
    r.h.handle_answer(r.t0 + ms(3), 0, m1.to, &refusal, None);
    let e = r.h.outcome().expect("decided").err().unwrap();
    assert!(e.contains("session limit"), "{e}");
}

#[test]
fn answers_from_elsewhere_or_for_another_session_are_ignored() {
    let mut r = rig(&[("wifi", false)], &["10.0.0.1:4433"], 6);
    let m1 = r.sent().remove(0);
    let answer = r.server.answer(&r.agent, &m1.packet);
    // From an address the path did not send to: nothing.
    r.h.handle_answer(r.t0 + ms(3), 0, addr("10.9.9.9:4433"), &answer, None);
    assert!(!r.h.is_done());
    r.h.handle_answer(r.t0 + ms(4), 0, m1.to, &answer, None);
    assert!(r.h.outcome().unwrap().is_ok());
}

/// Regression (issue 38 item 4): with its key missing from the server's agents file the
/// agent fell back to TCP and gave a generic checklist. The server's key refusal ends the
/// handshake at once with what to do: which key, which file.
#[test]
fn a_key_refusal_says_the_key_is_not_accepted_and_what_to_copy_where() {
    let mut r = rig(&[("wifi", false), ("lte", false)], &["10.0.0.1:4433"], 6);
    let m1 = r.sent().remove(0);
    let refusal = key_refusal(&parse_header(&m1.packet).unwrap());
    r.h.handle_answer(r.t0 + ms(3), m1.path, m1.to, &refusal, None);
    let e = r.h.outcome().expect("decided at once").err().unwrap();
    let key = r.agent.public().to_base64();
    assert!(e.contains("do not accept this agent's key"), "{e}");
    assert!(e.contains(&format!("add the line `{key}`")), "{e}");
    assert!(e.contains("/etc/braid/agents.txt"), "{e}");
    assert!(!e.contains("blocks UDP"), "{e}");
}

/// Regression (issue 38 item 4): with a wrong `server_pub` the server drops every message
/// 1 without a word (mac1 is for another key), and the agent, whose TCP connection to the
/// port was accepted, gave the generic checklist. It now says the network is fine and the
/// server key most likely does not match.
#[test]
fn silence_from_a_server_whose_port_took_tcp_blames_server_pub_not_the_network() {
    let mut r = rig(&[("wifi", false)], &["10.0.0.1:4433"], 3);
    r.sent();
    r.expire();
    let tcp = r.sent();
    let c = tcp.iter().find(|t| t.via == Via::TcpConnect).expect("TCP");
    r.h.handle_tcp_connected(c.to);
    while r.h.poll_timeout().is_some() {
        r.expire();
        r.sent();
    }
    let e = r.h.outcome().unwrap().err().expect("no answer");
    assert!(e.contains("took a TCP connection on their port"), "{e}");
    assert!(e.contains("server_pub"), "{e}");
    assert!(e.contains("/etc/braid/server.pub"), "{e}");
}
