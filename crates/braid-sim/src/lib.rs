//! braid-sim: a deterministic discrete-event simulator that runs `braid-core` over modelled
//! links in virtual time.
//!
//! - [`scenario`]: the TOML scenario format, [`sweep`]: one file for many scenarios,
//!   [`units`], [`trace`]: its building blocks, [`time`]: the virtual clock's unit,
//! - [`link`]: the per-path link model, [`energy`]: interface energy,
//! - [`connmix`]: a flow-level model of direct (connection-level) and server (packet-level)
//!   connections side by side,
//! - [`world`]: the event loop joining two sessions through the links,
//! - [`runner`]: transfers and metrics, [`report`]: results as JSON and tables,
//! - [`payload`]: deterministic transfer bytes and their hash,
//! - [`latency`]: the sparse probe flow's shape and its idle/loaded percentiles, [`probe`]:
//!   the probe application that measures them.

pub mod arf;
pub mod connlevel;
pub mod connmix;
pub mod energy;
pub mod latency;
pub mod link;
pub mod payload;
pub mod probe;
pub mod report;
pub mod runner;
pub mod scenario;
pub mod sweep;
pub mod time;
pub mod trace;
pub mod units;
pub mod wifi;
pub mod world;

pub use energy::EnergyMeter;
pub use latency::Latency;
pub use link::{Dir, LinkStats, PathModel};
pub use report::{PathResult, Report, RunResult};
pub use runner::{run_scenario, run_sweep};
pub use scenario::{
    BurstSpec, Direction, EnergySpec, LinkSpec, PathSpec, RateSpec, Scenario, ScenarioError,
    VariantKind, VariantSpec, Workload,
};
pub use time::Nanos;
pub use trace::Trace;
