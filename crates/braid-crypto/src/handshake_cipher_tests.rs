//! Tests of the packet cipher negotiation in the handshake (docs/protocol.md section 5):
//! the matrix of offers and server preferences, peers that predate the negotiation, and
//! men in the middle who try to change the offer or the choice.
use super::*;
use crate::aead::TAG_LEN;
use crate::guard::ReplayGuard;
use crate::noise::builder;
use braid_wire::{write_header, PacketType};
use Cipher::{Aes256Gcm as Aes, ChaCha20Poly1305 as ChaCha};

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
    let authorized = vec![client.public()];
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
        ciphers: &Ciphers,
    ) -> Result<(PublicKey, SessionKeys, Vec<u8>), HandshakeError> {
        let r = Responder {
            key: &self.server,
            authorized: &self.authorized,
            max_skew_ms: SKEW,
            unicast: None,
            ciphers,
        };
        r.respond(&mut self.guard, packet, NOW)
    }

    fn client(&self, offer: &Ciphers, ts: u64) -> (ClientHandshake, Vec<u8>) {
        ClientHandshake::offering(&self.client, &self.server.public(), 5, 1, ts, offer).unwrap()
    }

    /// A server's answer to `m1` with any payload in message 2 (an old server, or a
    /// server that breaks the rules).
    fn raw_reply(&self, m1: &[u8], payload2: &[u8]) -> Vec<u8> {
        let (sid, path, msg) = split_handshake_packet(m1).unwrap();
        let msg = &msg[..msg.len() - MACS_LEN];
        let mut st = builder(PROLOGUE)
            .unwrap()
            .local_private_key(self.server.private_bytes())
            .unwrap()
            .build_responder()
            .unwrap();
        let mut buf = [0u8; 256];
        st.read_message(msg, &mut buf).unwrap();
        let n = st.write_message(payload2, &mut buf).unwrap();
        handshake_packet(sid, path, &buf[..n]).unwrap()
    }
}

fn list(c: &[Cipher]) -> Ciphers {
    Ciphers::new(c).unwrap()
}

/// Both ends use `cipher`, and what one seals the other opens, both ways.
fn assert_keys(a: &SessionKeys, b: &SessionKeys, cipher: Cipher) {
    assert_eq!((a.cipher(), b.cipher()), (cipher, cipher));
    for (from, to) in [(a, b), (b, a)] {
        let mut p = Vec::new();
        let hl = write_header(&mut p, PacketType::Transport, 5, 1, 9).unwrap();
        p.extend_from_slice(&[0x17; 64 + TAG_LEN]);
        from.send.seal_in_place(&mut p, hl).unwrap();
        to.recv.open_in_place(&mut p, hl).unwrap();
        // The other cipher with the same key bytes does not open it.
        assert_eq!(p[hl..hl + 64], [0x17; 64]);
    }
}

#[test]
fn negotiation_matrix() {
    let cases: [(&[Cipher], &[Cipher], Cipher); 6] = [
        // The agent prefers AES (its CPU has AES instructions), the server too.
        (&[Aes, ChaCha], &[Aes, ChaCha], Aes),
        // The agent prefers AES, the server ChaCha: the server's preference wins.
        (&[Aes, ChaCha], &[ChaCha, Aes], ChaCha),
        // The agent prefers ChaCha (no AES instructions), the server AES.
        (&[ChaCha, Aes], &[Aes, ChaCha], Aes),
        // Only one supported on one side.
        (&[Aes], &[ChaCha, Aes], Aes),
        (&[Aes, ChaCha], &[ChaCha], ChaCha),
        // An agent that offers ChaCha only (sent as a message 1 without a list).
        (&[ChaCha], &[Aes, ChaCha], ChaCha),
    ];
    for (i, (offer, server, want)) in cases.into_iter().enumerate() {
        let mut w = world();
        let (mut ch, m1) = w.client(&list(offer), NOW + i as u64);
        let (_, skeys, m2) = w.respond(&m1, &list(server)).unwrap();
        let ckeys = ch.finish(&m2).unwrap();
        assert_keys(&ckeys, &skeys, want);
    }
}

#[test]
fn no_common_cipher_is_refused_with_a_hint() {
    for (offer, server) in [(Aes, ChaCha), (ChaCha, Aes)] {
        let mut w = world();
        let (_, m1) = w.client(&Ciphers::only(offer), NOW);
        let e = w.respond(&m1, &Ciphers::only(server)).unwrap_err();
        assert!(matches!(e, HandshakeError::NoCommonCipher { .. }), "{e:?}");
        let text = e.to_string();
        assert!(
            text.contains(offer.name()) && text.contains("--cipher"),
            "{text}"
        );
        // The refusal happened before the guard recorded anything.
        assert_eq!(w.guard.newest(&w.client.public()), None);
    }
}

/// message 1 as braid wrote it before the negotiation: a 16-byte payload.
fn old_client_message1(w: &World) -> (snow::HandshakeState, Vec<u8>) {
    let mut st = builder(PROLOGUE)
        .unwrap()
        .local_private_key(w.client.private_bytes())
        .unwrap()
        .remote_public_key(&w.server.public().0)
        .unwrap()
        .build_initiator()
        .unwrap();
    let mut payload = [0u8; 16];
    payload[..8].copy_from_slice(&NOW.to_be_bytes());
    payload[8..].copy_from_slice(&5u64.to_be_bytes());
    let mut buf = [0u8; 256];
    let n = st.write_message(&payload, &mut buf).unwrap();
    let mut p = handshake_packet(5, 1, &buf[..n]).unwrap();
    let mac1 = Mac1Key::new(&w.server.public()).mac1(&p);
    p.extend_from_slice(&mac1);
    p.extend_from_slice(&[0; MAC_LEN]);
    (st, p)
}

