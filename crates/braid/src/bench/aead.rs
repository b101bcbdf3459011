//! The packet ciphers alone: how fast one core seals and opens 1400-byte transport packets
//! with each (`braid_crypto::PacketKey`, as the driver calls it), to tell the cipher's
//! share of the data path's CPU from the rest. Timed by the thread's own CPU clock, so a
//! busy machine slows the run but does not change the figures much.
//!
//! Owns: the packets and the timing. Must not touch: keys of any real session.

use anyhow::Result;
use braid_crypto::{write_header, Cipher, PacketKey, PacketType, TAG_LEN};
use serde::Serialize;
use std::time::Duration;

/// One cipher's figures.
#[derive(Debug, Clone, Serialize)]
pub struct AeadRow {
    /// The cipher's name.
    pub cipher: String,
    /// Bytes of each packet (header, frames and tag).
    pub packet_bytes: usize,
    /// Sealing: Gbit of packets per CPU second of one core.
    pub seal_gbit_per_s: f64,
    /// Opening: Gbit of packets per CPU second of one core.
    pub open_gbit_per_s: f64,
    /// CPU seconds per GB to seal once and open once (what one GB costs the two ends).
    pub seal_open_s_per_gb: f64,
}

/// CPU seconds this thread has used.
pub(super) fn thread_cpu() -> f64 {
    // SAFETY: clock_gettime writes into the timespec we pass.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// Seal then open 1400-byte packets for about `time` of CPU per cipher and operation.
pub fn measure(time: Duration) -> Result<Vec<AeadRow>> {
    let mut rows = Vec::new();
    for c in [Cipher::ChaCha20Poly1305, Cipher::Aes256Gcm] {
        let key = PacketKey::with_cipher(c, &[0x42; 32]);
        let mut p = Vec::new();
        let hl = write_header(&mut p, PacketType::Transport, 7, 0, 0)?;
        p.resize(1400, 0x5a);
        let len = p.len();
        debug_assert!(len > hl + TAG_LEN);
        // Sealed copies to open: distinct packet numbers as on the wire.
        let batch = 4096usize;
        let mut sealed = Vec::with_capacity(batch);
        for pn in 0..batch as u64 {
            let mut q = Vec::with_capacity(len);
            write_header(&mut q, PacketType::Transport, 7, 0, pn)?;
            let qh = q.len();
            q.resize(len, 0x5a);
            key.seal_in_place(&mut q, qh)?;
            sealed.push((q, qh));
        }
        let (mut n, t) = (0u64, thread_cpu());
        while thread_cpu() - t < time.as_secs_f64() {
            for _ in 0..256 {
                key.seal_in_place(&mut p, hl)?;
            }
            n += 256;
        }
        let seal = (n * len as u64) as f64 * 8.0 / (thread_cpu() - t) / 1e9;
        let (mut n, t) = (0u64, thread_cpu());
        let mut buf = vec![0u8; len];
        while thread_cpu() - t < time.as_secs_f64() {
            for (q, qh) in &sealed {
                buf.copy_from_slice(q);
                key.open_in_place(&mut buf, *qh)?;
            }
            n += batch as u64;
        }
        let open = (n * len as u64) as f64 * 8.0 / (thread_cpu() - t) / 1e9;
        rows.push(AeadRow {
            cipher: c.name().into(),
            packet_bytes: len,
            seal_gbit_per_s: seal,
            open_gbit_per_s: open,
            seal_open_s_per_gb: 8.0 / seal + 8.0 / open,
        });
    }
    Ok(rows)
}
