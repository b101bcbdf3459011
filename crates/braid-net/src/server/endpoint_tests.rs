//! The handshake policy through the endpoint, without sockets (docs/protocol.md section 16).

use super::*;
use crate::server::logs::Dropped;
use braid_crypto::{write_header, ClientHandshake};
use braid_crypto::{ReplayGuard, StaticKeypair};
use std::sync::RwLock;
use std::time::Duration;

struct H(Vec<SocketAddr>);

impl SessionHandle for H {
    fn has_address(&self, a: SocketAddr) -> bool {
        self.0.contains(&a)
    }
}

struct Rig {
    ep: Endpoint<H>,
    server: Arc<StaticKeypair>,
    agents: Vec<StaticKeypair>,
    counters: Arc<HandshakeCounters>,
    t0: Instant,
    ms: u64,
}

fn rig(max_sessions: usize, load_threshold: u64, burst: u32) -> Rig {
    rig_on(max_sessions, load_threshold, burst, Steering::new(1, 1), 0)
}

fn rig_on(max: usize, load: u64, burst: u32, steering: Steering, worker: usize) -> Rig {
    rig_with(
        max,
        load,
        burst,
        steering,
        worker,
        braid_crypto::Ciphers::auto(),
    )
}

fn rig_with(
    max: usize,
    load: u64,
    burst: u32,
    steering: Steering,
    worker: usize,
    ciphers: braid_crypto::Ciphers,
) -> Rig {
    let server = Arc::new(StaticKeypair::generate().unwrap());
    let agents: Vec<_> = (0..2).map(|_| StaticKeypair::generate().unwrap()).collect();
    let keys = agents.iter().map(|a| a.public()).collect();
    let counters: Arc<HandshakeCounters> = Arc::default();
    let ms = 1_700_000_000_000;
    let cfg = SharedConfig {
        key: server.clone(),
        unicast: None,
        ciphers,
        max_sessions: max,
        rate: (80, burst),
        load_threshold: load,
        first_exchange_timeout: Duration::from_secs(10),
    };
    let auth = AuthorizedKeys::new(Arc::new(RwLock::new(keys)), None);
    let shared = Shared::new(cfg, ReplayGuard::new(), auth, counters.clone());
    Rig {
        ep: Endpoint::new(Arc::new(shared), steering, worker, ms).unwrap(),
        server,
        agents,
        counters,
        t0: Instant::now(),
        ms,
    }
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

impl Rig {
    /// Message 1 of agent `a` for session `sid`, its clock `dt` ms after the server's.
    fn m1(&self, a: usize, sid: u64, dt: u64) -> (ClientHandshake, Vec<u8>) {
        let k = &self.agents[a];
        ClientHandshake::new(k, &self.server.public(), sid, 0, self.ms + dt).unwrap()
    }

    fn handle(&mut self, from: SocketAddr, pkt: &[u8]) -> Outcome<'_, H> {
        self.ep.handle(self.t0, self.ms, from, pkt)
    }

    /// Accept session `sid` of agent `a` from `from` and start it with its first packet,
    /// as the worker would; returns message 2.
    fn accept(&mut self, a: usize, sid: u64, from: SocketAddr, dt: u64) -> Vec<u8> {
        let reply = self.handshake(a, sid, from, dt);
        self.start(sid, from, H(vec![from]));
        reply
    }

    /// Accept session `sid` of agent `a` from `from`; returns message 2.
    fn handshake(&mut self, a: usize, sid: u64, from: SocketAddr, dt: u64) -> Vec<u8> {
        let (_, m1) = self.m1(a, sid, dt);
        self.handshake_with(&m1, sid, from)
    }

    /// Accept message 1 `m1` of session `sid` from `from`; returns message 2.
    fn handshake_with(&mut self, m1: &[u8], sid: u64, from: SocketAddr) -> Vec<u8> {
        match self.handle(from, m1) {
            Outcome::Accepted { reply, to, id, .. } => {
                assert_eq!((to, id), (from, sid));
                reply.to_vec()
            }
            _ => panic!("not accepted"),
        }
    }

    /// Session `sid`'s first transport packet from `from`: its task is made (`handle`).
    fn start(&mut self, sid: u64, from: SocketAddr, handle: H) -> NewSession {
        let p = transport(sid);
        let Outcome::Start { session, .. } = self.handle(from, &p) else {
            panic!("the first packet did not start the session");
        };
        self.ep.started(sid, handle);
        session
    }
}