#[test]
fn an_old_client_gets_chacha_and_an_old_style_message_2() {
    let mut w = world();
    let (mut st, m1) = old_client_message1(&w);
    // A client offering ChaCha only sends exactly that format.
    let (_, new_m1) = w.client(&Ciphers::only(ChaCha), NOW);
    assert_eq!(new_m1.len(), m1.len());
    let (_, skeys, m2) = w.respond(&m1, &Ciphers::for_cpu(true)).unwrap();
    assert_eq!(skeys.cipher(), ChaCha);
    // The old client reads an empty payload (anything else it refuses).
    let (_, _, msg) = split_handshake_packet(&m2).unwrap();
    let mut buf = [0u8; 256];
    assert_eq!(st.read_message(msg, &mut buf).unwrap(), 0);
    let ckeys = SessionKeys::from_split(Role::Client, &st.dangerously_get_raw_split());
    assert_keys(&ckeys, &skeys, ChaCha);
    // A server that accepts AES only refuses it.
    let mut w2 = world();
    let (_, m1) = old_client_message1(&w2);
    let e = w2.respond(&m1, &Ciphers::only(Aes)).unwrap_err();
    assert!(matches!(e, HandshakeError::NoCommonCipher { .. }), "{e:?}");
}

#[test]
fn a_reply_without_a_cipher_or_with_one_not_offered_is_refused() {
    let w = world();
    for (offer, payload2) in [
        // An old server's reply (it could not have read the list: a broken server).
        (&[Aes, ChaCha][..], &[][..]),
        (&[Aes], &[CIPHER_ITEM, ChaCha.id()]),
        // A cipher item to a client that offered no list.
        (&[ChaCha], &[CIPHER_ITEM, Aes.id()]),
    ] {
        let (mut ch, m1) = w.client(&list(offer), NOW);
        let e = ch.finish(&w.raw_reply(&m1, payload2)).unwrap_err();
        assert!(
            matches!(e, HandshakeError::CipherNotOffered { .. }),
            "{e:?}"
        );
    }
    // Items that do not parse: a repeated cipher, an unknown id, a cut address.
    for payload2 in [
        &[CIPHER_ITEM, 2, CIPHER_ITEM, 2][..],
        &[CIPHER_ITEM, 9],
        &[CIPHER_ITEM, 2, 4, 127, 0],
    ] {
        let (mut ch, m1) = w.client(&Ciphers::for_cpu(true), NOW);
        let e = ch.finish(&w.raw_reply(&m1, payload2)).unwrap_err();
        assert!(
            matches!(e, HandshakeError::BadPayload { message: 2, .. }),
            "{e:?}"
        );
    }
    // The address item may come with the cipher item, in either order.
    let (mut ch, m1) = w.client(&Ciphers::for_cpu(true), NOW);
    let reply = w.raw_reply(&m1, &[4, 10, 0, 0, 1, 0x1f, 0x90, CIPHER_ITEM, 1]);
    assert_eq!(ch.finish(&reply).unwrap().cipher(), ChaCha);
    assert_eq!(ch.server_address(), Some("10.0.0.1:8080".parse().unwrap()));
}

#[test]
fn a_man_in_the_middle_cannot_downgrade_the_offer() {
    let mut w = world();
    let (_, m1) = w.client(&Ciphers::only(Aes), NOW);
    // The offer is the last bytes of message 1's encrypted payload, before its 16-byte
    // Noise tag and the two MACs. Whatever the attacker changes there, even with a fresh
    // mac1 (the server's public key is all it needs), Noise refuses the message.
    let end = m1.len() - MACS_LEN - 16;
    for at in end - 2..end {
        for flip in [1u8, 3, 0x80] {
            let mut p = m1.clone();
            p[at] ^= flip;
            let at_mac = p.len() - MACS_LEN;
            let mac = Mac1Key::new(&w.server.public()).mac1(&p[..at_mac]);
            p[at_mac..at_mac + MAC_LEN].copy_from_slice(&mac);
            let e = w.respond(&p, &Ciphers::for_cpu(false)).unwrap_err();
            assert!(matches!(e, HandshakeError::Noise { .. }), "{e:?}");
        }
    }
    // Nor by cutting the list off (the old 16-byte form means ChaCha20-Poly1305).
    let mut p = m1[..end - 2].to_vec();
    p.extend_from_slice(&m1[end..m1.len() - MACS_LEN]);
    let mac = Mac1Key::new(&w.server.public()).mac1(&p);
    p.extend_from_slice(&mac);
    p.extend_from_slice(&[0; MAC_LEN]);
    assert!(matches!(
        w.respond(&p, &Ciphers::for_cpu(false)),
        Err(HandshakeError::Noise { .. })
    ));
    assert_eq!(w.guard.newest(&w.client.public()), None);
}

#[test]
fn a_man_in_the_middle_cannot_change_the_choice() {
    let mut w = world();
    let (mut ch, m1) = w.client(&Ciphers::for_cpu(true), NOW);
    let (_, skeys, m2) = w.respond(&m1, &Ciphers::for_cpu(true)).unwrap();
    // message 2's payload is the cipher item (2 bytes) before the Noise tag.
    let end = m2.len() - 16;
    for at in end - 2..end {
        let mut p = m2.clone();
        p[at] ^= 3; // Aes (2) <-> ChaCha (1)
        let e = ch.finish(&p).unwrap_err();
        assert!(matches!(e, HandshakeError::Noise { .. }), "{e:?}");
    }
    // The forgeries did not spoil the handshake.
    assert_keys(&ch.finish(&m2).unwrap(), &skeys, Aes);
}
