//! Two [`Connection`]s driven against each other without sockets (the test kit's
//! [`ConnPair`]): sessions whose keys came from a Noise handshake exchange stream data, a
//! NAT rebinding moves the server's transmits to the new address, and replayed, truncated
//! or foreign-key datagrams are dropped without harming the session.

use braid_conn::protect::Aead;
use braid_conn::{PacketProtection, Transport};
use braid_core::Side;
use braid_testkit::conn_pair::{public_addr, split_keys, ConnPair, SERVER};
use braid_testkit::pair::{no_tamper, TamperCtx};
use bytes::Bytes;
use std::net::SocketAddr;

fn body(n: usize) -> Vec<u8> {
    (0..n as u32).map(|i| (i * 31 + i / 255) as u8).collect()
}

#[test]
fn handshake_keyed_connections_exchange_stream_data() {
    let mut pair = ConnPair::established(1);
    let data = body(300_000);
    let got = pair.transfer(&data, 20_000, &mut no_tamper);
    assert_eq!(got.len(), data.len(), "all of it arrived");
    assert!(got == data, "the bytes are those sent");
    // Sealed on the wire: the body is not there in the clear.
    let plain = &data[..64];
    let seen = pair
        .to_server
        .iter()
        .any(|d| d.windows(64).any(|w| w == plain));
    assert!(!seen, "stream bytes travel sealed");
    assert_eq!(pair.server.drops().unopened, 0);
    assert_eq!(pair.client.drops().unopened, 0);
    // The server's transmits carry the agent's address and the server's own.
    let a = pair.server.path_addr(0).unwrap();
    assert_eq!((a.remote, a.local), (public_addr(0), Some(SERVER.ip())));
    assert_eq!(a.transport, Transport::Udp);
    assert!(pair
        .server_sent_to
        .iter()
        .all(|(_, d)| *d == public_addr(0)));
    assert_eq!(pair.lost_to_nat, 0);
}

#[test]
fn after_a_nat_rebinding_the_server_transmits_follow_the_new_address() {
    let mut pair = ConnPair::established(1);
    let data = body(200_000);
    let first = pair.transfer(&data[..50_000], 20_000, &mut no_tamper);
    assert_eq!(first.len(), 50_000);
    // The NAT in front of the agent rebinds path 0: a new public port. Datagrams to the
    // old one are lost from now on.
    let moved: SocketAddr = "198.51.100.1:40999".parse().unwrap();
    pair.nat.insert(0, moved);
    let sent_before = pair.server_sent_to.len();
    let got = pair.transfer(&data, 40_000, &mut no_tamper);
    assert!(got == data, "the transfer completed after the rebinding");
    assert_eq!(pair.server.path_addr(0).map(|a| a.remote), Some(moved));
    let after = &pair.server_sent_to[sent_before..];
    let to_new = after.iter().filter(|(_, d)| *d == moved).count();
    assert!(to_new > 10, "the server sends to the new address: {to_new}");
    assert_eq!(
        after.last().map(|(_, d)| *d),
        Some(moved),
        "and keeps sending there"
    );
    // At most what was in flight towards the old address before the first packet from the
    // new one arrived was lost.
    assert!(
        pair.lost_to_nat < 64,
        "lost to the old mapping: {}",
        pair.lost_to_nat
    );
}

#[test]
fn replayed_truncated_and_wrong_key_datagrams_are_dropped_and_the_session_goes_on() {
    let mut pair = ConnPair::established(1);
    let mut foreign = Aead::new(split_keys(99).0);
    let mut injected = 0u64;
    let mut tamper = |ctx: &mut TamperCtx<'_>| -> Vec<Bytes> {
        if ctx.dest != Side::Server || !ctx.history.len().is_multiple_of(3) {
            return Vec::new();
        }
        let pkt = ctx.pkt;
        let mut wrong_key = pkt.to_vec();
        assert!(foreign.seal(&mut wrong_key));
        let mut out = vec![
            // Truncated: the tag cut off, then all but the header.
            pkt.slice(..pkt.len() - 1),
            pkt.slice(..12.min(pkt.len())),
            // The same header and length, sealed under another session's keys.
            Bytes::from(wrong_key),
        ];
        // A replay of a datagram the server already took.
        if let Some(old) = ctx.history.last() {
            out.push(old.clone());
        }
        injected += out.len() as u64;
        out
    };
    let data = body(200_000);
    let got = pair.transfer(&data, 40_000, &mut tamper);
    assert!(got == data, "the transfer completed, intact");
    assert!(injected > 100, "injected {injected}");
    assert_eq!(
        pair.server.drops().unopened,
        injected,
        "every injected datagram was dropped, and nothing genuine"
    );
    assert!(
        pair.server.session().error().is_none(),
        "the session is unharmed"
    );
}