/// A transport packet of session `sid` (its contents are the session task's to check).
fn transport(sid: u64) -> Vec<u8> {
    let mut p = Vec::new();
    write_header(&mut p, PacketType::Transport, sid, 0, 1).unwrap();
    p.resize(60, 0);
    p
}

fn dropped<H>(o: &Outcome<'_, H>) -> Option<Dropped> {
    match o {
        Outcome::Drop(d) => Some(*d),
        _ => None,
    }
}

#[test]
fn a_retransmitted_message_1_gets_the_cached_reply_only_from_a_known_address() {
    let mut r = rig(16, 1000, 10);
    let a = addr("192.0.2.1:5000");
    let (_, m1) = r.m1(0, 7, 0);
    let reply = r.handshake_with(&m1, 7, a);
    r.start(7, a, H(vec![a, addr("198.51.100.9:7")]));
    match r.handle(a, &m1) {
        Outcome::Send { to, bytes } => assert_eq!((to, bytes), (a, reply.clone())),
        _ => panic!("no cached reply"),
    }
    // From another path address of the session too, but never from a stranger.
    assert!(matches!(
        r.handle(addr("198.51.100.9:7"), &m1),
        Outcome::Send { .. }
    ));
    let o = r.handle(addr("203.0.113.5:5000"), &m1);
    assert_eq!(dropped(&o), Some(Dropped::ExistingSession));
    assert_eq!(HandshakeCounters::get(&r.counters.accepted), 1);
    assert!(
        reply.len() < m1.len(),
        "the reply is smaller than the request"
    );
}

#[test]
fn a_flood_from_one_address_is_rate_limited() {
    let mut r = rig(1000, 1000, 5);
    let a = addr("192.0.2.1:5000");
    let mut accepted = 0;
    for i in 0..20u64 {
        let (_, m1) = r.m1(0, 100 + i, i + 1);
        match r.handle(a, &m1) {
            Outcome::Accepted { .. } => accepted += 1,
            o => assert_eq!(dropped(&o), Some(Dropped::RateLimited)),
        }
    }
    assert_eq!(accepted, 5, "the burst, then nothing at the same instant");
    assert_eq!(HandshakeCounters::get(&r.counters.rate_limited), 15);
    // Another address has its own budget.
    let (_, m1) = r.m1(1, 999, 1);
    assert!(matches!(
        r.handle(addr("192.0.2.2:1"), &m1),
        Outcome::Accepted { .. }
    ));
}

#[test]
fn under_load_a_cookie_comes_first_and_message_1_with_mac2_gets_in() {
    let mut r = rig(1000, 2, 100);
    let a = addr("192.0.2.1:5000");
    // Two handshake packets a second are fine; the third is load.
    for i in 0..2u64 {
        r.accept(0, 10 + i, a, i + 1);
    }
    let (mut hs, m1) = r.m1(1, 42, 1);
    let cookie = match r.handle(a, &m1) {
        Outcome::Send { to, bytes } => {
            assert_eq!(to, a);
            bytes
        }
        _ => panic!("under load: a cookie reply, no Diffie-Hellman"),
    };
    assert_eq!(parse_header(&cookie).unwrap().ptype, PacketType::Cookie);
    assert_eq!(HandshakeCounters::get(&r.counters.cookies), 1);
    hs.handle_cookie_reply(&cookie).unwrap();
    let m1 = hs.message1();
    assert!(matches!(r.handle(a, &m1), Outcome::Accepted { .. }));
    // The cookie is bound to the address it was sent to.
    let (mut hs, m1) = r.m1(1, 43, 2);
    let Outcome::Send { bytes, .. } = r.handle(a, &m1) else {
        panic!("no cookie")
    };
    hs.handle_cookie_reply(&bytes).unwrap();
    let o = r.handle(addr("192.0.2.77:5000"), &hs.message1());
    assert!(matches!(o, Outcome::Send { .. }), "another cookie, no work");
}

