//! braid-crypto's integration tests, in one binary: key files and no panic on any input.

mod key_files;
mod no_panic;
