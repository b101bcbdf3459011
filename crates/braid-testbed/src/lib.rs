//! braid-testbed: `braid sim`'s scenarios over real kernels and processes.
//!
//! A run builds three network namespaces (client, emulator, server) joined by one emulated
//! link per scenario path, runs every variant (`tcp`, `mptcp`, `ss-mptcp`, `bond`, `braid`)
//! through them with a built-in traffic tool, and reports in braid-sim's `Report` format
//! (`mode: "testbed"`) plus 100 ms throughput samples. Root only; one run at a time.
//!
//! - [`netns`]: namespaces, veths, addresses, policy routing, entering a namespace;
//! - [`l2emu`]: the layer-2 emulator (braid-sim's `PathModel` on every frame);
//! - [`traffic`]: the transfer server and client (TCP, MPTCP, SOCKS5), byte-exact checks;
//! - [`probe`]: the sparse UDP latency probe and its echo responder; [`rpm`]: responsiveness
//!   under load (new and long-lived connections); [`measure`]: a transfer with both beside it;
//!   [`faults`]: carrier loss, black holes and address changes during a transfer, as the
//!   probe and the bulk flow saw them;
//! - [`procs`]: helper processes in namespaces (braid, shadowsocks);
//! - [`runner`]: the whole run, per-variant stacks, the report; [`samples`]: the
//!   per-transfer throughput and probe series it reports;
//! - [`lock`], [`signal`]: one run at a time, root check, SIGINT/SIGTERM teardown;
//! - [`cmd`]: external commands and tool installation; [`error`]: [`TestbedError`].

pub mod cmd;
pub mod error;
pub mod faults;
pub mod l2emu;
pub mod lock;
pub mod measure;
pub mod netns;
pub mod probe;
pub mod procs;
pub mod rpm;
pub mod runner;
pub mod samples;
pub mod signal;
pub mod traffic;

pub use error::{Result, TestbedError};
pub use runner::{check_scenario, find_braid, run_scenario, Progress, RunOptions, TestbedReport};
pub use samples::RunSamples;

/// Why the testbed cannot run here (not root, no namespace support), or `None` if it can.
/// Tests use it to skip with a reason.
pub fn unavailable_reason() -> Option<String> {
    if let Err(e) = lock::require_root() {
        return Some(e.to_string());
    }
    if !std::path::Path::new("/proc/self/ns/net").exists() {
        return Some("this kernel has no network namespaces (/proc/self/ns/net is missing)".into());
    }
    if cmd::which("ip").is_none() {
        return Some("`ip` (iproute2) is not installed".into());
    }
    None
}
