use super::*;
use braid_wire::write_header;

fn pair() -> (SessionKeys, SessionKeys) {
    pair_with(Cipher::ChaCha20Poly1305)
}

fn pair_with(c: Cipher) -> (SessionKeys, SessionKeys) {
    let split = ([7u8; 32], [9u8; 32]);
    (
        SessionKeys::from_split_with(Role::Client, c, &split),
        SessionKeys::from_split_with(Role::Server, c, &split),
    )
}

/// A transport packet as the core writes it: header | body | 16 zero bytes.
fn packet(path: u8, pn: u64, body: &[u8]) -> (Vec<u8>, usize) {
    let mut p = Vec::new();
    let hl = write_header(
        &mut p,
        PacketType::Transport,
        0x1122_3344_5566_7788,
        path,
        pn,
    )
    .unwrap();
    p.extend_from_slice(body);
    p.extend_from_slice(&[0; TAG_LEN]);
    (p, hl)
}

#[test]
fn round_trip_many_sizes_with_both_ciphers() {
    for c in Cipher::ALL {
        round_trip_many_sizes(c);
    }
}

fn round_trip_many_sizes(c: Cipher) {
    let (client, server) = pair_with(c);
    assert_eq!((client.cipher(), server.recv.cipher()), (c, c));
    let pns = [0u64, 1, 63, 64, 16_383, 16_384, 1 << 30, (1 << 62) - 1];
    for size in (0..1500).step_by(7).chain([1452, 1453, 1500]) {
        let body: Vec<u8> = (0..size).map(|i| (i * 31 + size) as u8).collect();
        let pn = pns[size % pns.len()];
        let path = (size % 8) as u8;
        let (orig, hl) = packet(path, pn, &body);
        let mut p = orig.clone();
        client.send.seal_in_place(&mut p, hl).unwrap();
        assert_eq!(p.len(), orig.len());
        assert_eq!(&p[..hl], &orig[..hl], "header untouched");
        if size >= 16 {
            assert_ne!(&p[hl..hl + size], &body[..], "body encrypted");
        }
        server.recv.open_in_place(&mut p, hl).unwrap();
        assert_eq!(&p[..hl + size], &orig[..hl + size]);
        // And the other direction.
        let mut q = orig.clone();
        server.send.seal_in_place(&mut q, hl).unwrap();
        client.recv.open_in_place(&mut q, hl).unwrap();
        assert_eq!(&q[..hl + size], &orig[..hl + size]);
    }
}

#[test]
fn directions_use_different_keys() {
    let (client, _server) = pair();
    let (mut p, hl) = packet(0, 3, b"hello frames");
    client.send.seal_in_place(&mut p, hl).unwrap();
    assert!(matches!(
        client.recv.open_in_place(&mut p, hl),
        Err(AeadError::Authentication {
            path_id: 0,
            packet_number: 3
        })
    ));
}

#[test]
fn tampering_any_byte_fails_with_both_ciphers() {
    for c in Cipher::ALL {
        tampering_any_byte_fails(c);
    }
}

fn tampering_any_byte_fails(c: Cipher) {
    let (client, server) = pair_with(c);
    let (mut sealed, hl) = packet(2, 70_000, b"some frames, some more frames");
    client.send.seal_in_place(&mut sealed, hl).unwrap();
    for i in 0..sealed.len() {
        for flip in [0x01u8, 0x80] {
            let mut p = sealed.clone();
            p[i] ^= flip;
            // A flipped header byte may also change the header's length or validity:
            // whatever happens, opening must fail.
            let hl2 = parse_header(&p).map(|h| h.header_len).unwrap_or(hl);
            assert!(
                server.recv.open_in_place(&mut p, hl2).is_err(),
                "byte {i} ^ {flip:#x} went unnoticed"
            );
        }
    }
    let mut p = sealed.clone();
    server.recv.open_in_place(&mut p, hl).unwrap();
}

