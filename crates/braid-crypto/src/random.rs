//! Unguessable values: session ids, secrets and seeds, from the operating system's CSPRNG
//! (ring's [`SystemRandom`], i.e. `getrandom(2)` on Linux).
//!
//! Owns: every random value braid-crypto and the network driver need to be unpredictable
//! to an attacker (session ids, the cookie secret, the seed of a session's challenge
//! tokens). Must not touch: `braid-core`'s seedable `Rng` (deterministic
//! by design, for the simulator) and key generation (snow's, see [`crate::keys`]).
//!
//! Errors: the system generator practically never fails on Linux; if it does, the error
//! says so and callers refuse to go on rather than fall back to anything guessable.

use ring::rand::{SecureRandom, SystemRandom};

/// The system's random generator failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the operating system's random generator (getrandom) failed; braid will not use \
     guessable values instead: check that /dev/urandom is available"
)]
pub struct RandomError;

/// Fill `buf` with bytes from the system CSPRNG.
pub fn fill(buf: &mut [u8]) -> Result<(), RandomError> {
    SystemRandom::new().fill(buf).map_err(|_| RandomError)
}

/// 64 random bits from the system CSPRNG.
pub fn random_u64() -> Result<u64, RandomError> {
    let mut b = [0u8; 8];
    fill(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

/// A fresh session id: 64 random bits from the system CSPRNG, never 0 (0 is easy to
/// mistake for "unset" in logs and captures).
pub fn session_id() -> Result<u64, RandomError> {
    loop {
        let id = random_u64()?;
        if id != 0 {
            return Ok(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn session_ids_are_distinct_and_use_every_bit() {
        let ids: Vec<u64> = (0..10_000).map(|_| session_id().unwrap()).collect();
        let set: HashSet<u64> = ids.iter().copied().collect();
        assert_eq!(set.len(), ids.len(), "a repeated session id in 10 000");
        // Each of the 64 bits is set in roughly half of the ids (a counter, a clock or a
        // process id would leave the high or low bits nearly constant).
        for bit in 0..64 {
            let ones = ids.iter().filter(|id| *id >> bit & 1 == 1).count();
            assert!(
                (4_500..=5_500).contains(&ones),
                "bit {bit} set in {ones} of 10 000 ids"
            );
        }
    }

    #[test]
    fn fill_covers_the_whole_buffer() {
        let mut a = [0u8; 64];
        let mut b = [0u8; 64];
        fill(&mut a).unwrap();
        fill(&mut b).unwrap();
        assert_ne!(a, b);
        assert!(a.iter().filter(|x| **x == 0).count() < 8, "{a:?}");
    }
}
