//! braid-crypto: the cryptography of braid's network driver.
//!
//! Owns: long-term X25519 key files ([`keys`]), the Noise IK handshake that authenticates
//! client and server and derives per-session keys ([`handshake`], with what both sides share
//! in [`noise`]), per-packet AEAD
//! protection of transport packets ([`aead`]), the per-path replay window ([`replay`]), the
//! cheap checks in front of the handshake's Diffie-Hellman (mac1, mac2 and cookies: [`cookie`]),
//! the server's side of the handshake in two steps ([`responder`]), the handshake replay guard and its state file ([`guard`]), unguessable values from
//! the system CSPRNG ([`random`]), the key epochs of key rotation ([`rekey`]), X25519 work for benchmarks ([`speed`]) and the
//! server's refusal of a client that offers no cipher it accepts ([`refusal`]).
//!
//! The packet header's codec is `braid-wire`'s, the same one the core uses.
//!
//! Must not touch: `braid-core` (this crate does not depend on it and never parses frames),
//! sockets, clocks and global state (the operating system's random generator aside, read
//! through [`random`]). Every function that needs the time takes it as an argument. No
//! primitive is implemented here: Noise comes from `snow`, the AEAD, HMAC and SHA-256 from
//! `ring`.
//!
//! No-panic contract: every function that takes bytes from a file or from the network
//! returns an error on malformed input and never panics.
//!
//! How the network driver uses it:
//!
//! 1. Client: [`ClientHandshake::new`] gives message 1 as a complete handshake packet;
//!    [`ClientHandshake::finish`] takes the server's reply and yields [`SessionKeys`].
//! 2. Server: [`CookieChecker::check_mac1`] drops anything not made for this server for the
//!    price of one HMAC; under load [`CookieChecker::check_mac2`] demands a cookie bound to
//!    the source address (and [`CookieChecker::cookie_reply`] hands one out);
//!    [`ServerHandshake::respond`] checks message 1 (authorized key, clock skew, replay) and
//!    yields the client's key, [`SessionKeys`] and the reply packet; a server with several
//!    threads uses its two steps, [`Responder::read`] (no shared state) and
//!    [`Message1::answer_shared`] (the replay guard's lock held for a lookup only).
//! 3. Send: the core writes a transport packet ending in 16 zero bytes; the driver calls
//!    [`PacketKey::seal_in_place`] with `keys.send`.
//! 4. Receive: [`parse_header`] routes the datagram; [`PacketKey::open_in_place`] with
//!    `keys.recv` verifies and decrypts; then [`ReplayWindow::check_and_set`] for the
//!    packet's path drops duplicates; then the core gets the packet (same length).

pub mod aead;
pub mod cookie;
mod dh;
pub mod guard;
pub mod handshake;
pub mod keys;
pub mod noise;
pub mod random;
pub mod refusal;
pub mod rekey;
pub mod replay;
pub mod responder;
pub mod speed;

pub use aead::{
    cpu_has_aes, AeadError, Cipher, CipherError, Ciphers, PacketKey, Role, SessionKeys, TAG_LEN,
};
/// The packet header codec, shared with `braid-core` (see the `braid-wire` crate).
pub use braid_wire::{
    key_refusal, parse_header, session_limit_refusal, session_unknown_hint, write_header, Header,
    HeaderError, PacketType,
};
pub use cookie::{CookieChecker, CookieError, Mac1Key};
pub use guard::{GuardFileError, ReplayGuard};
pub use handshake::{ClientHandshake, HandshakeError, NOISE_PARAMS, PROLOGUE};
pub use keys::{
    parse_authorized, parse_public_key, read_authorized, read_private_key, read_public_key,
    write_keypair, KeyError, PublicKey, StaticKeypair,
};
pub use random::RandomError;
pub use refusal::{cipher_refusal, read_cipher_refusal};
pub use rekey::{KeyRing, RekeyPolicy};
pub use replay::ReplayWindow;
pub use responder::{Message1, Responder, ServerHandshake};
