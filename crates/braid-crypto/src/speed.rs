//! X25519 work for benchmarks that compare what a handshake costs the server with this
//! CPU's X25519 speed (`braid bench --handshakes`).
//!
//! Owns: [`x25519_ops`] (the Diffie-Hellman function the handshake uses: AWS-LC's, through
//! [`crate::dh`]), and for comparison [`dalek_x25519_ops`] (snow's own backend,
//! curve25519-dalek) and [`ring_x25519_ops`] (ring's, BoringSSL's code). Must not touch:
//! clocks (the caller times the calls), keys of any real session.

use ring::agreement::{self, EphemeralPrivateKey, UnparsedPublicKey, X25519};
use ring::rand::SystemRandom;

/// `n` X25519 operations (variable-base Diffie-Hellman) with the X25519 the handshake uses
/// (AWS-LC's, one private key reused as the server reuses its static key), chained so that
/// none can be skipped. Returns a byte of the last result.
pub fn x25519_ops(n: usize) -> u8 {
    chained(crate::dh::resolver(None).as_ref(), n)
}

/// [`x25519_ops`] with snow's own backend (curve25519-dalek), which the handshake used
/// before [`crate::dh`].
pub fn dalek_x25519_ops(n: usize) -> u8 {
    chained(&snow::resolvers::DefaultResolver, n)
}

/// `n` chained Diffie-Hellman operations with `resolver`'s X25519.
fn chained(resolver: &dyn snow::resolvers::CryptoResolver, n: usize) -> u8 {
    let Some(mut dh) = resolver.resolve_dh(&snow::params::DHChoice::Curve25519) else {
        return 0;
    };
    dh.set(&[0x42; 32]);
    let mut point = [9u8; 32];
    let mut out = [0u8; 32];
    for _ in 0..n {
        if dh.dh(&point, &mut out).is_err() {
            return 0;
        }
        point = out;
    }
    point[0]
}

/// `n` X25519 Diffie-Hellman operations with ring (each with a fresh private key: ring
/// takes only ephemeral keys, drawn from the system's generator, a few hundred
/// nanoseconds), chained. Returns a byte of the last result (0 if ring failed).
pub fn ring_x25519_ops(n: usize) -> u8 {
    let rng = SystemRandom::new();
    let mut point = [9u8; 32];
    for _ in 0..n {
        let Ok(key) = EphemeralPrivateKey::generate(&X25519, &rng) else {
            return 0;
        };
        let peer = UnparsedPublicKey::new(&X25519, point);
        match agreement::agree_ephemeral(key, &peer, |k| <[u8; 32]>::try_from(k)) {
            Ok(Ok(k)) => point = k,
            _ => return 0,
        }
    }
    point[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real operations: the same count from the same start gives the same result with
    /// snow's backend, and both backends do work (a failure returns 0 every time).
    #[test]
    fn x25519_ops_are_chained_and_real() {
        assert_eq!(x25519_ops(3), x25519_ops(3));
        let r: Vec<u8> = (1..6).map(x25519_ops).collect();
        assert!(r.windows(2).any(|w| w[0] != w[1]), "{r:?}");
        // The same X25519 in both backends: the same chain.
        let dalek: Vec<u8> = (1..6).map(dalek_x25519_ops).collect();
        assert_eq!(r, dalek);
        let ring: Vec<u8> = (0..8).map(|_| ring_x25519_ops(2)).collect();
        assert!(ring.iter().any(|&b| b != 0), "{ring:?}");
    }
}
