//! Unit tests of the handshake (kept apart so that `handshake.rs` reads in one sitting).
use super::*;
use crate::aead::TAG_LEN;
use crate::guard::ReplayGuard;
use crate::responder::encode_address;
use braid_wire::{parse_header, write_header, PacketType};

const NOW: u64 = 1_700_000_000_000;
const SKEW: u64 = 30_000;

struct World {
    server: StaticKeypair,
    client: StaticKeypair,
    authorized: Vec<PublicKey>,
    guard: ReplayGuard,
}

fn world() -> World {
    let server = StaticKeypair::generate().unwrap();
    let client = StaticKeypair::generate().unwrap();
    let other = StaticKeypair::generate().unwrap();
    let authorized = vec![other.public(), client.public()];
    World {
        server,
        client,
        authorized,
        guard: ReplayGuard::new(),
    }
}

impl World {
    fn respond(
        &mut self,
        packet: &[u8],
        now: u64,
    ) -> Result<(PublicKey, SessionKeys, Vec<u8>), HandshakeError> {
        ServerHandshake::respond(
            &self.server,
            &self.authorized,
            &mut self.guard,
            packet,
            now,
            SKEW,
        )
    }
}

/// `packet` with its mac1 made again for `server` (an attacker who altered the header
/// can do this: mac1 is keyed by the public key).
fn remac(server: &PublicKey, packet: &[u8]) -> Vec<u8> {
    let mut p = packet.to_vec();
    let at = p.len() - 32;
    let mac = Mac1Key::new(server).mac1(&p[..at]);
    p[at..at + 16].copy_from_slice(&mac);
    p
}

/// Keys match when what one end seals the other opens, both ways.
fn assert_keys_match(a: &SessionKeys, b: &SessionKeys) {
    for (from, to) in [(a, b), (b, a)] {
        let mut p = Vec::new();
        let hl = write_header(&mut p, PacketType::Transport, 42, 1, 9).unwrap();
        p.extend_from_slice(b"stream frames here");
        p.extend_from_slice(&[0; TAG_LEN]);
        let orig = p.clone();
        from.send.seal_in_place(&mut p, hl).unwrap();
        to.recv.open_in_place(&mut p, hl).unwrap();
        assert_eq!(p[..p.len() - TAG_LEN], orig[..orig.len() - TAG_LEN]);
        // And not with the key of the wrong direction.
        let mut q = orig.clone();
        from.send.seal_in_place(&mut q, hl).unwrap();
        assert!(from.recv.open_in_place(&mut q, hl).is_err());
    }
}

#[test]
fn full_handshake_gives_matching_keys() {
    let mut w = world();
    let (mut ch, m1) = ClientHandshake::new(&w.client, &w.server.public(), 0xabcd, 3, NOW).unwrap();
    let h1 = parse_header(&m1).unwrap();
    assert_eq!(
        (
            h1.ptype,
            h1.session_id,
            h1.path_id,
            h1.packet_number,
            h1.header_len
        ),
        (PacketType::Handshake, 0xabcd, 3, 0, 12)
    );
    let (client_pub, server_keys, m2) = w.respond(&m1, NOW + 5).unwrap();
    assert_eq!(client_pub, w.client.public());
    let h2 = parse_header(&m2).unwrap();
    assert_eq!((h2.session_id, h2.path_id), (0xabcd, 3));
    let client_keys = ch.finish(&m2).unwrap();
    assert_keys_match(&client_keys, &server_keys);
    assert!(matches!(
        ch.finish(&m2),
        Err(HandshakeError::AlreadyFinished)
    ));
    assert_eq!(w.guard.newest(&client_pub), Some(NOW));
}

