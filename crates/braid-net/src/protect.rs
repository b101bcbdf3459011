//! Packet protection: moved to braid-conn (the sans-IO connection crate); this module is
//! its name here, so the agent, the server and the tests keep `crate::protect::...`.
//!
//! Owns: nothing. Must not touch: anything (a re-export).

pub use braid_conn::protect::{Aead, KeyStats, Plain, RekeyInbox};
