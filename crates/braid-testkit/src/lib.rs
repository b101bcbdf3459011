//! braid's test kit: the rigs and helpers that test binaries share, so that no test file
//! builds its own copy (issue 27). Never shipped (`publish = false`); only test targets
//! depend on it.
//!
//! - [`loopback`]: a server, link emulators and an agent on this machine's loopback, a small
//!   HTTP server, deterministic bodies and their SHA-256, fetching through SOCKS5.
//! - [`netns`]: two network namespaces joined by veth pairs shaped by tbf, the braid server
//!   and an HTTP server in one, the agent in the other; link changes with `ip`; downloads
//!   timed read by read (root; [`netns::skip`] says why a test cannot run).
//!
//! Owns: test scaffolding only. Must not touch: product code paths (it drives the public
//! APIs of braid-net and braid-emu as the binaries do).

pub mod loopback;
pub mod netns;
