//! braid's test kit: the rigs and helpers that test binaries share, so that no test file
//! builds its own copy (issue 27). Never shipped (`publish = false`); only test targets
//! depend on it.
//!
//! - [`conn_pair`]: two protected connections (braid-conn) in memory, through a NAT, with
//!   the pair's tamper hook (the connection's tests and its fuzz target; feature `conn`).
//! - [`http`]: small HTTP/1.1 origin servers (accept, read the head, answer).
//! - [`loopback`]: a server, link emulators and an agent on this machine's loopback, a small
//!   HTTP server, deterministic bodies and their SHA-256, fetching through SOCKS5.
//! - [`netns`]: two network namespaces joined by veth pairs shaped by tbf (two at one rate,
//!   or one per rate given), the braid server and an HTTP server in one, the agent in the
//!   other; link changes with `ip`; downloads timed read by read (root; [`netns::skip`]
//!   says why a test cannot run).
//! - [`pair`]: two sessions in memory on simulated time, with a tamper hook (the core's
//!   robustness tests and the fuzz targets; the only module without the `rigs` feature).
//! - [`wire`]: one delayed wire between two ends of any session type (braid-core's unit
//!   tests implement its `End` for their own copy of `Session`; no feature needed).
//! - [`socks5`]: a SOCKS5 client: CONNECT, UDP ASSOCIATE, the relay's UDP header.
//!
//! Owns: test scaffolding only. Must not touch: product code paths (it drives the public
//! APIs of braid-net and braid-emu as the binaries do).

#[cfg(feature = "conn")]
pub mod conn_pair;
#[cfg(feature = "rigs")]
pub mod http;
#[cfg(feature = "rigs")]
pub mod loopback;
#[cfg(feature = "rigs")]
pub mod netns;
pub mod pair;
#[cfg(feature = "rigs")]
pub mod socks5;
pub mod wire;