#[test]
fn two_handshakes_give_different_keys() {
    let mut w = world();
    let (mut c1, m1) = ClientHandshake::new(&w.client, &w.server.public(), 1, 0, NOW).unwrap();
    let (_, s1, r1) = w.respond(&m1, NOW).unwrap();
    let k1 = c1.finish(&r1).unwrap();
    let (mut c2, m2) = ClientHandshake::new(&w.client, &w.server.public(), 1, 0, NOW + 1).unwrap();
    let (_, s2, r2) = w.respond(&m2, NOW).unwrap();
    let k2 = c2.finish(&r2).unwrap();
    assert_keys_match(&k1, &s1);
    assert_keys_match(&k2, &s2);
    let mut p = Vec::new();
    let hl = write_header(&mut p, PacketType::Transport, 1, 0, 0).unwrap();
    p.extend_from_slice(&[0; 20 + TAG_LEN]);
    k1.send.seal_in_place(&mut p, hl).unwrap();
    assert!(s2.recv.open_in_place(&mut p, hl).is_err());
}

#[test]
fn unknown_client_refused() {
    let mut w = world();
    let stranger = StaticKeypair::generate().unwrap();
    let (_, m1) = ClientHandshake::new(&stranger, &w.server.public(), 7, 0, NOW).unwrap();
    match w.respond(&m1, NOW) {
        Err(HandshakeError::UnknownClient(k)) => {
            assert_eq!(k, stranger.public());
            let msg = HandshakeError::UnknownClient(k).to_string();
            assert!(
                msg.contains(&k.to_base64()) && msg.contains("authorized"),
                "{msg}"
            );
        }
        other => panic!("expected UnknownClient, got {other:?}"),
    }
    assert_eq!(w.guard.newest(&stranger.public()), None);
}

#[test]
fn wrong_server_key_refused() {
    let mut w = world();
    let impostor = StaticKeypair::generate().unwrap();
    // The client believes the server's key is `impostor`: mac1 is wrong for the real
    // server, and with a mac1 made right the Noise message still does not open.
    let (_, m1) = ClientHandshake::new(&w.client, &impostor.public(), 7, 0, NOW).unwrap();
    assert!(matches!(w.respond(&m1, NOW), Err(HandshakeError::Mac1)));
    assert!(matches!(
        w.respond(&remac(&w.server.public(), &m1), NOW),
        Err(HandshakeError::Noise { .. })
    ));
    // A server answering with another key than the client expects: the client refuses.
    let (mut ch, m1) = ClientHandshake::new(&w.client, &impostor.public(), 8, 0, NOW + 1).unwrap();
    let mut imp = World {
        server: impostor,
        client: StaticKeypair::generate().unwrap(),
        authorized: w.authorized.clone(),
        guard: ReplayGuard::new(),
    };
    let (_, _, good_reply) = imp.respond(&m1, NOW).unwrap();
    // Message 2 produced by the real server for another message 1 does not finish it.
    let (_, m1b) = ClientHandshake::new(&w.client, &w.server.public(), 8, 0, NOW + 2).unwrap();
    let (_, _, other_reply) = w.respond(&m1b, NOW).unwrap();
    assert!(matches!(
        ch.finish(&other_reply),
        Err(HandshakeError::Noise { .. })
    ));
    // The failure did not spoil the handshake: the right reply still works.
    ch.finish(&good_reply).unwrap();
}

#[test]
fn wrong_prologue_refused() {
    let mut w = world();
    let (_, m1) = ClientHandshake::with_prologue(
        &w.client,
        &w.server.public(),
        7,
        0,
        NOW,
        b"braid v1",
        &Ciphers::auto(),
    )
    .unwrap();
    let e = w.respond(&m1, NOW).unwrap_err();
    assert!(matches!(e, HandshakeError::Noise { .. }), "{e:?}");
    assert!(e.to_string().contains("prologue"), "{e}");
}

