//! braid-net's integration tests, in one binary (one build and link instead of one per file):
//! real sockets on loopback. The namespace tests are in `netns` and `live_paths`.

use braid_testkit::loopback as common;

mod bad_input;
mod end_to_end;
mod expiry_under_load;
mod faults;
mod faults_server_restart;
mod flood_watch;
mod hardening;
mod hardening_flood;
mod hardening_proxy;
mod hardening_rekey;
mod no_path;
mod server_threads;
mod servers;
