//! Path identity: the number that names a path in every packet header.
//!
//! Owns: the [`PathId`] type. Must not touch: anything else; this is a leaf that the
//! schedulers, the paths and the session all name, so that none of them has to import
//! another for it.

/// Path identifier, chosen by the client, carried in every packet header.
pub type PathId = u8;
