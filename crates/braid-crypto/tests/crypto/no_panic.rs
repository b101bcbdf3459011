//! Property tests of the no-panic contract: arbitrary bytes given to the header parser, the
//! AEAD and the server handshake produce errors, never panics, and never a false success.

use braid_crypto::{
    parse_header, write_header, ClientHandshake, CookieChecker, PacketType, ReplayGuard, Role,
    ServerHandshake, SessionKeys, StaticKeypair, TAG_LEN,
};
use proptest::prelude::*;
use std::sync::OnceLock;

const NOW: u64 = 1_700_000_000_000;

struct Fixture {
    server: StaticKeypair,
    client: StaticKeypair,
    keys: SessionKeys,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| Fixture {
        server: StaticKeypair::generate().unwrap(),
        client: StaticKeypair::generate().unwrap(),
        keys: SessionKeys::from_split(Role::Server, &([1; 32], [2; 32])),
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn parse_header_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
        if let Ok(h) = parse_header(&bytes) {
            prop_assert!(h.header_len >= 12 && h.header_len <= 19 && h.header_len <= bytes.len());
        }
    }

    #[test]
    fn open_random_bytes_never_panics(
        mut bytes in proptest::collection::vec(any::<u8>(), 0..200),
        header_len in 0usize..300,
    ) {
        let f = fixture();
        prop_assert!(f.keys.recv.open_in_place(&mut bytes, header_len).is_err());
    }

    #[test]
    fn open_random_body_with_valid_header_fails(
        path in any::<u8>(),
        pn in 0u64..(1 << 62),
        body in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let f = fixture();
        let mut p = Vec::new();
        let hl = write_header(&mut p, PacketType::Transport, 5, path, pn).unwrap();
        p.extend_from_slice(&body);
        let r = f.keys.recv.open_in_place(&mut p, hl);
        prop_assert!(r.is_err());
        prop_assert_eq!(body.len() < TAG_LEN, matches!(r, Err(braid_crypto::AeadError::TooShort { .. })));
    }

    #[test]
    fn respond_random_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let f = fixture();
        let mut guard = ReplayGuard::new();
        let auth = [f.client.public()];
        prop_assert!(ServerHandshake::respond(&f.server, &auth, &mut guard, &bytes, NOW, 1000).is_err());
    }

    #[test]
    fn respond_valid_header_random_noise_never_panics(
        sid in any::<u64>(),
        msg in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let f = fixture();
        let mut p = Vec::new();
        write_header(&mut p, PacketType::Handshake, sid, 0, 0).unwrap();
        p.extend_from_slice(&msg);
        let mut guard = ReplayGuard::new();
        let auth = [f.client.public()];
        prop_assert!(ServerHandshake::respond(&f.server, &auth, &mut guard, &p, NOW, 1000).is_err());
    }

    #[test]
    fn respond_mutated_message_1_never_panics(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
        extra in proptest::collection::vec(any::<u8>(), 0..8),
    ) {
        let f = fixture();
        let (_, m1) = ClientHandshake::new(&f.client, &f.server.public(), 9, 0, NOW).unwrap();
        let mut bad = m1.clone();
        for (i, x) in &flips {
            // Not the last 16 bytes: mac2 is the server's load check, respond ignores it.
            let i = i.index(bad.len() - 16);
            bad[i] ^= x;
        }
        bad.extend_from_slice(&extra);
        let mut guard = ReplayGuard::new();
        let auth = [f.client.public()];
        let r = ServerHandshake::respond(&f.server, &auth, &mut guard, &bad, NOW, 1000);
        prop_assert_eq!(r.is_ok(), bad == m1);
    }

    #[test]
    fn cookie_checks_random_bytes_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..300),
        port in any::<u16>(),
        now in any::<u64>(),
    ) {
        let f = fixture();
        let mut c = CookieChecker::new(&f.server.public(), 0).unwrap();
        let from = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        prop_assert!(!c.check_mac1(&bytes));
        prop_assert!(!c.check_mac2(&bytes, from, now));
        let _ = c.cookie_reply(&bytes, from, now);
        let (mut ch, _) = ClientHandshake::new(&f.client, &f.server.public(), 9, 0, NOW).unwrap();
        let mut p = Vec::new();
        write_header(&mut p, PacketType::Cookie, 9, 0, 0).unwrap();
        p.extend_from_slice(&bytes);
        prop_assert!(ch.handle_cookie_reply(&bytes).is_err());
        prop_assert!(ch.handle_cookie_reply(&p).is_err());
    }

    #[test]
    fn finish_random_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let f = fixture();
        let (mut ch, _) = ClientHandshake::new(&f.client, &f.server.public(), 9, 0, NOW).unwrap();
        let mut p = Vec::new();
        write_header(&mut p, PacketType::Handshake, 9, 0, 0).unwrap();
        p.extend_from_slice(&bytes);
        prop_assert!(ch.finish(&bytes).is_err());
        prop_assert!(ch.finish(&p).is_err());
    }
}