/// Regression for "an agent whose --cipher the server does not accept only times out": an
/// authorized agent that offers no cipher the server accepts is told which the server
/// accepts (packet type 6), and no session is made; an agent that offers one gets in.
#[test]
fn an_agent_offering_no_accepted_cipher_is_told_which_the_server_accepts() {
    use braid_crypto::{read_cipher_refusal, Cipher, Ciphers};
    let aes = Ciphers::only(Cipher::Aes256Gcm);
    let mut r = rig_with(4, 1000, 10, Steering::new(1, 1), 0, aes.clone());
    let offer = |r: &Rig, sid, dt, c| {
        let k = &r.agents[0];
        ClientHandshake::offering(k, &r.server.public(), sid, 2, r.ms + dt, &Ciphers::only(c))
            .unwrap()
            .1
    };
    let m1 = offer(&r, 5, 1, Cipher::ChaCha20Poly1305);
    match r.handle(addr("192.0.2.1:5000"), &m1) {
        Outcome::Send { to, bytes } => {
            assert_eq!(to, addr("192.0.2.1:5000"));
            assert!(bytes.len() < m1.len(), "never more bytes than message 1");
            let (h, accepted) = read_cipher_refusal(&bytes).expect("a cipher refusal");
            assert_eq!((h.session_id, h.path_id), (5, 2));
            assert_eq!(accepted, aes.as_slice());
        }
        _ => panic!("not told"),
    }
    assert_eq!(HandshakeCounters::get(&r.counters.refused), 1);
    assert_eq!(HandshakeCounters::get(&r.counters.accepted), 0);
    // An unauthorized key offering the wrong cipher learns nothing of the ciphers: it is
    // told its key is not accepted (issue 38 item 4).
    let stranger = StaticKeypair::generate().unwrap();
    let (_, m1) = ClientHandshake::offering(
        &stranger,
        &r.server.public(),
        6,
        0,
        r.ms + 2,
        &Ciphers::only(Cipher::ChaCha20Poly1305),
    )
    .unwrap();
    match r.handle(addr("192.0.2.1:5000"), &m1) {
        Outcome::Send { bytes, .. } => {
            assert_eq!(read_cipher_refusal(&bytes), None, "no cipher list");
            assert_eq!(parse_header(&bytes).unwrap().ptype, PacketType::KeyRefused);
        }
        _ => panic!("not told"),
    }
    let m1 = offer(&r, 7, 3, Cipher::Aes256Gcm);
    assert!(matches!(
        r.handle(addr("192.0.2.1:5000"), &m1),
        Outcome::Accepted { .. }
    ));
}

/// Regression (issue 38 item 4): a key missing from the agents file was dropped without a
/// word, and its agent took the silence for a network that blocks UDP. A fresh message 1
/// of a key that is not authorized gets a 12-byte key refusal naming its session and path
/// (never more bytes than it); one of an authorized key made for another server key (a
/// wrong `server_pub`: no valid mac1) still gets nothing.
#[test]
fn a_key_not_authorized_is_told_so_and_a_wrong_server_key_gets_nothing() {
    let mut r = rig(4, 1000, 10);
    let stranger = StaticKeypair::generate().unwrap();
    let (_, m1) = ClientHandshake::new(&stranger, &r.server.public(), 9, 1, r.ms + 1).unwrap();
    match r.handle(addr("192.0.2.1:5000"), &m1) {
        Outcome::Send { to, bytes } => {
            assert_eq!(to, addr("192.0.2.1:5000"));
            assert_eq!(bytes.len(), 12);
            assert!(bytes.len() < m1.len());
            let h = parse_header(&bytes).unwrap();
            assert_eq!(
                (h.ptype, h.session_id, h.path_id),
                (PacketType::KeyRefused, 9, 1)
            );
        }
        _ => panic!("not told"),
    }
    assert_eq!(HandshakeCounters::get(&r.counters.refused), 1);
    let other = StaticKeypair::generate().unwrap().public();
    let (_, m1) = ClientHandshake::new(&r.agents[0], &other, 10, 0, r.ms + 2).unwrap();
    assert!(matches!(
        r.handle(addr("192.0.2.1:5000"), &m1),
        Outcome::Drop(Dropped::BadMac1)
    ));
}

#[test]
fn at_the_session_limit_a_handshake_is_refused_and_told_so() {
    let mut r = rig(1, 1000, 10);
    let a = addr("192.0.2.1:5000");
    r.accept(0, 1, a, 1);
    let (_, m1) = r.m1(1, 2, 1);
    match r.handle(addr("192.0.2.2:5000"), &m1) {
        Outcome::Send { bytes, .. } => {
            assert_eq!(bytes.len(), 12);
            let h = parse_header(&bytes).unwrap();
            assert_eq!((h.ptype, h.session_id), (PacketType::SessionLimit, 2));
        }
        _ => panic!("not refused"),
    }
    assert_eq!(HandshakeCounters::get(&r.counters.full), 1);
    assert!(r.ep.session_ended(1));
    assert!(!r.ep.session_ended(1), "once");
    let (_, m1) = r.m1(1, 3, 2);
    assert!(matches!(
        r.handle(addr("192.0.2.2:5000"), &m1),
        Outcome::Accepted { .. }
    ));
}

