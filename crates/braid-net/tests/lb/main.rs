//! Several braid servers behind a real load balancer (issue 24, item 3), in a test binary
//! of its own: 3 servers and 20 agents downloading at once are CPU-heavy for a moment,
//! which would disturb the throughput and stall bars of `netns`'s tests running beside
//! them. Root only (network namespaces, nftables); each test says why it skips.

use braid_testkit::loopback as common;
use braid_testkit::netns as nsrig;

mod lbrig;
mod tests;
