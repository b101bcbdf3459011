//! Corruption in flight: the one place the emulator alters a datagram's bytes.
//!
//! Owns: deciding, per datagram, whether it is corrupted (a probability set at run time) and
//! flipping the bits of one byte at a seeded random position. Must not touch: which packets
//! are delivered or when (that is the link model's), or anything but the one datagram.

use std::sync::atomic::{AtomicU64, Ordering};

/// The corruption probability of a running path, shared between the test and the relay
/// thread (an `f64` stored as its bits).
#[derive(Debug, Default)]
pub struct CorruptKnob(AtomicU64);

impl CorruptKnob {
    /// Corrupt each datagram with probability `p` (clamped to `[0, 1]`; NaN means 0).
    pub fn set(&self, p: f64) {
        let p = if p.is_nan() { 0.0 } else { p.clamp(0.0, 1.0) };
        self.0.store(p.to_bits(), Ordering::Relaxed);
    }

    pub fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
}

/// A small seeded generator (splitmix64), so a run's corruption is reproducible.
#[derive(Debug, Clone)]
pub struct Corrupter {
    state: u64,
}

impl Corrupter {
    pub fn new(seed: u64) -> Corrupter {
        Corrupter {
            state: seed ^ 0x5eed_c0de_bad0_b175,
        }
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// With probability `p`, flip at least one bit of one byte of `pkt`; returns whether it
    /// did. An empty datagram is never changed.
    pub fn maybe_corrupt(&mut self, p: f64, pkt: &mut [u8]) -> bool {
        if pkt.is_empty() || p <= 0.0 {
            return false;
        }
        let draw = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        if draw >= p {
            return false;
        }
        let r = self.next();
        let at = (r % pkt.len() as u64) as usize;
        // A non-zero mask, so the byte always changes.
        let mask = ((r >> 32) as u8) | 1;
        pkt[at] ^= mask;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_datagram_changes_at_probability_one_and_none_at_zero() {
        let mut c = Corrupter::new(1);
        for len in 1..200usize {
            let orig: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut p = orig.clone();
            assert!(c.maybe_corrupt(1.0, &mut p));
            assert_ne!(p, orig, "length {len}");
            let diff = p.iter().zip(&orig).filter(|(a, b)| a != b).count();
            assert_eq!(diff, 1, "one byte changes");
            let mut q = orig.clone();
            assert!(!c.maybe_corrupt(0.0, &mut q));
            assert_eq!(q, orig);
        }
        assert!(!c.maybe_corrupt(1.0, &mut []));
    }

    #[test]
    fn one_percent_corrupts_about_one_datagram_in_a_hundred() {
        let mut c = Corrupter::new(7);
        let n = 100_000;
        let hits = (0..n)
            .filter(|_| c.maybe_corrupt(0.01, &mut [0u8; 64]))
            .count();
        assert!((800..1200).contains(&hits), "{hits} of {n}");
    }

    #[test]
    fn the_knob_clamps_and_reads_back() {
        let k = CorruptKnob::default();
        assert_eq!(k.get(), 0.0);
        k.set(0.01);
        assert_eq!(k.get(), 0.01);
        k.set(3.0);
        assert_eq!(k.get(), 1.0);
        k.set(f64::NAN);
        assert_eq!(k.get(), 0.0);
    }
}
