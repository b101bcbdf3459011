//! Key epochs: the session keys of successive handshakes of one session, and which of them
//! seals and opens what (docs/protocol.md section 16a).
//!
//! Owns: [`RekeyPolicy`] (when keys must be replaced and how long old ones live) and
//! [`KeyRing`] (the current send key, the receive keys of the epochs that may still have
//! packets in flight, the key phase in the type byte, retirement of old keys and expiry of
//! keys that were not replaced in time). Must not touch: the handshake that makes new keys
//! (the driver runs it with [`crate::handshake`]), sockets and clocks (every method that
//! needs the time takes `now`, a [`Duration`] since any fixed origin of the caller's).
//!
//! Epochs: the first handshake's keys are epoch 0; each rotation adds one. A transport
//! packet's type byte carries the epoch's parity (0: even, 3: odd; the AEAD covers it), so a
//! receiver knows which keys to try without trial decryption beyond one candidate of the same
//! parity. The **client** seals with a new epoch as soon as it has its keys
//! ([`KeyRing::install`]); the **server** installs them as pending when it sends message 2
//! ([`KeyRing::install_pending`]) and keeps sealing with the old epoch until a packet
//! under the new one opens (key confirmation). A receiver keeps an old epoch's receive key
//! for [`RekeyPolicy::overlap`] after the first packet of a newer epoch opened, so packets
//! reordered or retransmitted across the switch still open; then it is wiped.
//!
//! Packet numbers and replay windows continue across epochs (the caller's business): every
//! epoch has fresh keys, so a (key, nonce) pair is still never used twice.

use std::time::Duration;

use crate::aead::{AeadError, PacketKey, SessionKeys};
use braid_wire::{parse_header, Header, TRANSPORT_ODD_PHASE};

/// When keys are replaced and how long old ones may be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RekeyPolicy {
    /// The client starts a rotation when its current keys are this old.
    pub interval: Duration,
    /// ...or when its current send key sealed, or its current receive key opened, this
    /// many packets.
    pub max_packets: u64,
    /// Keys that were not replaced within this time of their installation are refused (and
    /// the session ends): a peer that can no longer complete a handshake (its key was
    /// removed from the authorized file) loses its session within one rotation.
    pub lifetime: Duration,
    /// How long an old receive key still opens packets after a newer epoch's first packet.
    pub overlap: Duration,
}

impl Default for RekeyPolicy {
    /// Fresh keys every 2 minutes or 2^32 - 2^16 packets, refused after 3 minutes, old
    /// keys kept 10 s after the switch.
    fn default() -> Self {
        RekeyPolicy {
            interval: Duration::from_secs(120),
            max_packets: (1 << 32) - (1 << 16),
            lifetime: Duration::from_secs(180),
            overlap: Duration::from_secs(10),
        }
    }
}

/// Most receive keys kept at once (the current one and old ones in their overlap).
const MAX_RECV_KEYS: usize = 4;

struct RecvKey {
    epoch: u64,
    key: PacketKey,
    /// Refused from this instant on (set when a newer epoch's first packet opened).
    retire_at: Option<Duration>,
}

/// The keys of one session across rotations.
pub struct KeyRing {
    policy: RekeyPolicy,
    /// The epoch that seals.
    epoch: u64,
    send: PacketKey,
    /// Packets sealed with `send`.
    sealed: u64,
    /// When the newest keys (pending ones included) were installed.
    installed_at: Duration,
    /// Receive keys, oldest first; the newest is the send epoch's (or the pending one's).
    recv: Vec<RecvKey>,
    /// Packets opened with the newest epoch's receive key.
    opened: u64,
    /// The newest epoch that opened a packet.
    newest_opened: u64,
    /// Server: the send key of the next epoch, used once a packet under it opened.
    pending: Option<PacketKey>,
    /// Packets that failed to open (no key of their phase, forged, or retired).
    failures: u64,
}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyRing")
            .field("epoch", &self.epoch)
            .field(
                "recv_epochs",
                &self.recv.iter().map(|k| k.epoch).collect::<Vec<_>>(),
            )
            .field("pending", &self.pending.is_some())
            .finish_non_exhaustive()
    }
}

fn phase_of(epoch: u64) -> u8 {
    (epoch & 1) as u8
}

