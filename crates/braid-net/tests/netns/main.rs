//! braid-net's namespace tests, in one binary: real interfaces in network namespaces, links
//! shaped by tbf (root; each test says why it skips otherwise). Apart from `net`, whose
//! CPU-heavy tests (floods, many agents) would disturb the throughput these measure.
//! `live_paths` shares the rig but stays a binary of its own: it measures its process's
//! descriptors and memory.

#[path = "../net/common/mod.rs"]
mod common;
mod nsrig;

mod blocked;
mod direct;
mod direct_links;
mod faults_paths;
mod inbound;
mod ipv6;
mod rules;
mod rules_rig;
mod wildcard;
