//! Scenario files: the TOML format, its validation, and the resolved model the simulator runs.
//!
//! Owns: the resolved types (`Scenario`, `PathSpec`, `LinkSpec`, ...) and `ScenarioError`
//! with its file/key/line context; the file format (see `docs/scenarios.md`) is read in the
//! submodules: [`raw`] (the TOML tables as written), `load` (entry points and TOML error
//! positions), `resolve` with `path`, `workload` and `variant` (validation into the resolved
//! types) and `connections` (the `[workload.connections]` table).
//! Must not touch: link behaviour (`link`), the event loop or the runner (which validate
//! scheduler and congestion-controller names themselves and may add errors through
//! `ScenarioError::new`). Nothing here panics on any input.

mod connections;
mod load;
mod path;
mod raw;
mod resolve;
mod variant;
mod workload;

pub use self::connections::{ConnClass, ConnWorkload};
pub use crate::energy::EnergySpec;
use crate::time::Nanos;
pub use crate::trace::RateSpec;
use crate::wifi::WifiSpec;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;

/// The most paths a scenario may have.
pub const MAX_PATHS: usize = 8;
/// The smallest queue a queue given as time converts to.
pub const MIN_QUEUE_BYTES: u64 = 3000;
/// The shortest allowed `blackout_every`.
pub const MIN_BLACKOUT_EVERY: Nanos = 1_000_000;

/// A scenario problem: which file, which key, what was expected and what was found.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct ScenarioError {
    /// The scenario file (or `<built-in>`).
    pub file: PathBuf,
    /// The key path, like `path[1].rate`; empty when the problem is not about one key.
    pub key: String,
    /// The 1-based line in the file, when known.
    pub line: Option<usize>,
    /// What was expected and what was found.
    pub message: String,
}

impl ScenarioError {
    /// An error about `key` in `file`.
    pub fn new(
        file: impl Into<PathBuf>,
        key: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        ScenarioError {
            file: file.into(),
            key: key.into(),
            line: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, "line {line}: ")?;
        }
        if !self.key.is_empty() {
            write!(f, "key `{}`: ", self.key)?;
        }
        f.write_str(&self.message)
    }
}

/// A fully resolved and validated scenario.
#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    pub name: String,
    pub seed: u64,
    /// Virtual-time limit per transfer.
    pub time_limit: Nanos,
    /// The session fails when no path has been usable for this long.
    pub path_timeout: Nanos,
    pub paths: Vec<PathSpec>,
    pub workload: Workload,
    pub variants: Vec<VariantSpec>,
    /// The file it came from, or `<built-in>`.
    pub file: PathBuf,
}

/// One path: two directions plus the properties they share.
#[derive(Debug, Clone, Serialize)]
pub struct PathSpec {
    pub name: String,
    /// Client -> server.
    pub up: LinkSpec,
    /// Server -> client.
    pub down: LinkSpec,
    /// Both directions share one medium whose rate is `down.rate`.
    pub half_duplex: bool,
    /// Extra airtime per frame on a half-duplex medium.
    pub frame_overhead: Nanos,
    /// Both directions are 802.11 stations contending for one medium (`wifi.rs`); each
    /// direction's `rate` is its PHY rate.
    pub wifi: Option<WifiSpec>,
    pub energy: EnergySpec,
    /// The rate the agent tells the scheduler the path has (bits per second, PATH_COST's
    /// rate hint); `None`: the scheduler estimates it.
    pub rate_hint: Option<u64>,
}

/// One direction of a path.
#[derive(Debug, Clone, Serialize)]
pub struct LinkSpec {
    pub rate: RateSpec,
    /// One-way propagation delay.
    pub delay: Nanos,
    /// Extra per-packet delay, uniform in `[0, jitter]`.
    pub jitter: Nanos,
    /// Per-packet loss probability (the good-state loss when `burst` is set).
    pub loss: f64,
    pub burst: Option<BurstSpec>,
    pub duplicate: f64,
    /// Drop-tail buffer size in bytes (excluding the frame on the air).
    pub queue_bytes: u64,
    /// `[start, end)` intervals during which nothing crosses the link.
    pub blackouts: Vec<(Nanos, Nanos)>,
    /// Periodic blackouts `(period, duration)`: `[k*period, k*period+duration)`, k >= 1.
    pub blackout_every: Option<(Nanos, Nanos)>,
}

