//! The session's named choices: which scheduler and which datagram mode, with their names
//! (as in scenarios, TOML and flags) and the scheduler's id on the wire.
//!
//! Owns: [`SchedulerKind`] and [`DatagramMode`] as values, their names and wire ids. Must
//! not touch: schedulers and datagram queues themselves (`SchedulerKind::build` lives in
//! `sched`, the datagram plans in `session::dgram`). A leaf, so that `config` can name the
//! choices without depending on the schedulers or the session.

use std::fmt;
use std::str::FromStr;

/// The schedulers this build offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SchedulerKind {
    /// [`MinRtt`](crate::sched::MinRtt).
    MinRtt,
    /// [`RoundRobin`](crate::sched::RoundRobin).
    RoundRobin,
    /// [`WeightedRoundRobin`](crate::sched::WeightedRoundRobin).
    WeightedRoundRobin,
    /// [`Ecf`](crate::sched::Ecf).
    Ecf,
    /// [`Blest`](crate::sched::Blest).
    Blest,
    /// [`Super`](crate::sched::Super).
    Super,
    /// [`Operetta`](crate::sched::Operetta).
    Operetta,
    /// [`Redundant`](crate::sched::Redundant).
    Redundant,
}

impl SchedulerKind {
    /// Every scheduler and its name.
    pub const ALL: &'static [(&'static str, SchedulerKind)] = &[
        ("minrtt", SchedulerKind::MinRtt),
        ("rr", SchedulerKind::RoundRobin),
        ("wrr", SchedulerKind::WeightedRoundRobin),
        ("ecf", SchedulerKind::Ecf),
        ("blest", SchedulerKind::Blest),
        ("super", SchedulerKind::Super),
        ("operetta", SchedulerKind::Operetta),
        ("redundant", SchedulerKind::Redundant),
    ];

    /// The scheduler's id in HELLO (`HelloParams::scheduler`). Part of the protocol: a new
    /// scheduler takes a new number, an existing one never changes (pinned by
    /// `tests/wire_golden.rs`).
    pub const fn wire_id(self) -> u64 {
        match self {
            SchedulerKind::MinRtt => 0,
            SchedulerKind::RoundRobin => 1,
            SchedulerKind::WeightedRoundRobin => 2,
            SchedulerKind::Ecf => 3,
            SchedulerKind::Blest => 4,
            SchedulerKind::Super => 5,
            SchedulerKind::Operetta => 6,
            SchedulerKind::Redundant => 7,
        }
    }

    /// The scheduler whose HELLO id is `id`, if this build has one.
    pub fn from_wire_id(id: u64) -> Option<SchedulerKind> {
        SchedulerKind::ALL
            .iter()
            .map(|(_, k)| *k)
            .find(|k| k.wire_id() == id)
    }
}

impl FromStr for SchedulerKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        SchedulerKind::ALL
            .iter()
            .find(|(n, _)| *n == s)
            .map(|(_, k)| *k)
            .ok_or_else(|| {
                let names: Vec<_> = SchedulerKind::ALL.iter().map(|(n, _)| *n).collect();
                format!(
                    "unknown scheduler {s:?}; expected one of {}",
                    names.join(", ")
                )
            })
    }
}

impl fmt::Display for SchedulerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = SchedulerKind::ALL
            .iter()
            .find(|(_, k)| k == self)
            .map_or("?", |(n, _)| n);
        f.write_str(n)
    }
}

/// How datagrams use the paths. On the wire as HELLO feature bits
/// (`features::DATAGRAM_REDUNDANT`, `features::DATAGRAM_AUTO`; neither: spread).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DatagramMode {
    /// Real-time flows on the lowest-delay path with a copy on the second (within a
    /// budget), bulk flows spread.
    #[default]
    Auto,
    /// Spread over the paths by delay and capacity, arrivals kept in order.
    Spread,
    /// Every datagram on the two fastest paths; duplicates dropped at the far end.
    Redundant,
}

impl DatagramMode {
    /// Every mode and its name.
    pub const ALL: [(&'static str, DatagramMode); 3] = [
        ("auto", DatagramMode::Auto),
        ("spread", DatagramMode::Spread),
        ("redundant", DatagramMode::Redundant),
    ];
}
