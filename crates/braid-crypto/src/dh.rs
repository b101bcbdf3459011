//! X25519 for the Noise handshake from AWS-LC (aws-lc-rs), given to snow through a
//! `CryptoResolver`: snow's hash and cipher stay its own (BLAKE2s, ChaCha20-Poly1305).
//!
//! Owns: [`LocalKey`] (a private key made ready for X25519 once: AWS-LC's key object and
//! the public key derived from it), [`resolver`] (what [`crate::noise::builder`] gives
//! snow) and the `snow::types::Dh` it resolves. Must not touch: the Noise pattern, the
//! handshake's messages, key files, clocks or sockets.
//!
//! Why: the responder's cost is mostly X25519. curve25519-dalek (snow's own backend) does
//! about 24 000 Diffie-Hellman operations a second on the test machine, AWS-LC's
//! (s2n-bignum's verified assembly on x86_64 and aarch64) markedly more; and snow derives
//! the static public key again for each handshake state (a fixed-base multiplication):
//! with the key prepared once ([`LocalKey`], kept in [`crate::StaticKeypair`]) the
//! handshake reuses it. The results are the same X25519 (RFC 7748) bytes, so peers with
//! either backend interoperate; the one difference is that AWS-LC refuses a peer key of
//! small order (an all-zero shared secret), where dalek returns the zeros: such a key is
//! an attack, never an honest peer, and the handshake fails on it.

use aws_lc_rs::agreement::{agree, PrivateKey, UnparsedPublicKey, X25519};
use snow::params::{CipherChoice, DHChoice, HashChoice};
use snow::resolvers::{BoxedCryptoResolver, CryptoResolver, DefaultResolver, FallbackResolver};
use snow::types::{Cipher, Dh, Hash, Random};
use std::sync::Arc;

/// X25519 key and value length.
const LEN: usize = 32;

/// A private key made ready for X25519: AWS-LC's key object (built once, reused for every
/// Diffie-Hellman) and its public key. The private bytes are wiped when dropped.
pub(crate) struct LocalKey {
    private: [u8; LEN],
    public: [u8; LEN],
    key: PrivateKey,
}

impl LocalKey {
    /// The key of `private` (any 32 bytes: X25519 clamps them); None if AWS-LC refused
    /// it, which it does only for a wrong length.
    pub(crate) fn new(private: &[u8; LEN]) -> Option<LocalKey> {
        let key = PrivateKey::from_private_key(&X25519, private).ok()?;
        let public: [u8; LEN] = key.compute_public_key().ok()?.as_ref().try_into().ok()?;
        Some(LocalKey {
            private: *private,
            public,
            key,
        })
    }

    /// Whether `private` is this key's private key, in time independent of the bytes.
    fn is(&self, private: &[u8]) -> bool {
        private.len() == LEN
            && private
                .iter()
                .zip(&self.private)
                .fold(0u8, |d, (a, b)| d | (a ^ b))
                == 0
    }
}

impl Drop for LocalKey {
    fn drop(&mut self) {
        wipe(&mut self.private);
    }
}

/// What the handshake's snow builder resolves its primitives with: X25519 from AWS-LC
/// (reusing `local` when snow is given its private key), everything else snow's default.
pub(crate) fn resolver(local: Option<Arc<LocalKey>>) -> BoxedCryptoResolver {
    Box::new(FallbackResolver::new(
        Box::new(AwsLcResolver { local }),
        Box::new(DefaultResolver),
    ))
}

/// Resolves only X25519.
struct AwsLcResolver {
    local: Option<Arc<LocalKey>>,
}

impl CryptoResolver for AwsLcResolver {
    fn resolve_rng(&self) -> Option<Box<dyn Random>> {
        None
    }

    fn resolve_dh(&self, choice: &DHChoice) -> Option<Box<dyn Dh>> {
        match choice {
            DHChoice::Curve25519 => Some(Box::new(AwsLcX25519 {
                prepared: self.local.clone(),
                key: None,
            })),
            _ => None,
        }
    }

    fn resolve_hash(&self, _: &HashChoice) -> Option<Box<dyn Hash>> {
        None
    }

    fn resolve_cipher(&self, _: &CipherChoice) -> Option<Box<dyn Cipher>> {
        None
    }
}

/// snow's view of one key pair of a handshake (the static or the ephemeral one).
struct AwsLcX25519 {
    /// The static key made ready beforehand, used when `set` is given its private key.
    prepared: Option<Arc<LocalKey>>,
    /// The key set or generated; None before, or if AWS-LC refused it.
    key: Option<Arc<LocalKey>>,
}

/// What `pubkey` and `privkey` show before a key is set.
const NO_KEY: [u8; LEN] = [0; LEN];

