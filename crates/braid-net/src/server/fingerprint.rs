//! How the server names an agent key in its logs, `braid status` and metrics: `SHA256:`
//! and the unpadded base64 of the key's SHA-256, as `ssh-keygen -l` prints.
//!
//! Owns: [`fingerprint`]. Must not touch: anything else (a leaf: the registry, the egress
//! policy and the workers all use it).

use braid_crypto::PublicKey;

/// `SHA256:` and the unpadded base64 of the key's SHA-256, as `ssh-keygen -l` prints.
pub fn fingerprint(key: &PublicKey) -> String {
    use base64::Engine as _;
    let d = ring::digest::digest(&ring::digest::SHA256, &key.0);
    format!(
        "SHA256:{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(d.as_ref())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_sha256_base64_like_ssh() {
        let k = PublicKey([7u8; 32]);
        let f = fingerprint(&k);
        assert!(f.starts_with("SHA256:"), "{f}");
        assert_eq!(f.len(), 7 + 43, "{f}");
        assert_ne!(f, fingerprint(&PublicKey([8u8; 32])));
    }
}
