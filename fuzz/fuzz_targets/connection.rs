//! Protected datagrams to an agent's and a server's `braid_conn::Connection` (the test kit's
//! `ConnPair`, keys made without a handshake), fresh or established, mid-transfer or not:
//! raw bytes; a transport packet for the session sealed under the right keys (so the
//! frames reach the session) or under another session's keys; a genuine sealed datagram
//! with bytes XORed in or cut short; replays. After the input the pair keeps running
//! (sending, timers) for at most 60 steps. Nothing may panic; a datagram that is not
//! genuine never reaches a session as genuine (a foreign-key or truncated one is counted
//! as dropped).
//!
//! Input layout: one mode byte, then records `flags, len, body[len]`:
//! - mode bit 0: establish the session first; bit 1: the agent has a stream transfer under
//!   way; bit 2: two paths; bit 3: run the pair a few steps between records.
//! - flags bit 0: deliver to the agent (else the server); bits 1-2: 0 raw body, 1 a header
//!   for the session + body as frames, sealed (bit 3: under another session's keys),
//!   2 the newest genuine datagram to that side with the body XORed in from offset body[0]
//!   and cut to body[1] bytes when body[1] > 0, 3 a replay of the k-th newest genuine
//!   datagram (k = body[0]); bit 4: path id 1 (else 0); bits 5-7: packet number for kind 1
//!   (7: a large one from the body).

#![no_main]

use braid_conn::protect::Aead;
use braid_conn::PacketProtection;
use braid_core::wire::{Header, PacketType};
use braid_core::Side;
use braid_testkit::conn_pair::{split_keys, ConnPair};
use braid_testkit::pair::{no_tamper, SID};
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

const TAG: usize = 16;

/// The agent's stream payload (mode bit 1), made once per process.
fn payload() -> &'static [u8] {
    static P: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    P.get_or_init(|| (0..20_000u32).map(|i| (i * 7) as u8).collect())
}

/// A transport packet of `path`, number `pn`, carrying `frames`, with tag space.
fn packet(path: u8, pn: u64, frames: &[u8]) -> Vec<u8> {
    let h = Header::new(PacketType::Transport, SID, path, pn).unwrap();
    let mut p = vec![0u8; 32];
    let n = h.write_into(&mut p).unwrap();
    p.truncate(n);
    p.extend_from_slice(frames);
    p.extend_from_slice(&[0; TAG]);
    p
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, mut rest)) = data.split_first() else {
        return;
    };
    let (c, s) = split_keys(1);
    let paths = if mode & 4 != 0 { 2 } else { 1 };
    let mut pair = ConnPair::with_keys(c, s, paths);
    // Sealers with the same keys as each end (to make valid packets), and with others.
    let (c, s) = split_keys(1);
    let mut as_agent = Aead::new(c);
    let mut as_server = Aead::new(s);
    let (fc, fs) = split_keys(77);
    let mut foreign = (Aead::new(fc), Aead::new(fs));
    if mode & 1 != 0 {
        pair.run(200, &mut no_tamper, &mut |p| {
            p.client.session().is_established() && p.server.session().is_established()
        });
    }
    if mode & 2 != 0 {
        if let Ok(id) = pair.client.session_mut().open_stream() {
            let _ = pair.client.session_mut().stream_write(id, payload());
            pair.run(4, &mut no_tamper, &mut |_| false);
        }
    }
    while let Some((&flags, tail)) = rest.split_first() {
        let (len, tail) = match tail.split_first() {
            Some((&l, t)) => (l as usize, t),
            None => (0, tail),
        };
        let (body, next) = tail.split_at(len.min(tail.len()));
        rest = next;
        let dest = if flags & 1 != 0 { Side::Client } else { Side::Server };
        let history = match dest {
            Side::Client => &pair.to_client,
            Side::Server => &pair.to_server,
        };
        let before = match dest {
            Side::Client => pair.client.drops().unopened,
            Side::Server => pair.server.drops().unopened,
        };
        let mut must_drop = false;
        let dgram: Vec<u8> = match (flags >> 1) & 3 {
            0 => body.to_vec(),
            1 => {
                let path = (flags >> 4) & 1;
                let pn = match flags >> 5 {
                    7 => body.iter().take(8).fold(0u64, |a, &b| a << 8 | b as u64) >> 2,
                    k => k as u64 * 3,
                };
                let mut p = packet(path, pn, body);
                let wrong = flags & 8 != 0;
                let sealer: &mut Aead = match (dest, wrong) {
                    (Side::Server, false) => &mut as_agent,
                    (Side::Client, false) => &mut as_server,
                    (Side::Server, true) => &mut foreign.0,
                    (Side::Client, true) => &mut foreign.1,
                };
                if !sealer.seal(&mut p) {
                    continue;
                }
                must_drop = wrong;
                p
            }
            2 => {
                let Some(g) = history.last() else { continue };
                let mut g = g.to_vec();
                let off = body.first().copied().unwrap_or(0) as usize;
                for (i, b) in body.iter().skip(2).enumerate() {
                    if let Some(x) = g.get_mut(off + i) {
                        *x ^= b;
                    }
                }
                let cut = body.get(1).copied().unwrap_or(0) as usize;
                if cut > 0 && cut < g.len() {
                    g.truncate(cut);
                    must_drop = true;
                }
                g
            }
            _ => {
                let k = body.first().copied().unwrap_or(0) as usize;
                let Some(g) = history.iter().rev().nth(k) else { continue };
                g.to_vec()
            }
        };
        pair.inject(dest, Bytes::from(dgram));
        let after = match dest {
            Side::Client => pair.client.drops().unopened,
            Side::Server => pair.server.drops().unopened,
        };
        assert!(!must_drop || after == before + 1, "a forged or cut datagram was taken");
        if mode & 8 != 0 {
            pair.run(3, &mut no_tamper, &mut |_| false);
        }
    }
    pair.run(60, &mut no_tamper, &mut |_| false);
});