impl KeyRing {
    /// Epoch 0: the keys of the session's first handshake, installed at `now`.
    pub fn new(keys: SessionKeys, policy: RekeyPolicy, now: Duration) -> KeyRing {
        KeyRing {
            policy,
            epoch: 0,
            send: keys.send,
            sealed: 0,
            installed_at: now,
            recv: vec![RecvKey {
                epoch: 0,
                key: keys.recv,
                retire_at: None,
            }],
            opened: 0,
            newest_opened: 0,
            pending: None,
            failures: 0,
        }
    }

    /// The policy.
    pub fn policy(&self) -> &RekeyPolicy {
        &self.policy
    }

    /// The epoch that seals now.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The newest epoch installed (the pending one at a server that has not seen it used).
    pub fn newest_epoch(&self) -> u64 {
        self.recv.last().map_or(self.epoch, |k| k.epoch)
    }

    /// Packets that failed to open since the start.
    pub fn failures(&self) -> u64 {
        self.failures
    }

    fn push_recv(&mut self, epoch: u64, key: PacketKey) {
        // A server that installs a second pending epoch replaces the first one (it was
        // never confirmed, so the client gave it up).
        self.recv.retain(|k| k.epoch < epoch);
        self.recv.push(RecvKey {
            epoch,
            key,
            retire_at: None,
        });
        while self.recv.len() > MAX_RECV_KEYS {
            self.recv.remove(0);
        }
    }

    /// Client: new keys from a rotation's handshake. They seal from now on; the old
    /// receive keys stay until the overlap after the new epoch's first packet.
    pub fn install(&mut self, keys: SessionKeys, now: Duration) {
        let epoch = self.newest_epoch() + 1;
        self.epoch = epoch;
        self.send = keys.send;
        self.sealed = 0;
        self.installed_at = now;
        self.opened = 0;
        self.pending = None;
        self.push_recv(epoch, keys.recv);
    }

    /// Server: new keys from a rotation's handshake (message 2 is on its way). They open
    /// at once; they seal once a packet under them opened. Installing again before that
    /// replaces them.
    pub fn install_pending(&mut self, keys: SessionKeys, now: Duration) {
        let epoch = self.epoch + 1;
        self.pending = Some(keys.send);
        self.installed_at = now;
        self.push_recv(epoch, keys.recv);
    }

    /// Client: a rotation is due (the keys' age or packet count).
    pub fn rekey_due(&self, now: Duration) -> bool {
        now.saturating_sub(self.installed_at) >= self.policy.interval
            || self.sealed >= self.policy.max_packets
            || self.opened >= self.policy.max_packets
    }

    /// The newest keys are older than the lifetime: the session must end.
    pub fn expired(&self, now: Duration) -> bool {
        now.saturating_sub(self.installed_at) >= self.policy.lifetime
    }

    /// The next instant at which something changes: an old key retires, a rotation is due
    /// (with `rotation`, a client that has none under way) or the keys expire (with
    /// `expiry`, until the caller has acted on it).
    pub fn next_timeout(&self, rotation: bool, expiry: bool) -> Option<Duration> {
        let mut t = self.recv.iter().filter_map(|k| k.retire_at).min();
        let mut at = |x: Duration| t = Some(t.map_or(x, |t| t.min(x)));
        if rotation {
            at(self.installed_at + self.policy.interval);
        }
        if expiry {
            at(self.installed_at + self.policy.lifetime);
        }
        t
    }

    /// Wipe receive keys whose overlap has passed.
    pub fn retire(&mut self, now: Duration) {
        self.recv.retain(|k| k.retire_at.is_none_or(|r| now < r));
    }

    /// Seal a transport packet (header | frames | 16 tag bytes, type byte 0 as the core
    /// wrote it) with the current epoch: the type byte becomes the epoch's phase first.
    pub fn seal(&mut self, packet: &mut [u8]) -> Result<(), AeadError> {
        let h = parse_header(packet)?;
        if let Some(b) = packet.get_mut(1) {
            *b = if phase_of(self.epoch) == 1 {
                TRANSPORT_ODD_PHASE
            } else {
                0
            };
        }
        self.send.seal_parsed(packet, &h)?;
        self.sealed += 1;
        Ok(())
    }