#[test]
fn same_body_different_path_or_pn_differs() {
    let (client, _) = pair();
    let (mut a, hl) = packet(0, 5, &[0xaa; 40]);
    let (mut b, _) = packet(1, 5, &[0xaa; 40]);
    let (mut c, _) = packet(0, 6, &[0xaa; 40]);
    client.send.seal_in_place(&mut a, hl).unwrap();
    client.send.seal_in_place(&mut b, hl).unwrap();
    client.send.seal_in_place(&mut c, hl).unwrap();
    assert_ne!(a[hl..], b[hl..]);
    assert_ne!(a[hl..], c[hl..]);
}

#[test]
fn refuses_bad_lengths_and_types() {
    let (client, server) = pair();
    let (mut p, hl) = packet(0, 1, b"abc");
    assert_eq!(
        client.send.seal_in_place(&mut p, hl + 1),
        Err(AeadError::HeaderLenMismatch {
            given: hl + 1,
            actual: hl
        })
    );
    let mut short = p[..hl + 15].to_vec();
    assert_eq!(
        server.recv.open_in_place(&mut short, hl),
        Err(AeadError::TooShort {
            len: hl + 15,
            header_len: hl
        })
    );
    let mut hs = p.clone();
    hs[1] = 1;
    assert_eq!(
        client.send.seal_in_place(&mut hs, hl),
        Err(AeadError::NotTransport)
    );
    assert!(matches!(
        server.recv.open_in_place(&mut [], 0),
        Err(AeadError::Header(_))
    ));
    // Header and tag only (no frames) is a valid AEAD message.
    let (mut empty, hl) = packet(0, 2, b"");
    client.send.seal_in_place(&mut empty, hl).unwrap();
    server.recv.open_in_place(&mut empty, hl).unwrap();
}

#[test]
fn the_ciphers_differ_and_do_not_open_each_other() {
    let (aes, _) = pair_with(Cipher::Aes256Gcm);
    let (_, chacha) = pair_with(Cipher::ChaCha20Poly1305);
    let (orig, hl) = packet(1, 77, &[0x42; 100]);
    let (mut a, mut b) = (orig.clone(), orig.clone());
    aes.send.seal_in_place(&mut a, hl).unwrap();
    pair_with(Cipher::ChaCha20Poly1305)
        .0
        .send
        .seal_in_place(&mut b, hl)
        .unwrap();
    assert_ne!(a, b, "same key bytes, different ciphers, different output");
    assert!(chacha.recv.open_in_place(&mut a, hl).is_err());
}

#[test]
fn cipher_lists_parse_and_choose() {
    use Cipher::*;
    assert_eq!(
        Ciphers::for_cpu(true).as_slice(),
        [Aes256Gcm, ChaCha20Poly1305]
    );
    assert_eq!(
        Ciphers::for_cpu(false).as_slice(),
        [ChaCha20Poly1305, Aes256Gcm]
    );
    assert_eq!(Ciphers::parse("auto").unwrap(), Ciphers::auto());
    assert_eq!(
        Ciphers::parse("AES-256-GCM").unwrap(),
        Ciphers::only(Aes256Gcm)
    );
    assert_eq!(
        Ciphers::parse("chacha20-poly1305").unwrap(),
        Ciphers::only(ChaCha20Poly1305)
    );
    let e = Ciphers::parse("rot13").unwrap_err().to_string();
    assert!(e.contains("rot13") && e.contains("aes-256-gcm"), "{e}");
    assert_eq!(Ciphers::new(&[]), None);
    assert_eq!(
        Ciphers::new(&[Aes256Gcm, Aes256Gcm]).unwrap(),
        Ciphers::only(Aes256Gcm)
    );
    // The server's order wins; nothing in common: no choice.
    assert_eq!(
        Ciphers::for_cpu(false).choose(&[Aes256Gcm, ChaCha20Poly1305]),
        Some(ChaCha20Poly1305)
    );
    assert_eq!(Ciphers::only(Aes256Gcm).choose(&[ChaCha20Poly1305]), None);
    for c in Cipher::ALL {
        assert_eq!(Cipher::from_id(c.id()), Some(c));
    }
    assert_eq!(Cipher::from_id(0), None);
}

#[test]
fn error_messages_say_what_to_do() {
    let e = AeadError::Authentication {
        path_id: 3,
        packet_number: 9,
    };
    assert!(e.to_string().contains("path 3 number 9"), "{e}");
    assert!(e.to_string().contains("drop it"), "{e}");
}