#[test]
fn replayed_handshake_refused() {
    let mut w = world();
    let (_, m1) = ClientHandshake::new(&w.client, &w.server.public(), 7, 0, NOW).unwrap();
    w.respond(&m1, NOW).unwrap();
    let e = w.respond(&m1, NOW + 10).unwrap_err();
    assert!(
        matches!(
            e,
            HandshakeError::Replayed {
                timestamp_ms: NOW,
                newest_ms: NOW,
                ..
            }
        ),
        "{e:?}"
    );
    // An older (but within skew) fresh handshake is refused too; a newer one is fine.
    let (_, old) = ClientHandshake::new(&w.client, &w.server.public(), 8, 0, NOW - 1).unwrap();
    assert!(matches!(
        w.respond(&old, NOW),
        Err(HandshakeError::Replayed { .. })
    ));
    let (_, new) = ClientHandshake::new(&w.client, &w.server.public(), 8, 0, NOW + 1).unwrap();
    w.respond(&new, NOW).unwrap();
    assert_eq!(w.guard.newest(&w.client.public()), Some(NOW + 1));
}

#[test]
fn clock_skew_refused_and_guard_untouched() {
    let mut w = world();
    for ts in [NOW - SKEW - 1, NOW + SKEW + 1] {
        let (_, m1) = ClientHandshake::new(&w.client, &w.server.public(), 7, 0, ts).unwrap();
        let e = w.respond(&m1, NOW).unwrap_err();
        assert!(matches!(e, HandshakeError::ClockSkew { .. }), "{e:?}");
        assert!(e.to_string().contains("NTP"), "{e}");
    }
    assert_eq!(w.guard.newest(&w.client.public()), None);
    for ts in [NOW - SKEW, NOW + SKEW] {
        let (_, m1) = ClientHandshake::new(&w.client, &w.server.public(), 7, 0, ts).unwrap();
        w.respond(&m1, NOW).unwrap();
    }
}

#[test]
fn altered_header_refused() {
    let mut w = world();
    let (mut ch, m1) = ClientHandshake::new(&w.client, &w.server.public(), 7, 2, NOW).unwrap();
    // Session id changed in the clear header: mac1 fails; with mac1 made again for the
    // altered header, the authenticated payload disagrees.
    let mut bad = m1.clone();
    bad[9] ^= 1;
    assert!(matches!(w.respond(&bad, NOW), Err(HandshakeError::Mac1)));
    assert!(matches!(
        w.respond(&remac(&w.server.public(), &bad), NOW),
        Err(HandshakeError::SessionMismatch { .. })
    ));
    let mut bad = m1.clone();
    bad[1] = 0;
    assert!(matches!(
        w.respond(&bad, NOW),
        Err(HandshakeError::NotHandshake)
    ));
    let (_, _, m2) = w.respond(&m1, NOW).unwrap();
    let mut bad = m2.clone();
    bad[9] ^= 1;
    assert!(matches!(
        ch.finish(&bad),
        Err(HandshakeError::WrongSession { .. })
    ));
    let mut bad = m2.clone();
    bad[10] = 5;
    assert!(matches!(
        ch.finish(&bad),
        Err(HandshakeError::WrongPath {
            expected: 2,
            got: 5
        })
    ));
    ch.finish(&m2).unwrap();
}

#[test]
fn any_corrupted_byte_of_message_1_refused() {
    let mut w = world();
    let (_, m1) = ClientHandshake::new(&w.client, &w.server.public(), 7, 0, NOW).unwrap();
    // Every byte but mac2 (the server's load check, which `respond` ignores).
    for i in 0..m1.len() - 16 {
        let mut bad = m1.clone();
        bad[i] ^= 0x20;
        assert!(w.respond(&bad, NOW).is_err(), "byte {i}");
    }
    for cut in 0..m1.len() {
        assert!(w.respond(&m1[..cut], NOW).is_err(), "cut {cut}");
    }
    w.respond(&m1, NOW).unwrap();
}