    /// Open a transport packet with the receive key of its phase (the newest epoch of that
    /// phase first); on success the type byte is 0 again, as the core expects. A packet
    /// under a newer epoch starts the overlap of the older ones; at a server, the first
    /// packet under the pending epoch makes it seal.
    pub fn open(&mut self, packet: &mut [u8], now: Duration) -> Result<(), AeadError> {
        let h = parse_header(packet)?;
        self.open_parsed(packet, &h, now)
    }

    /// [`KeyRing::open`] for a packet whose header the caller already parsed (`h` must be
    /// `parse_header(packet)`): the receive path parses each header once.
    pub fn open_parsed(
        &mut self,
        packet: &mut [u8],
        h: &Header,
        now: Duration,
    ) -> Result<(), AeadError> {
        let mut err = AeadError::Authentication {
            path_id: h.path_id,
            packet_number: h.packet_number,
        };
        let mut opened = None;
        let live =
            |k: &&RecvKey| phase_of(k.epoch) == h.key_phase && k.retire_at.is_none_or(|r| now < r);
        // A failed open leaves the body unspecified: with two candidates (an old epoch in
        // its overlap and a pending one of the same parity) keep the bytes for the second.
        let copy = (self.recv.iter().filter(live).count() > 1).then(|| packet.to_vec());
        for k in self.recv.iter().rev().filter(live) {
            match k.key.open_parsed(packet, h) {
                Ok(()) => {
                    opened = Some(k.epoch);
                    break;
                }
                Err(e) => {
                    err = e;
                    if let Some(c) = &copy {
                        packet.copy_from_slice(c);
                    }
                }
            }
        }
        let Some(epoch) = opened else {
            self.failures += 1;
            return Err(err);
        };
        if let Some(b) = packet.get_mut(1) {
            *b = 0;
        }
        if epoch > self.newest_opened {
            self.newest_opened = epoch;
            self.opened = 0;
            for k in self.recv.iter_mut().filter(|k| k.epoch < epoch) {
                k.retire_at.get_or_insert(now + self.policy.overlap);
            }
        }
        if epoch == self.newest_opened {
            self.opened += 1;
        }
        if epoch > self.epoch {
            if let Some(send) = self.pending.take() {
                // Key confirmation: the client uses the new epoch, so do we.
                self.epoch = epoch;
                self.send = send;
                self.sealed = 0;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aead::Role;
    use braid_wire::{write_header, PacketType};

    const MS: Duration = Duration::from_millis(1);

    fn pair(seed: u8) -> (SessionKeys, SessionKeys) {
        let split = ([seed; 32], [seed.wrapping_add(1); 32]);
        (
            SessionKeys::from_split(Role::Client, &split),
            SessionKeys::from_split(Role::Server, &split),
        )
    }

    fn policy() -> RekeyPolicy {
        RekeyPolicy {
            interval: 100 * MS,
            max_packets: 1000,
            lifetime: 300 * MS,
            overlap: 50 * MS,
        }
    }

    fn packet(path: u8, pn: u64) -> Vec<u8> {
        let mut p = Vec::new();
        write_header(&mut p, PacketType::Transport, 42, path, pn).unwrap();
        p.extend_from_slice(b"frames");
        p.extend_from_slice(&[0; 16]);
        p
    }

    fn rings(now: Duration) -> (KeyRing, KeyRing) {
        let (c, s) = pair(1);
        (
            KeyRing::new(c, policy(), now),
            KeyRing::new(s, policy(), now),
        )
    }

    #[test]
    fn a_rotation_loses_no_packet_sealed_before_or_after_the_switch() {
        let (mut client, mut server) = rings(Duration::ZERO);
        // Sealed under epoch 0, delivered after the switch (reordered).
        let mut late = packet(0, 1);
        client.seal(&mut late).unwrap();
        assert_eq!(late[1], 0);
        let (c1, s1) = pair(7);
        server.install_pending(s1, 10 * MS);
        client.install(c1, 10 * MS);
        // The server still seals with epoch 0 until it sees epoch 1 used.
        let mut down = packet(0, 1);
        server.seal(&mut down).unwrap();
        assert_eq!(down[1], 0);
        let mut first = packet(0, 2);
        client.seal(&mut first).unwrap();
        assert_eq!(first[1], TRANSPORT_ODD_PHASE, "epoch 1 is odd");
        server.open(&mut first, 20 * MS).unwrap();
        assert_eq!(first[1], 0, "the core sees type 0");
        assert_eq!(server.epoch(), 1, "key confirmation");
        // Within the overlap the old packet still opens, both ways.
        server.open(&mut late, 60 * MS).unwrap();
        client.open(&mut down, 60 * MS).unwrap();
        let mut up = packet(0, 2);
        server.seal(&mut up).unwrap();
        assert_eq!(up[1], TRANSPORT_ODD_PHASE);
        client.open(&mut up, 61 * MS).unwrap();
        assert_eq!(server.failures() + client.failures(), 0);
    }

    #[test]
    fn old_keys_retire_after_the_overlap_and_unreplaced_keys_expire() {
        let (mut client, mut server) = rings(Duration::ZERO);
        let mut old = packet(1, 5);
        client.seal(&mut old).unwrap();
        let (c1, s1) = pair(9);
        server.install_pending(s1, 10 * MS);
        client.install(c1, 10 * MS);
        let mut p = packet(1, 6);
        client.seal(&mut p).unwrap();
        server.open(&mut p, 20 * MS).unwrap();
        // The overlap (50 ms) after the first epoch-1 packet (20 ms) has passed.
        assert!(server.open(&mut old, 70 * MS).is_err());
        server.retire(70 * MS);
        assert_eq!(server.recv.len(), 1, "epoch 0's key is wiped");
        assert!(!server.expired(309 * MS));
        assert!(server.expired(310 * MS), "lifetime 300 ms from the install");
        assert!(client.rekey_due(110 * MS) && !client.rekey_due(109 * MS));
    }

    #[test]
    fn rotation_is_due_after_max_packets_either_way() {
        let (mut client, mut server) = rings(Duration::ZERO);
        for pn in 0..1000 {
            assert!(!client.rekey_due(Duration::ZERO));
            let mut p = packet(0, pn);
            client.seal(&mut p).unwrap();
        }
        assert!(client.rekey_due(Duration::ZERO), "sent 1000");
        let (c, _) = pair(3);
        client.install(c, Duration::ZERO);
        assert!(!client.rekey_due(Duration::ZERO));
        let (mut client, _) = rings(Duration::ZERO);
        for pn in 0..1000 {
            let mut p = packet(0, pn);
            server.seal(&mut p).unwrap();
            client.open(&mut p, Duration::ZERO).unwrap();
        }
        assert!(client.rekey_due(Duration::ZERO), "received 1000");
    }

    #[test]
    fn a_second_pending_epoch_replaces_an_unconfirmed_one() {
        let (mut client, mut server) = rings(Duration::ZERO);
        let (_, s_lost) = pair(20);
        server.install_pending(s_lost, MS);
        // The client never got that reply; its next rotation succeeds.
        let (c, s) = pair(30);
        server.install_pending(s, 2 * MS);
        client.install(c, 2 * MS);
        assert_eq!((client.epoch(), server.newest_epoch()), (1, 1));
        let mut p = packet(0, 0);
        client.seal(&mut p).unwrap();
        server.open(&mut p, 3 * MS).unwrap();
        assert_eq!(server.epoch(), 1);
        let mut q = packet(0, 0);
        server.seal(&mut q).unwrap();
        client.open(&mut q, 3 * MS).unwrap();
    }

    #[test]
    fn forged_or_foreign_packets_fail_and_leave_the_keys_alone() {
        let (mut client, mut server) = rings(Duration::ZERO);
        let (mut other, _) = rings(Duration::ZERO);
        other.send = pair(99).0.send;
        let mut p = packet(0, 1);
        other.seal(&mut p).unwrap();
        assert!(server.open(&mut p, MS).is_err());
        let mut q = packet(0, 1);
        client.seal(&mut q).unwrap();
        q[1] = TRANSPORT_ODD_PHASE; // the phase is authenticated too
        assert!(server.open(&mut q, MS).is_err());
        assert_eq!(server.failures(), 2);
        for junk in [&[][..], &[1u8, 3, 0][..], &[1u8; 40][..]] {
            let mut j = junk.to_vec();
            assert!(server.open(&mut j, MS).is_err());
        }
        assert_eq!(server.epoch(), 0);
    }
}