#[test]
fn a_rotation_from_another_agent_key_is_refused() {
    let mut r = rig(16, 1000, 10);
    let a = addr("192.0.2.1:5000");
    r.accept(0, 5, a, 1);
    // Agent 1 (authorized too) tries to take over agent 0's session from its address.
    let (_, m1) = r.m1(1, 5, 2);
    assert_eq!(dropped(&r.handle(a, &m1)), Some(Dropped::RotationRefused));
    assert_eq!(HandshakeCounters::get(&r.counters.rotations_refused), 1);
    // Agent 0 itself rotates.
    let (_, m1) = r.m1(0, 5, 3);
    assert!(matches!(r.handle(a, &m1), Outcome::Rotate { to, .. } if to == a));
    assert_eq!(HandshakeCounters::get(&r.counters.rotations), 1);
    // The rotation's reply is now the cached one.
    assert!(matches!(r.handle(a, &m1), Outcome::Send { .. }));
}

#[test]
fn unknown_session_hints_are_never_bigger_than_the_packet() {
    let mut r = rig(16, 1000, 10);
    let mut hints = 0;
    for len in 0..64usize {
        let mut p = Vec::new();
        write_header(&mut p, PacketType::Transport, 0xdead, 1, 9).unwrap();
        p.resize(len.max(p.len()), 0);
        p.truncate(len);
        let from = SocketAddr::from(([10, 0, (len >> 8) as u8, len as u8], 9));
        match r.handle(from, &p) {
            Outcome::Send { bytes, .. } => {
                hints += 1;
                assert!(bytes.len() <= p.len(), "{} for {}", bytes.len(), p.len());
                // Only for what could be a sealed packet: a header and a whole tag.
                let full = parse_header(&p).unwrap().header_len + braid_crypto::TAG_LEN;
                assert!(p.len() >= full, "a hint for {} bytes", p.len());
                let h = parse_header(&bytes).unwrap();
                assert_eq!(
                    (h.ptype, h.session_id),
                    (PacketType::SessionUnknown, 0xdead)
                );
            }
            Outcome::Drop(d) => assert!(matches!(d, Dropped::UnknownSession | Dropped::NotBraid)),
            _ => panic!("len {len}: neither a hint nor a drop"),
        }
    }
    assert!(hints > 0, "a hint for a full-size packet");
    assert_eq!(HandshakeCounters::get(&r.counters.hints), hints);
}

#[test]
fn a_packet_that_is_not_braid_is_dropped() {
    let mut r = rig(16, 1000, 10);
    let a = addr("192.0.2.1:5000");
    for p in [&b""[..], b"GET / HTTP/1.1\r\n\r\n", &[0xff; 100]] {
        assert_eq!(dropped(&r.handle(a, p)), Some(Dropped::NotBraid));
    }
    let mut cookie = Vec::new();
    write_header(&mut cookie, PacketType::Cookie, 1, 0, 0).unwrap();
    cookie.resize(64, 0);
    assert_eq!(dropped(&r.handle(a, &cookie)), Some(Dropped::NotBraid));
    // A handshake made for another server's key: no reply.
    let other = StaticKeypair::generate().unwrap().public();
    let (_, m1) = ClientHandshake::new(&r.agents[0], &other, 1, 0, r.ms).unwrap();
    assert_eq!(dropped(&r.handle(a, &m1)), Some(Dropped::BadMac1));
    assert_eq!(r.ep.log().total(Dropped::NotBraid), 4);
}

#[test]
fn transport_packets_of_a_live_session_are_delivered_and_others_forwarded() {
    let steering = Steering::new(2, 0x5bd1_e995);
    let mut r = rig_on(16, 1000, 10, steering, 0);
    let mine = (1..).find(|&s| steering.worker_of(s) == 0).unwrap();
    let theirs = (1..).find(|&s| steering.worker_of(s) == 1).unwrap();
    let a = addr("192.0.2.1:5000");
    r.accept(0, mine, a, 1);
    let p = transport(mine);
    assert!(matches!(r.handle(a, &p), Outcome::Deliver(h) if h.0 == vec![a]));
    let (_, m1) = r.m1(1, theirs, 1);
    assert!(matches!(r.handle(a, &m1), Outcome::Forward(1)));
    assert!(r.ep.session_expired(mine));
    assert_eq!(HandshakeCounters::get(&r.counters.unfinished), 1);
    assert_eq!(r.ep.shared().sessions(), 0);
}

