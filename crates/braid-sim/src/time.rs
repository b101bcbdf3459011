//! Virtual time: the simulator's one clock unit.
//!
//! Owns: the `Nanos` type every module counts virtual time in. It sits below every other
//! module so that any of them (links, traces, units, scenarios) can name a time without
//! importing the link model. Must not touch: anything else (no clock reads: time only moves
//! when the event loop in `world.rs` says so).

/// Virtual time in nanoseconds.
pub type Nanos = u64;
