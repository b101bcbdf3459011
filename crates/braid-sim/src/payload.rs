//! Transfer payloads: a deterministic byte stream that is cheap to generate at any offset,
//! and the hash both ends compute over it.
//!
//! Owns: what bytes a transfer carries and how they are checked. Must not touch: the
//! session or links. Word `i` of a transfer's stream is `splitmix64(seed ^ i)`, so no two
//! regions repeat and any misplaced, duplicated or missing byte changes the hash.

use braid_core::rng::splitmix64;
use xxhash_rust::xxh3::Xxh3;

/// Generates the bytes of one transfer in order.
#[derive(Clone)]
pub struct Generator {
    seed: u64,
    offset: u64,
    size: u64,
    hash: Xxh3,
}

impl Generator {
    /// The stream of `size` bytes for `seed`.
    pub fn new(seed: u64, size: u64) -> Self {
        Generator {
            seed,
            offset: 0,
            size,
            hash: Xxh3::new(),
        }
    }

    /// Bytes not yet generated.
    pub fn remaining(&self) -> u64 {
        self.size - self.offset
    }

    /// Fill `buf` (up to the remaining size) with the next bytes; returns how many.
    pub fn fill(&mut self, buf: &mut [u8]) -> usize {
        let n = (self.remaining().min(buf.len() as u64)) as usize;
        let buf = &mut buf[..n];
        let mut i = 0;
        while i < n {
            let off = self.offset + i as u64;
            let word = splitmix64(self.seed ^ (off / 8)).to_le_bytes();
            let within = (off % 8) as usize;
            let take = (8 - within).min(n - i);
            buf[i..i + take].copy_from_slice(&word[within..within + take]);
            i += take;
        }
        self.hash.update(buf);
        self.offset += n as u64;
        n
    }

    /// Hash of everything generated so far.
    pub fn digest(&self) -> u128 {
        self.hash.digest128()
    }
}

/// Hashes received bytes in order.
#[derive(Clone, Default)]
pub struct Checker {
    received: u64,
    hash: Xxh3,
}

impl Checker {
    /// A checker with nothing received.
    pub fn new() -> Self {
        Checker {
            received: 0,
            hash: Xxh3::new(),
        }
    }
    /// Account for received bytes.
    pub fn update(&mut self, data: &[u8]) {
        self.received += data.len() as u64;
        self.hash.update(data);
    }
    /// Bytes received.
    pub fn received(&self) -> u64 {
        self.received
    }
    /// Hash of everything received.
    pub fn digest(&self) -> u128 {
        self.hash.digest128()
    }
}

/// The expected hash of a whole transfer, computed independently of any sender.
pub fn expected_digest(seed: u64, size: u64) -> u128 {
    let mut g = Generator::new(seed, size);
    let mut buf = vec![0u8; 64 * 1024];
    while g.fill(&mut buf) > 0 {}
    g.digest()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunking_does_not_change_the_stream() {
        let mut a = Generator::new(5, 1000);
        let mut whole = vec![0u8; 1000];
        a.fill(&mut whole);
        let mut b = Generator::new(5, 1000);
        let mut parts = Vec::new();
        for n in [1usize, 7, 8, 13, 500, 1000] {
            let mut buf = vec![0u8; n];
            let k = b.fill(&mut buf);
            parts.extend_from_slice(&buf[..k]);
        }
        assert_eq!(parts, whole);
        assert_eq!(a.digest(), b.digest());
        let mut c = Checker::new();
        c.update(&whole);
        assert_eq!(c.digest(), expected_digest(5, 1000));
        let mut swapped = whole.clone();
        swapped.swap(10, 900);
        let mut d = Checker::new();
        d.update(&swapped);
        assert_ne!(d.digest(), c.digest());
    }
}
