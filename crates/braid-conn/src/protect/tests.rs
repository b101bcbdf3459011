//! Unit tests of packet protection, without sockets: what the seal, open and
//! `poll_control` do on each end of a session (AEAD, per-path replay windows, the agent's
//! key rotation and the server's inbox, expiry).

use super::*;

use braid_crypto::{write_header, ReplayGuard, Role, ServerHandshake, TAG_LEN};

const MS: Duration = Duration::from_millis(1);
const SESSION: u64 = 42;

/// Matching agent and server keys.
fn pair(seed: u8) -> (SessionKeys, SessionKeys) {
    let split = ([seed; 32], [seed.wrapping_add(1); 32]);
    (
        SessionKeys::from_split(Role::Client, &split),
        SessionKeys::from_split(Role::Server, &split),
    )
}

/// A transport packet of `path` and packet number `pn` carrying `body`, with tag space.
fn packet(path: u8, pn: u64, body: &[u8]) -> Vec<u8> {
    let mut p = Vec::new();
    write_header(&mut p, PacketType::Transport, SESSION, path, pn).unwrap();
    p.extend_from_slice(body);
    p.extend_from_slice(&[0; TAG_LEN]);
    p
}

/// `body` sealed by `a` as packet `pn` of `path`.
fn sealed(a: &mut Aead, path: u8, pn: u64, body: &[u8]) -> Vec<u8> {
    let mut p = packet(path, pn, body);
    assert!(a.seal(&mut p), "seal");
    p
}

/// `p` opened by `a` (a copy: the caller may open the same bytes again): the frames.
fn opened(a: &mut Aead, p: &[u8]) -> Option<Vec<u8>> {
    let mut p = p.to_vec();
    let h = a.open(&mut p)?;
    Some(p[h.header_len..p.len() - TAG_LEN].to_vec())
}

fn at(ms: u64) -> Instant {
    Instant(ms * 1_000_000)
}

#[test]
fn a_sealed_packet_opens_once_per_path_and_a_replay_is_dropped() {
    let (c, s) = pair(1);
    let (mut agent, mut server) = (Aead::new(c), Aead::new(s));
    let p = sealed(&mut agent, 0, 7, b"frames");
    assert_ne!(
        &p[p.len() - TAG_LEN - 6..p.len() - TAG_LEN],
        b"frames",
        "encrypted"
    );
    assert_eq!(opened(&mut server, &p).as_deref(), Some(&b"frames"[..]));
    assert_eq!(
        opened(&mut server, &p),
        None,
        "the same packet again is a replay"
    );
    // The replay window is per path: packet number 7 of path 1 is new.
    let q = sealed(&mut agent, 1, 7, b"other path");
    assert_eq!(opened(&mut server, &q).as_deref(), Some(&b"other path"[..]));
    // An older packet within the window still opens (reordering), once.
    let r = sealed(&mut agent, 0, 5, b"late");
    assert_eq!(opened(&mut server, &r).as_deref(), Some(&b"late"[..]));
    assert_eq!(opened(&mut server, &r), None);
    // Replays are not failures to open: nothing was forged.
    assert_eq!(server.stats.unopened.load(Ordering::Relaxed), 0);
    // And the other way.
    let back = sealed(&mut server, 0, 1, b"ack");
    assert_eq!(opened(&mut agent, &back).as_deref(), Some(&b"ack"[..]));
}

#[test]
fn a_corrupted_or_foreign_packet_is_counted_and_harms_nothing() {
    let (c, s) = pair(1);
    let (mut agent, mut server) = (Aead::new(c), Aead::new(s));
    let good = sealed(&mut agent, 0, 3, b"frames");
    // Any flipped byte, header (associated data) or body or tag, fails.
    for i in [0, 5, good.len() - TAG_LEN - 1, good.len() - 1] {
        let mut bad = good.clone();
        bad[i] ^= 0x40;
        assert_eq!(opened(&mut server, &bad), None, "byte {i} flipped");
    }
    // Sealed under another session's keys.
    let (other, _) = pair(9);
    let foreign = sealed(&mut Aead::new(other), 0, 4, b"frames");
    assert_eq!(opened(&mut server, &foreign), None);
    let unopened = server.stats.unopened.load(Ordering::Relaxed);
    assert!(unopened >= 4, "failures counted: {unopened}");
    // None of them took packet number 3 from the replay window: the real one opens.
    assert_eq!(opened(&mut server, &good).as_deref(), Some(&b"frames"[..]));
    // A truncated packet (shorter than a header and tag) is dropped, not a panic.
    for n in [0, 1, 11, good.len() - TAG_LEN] {
        assert_eq!(opened(&mut server, &good[..n]), None, "{n} bytes");
    }
}

