//! braid-sim's integration tests, in one binary: the catalogue, the default stack, the
//! schedulers' and controllers' targets and the property tests, all on the simulator.

mod common;

mod catalogue;
mod connmix;
mod datagram_auto;
mod datagram_paths;
mod default_stack;
mod keepalive_energy;
mod latency;
mod link_effects;
mod opconn;
mod operetta;
mod properties;
mod scenario_errors;
mod sessions;
mod superagg;
mod targets;
mod wifi;
