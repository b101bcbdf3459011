//! braid-core: a sans-IO multipath transport.
//!
//! The core performs no I/O, never reads a clock and never uses a global random generator:
//! every entry point takes `now`, and the caller moves datagrams between the core and the
//! network (or the simulator). See `docs/architecture.md` for the map of modules.
//!
//! - [`session`]: the session over N paths (the public API),
//! - [`path`]: per-path recovery, RTT, congestion control and pacing,
//! - [`stream`]: stream buffers and reassembly,
//! - [`sched`]: packet schedulers, [`cc`]: congestion controllers,
//! - [`ids`]: path identity, [`choices`]: the scheduler and datagram mode as named values,
//! - [`blackout`]: blackout detection of a path (super-aggregation),
//! - [`flows`]: datagram flows classed real-time or bulk by their rate,
//! - [`wire`]: the wire format, [`ranges`], [`rtt`], [`pacer`], [`rng`], [`time`]: helpers.

pub mod blackout;
pub mod cc;
pub mod choices;
pub mod config;
pub mod connsched;
pub mod flows;
pub mod ids;
mod loss;
pub mod pacer;
pub mod path;
pub mod ranges;
pub mod rng;
pub mod rtt;
pub mod sched;
pub mod session;
pub mod stream;
pub mod time;
pub mod wire;

pub use cc::CcAlgorithm;
pub use choices::{DatagramMode, SchedulerKind};
pub use config::Config;
pub use ids::PathId;
pub use rng::Rng;
pub use session::{
    BatchTransmit, DatagramError, Event, PathCondition, PathError, Session, SessionError,
    SessionStats, Side, Transmit, MIN_PATH_DATAGRAM,
};
pub use stream::{StreamError, StreamId};
pub use time::Instant;
pub use wire::PathState;
