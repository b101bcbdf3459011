//! `Session::handle_datagram` on client and server sessions, fresh or established, with
//! datagrams built from the input: raw bytes, a valid header for the session followed by
//! arbitrary frame bytes and a tag, or a genuine datagram of the session with bytes XORed
//! in, cut short or replayed. After each input the sessions keep running (sending, timers)
//! for a while: at most 50 steps and [`AFTER`] of simulated time, past the idle timeout
//! (30 s, then the close and its draining) and two keepalive rounds (15 s); later an idle
//! pair only repeats keepalives (before this bound, that repetition was most of the 50
//! steps and half of each execution's time).
//! Nothing may panic; the server then reads the client's stream (mode bit 1) whether the
//! session is open or closed.
//!
//! Input layout: one mode byte, then records `flags, len, body[len]`:
//! - mode bit 0: establish the session first; bit 1: the client has a stream transfer
//!   under way; bit 2: run the pair a few steps between records.
//! - flags bit 0: deliver to the client (else the server); bits 1-2: 0 raw body,
//!   1 valid header + body + tag, 2 the newest genuine datagram to that side with the body
//!   XORed in from offset body[0] and cut to body[1] bytes when body[1] > 0, 3 a replay of
//!   the k-th newest genuine datagram (k = body[0]); bits 3-4: path id; bits 5-7: packet
//!   number for bit 1-2 = 1 (7: a large one from the body).

#![no_main]

use braid_core::wire::{Header, PacketType};
use braid_core::Instant;
use braid_testkit::pair::{Pair, SID};
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use std::time::Duration;

const TAG: usize = 16;
/// How long the sessions keep running after the input (simulated time).
const AFTER: Duration = Duration::from_secs(40);

/// The client's stream payload (mode bit 1), made once per process.
fn payload() -> &'static [u8] {
    static P: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    P.get_or_init(|| (0..20_000u32).map(|i| (i * 7) as u8).collect())
}

fn header(path: u8, pn: u64) -> Vec<u8> {
    let h = Header::new(PacketType::Transport, SID, path, pn).unwrap();
    let mut buf = [0u8; 32];
    let n = h.write_into(&mut buf).unwrap();
    buf[..n].to_vec()
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, mut rest)) = data.split_first() else {
        return;
    };
    let mut pair = Pair::new();
    if mode & 1 != 0 {
        pair.establish(200);
    }
    let mut stream = None;
    if mode & 2 != 0 {
        if let Ok(id) = pair.client.open_stream() {
            let _ = pair.client.stream_write(id, payload());
            let _ = pair.client.stream_finish(id);
            pair.run_until(4, Instant(u64::MAX));
            stream = Some(id);
        }
    }

    while let Some((&flags, tail)) = rest.split_first() {
        let (len, tail) = match tail.split_first() {
            Some((&l, t)) => (l as usize, t),
            None => (0, tail),
        };
        let (body, next) = tail.split_at(len.min(tail.len()));
        rest = next;
        let to_client = flags & 1 != 0;
        let history = if to_client {
            &pair.to_client
        } else {
            &pair.to_server
        };
        let dgram: Vec<u8> = match (flags >> 1) & 3 {
            0 => body.to_vec(),
            1 => {
                let path = (flags >> 3) & 3;
                let pn = match flags >> 5 {
                    7 => {
                        body.iter()
                            .take(8)
                            .fold(0u64, |a, b| a << 8 | u64::from(*b))
                            & braid_core::wire::varint::MAX
                    }
                    k => (history.len() as u64 + u64::from(k)).saturating_sub(3),
                };
                let mut p = header(path, pn);
                p.extend_from_slice(body);
                p.extend_from_slice(&[0u8; TAG]);
                p
            }
            2 => {
                let Some(last) = history.last() else { continue };
                let mut p = last.to_vec();
                let at = body.first().map_or(0, |&b| b as usize);
                for (i, b) in body.iter().skip(2).enumerate() {
                    if let Some(x) = p.get_mut(at + i) {
                        *x ^= b;
                    }
                }
                if let Some(&cut) = body.get(1).filter(|&&c| c > 0) {
                    p.truncate(cut as usize * p.len() / 256);
                }
                p
            }
            _ => {
                if history.is_empty() {
                    continue;
                }
                let k = body.first().map_or(0, |&b| b as usize) % history.len();
                history[history.len() - 1 - k].to_vec()
            }
        };
        let now = pair.now;
        if to_client {
            pair.client.handle_datagram(now, Bytes::from(dgram));
        } else {
            pair.server.handle_datagram(now, Bytes::from(dgram));
        }
        if mode & 4 != 0 {
            pair.run_until(3, Instant(u64::MAX));
        }
    }

    let until = pair.now + AFTER;
    pair.run_until(50, until);
    for s in [&mut pair.client, &mut pair.server] {
        while s.poll_event().is_some() {}
        let _ = s.stats();
        for id in s.path_ids() {
            let _ = s.path_stats(id);
        }
        assert!(!s.is_closed() || s.error().is_some());
    }
    // The server reads what arrived, open or closed: a read after the session closed
    // must not panic either (it did once, see the test
    // `stream_read_after_reset_beyond_session_window_does_not_panic` in
    // crates/braid-core/tests/robustness.rs).
    if let Some(id) = stream {
        while let Ok(Some(b)) = pair.server.stream_read(id, usize::MAX) {
            if b.is_empty() {
                break;
            }
        }
    }
});
