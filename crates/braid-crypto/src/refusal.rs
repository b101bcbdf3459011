//! The server's "no common cipher" refusal (packet type 6).
//!
//! ```text
//! header (12 bytes: type 6, the session id and path id of message 1, packet number 0)
//! | count (1, 1 to 8) | cipher id (1) x count
//! ```
//!
//! A server sends it in answer to a handshake message 1 of an authorized client that offers
//! no packet cipher the server accepts (`HandshakeError::NoCommonCipher`), so that the agent
//! can say what to change instead of timing out. It is not authenticated: a client only
//! reports it (and keeps trying), as it does the session-limit refusal. It is smaller than
//! the message 1 it answers.
//!
//! Owns: the refusal's bytes. Must not touch: when a server sends it (the server's endpoint
//! decides), the handshake itself, sockets.
//!
//! No-panic contract: [`read_cipher_refusal`] accepts any bytes and returns `None` for
//! anything that is not a well-formed refusal.

use crate::aead::{Cipher, Ciphers};
use braid_wire::{parse_header, write_header, Header, PacketType};

/// Most cipher ids in a refusal (as in an offer).
const MAX_LISTED: usize = 8;

/// The refusal of the handshake message 1 whose header is `h`: the server accepts
/// `accepted`.
pub fn cipher_refusal(h: &Header, accepted: &Ciphers) -> Vec<u8> {
    let ids: Vec<u8> = accepted
        .as_slice()
        .iter()
        .take(MAX_LISTED)
        .map(|c| c.id())
        .collect();
    let mut out = Vec::with_capacity(14 + ids.len());
    // Packet number 0 always fits.
    let _ = write_header(
        &mut out,
        PacketType::CipherRefused,
        h.session_id,
        h.path_id,
        0,
    );
    out.push(ids.len() as u8);
    out.extend_from_slice(&ids);
    out
}

/// The header and the server's accepted ciphers of a refusal (ids this version does not
/// know are left out); `None` if `packet` is not a well-formed refusal.
pub fn read_cipher_refusal(packet: &[u8]) -> Option<(Header, Vec<Cipher>)> {
    let h = parse_header(packet).ok()?;
    if h.ptype != PacketType::CipherRefused {
        return None;
    }
    let (&n, ids) = packet.get(h.header_len..)?.split_first()?;
    if n == 0 || usize::from(n) > MAX_LISTED || ids.len() != usize::from(n) {
        return None;
    }
    Some((h, ids.iter().filter_map(|&i| Cipher::from_id(i)).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_message_and_the_accepted_ciphers() {
        let m1 = Header::new(PacketType::Handshake, 0x1234, 3, 0).unwrap();
        for accepted in [
            Ciphers::only(Cipher::Aes256Gcm),
            Ciphers::only(Cipher::ChaCha20Poly1305),
            Ciphers::new(&[Cipher::ChaCha20Poly1305, Cipher::Aes256Gcm]).unwrap(),
        ] {
            let r = cipher_refusal(&m1, &accepted);
            assert_eq!(r.len(), 12 + 1 + accepted.as_slice().len());
            let (h, list) = read_cipher_refusal(&r).unwrap();
            assert_eq!(
                (h.ptype, h.session_id, h.path_id),
                (PacketType::CipherRefused, 0x1234, 3)
            );
            assert_eq!(list, accepted.as_slice());
            // Every truncation and any extra byte is refused.
            for cut in 0..r.len() {
                assert_eq!(read_cipher_refusal(&r[..cut]), None);
            }
            let mut long = r.clone();
            long.push(1);
            assert_eq!(read_cipher_refusal(&long), None);
        }
    }

    #[test]
    fn unknown_ids_are_left_out_and_bad_counts_refused() {
        let m1 = Header::new(PacketType::Handshake, 7, 0, 0).unwrap();
        let mut r = cipher_refusal(&m1, &Ciphers::only(Cipher::Aes256Gcm));
        r.truncate(12);
        r.extend_from_slice(&[3, 9, 2, 200]);
        assert_eq!(read_cipher_refusal(&r).unwrap().1, vec![Cipher::Aes256Gcm]);
        r.truncate(12);
        r.push(0);
        assert_eq!(read_cipher_refusal(&r), None, "an empty list");
        r.truncate(12);
        r.push(9);
        r.extend_from_slice(&[1; 9]);
        assert_eq!(read_cipher_refusal(&r), None, "more than 8 ids");
        // Another packet type is not a refusal.
        let limit = braid_wire::session_limit_refusal(&m1);
        assert_eq!(read_cipher_refusal(&limit), None);
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_never_panic(bytes in proptest::collection::vec(
            proptest::prelude::any::<u8>(), 0..40), six: bool) {
            let mut bytes = bytes;
            if six && bytes.len() > 12 {
                bytes[0] = 1;
                bytes[1] = 6;
                bytes[11] &= 0x3f;
            }
            if let Some((h, list)) = read_cipher_refusal(&bytes) {
                proptest::prop_assert_eq!(h.ptype, PacketType::CipherRefused);
                proptest::prop_assert!(list.len() <= MAX_LISTED);
            }
        }
    }
}
