//! The packet ciphers: AES-256-GCM and ChaCha20-Poly1305, their wire ids and names, and
//! the ordered list of them an end accepts (with the CPU-dependent default order).
//!
//! Owns: [`Cipher`], [`Ciphers`], [`CipherError`] and [`cpu_has_aes`]. Must not touch:
//! packets or keys (`mod.rs` seals and opens with the cipher chosen here) or the
//! negotiation in the handshake.

use ring::aead::{AES_256_GCM, CHACHA20_POLY1305};

/// A packet cipher. Its wire id (in the handshake payloads) is [`Cipher::id`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cipher {
    /// ChaCha20-Poly1305 (RFC 8439): fast everywhere in software; the cipher of peers
    /// that offer no list.
    ChaCha20Poly1305,
    /// AES-256-GCM: faster where the CPU has AES and carry-less multiply instructions.
    Aes256Gcm,
}

impl Cipher {
    /// Every cipher braid implements, in no particular order.
    pub const ALL: [Cipher; 2] = [Cipher::Aes256Gcm, Cipher::ChaCha20Poly1305];

    /// The byte that names the cipher in the handshake payloads.
    pub fn id(self) -> u8 {
        match self {
            Cipher::ChaCha20Poly1305 => 1,
            Cipher::Aes256Gcm => 2,
        }
    }

    /// The cipher a handshake byte names (None: one this version does not know).
    pub fn from_id(id: u8) -> Option<Cipher> {
        match id {
            1 => Some(Cipher::ChaCha20Poly1305),
            2 => Some(Cipher::Aes256Gcm),
            _ => None,
        }
    }

    /// The name used on the command line and in logs.
    pub fn name(self) -> &'static str {
        match self {
            Cipher::ChaCha20Poly1305 => "chacha20-poly1305",
            Cipher::Aes256Gcm => "aes-256-gcm",
        }
    }

    pub(super) fn algorithm(self) -> &'static ring::aead::Algorithm {
        match self {
            Cipher::ChaCha20Poly1305 => &CHACHA20_POLY1305,
            Cipher::Aes256Gcm => &AES_256_GCM,
        }
    }
}

impl std::fmt::Display for Cipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether this CPU has the instructions that make AES-GCM fast and constant-time (AES and
/// carry-less multiplication). Read once per call from the CPU's feature flags.
pub fn cpu_has_aes() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("aes")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// The packet ciphers an end accepts, most preferred first (never empty). An agent offers
/// them in this order; a server picks the first of its own list that the agent offered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ciphers(Vec<Cipher>);

/// Why a cipher list was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CipherError {
    /// A name that is no cipher.
    #[error(
        "unknown cipher {0:?}: use aes-256-gcm, chacha20-poly1305 or auto (AES-256-GCM \
         first where the CPU has AES instructions, else ChaCha20-Poly1305)"
    )]
    Unknown(String),
}

impl Ciphers {
    /// Both ciphers, AES-256-GCM first if [`cpu_has_aes`], else ChaCha20-Poly1305 first.
    pub fn auto() -> Ciphers {
        Self::for_cpu(cpu_has_aes())
    }

    /// Both ciphers, in the order for a CPU with (`true`) or without AES instructions.
    pub fn for_cpu(has_aes: bool) -> Ciphers {
        if has_aes {
            Ciphers(vec![Cipher::Aes256Gcm, Cipher::ChaCha20Poly1305])
        } else {
            Ciphers(vec![Cipher::ChaCha20Poly1305, Cipher::Aes256Gcm])
        }
    }

    /// Only `c`.
    pub fn only(c: Cipher) -> Ciphers {
        Ciphers(vec![c])
    }

    /// These ciphers in this order (duplicates dropped); None if `list` is empty.
    pub fn new(list: &[Cipher]) -> Option<Ciphers> {
        let mut v: Vec<Cipher> = Vec::new();
        for &c in list {
            if !v.contains(&c) {
                v.push(c);
            }
        }
        (!v.is_empty()).then_some(Ciphers(v))
    }

    /// `auto`, `aes-256-gcm` or `chacha20-poly1305` (the `--cipher` flag).
    pub fn parse(s: &str) -> Result<Ciphers, CipherError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Ciphers::auto()),
            "aes-256-gcm" | "aes256gcm" | "aes" => Ok(Ciphers::only(Cipher::Aes256Gcm)),
            "chacha20-poly1305" | "chacha20poly1305" | "chacha" => {
                Ok(Ciphers::only(Cipher::ChaCha20Poly1305))
            }
            _ => Err(CipherError::Unknown(s.to_string())),
        }
    }

    /// The ciphers, most preferred first.
    pub fn as_slice(&self) -> &[Cipher] {
        &self.0
    }

    /// The most preferred.
    pub fn first(&self) -> Cipher {
        self.0[0]
    }

    /// The server's choice: the first of `self` (the server's list) that `offered` (the
    /// agent's) contains.
    pub fn choose(&self, offered: &[Cipher]) -> Option<Cipher> {
        self.0.iter().copied().find(|c| offered.contains(c))
    }
}

impl Default for Ciphers {
    fn default() -> Self {
        Ciphers::auto()
    }
}
