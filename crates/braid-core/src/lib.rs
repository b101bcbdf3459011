//! braid-core: a sans-IO multipath transport.
//!
//! The core performs no I/O, never reads a clock and never uses a global random generator:
//! every entry point takes `now`, and the caller moves datagrams between the core and the
//! network (or the simulator). See `docs/architecture.md` for the map of modules.

pub mod rng;
pub mod time;

pub use rng::Rng;
pub use time::Instant;