impl Dh for AwsLcX25519 {
    fn name(&self) -> &'static str {
        "25519"
    }

    fn pub_len(&self) -> usize {
        LEN
    }

    fn priv_len(&self) -> usize {
        LEN
    }

    fn set(&mut self, privkey: &[u8]) {
        self.key = match &self.prepared {
            Some(p) if p.is(privkey) => Some(p.clone()),
            _ => <&[u8; LEN]>::try_from(privkey)
                .ok()
                .and_then(LocalKey::new)
                .map(Arc::new),
        };
    }

    fn generate(&mut self, rng: &mut dyn Random) -> Result<(), snow::Error> {
        let mut private = [0u8; LEN];
        rng.try_fill_bytes(&mut private)?;
        self.key = LocalKey::new(&private).map(Arc::new);
        wipe(&mut private);
        self.key.as_ref().map(|_| ()).ok_or(snow::Error::Dh)
    }

    fn pubkey(&self) -> &[u8] {
        self.key.as_ref().map_or(&NO_KEY, |k| &k.public)
    }

    fn privkey(&self) -> &[u8] {
        self.key.as_ref().map_or(&NO_KEY, |k| &k.private)
    }

    fn dh(&self, pubkey: &[u8], out: &mut [u8]) -> Result<(), snow::Error> {
        let key = self.key.as_ref().ok_or(snow::Error::Dh)?;
        let out = out.get_mut(..LEN).ok_or(snow::Error::Dh)?;
        // snow passes its key buffer, which is longer than an X25519 key (room for X448).
        let pubkey = pubkey.get(..LEN).ok_or(snow::Error::Dh)?;
        let peer = UnparsedPublicKey::new(&X25519, pubkey);
        agree(&key.key, peer, snow::Error::Dh, |secret| {
            out.copy_from_slice(secret.get(..LEN).ok_or(snow::Error::Dh)?);
            Ok(())
        })
    }
}

/// Overwrite secret bytes with zeros, as `keys::wipe` does (not imported from there:
/// `keys` imports this module).
fn wipe(bytes: &mut [u8]) {
    bytes.fill(0);
    std::hint::black_box(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use snow::resolvers::CryptoResolver;

    fn dalek(private: &[u8; LEN]) -> Box<dyn Dh> {
        let mut d = DefaultResolver.resolve_dh(&DHChoice::Curve25519).unwrap();
        d.set(private);
        d
    }

    fn aws(private: &[u8; LEN], prepared: Option<Arc<LocalKey>>) -> Box<dyn Dh> {
        let mut d = resolver(prepared)
            .resolve_dh(&DHChoice::Curve25519)
            .unwrap();
        d.set(private);
        d
    }

    /// The same public keys and shared secrets as snow's own backend, for keys with and
    /// without the bits X25519 clamps, through a prepared key or a fresh one.
    #[test]
    fn agrees_with_snows_backend() {
        for seed in [0u8, 1, 7, 0x80, 0xff] {
            let a: [u8; LEN] = std::array::from_fn(|i| seed.wrapping_mul(31).wrapping_add(i as u8));
            let b: [u8; LEN] = std::array::from_fn(|i| seed ^ (3 * i as u8).wrapping_add(1));
            let prepared = LocalKey::new(&a).map(Arc::new);
            for mine in [aws(&a, None), aws(&a, prepared.clone())] {
                let (theirs, mut x, mut y) = (dalek(&b), [0u8; LEN], [0u8; LEN]);
                assert_eq!(mine.pubkey(), dalek(&a).pubkey());
                mine.dh(theirs.pubkey(), &mut x).unwrap();
                theirs.dh(mine.pubkey(), &mut y).unwrap();
                assert_eq!(x, y, "seed {seed}");
                assert_ne!(x, [0u8; LEN]);
            }
        }
    }

    /// The prepared key is used only for its own private key.
    #[test]
    fn a_prepared_key_is_used_for_its_own_private_key_only() {
        let (a, b) = ([5u8; LEN], [6u8; LEN]);
        let prepared = LocalKey::new(&a).map(Arc::new);
        let other = aws(&b, prepared);
        assert_eq!(other.pubkey(), dalek(&b).pubkey());
        assert_eq!(other.privkey(), &b);
    }

    /// A peer key of small order (here 0 and 1) gives no shared secret.
    #[test]
    fn a_small_order_peer_key_is_refused() {
        let mine = aws(&[9u8; LEN], None);
        let mut out = [0u8; LEN];
        for bad in [[0u8; LEN], {
            let mut one = [0u8; LEN];
            one[0] = 1;
            one
        }] {
            assert!(mine.dh(&bad, &mut out).is_err());
        }
    }
}