/// Two workers over one `Shared`, as the server runs them: each gate has its share of an
/// address's budget (burst 6 over 2 workers: 3 each, 6 in all), and `max_sessions` counts
/// the sessions of both (reserved without a lock).
#[test]
fn two_workers_share_an_address_budget_and_the_session_limit() {
    let steering = Steering::new(2, 0x5bd1_e995);
    let mut r = rig_on(7, 1000, 6, steering, 0);
    let shared = r.ep.shared.clone();
    let mut other: Endpoint<H> = Endpoint::new(shared.clone(), steering, 1, r.ms).unwrap();
    let a = addr("192.0.2.1:5000");
    let mut accepted = [0usize; 2];
    for sid in 1..=40u64 {
        let (_, m1) = r.m1((sid % 2) as usize, sid, sid);
        let w = steering.worker_of(sid);
        let ep = if w == 0 { &mut r.ep } else { &mut other };
        match ep.handle(r.t0, r.ms, a, &m1) {
            Outcome::Accepted { .. } => accepted[w] += 1,
            o => assert_eq!(dropped(&o), Some(Dropped::RateLimited)),
        }
    }
    assert_eq!(accepted, [3, 3], "each worker's share of the burst");
    assert_eq!(shared.sessions(), 6);
    // One slot left of 7: the first worker takes it, the second is told the server is full.
    let b = addr("192.0.2.2:5000");
    let on = |w: usize| (100..).find(|&s| steering.worker_of(s) == w).unwrap();
    let (_, m1) = r.m1(1, on(0), 100);
    let Outcome::Accepted { .. } = r.ep.handle(r.t0, r.ms, b, &m1) else {
        panic!("the last slot was not given");
    };
    let (_, m1) = r.m1(0, on(1), 101);
    match other.handle(r.t0, r.ms, b, &m1) {
        Outcome::Send { bytes, .. } => {
            assert_eq!(
                parse_header(&bytes).unwrap().ptype,
                PacketType::SessionLimit
            )
        }
        _ => panic!("a session beyond the limit"),
    }
    assert_eq!(shared.sessions(), 7);
}

/// A handshake refused after it reserved its slot (here: a stale timestamp) gives the slot
/// back, so a flood of refused handshakes cannot fill the server.
#[test]
fn a_refused_handshake_gives_its_session_slot_back() {
    let mut r = rig(1, 1000, 100);
    for sid in 1..=5u64 {
        let (k, ts) = (&r.agents[0], r.ms - 200_000);
        let (_, stale) = ClientHandshake::new(k, &r.server.public(), sid, 0, ts).unwrap();
        let o = r.handle(addr("192.0.2.1:5000"), &stale);
        assert_eq!(dropped(&o), Some(Dropped::Refused));
    }
    assert_eq!(r.ep.shared().sessions(), 0);
    r.accept(1, 9, addr("192.0.2.2:5000"), 1);
    assert_eq!(r.ep.shared().sessions(), 1);
}

/// A handshake that no packet follows (a flood of valid initiations, an agent gone) makes
/// no session: the endpoint keeps its keys, answers a retransmitted message 1, and forgets
/// it when its first exchange is due, giving its slot back.
#[test]
fn a_handshake_no_packet_follows_makes_no_session_and_expires_when_due() {
    let mut r = rig(4, 1000, 10);
    let a = addr("192.0.2.1:5000");
    let (_, m1) = r.m1(0, 7, 1);
    let reply = r.handshake_with(&m1, 7, a);
    assert_eq!(r.ep.shared().sessions(), 1, "its slot is taken");
    assert_eq!(HandshakeCounters::get(&r.counters.waiting), 1);
    let due = r.t0 + Duration::from_secs(10);
    assert_eq!(r.ep.next_due(), Some(due));
    match r.handle(a, &m1) {
        Outcome::Send { to, bytes } => assert_eq!((to, bytes), (a, reply)),
        _ => panic!("no cached reply for a pending session"),
    }
    let mut checked = Vec::new();
    r.ep.expire_due(due - Duration::from_millis(1), |id, _| checked.push(id));
    assert_eq!(r.ep.len(), 1, "not before it is due");
    r.ep.expire_due(due, |id, _| checked.push(id));
    assert!(checked.is_empty(), "no task to ask");
    assert_eq!((r.ep.len(), r.ep.shared().sessions()), (0, 0));
    assert_eq!(HandshakeCounters::get(&r.counters.unfinished), 1);
    assert_eq!(HandshakeCounters::get(&r.counters.waiting), 0);
    assert_eq!(r.ep.next_due(), None);
    // Its packets are now of no session.
    assert!(!matches!(r.handle(a, &transport(7)), Outcome::Start { .. }));
}

