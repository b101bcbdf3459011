//! braid-net's namespace tests, in one binary: real interfaces in network namespaces, links
//! shaped by tbf (root; each test says why it skips otherwise). Apart from `net`, whose
//! CPU-heavy tests (floods, many agents) would disturb the throughput these measure.
//! `live_paths` shares the rig but stays a binary of its own: it measures its process's
//! descriptors and memory.

use braid_testkit::loopback as common;
use braid_testkit::netns as nsrig;

mod blocked;
mod captive;
mod direct;
mod direct_links;
mod egress;
mod fallback;
mod faults_paths;
mod inbound;
mod ipv6;
mod mtu;
mod nat;
mod router;
mod rules;
mod rules_rig;
mod shares;
mod startup;
mod wildcard;
