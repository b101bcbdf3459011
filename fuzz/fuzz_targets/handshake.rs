//! The handshake messages on arbitrary bytes: `ServerHandshake::respond` (raw bytes, and a
//! genuine message 1 with bytes XORed in and its mac1 made again so that the Noise layer is
//! reached), the server's mac1/mac2/cookie checks, and the client's
//! `ClientHandshake::finish` and `handle_cookie_reply` (raw, and genuine replies mutated),
//! and the client's reading of a cipher refusal (`read_cipher_refusal`).
//! Never a panic; a mutated message 1 is accepted only when the mutation changed nothing
//! the server reads, and a mutated reply never gives keys or a cookie unless unchanged.
//!
//! Keys and cipher lists are fixed (not random, not the CPU's `auto` order) so that every
//! input replays the same way on every machine; message 1 carries a two-cipher list.

#![no_main]

use braid_crypto::cookie::{Mac1Key, MACS_LEN, MAC_LEN};
use braid_crypto::{
    cipher_refusal, read_cipher_refusal, Ciphers, ClientHandshake, CookieChecker, ReplayGuard, Responder, ServerHandshake,
    StaticKeypair,
};
use libfuzzer_sys::fuzz_target;
use std::net::SocketAddr;
use std::sync::OnceLock;

const NOW: u64 = 1_700_000_000_000;
const SKEW: u64 = 120_000;

struct Fixture {
    server: StaticKeypair,
    client: StaticKeypair,
    /// A genuine message 1 and the server's genuine message 2 and cookie reply to it.
    m1: Vec<u8>,
    m2: Vec<u8>,
    cookie: Vec<u8>,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let server = StaticKeypair::from_private([7; 32]).unwrap();
        let client = StaticKeypair::from_private([9; 32]).unwrap();
        let offer = Ciphers::for_cpu(true);
        let (_, m1) =
            ClientHandshake::offering(&client, &server.public(), 0x0123_4567, 1, NOW, &offer)
                .unwrap();
        let auth = [client.public()];
        let responder = Responder {
            key: &server,
            authorized: &auth,
            max_skew_ms: SKEW,
            unicast: None,
            ciphers: &Ciphers::for_cpu(false),
        };
        let (_, _, m2) = responder.respond(&mut ReplayGuard::new(), &m1, NOW).unwrap();
        let mut checker = CookieChecker::new(&server.public(), NOW).unwrap();
        let cookie = checker.cookie_reply(&m1, from(), NOW).unwrap();
        Fixture {
            server,
            client,
            m1,
            m2,
            cookie,
        }
    })
}

fn from() -> SocketAddr {
    "192.0.2.1:4433".parse().unwrap()
}

fn xor(base: &[u8], data: &[u8]) -> Vec<u8> {
    let mut out = base.to_vec();
    for (i, b) in data.iter().enumerate() {
        if let Some(o) = out.get_mut(i % base.len().max(1)) {
            *o ^= b;
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let auth = [f.client.public()];
    match mode % 4 {
        0 => {
            // Raw bytes at the server: the cheap checks and the handshake.
            let mut checker = CookieChecker::new(&f.server.public(), NOW).unwrap();
            assert!(!checker.check_mac1(rest) || rest.len() >= MACS_LEN);
            let _ = checker.check_mac2(rest, from(), NOW);
            let _ = checker.cookie_reply(rest, from(), NOW);
            let r = ServerHandshake::respond(&f.server, &auth, &mut ReplayGuard::new(), rest, NOW, SKEW);
            if r.is_ok() {
                // Only the genuine message 1 (mac2 aside) can be accepted.
                assert_eq!(rest[..rest.len() - MAC_LEN], f.m1[..f.m1.len() - MAC_LEN]);
            }
        }
        1 => {
            // A genuine message 1, mutated, with a valid mac1 again: the Noise layer.
            let mut p = xor(&f.m1, rest);
            if p.len() >= MACS_LEN {
                let at = p.len() - MACS_LEN;
                let mac = Mac1Key::new(&f.server.public()).mac1(&p[..at]);
                p[at..at + MAC_LEN].copy_from_slice(&mac);
            }
            let r = ServerHandshake::respond(&f.server, &auth, &mut ReplayGuard::new(), &p, NOW, SKEW);
            // The path id (byte 10) is echoed, not checked by Noise (mac1, made again here,
            // covers it); mac2 is ignored.
            let mut q = p.clone();
            let mut m = f.m1.clone();
            q[10] = 0;
            m[10] = 0;
            let n = q.len().saturating_sub(MACS_LEN);
            assert_eq!(r.is_ok(), q[..n] == m[..m.len() - MACS_LEN], "{r:?}");
        }
        2 => {
            // The client: raw bytes, then a mutated genuine message 2.
            let (mut hs, _) = ClientHandshake::offering(&f.client, &f.server.public(), 0x0123_4567, 1, NOW, &Ciphers::for_cpu(true)).unwrap();
            assert!(hs.finish(rest).is_err() || rest == f.m2.as_slice());
            let _ = hs.handle_cookie_reply(rest);
            let m2 = xor(&f.m2, rest);
            let _ = hs.finish(&m2);
            // A cipher refusal: raw, then a genuine one mutated.
            let _ = read_cipher_refusal(rest);
            let h = braid_crypto::parse_header(&f.m1).unwrap();
            let refusal = cipher_refusal(&h, &Ciphers::for_cpu(false));
            if let Some((h2, list)) = read_cipher_refusal(&xor(&refusal, rest)) {
                assert!(list.len() <= 8);
                assert_eq!(h2.ptype, braid_crypto::PacketType::CipherRefused);
            }
        }
        _ => {
            // A mutated genuine cookie reply: accepted only unchanged.
            let (mut hs, _) = ClientHandshake::offering(&f.client, &f.server.public(), 0x0123_4567, 1, NOW, &Ciphers::for_cpu(true)).unwrap();
            let c = xor(&f.cookie, rest);
            let ok = hs.handle_cookie_reply(&c).is_ok();
            assert!(!ok || c == f.cookie, "a forged cookie reply was accepted");
        }
    }
});