/// The first transport packet starts the session with the handshake's keys and message 1's
/// addresses; packets after it go to the task; its first exchange, when due, is the task's
/// to judge.
#[test]
fn the_first_packet_starts_the_session_with_the_handshakes_keys() {
    let mut r = rig(4, 1000, 10);
    let a = addr("192.0.2.1:5000");
    let local = Some("192.0.2.200".parse().unwrap());
    let (mut hs, m1) = r.m1(0, 7, 1);
    let Outcome::Accepted { reply, .. } =
        r.ep.handle_parsed(r.t0, r.ms, (a, local), &m1, parse_header(&m1).ok())
    else {
        panic!("not accepted");
    };
    let client = hs.finish(reply).unwrap();
    // The agent's first packet comes from another port (a NAT's new mapping).
    let b = addr("192.0.2.1:6000");
    let Outcome::Start { session, keys } = r.handle(b, &transport(7)) else {
        panic!("not started");
    };
    assert_eq!((session.id, session.path, session.from), (7, 0, a));
    assert_eq!(
        (session.local, session.client),
        (local, r.agents[0].public())
    );
    assert_eq!(HandshakeCounters::get(&r.counters.waiting), 0);
    let mut p = transport(7);
    client.send.seal_in_place(&mut p, 12).unwrap();
    keys.recv
        .open_in_place(&mut p, 12)
        .expect("the handshake's keys");
    // While its task is being made, nothing else starts it again.
    let o = r.handle(b, &transport(7));
    assert_eq!(dropped(&o), Some(Dropped::UnknownSession));
    r.ep.started(7, H(vec![a, b]));
    assert!(matches!(r.handle(b, &transport(7)), Outcome::Deliver(h) if h.0 == vec![a, b]));
    let mut checked = Vec::new();
    r.ep.expire_due(r.t0 + Duration::from_secs(10), |id, h| {
        checked.push((id, h.0.len()))
    });
    assert_eq!(checked, vec![(7, 2)]);
    assert_eq!(
        r.ep.len(),
        1,
        "the task expires it if its core is not established"
    );
}

/// A rotation before the first packet: the pending session starts with the new keys.
#[test]
fn a_rotation_before_the_first_packet_replaces_the_pending_keys() {
    let mut r = rig(4, 1000, 10);
    let a = addr("192.0.2.1:5000");
    r.handshake(0, 7, a, 1);
    let (mut hs, m1) = r.m1(0, 7, 2);
    let Outcome::Rotate {
        session: None,
        reply,
        to,
    } = r.handle(a, &m1)
    else {
        panic!("not a rotation of a pending session");
    };
    assert_eq!(to, a);
    let client = hs.finish(&reply).unwrap();
    let Outcome::Start { keys, .. } = r.handle(a, &transport(7)) else {
        panic!("not started");
    };
    let mut p = transport(7);
    client.send.seal_in_place(&mut p, 12).unwrap();
    keys.recv
        .open_in_place(&mut p, 12)
        .expect("the rotation's keys");
}

/// Regression guard: a session id that comes back (its first session ended, a new
/// handshake took the id) is judged by its own first-exchange record, not the old one.
#[test]
fn an_old_first_exchange_record_does_not_expire_a_new_session_of_its_id() {
    let mut r = rig(4, 1000, 10);
    let a = addr("192.0.2.1:5000");
    r.accept(0, 7, a, 1);
    assert!(r.ep.session_ended(7));
    let (_, m1) = r.m1(0, 7, 2);
    let later = r.t0 + Duration::from_secs(5);
    let o = r.ep.handle(later, r.ms + 5000, a, &m1);
    assert!(matches!(o, Outcome::Accepted { .. }));
    r.ep.expire_due(r.t0 + Duration::from_secs(10), |_, _| panic!("no task"));
    assert_eq!(r.ep.len(), 1, "the old record judged the new session");
    r.ep.expire_due(later + Duration::from_secs(10), |_, _| panic!("no task"));
    assert_eq!(r.ep.len(), 0);
}