/// Gilbert–Elliott burst loss: per packet, good->bad with `p`, bad->good with `r`; loss in
/// the bad state is `loss_bad` (in the good state it is the link's `loss`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BurstSpec {
    pub p: f64,
    pub r: f64,
    #[serde(default = "one")]
    pub loss_bad: f64,
}

fn one() -> f64 {
    1.0
}

/// Which way the transfers go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Server -> client.
    Down,
    /// Client -> server.
    Up,
}

/// What to transfer.
#[derive(Debug, Clone, Serialize)]
pub struct Workload {
    pub direction: Direction,
    /// One transfer per entry, in bytes.
    pub sizes: Vec<u64>,
    /// How often the whole list runs, each time with its own seed.
    pub repetitions: u32,
    /// Run every transfer of a variant one after the other on one session (as the agent
    /// keeps it: windows and RTT estimates carry over), instead of a fresh session each.
    pub shared_session: bool,
    /// Idle time between transfers on a shared session.
    pub gap: Nanos,
    /// Run the sparse latency probe (`latency.rs`) idle before each transfer and beside it
    /// (`probe = false` turns it off where its packets would disturb what is measured).
    pub probe: bool,
    /// Bytes of a bulk transfer the other way, beside each measured one (0: none): an
    /// upload beside a download fills the queue the download's acknowledgements cross.
    pub reverse: u64,
    /// `kind = "connections"`: connection-level runs (`connlevel.rs`) instead of transfers
    /// (`sizes` is then empty).
    pub connections: Option<ConnWorkload>,
}

/// Which system a variant runs. Only `Braid` runs in the simulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VariantKind {
    #[default]
    Braid,
    Tcp,
    Mptcp,
    SsMptcp,
    Bond,
}

impl VariantKind {
    /// The name used in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            VariantKind::Braid => "braid",
            VariantKind::Tcp => "tcp",
            VariantKind::Mptcp => "mptcp",
            VariantKind::SsMptcp => "ss-mptcp",
            VariantKind::Bond => "bond",
        }
    }
}

/// One configuration to compare.
#[derive(Debug, Clone, Serialize)]
pub struct VariantSpec {
    pub name: String,
    pub kind: VariantKind,
    /// Scheduler name; the runner validates it.
    pub scheduler: String,
    /// Congestion-controller name; the runner validates it.
    pub cc: String,
    /// Indices into `Scenario::paths`.
    pub paths: Vec<usize>,
    /// Copy data in flight on slow paths onto a fast one at the end of a transfer
    /// (default true; false gives Linux MPTCP's plain behaviour).
    pub tail_reinjection: bool,
    /// OPERETTA's utility alpha, 0..=1 (default 1: most throughput).
    pub alpha: f64,
    /// Super-aggregation mechanisms; each defaults to true under the `super` scheduler, to
    /// false under every other named one, and to the agent's default when the variant names
    /// neither a scheduler nor a controller.
    pub ack_offload: bool,
    pub blackout_freeze: bool,
    pub loss_recovery: bool,
    /// Ask the peer to acknowledge less often as a path's window grows (ACK_FREQUENCY;
    /// default true, as the agent does).
    pub ack_frequency: bool,
    /// Indices into `Scenario::paths` of the variant's paths the client sets to standby
    /// after the handshake (used only when no active path works), e.g. "WiFi first, 3G as
    /// fallback".
    pub standby: Vec<usize>,
    /// Keepalive interval of idle paths, both ends (default: the core's default).
    pub keepalive: Option<Nanos>,
    /// Seal and open every packet as the agent and the server do (AEAD, replay windows;
    /// default false: the tag space is sent as zeros).
    pub protection: bool,
}

impl Scenario {
    /// The index of the path called `name`.
    pub fn path_index(&self, name: &str) -> Option<usize> {
        self.paths.iter().position(|p| p.name == name)
    }
}

/// The seed of a repetition: the scenario seed plus the repetition number.
pub fn repetition_seed(scn: &Scenario, repetition: u32) -> u64 {
    scn.seed.wrapping_add(repetition as u64)
}

#[cfg(test)]
mod tests;
