//! braid-net's integration tests, in one binary (one build and link instead of one per file):
//! real sockets on loopback, and network namespaces when root. `live_paths` stays a binary of
//! its own: it measures this process's descriptors and memory.

mod common;
mod nsrig;

mod bad_input;
mod blocked;
mod direct;
mod end_to_end;
mod faults;
mod faults_paths;
mod faults_server_restart;
mod hardening;
mod hardening_flood;
mod hardening_proxy;
mod hardening_rekey;
mod no_path;
mod server_threads;
mod servers;
