//! placeholder

pub mod energy;
pub mod link;
pub mod scenario;
pub mod trace;
pub mod units;

pub use energy::EnergyMeter;
pub use link::{Dir, LinkStats, Nanos, PathModel};
pub use scenario::{
    BurstSpec, Direction, EnergySpec, LinkSpec, PathSpec, RateSpec, Scenario, ScenarioError,
    VariantKind, VariantSpec, Workload,
};
pub use trace::Trace;