#[test]
fn message_1_without_valid_mac1_refused_before_noise() {
    let mut w = world();
    let (_, m1) = ClientHandshake::new(&w.client, &w.server.public(), 7, 0, NOW).unwrap();
    let at = m1.len() - 32;
    for i in at..at + 16 {
        let mut bad = m1.clone();
        bad[i] ^= 1;
        assert!(
            matches!(w.respond(&bad, NOW), Err(HandshakeError::Mac1)),
            "mac1 byte {}",
            i - at
        );
    }
    // mac1 covers the clear header too (the path id the reply echoes).
    let mut bad = m1.clone();
    bad[10] ^= 1;
    assert!(matches!(w.respond(&bad, NOW), Err(HandshakeError::Mac1)));
    assert_eq!(w.guard.newest(&w.client.public()), None);
    w.respond(&m1, NOW).unwrap();
}

#[test]
fn cookie_reply_gives_message_1_a_mac2_and_keeps_the_noise_part() {
    let mut w = world();
    let (mut ch, m1) = ClientHandshake::new(&w.client, &w.server.public(), 7, 1, NOW).unwrap();
    // The Noise message: 112 bytes with the 16-byte payload, 3 more for a 2-cipher offer.
    assert_eq!(m1.len(), 12 + 112 + 3 + 32);
    assert_eq!(ch.message1(), m1);
    assert_eq!(&m1[m1.len() - 16..], &[0u8; 16], "no mac2 before a cookie");
    let from: std::net::SocketAddr = "198.51.100.1:5000".parse().unwrap();
    let mut checker = crate::cookie::CookieChecker::new(&w.server.public(), 0).unwrap();
    assert!(checker.check_mac1(&m1));
    assert!(!checker.check_mac2(&m1, from, 0));
    let reply = checker.cookie_reply(&m1, from, 0).unwrap();
    // A forged cookie reply changes nothing.
    let mut forged = reply.clone();
    forged[30] ^= 1;
    assert!(ch.handle_cookie_reply(&forged).is_err());
    assert_eq!(ch.message1(), m1);
    ch.handle_cookie_reply(&reply).unwrap();
    let m1c = ch.message1();
    assert_eq!(m1c[..m1c.len() - 16], m1[..m1.len() - 16]);
    assert!(checker.check_mac1(&m1c) && checker.check_mac2(&m1c, from, 1));
    let (_, server_keys, m2) = w.respond(&m1c, NOW).unwrap();
    let client_keys = ch.finish(&m2).unwrap();
    assert_keys_match(&client_keys, &server_keys);
}

/// A server behind a shared address names its own unicast address in message 2 (IPv4 or
/// IPv6); the client reads it; without one, none. An altered message 2 is refused as any.
#[test]
fn message_2_may_carry_the_servers_unicast_address() {
    let mut w = world();
    for (i, unicast) in [None, Some("192.0.2.7:4433"), Some("[2001:db8::7]:443")]
        .into_iter()
        .enumerate()
    {
        let unicast: Option<std::net::SocketAddr> = unicast.map(|a| a.parse().unwrap());
        let server_pub = w.server.public();
        let (mut hs, m1) =
            ClientHandshake::new(&w.client, &server_pub, 7, 0, NOW + i as u64).unwrap();
        let (_, skeys, m2) = ServerHandshake::respond_with_address(
            &w.server,
            &w.authorized,
            &mut w.guard,
            &m1,
            NOW + i as u64,
            SKEW,
            unicast,
        )
        .unwrap();
        let mut bad = m2.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(hs.finish(&bad).is_err());
        let ckeys = hs.finish(&m2).unwrap();
        assert_keys_match(&ckeys, &skeys);
        assert_eq!(hs.server_address(), unicast);
    }
}

#[test]
fn address_payloads_round_trip_and_bad_ones_are_refused() {
    for a in ["10.0.0.1:1", "[::1]:65535"] {
        let a: std::net::SocketAddr = a.parse().unwrap();
        assert_eq!(decode_address(&encode_address(a)), Some(a));
    }
    for bad in [
        &[][..],
        &[4, 1, 2, 3, 4, 5][..],
        &[5; 7][..],
        &[6; 7][..],
        &[4; 19][..],
    ] {
        assert_eq!(decode_address(bad), None, "{bad:?}");
    }
}