/// A rotation policy short enough for a test.
fn policy() -> RekeyPolicy {
    RekeyPolicy {
        interval: 100 * MS,
        max_packets: u64::MAX,
        lifetime: 60_000 * MS,
        overlap: 50 * MS,
    }
}

#[test]
fn the_agent_rotates_the_keys_and_no_packet_is_lost_across_the_switch() {
    let server_key = StaticKeypair::generate().unwrap();
    let agent_key = Arc::new(StaticKeypair::generate().unwrap());
    let (c, s) = pair(1);
    let stats = (Arc::new(KeyStats::default()), Arc::new(KeyStats::default()));
    let mut agent = Aead::client(
        c,
        policy(),
        agent_key.clone(),
        server_key.public(),
        SESSION,
        0,
        stats.0.clone(),
    );
    let inbox = Arc::new(RekeyInbox::default());
    let mut server = Aead::server(s, policy(), inbox.clone(), stats.1.clone());
    assert!(agent.poll_control(at(0)).is_none());
    assert_eq!(
        agent.poll_timeout(),
        Some(at(100)),
        "the rotation is due then"
    );
    // Message 1 goes out on the path that last delivered, then again with backoff
    // (0.5, 1, 2, 2 s) until answered.
    let Some(Control::Send(0, msg1)) = agent.poll_control(at(100)) else {
        panic!("no message 1 when the rotation was due");
    };
    let mut resent = Vec::new();
    for t in (100..=6_000).step_by(50) {
        if let Some(Control::Send(..)) = agent.poll_control(at(t)) {
            resent.push(t);
        }
    }
    assert_eq!(resent, vec![600, 1_600, 3_600, 5_600]);
    let before = sealed(&mut agent, 0, 1, b"sealed under epoch 0");
    // The server's listener answers message 1 and leaves the keys in the inbox.
    let now_ms = unix_ms();
    let mut guard = ReplayGuard::new();
    let authorized = [agent_key.public()];
    let (who, keys, mut msg2) =
        ServerHandshake::respond(&server_key, &authorized, &mut guard, &msg1, now_ms, 30_000)
            .unwrap();
    assert_eq!(who, agent_key.public());
    inbox.put(keys);
    // The agent takes message 2 (a handshake packet: nothing for the session) and switches.
    assert!(agent.open(&mut msg2).is_none());
    assert!(matches!(
        agent.poll_control(at(6_000)),
        Some(Control::Rotated)
    ));
    assert_eq!(agent.epoch(), 1);
    assert!(agent.poll_control(at(6_050)).is_none(), "no more message 1");
    let after = sealed(&mut agent, 0, 2, b"sealed under epoch 1");
    // The server opens both, the later first; then it seals under the new keys too.
    assert!(server.poll_control(at(6_000)).is_none());
    assert_eq!(
        opened(&mut server, &after).as_deref(),
        Some(&b"sealed under epoch 1"[..])
    );
    assert_eq!(server.epoch(), 1);
    assert_eq!(
        opened(&mut server, &before).as_deref(),
        Some(&b"sealed under epoch 0"[..]),
        "a packet of the old epoch within the overlap"
    );
    let reply = sealed(&mut server, 0, 9, b"answer");
    assert_eq!(opened(&mut agent, &reply).as_deref(), Some(&b"answer"[..]));
    assert_eq!(stats.0.rotations.load(Ordering::Relaxed), 1);
    assert_eq!(stats.1.rotations.load(Ordering::Relaxed), 1);
    // A second answer to the same rotation changes nothing.
    let (_, _, mut again) = ServerHandshake::respond(
        &server_key,
        &authorized,
        &mut ReplayGuard::new(),
        &msg1,
        now_ms,
        30_000,
    )
    .unwrap();
    assert!(agent.open(&mut again).is_none());
    assert_eq!(agent.epoch(), 1);
}

