//! Unit tests of the two-step responder: reading message 1 touches no shared state, and
//! only the guard's check-and-record decides between two copies answered at once.
use super::*;
use crate::handshake::ClientHandshake;
use crate::TAG_LEN;
use braid_wire::write_header;
use std::sync::Arc;

const NOW: u64 = 1_700_000_000_000;

struct Fixture {
    server: StaticKeypair,
    client: StaticKeypair,
    authorized: Vec<PublicKey>,
    ciphers: Ciphers,
}

fn fixture() -> Fixture {
    let client = StaticKeypair::generate().unwrap();
    Fixture {
        server: StaticKeypair::generate().unwrap(),
        authorized: vec![client.public()],
        client,
        ciphers: Ciphers::auto(),
    }
}

impl Fixture {
    fn responder(&self) -> Responder<'_> {
        Responder {
            key: &self.server,
            authorized: &self.authorized,
            max_skew_ms: 30_000,
            unicast: None,
            ciphers: &self.ciphers,
        }
    }

    fn message1(&self, ts: u64) -> (ClientHandshake, Vec<u8>) {
        let c = &self.ciphers;
        ClientHandshake::offering(&self.client, &self.server.public(), 77, 3, ts, c).unwrap()
    }

    fn read(&self, packet: &[u8]) -> Result<Message1, HandshakeError> {
        let h = parse_header(packet).unwrap();
        self.responder().read(&h, packet, NOW)
    }
}

#[test]
fn read_then_answer_shared_finishes_the_handshake_with_matching_keys() {
    let f = fixture();
    let (mut hs, m1) = f.message1(NOW);
    let m = f.read(&m1).unwrap();
    assert_eq!((m.client(), m.timestamp_ms()), (f.client.public(), NOW));
    let guard = Mutex::new(ReplayGuard::new());
    let (client, skeys, m2) = m.answer_shared(&guard).unwrap();
    assert_eq!(client, f.client.public());
    assert_eq!(guard.lock().unwrap().newest(&client), Some(NOW));
    let ckeys = hs.finish(&m2).unwrap();
    let mut p = Vec::new();
    let hl = write_header(&mut p, PacketType::Transport, 77, 3, 1).unwrap();
    p.extend_from_slice(b"hello");
    p.extend_from_slice(&[0; TAG_LEN]);
    ckeys.send.seal_in_place(&mut p, hl).unwrap();
    skeys.recv.open_in_place(&mut p, hl).unwrap();
    assert_eq!(&p[hl..hl + 5], b"hello");
}

/// Two workers that read the same message 1 at once (a replay racing the original) both
/// get past `read`, which shares nothing; the guard's check-and-record lets one through.
#[test]
fn two_copies_read_at_once_are_answered_once() {
    let f = Arc::new(fixture());
    let (_, m1) = f.message1(NOW);
    let guard = Arc::new(Mutex::new(ReplayGuard::new()));
    let barrier = Arc::new(std::sync::Barrier::new(2));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (f, m1, g, b) = (f.clone(), m1.clone(), guard.clone(), barrier.clone());
            std::thread::spawn(move || {
                let m = f.read(&m1).expect("both copies read");
                b.wait();
                m.answer_shared(&g).is_ok()
            })
        })
        .collect();
    let accepted = threads
        .into_iter()
        .map(|t| t.join().unwrap())
        .filter(|ok| *ok)
        .count();
    assert_eq!(accepted, 1);
}

/// A replay is refused by `answer` and leaves the guard as it was; a failure to read
/// (unknown key, skew) never reaches the guard.
#[test]
fn replays_and_refusals_leave_the_guard_unchanged() {
    let f = fixture();
    let (_, m1) = f.message1(NOW);
    let mut guard = ReplayGuard::new();
    f.read(&m1).unwrap().answer(&mut guard).unwrap();
    let before = guard.clone();
    let e = f.read(&m1).unwrap().answer(&mut guard).unwrap_err();
    assert!(matches!(e, HandshakeError::Replayed { .. }), "{e}");
    assert_eq!(guard, before);
    let (_, stale) = f.message1(NOW - 60_000);
    assert!(matches!(
        f.read(&stale),
        Err(HandshakeError::ClockSkew { .. })
    ));
    let stranger = Fixture {
        authorized: vec![StaticKeypair::generate().unwrap().public()],
        ..fixture()
    };
    let (_, m) = stranger.message1(NOW);
    assert!(matches!(
        stranger.read(&m),
        Err(HandshakeError::UnknownClient(_))
    ));
    // Issue 38 item 4: a server answers `UnknownClient` with a key refusal, so it must
    // mean a fresh message 1: an old one of a key that is not (or no longer) authorized,
    // replayed by someone who captured it, is refused for its age and learns nothing.
    let (_, old) = stranger.message1(NOW - 60_000);
    assert!(matches!(
        stranger.read(&old),
        Err(HandshakeError::ClockSkew { .. })
    ));
}

/// `read` takes the caller's parsed header: a transport header or a packet number is
/// refused, and a packet too short for the MAC trailer is not read.
#[test]
fn read_checks_the_header_it_is_given() {
    let f = fixture();
    let (_, m1) = f.message1(NOW);
    let mut h = parse_header(&m1).unwrap();
    h.packet_number = 5;
    let r = f.responder();
    assert!(matches!(
        r.read(&h, &m1, NOW),
        Err(HandshakeError::PacketNumber(5))
    ));
    let h = Header {
        ptype: PacketType::Transport,
        ..parse_header(&m1).unwrap()
    };
    assert!(matches!(
        r.read(&h, &m1, NOW),
        Err(HandshakeError::NotHandshake)
    ));
    let h = parse_header(&m1).unwrap();
    assert!(r.read(&h, &m1[..h.header_len + 20], NOW).is_err());
}
