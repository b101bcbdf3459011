//! One braid session end, whole and sans-IO: the core [`Session`](braid_core::Session), the
//! packet protection of every path and each path's local and remote addresses, in one
//! [`Connection`] that the I/O pumps (braid-net's server worker and agent runner, the
//! simulator, the test kit's pair) drive with received datagrams, timer expiries and
//! address changes, and that answers with [`Transmit`]s carrying their destination, source
//! address and GSO segment size, timer deadlines and the session's events.
//!
//! - [`conn`]: the [`Connection`] and its inputs and outputs.
//! - [`addr`]: path addresses and the datagram size an address family allows.
//! - [`protect`]: sealing and opening ([`PacketProtection`]), the AEAD with its replay
//!   windows and key rotation ([`protect::Aead`]).
//!
//! Owns: the per-packet work between a socket and the core. Must not touch: sockets,
//! tokio, clocks (every input carries its `now`), locks on the transport path.

pub mod addr;
pub mod conn;
pub mod protect;

pub use addr::{PathAddr, Transport};
pub use conn::{Connection, Received, Transmit};
pub use protect::{Control, PacketProtection};