#[test]
fn keys_that_outlive_their_lifetime_end_the_session_once() {
    let (_, s) = pair(1);
    let p = RekeyPolicy {
        lifetime: 300 * MS,
        ..policy()
    };
    let stats = Arc::new(KeyStats::default());
    let mut server = Aead::server(s, p, Arc::default(), stats.clone());
    assert!(server.poll_control(at(299)).is_none());
    assert!(server.poll_timeout().is_some_and(|t| t <= at(300)));
    assert!(matches!(
        server.poll_control(at(301)),
        Some(Control::Expired)
    ));
    assert!(server.poll_control(at(400)).is_none(), "said once");
    assert_eq!(stats.expired.load(Ordering::Relaxed), 1);
}

#[test]
fn the_replay_window_takes_packets_up_to_its_edge_and_refuses_beyond() {
    use braid_crypto::replay::WINDOW;
    let (c, s) = pair(3);
    let (mut agent, mut server) = (Aead::new(c), Aead::new(s));
    let top = 5_000;
    assert!(opened(&mut server, &sealed(&mut agent, 0, top, b"top")).is_some());
    // The oldest packet number the window still holds opens, once.
    let edge = sealed(&mut agent, 0, top - (WINDOW - 1), b"edge");
    assert!(opened(&mut server, &edge).is_some(), "at the window's edge");
    assert!(
        opened(&mut server, &edge).is_none(),
        "a duplicate at the edge"
    );
    // One further back is outside: refused, although it never arrived.
    let old = sealed(&mut agent, 0, top - WINDOW, b"old");
    assert!(opened(&mut server, &old).is_none(), "beyond the edge");
    // A jump of more than a window forgets the old bits, and the old top is now beyond.
    let far = sealed(&mut agent, 0, top + 3 * WINDOW, b"far");
    assert!(opened(&mut server, &far).is_some());
    assert!(
        opened(&mut server, &far).is_none(),
        "a duplicate after the jump"
    );
    let again = sealed(&mut agent, 0, top + 1, b"stale");
    assert!(
        opened(&mut server, &again).is_none(),
        "far behind the new top"
    );
    // Replays are not failures to open.
    assert_eq!(server.stats.unopened.load(Ordering::Relaxed), 0);
}

#[test]
fn old_keys_open_until_the_overlap_ends_after_the_first_packet_under_new_ones() {
    let ((c0, s0), (c1, s1)) = (pair(4), pair(5));
    let inbox = Arc::new(RekeyInbox::default());
    let mut server = Aead::server(s0, policy(), inbox.clone(), Arc::default());
    // The agent's keys: epoch 0, then epoch 1 after its rotation.
    let mut old = KeyRing::new(c0, policy(), Duration::ZERO);
    let mut new = KeyRing::new(c1, policy(), Duration::ZERO);
    new.install(pair(5).0, Duration::ZERO);
    let seal = |ring: &mut KeyRing, pn: u64| {
        let mut p = packet(0, pn, b"frames");
        ring.seal(&mut p).unwrap();
        p
    };
    assert!(opened(&mut server, &seal(&mut old, 1)).is_some());
    // The listener accepted the rotation: the new keys wait in the inbox.
    inbox.put(s1);
    assert!(server.poll_control(at(1_000)).is_none());
    assert!(
        opened(&mut server, &seal(&mut old, 2)).is_some(),
        "old keys before any new packet"
    );
    assert!(
        opened(&mut server, &seal(&mut new, 3)).is_some(),
        "the first packet under new keys"
    );
    assert_eq!(server.epoch(), 1);
    // The overlap (50 ms) runs from that first packet: late old packets open until it ends.
    assert!(server.poll_control(at(1_049)).is_none());
    assert!(
        opened(&mut server, &seal(&mut old, 4)).is_some(),
        "within the overlap"
    );
    assert!(server.poll_control(at(1_051)).is_none());
    assert!(
        opened(&mut server, &seal(&mut old, 5)).is_none(),
        "after the overlap"
    );
    assert!(
        opened(&mut server, &seal(&mut new, 6)).is_some(),
        "new keys still open"
    );
}
