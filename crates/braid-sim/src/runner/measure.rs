//! Measuring one transfer on an established world: the idle probe before it, the run (with
//! the loaded probe and the reverse transfer beside it), and the metrics it yields
//! (completion time, goodput, capacity, efficiency, energy, per-path bytes and mechanism
//! counters, latency).
//!
//! Owns: what a `RunResult` says about a transfer and the order of the phases. Must not
//! touch: the application model (`transfer.rs`), the world or the links (it only runs and
//! reads them).

use super::transfer::{Beside, Transfer};
use crate::latency::{IDLE_PROBE, PROBE_LOSS_AFTER};
use crate::link::Dir;
use crate::payload::expected_digest;
use crate::probe::{Phase, Probe, ProbeOnly, Probed};
use crate::report::{PathResult, RunResult};
use crate::scenario::{Direction, Scenario};
use crate::time::Nanos;
use crate::world::{Outcome, World};
use braid_core::rng::splitmix64;
use braid_core::PathId;

/// A path's counters when the transfer starts: id, delivered bytes, energy, mechanisms.
type Before = (PathId, u64, f64, [u64; 5]);

/// Run one transfer on an established world and fill in `result`.
pub fn run_transfer(
    scn: &Scenario,
    world: &mut World,
    ids: &[PathId],
    app: &mut Transfer,
    result: &mut RunResult,
) {
    let dir = match app.direction {
        Direction::Down => Dir::Down,
        Direction::Up => Dir::Up,
    };
    let mut probe = Probe::default();
    if scn.workload.probe {
        probe_idle(world, &mut probe);
    }
    let start = world.now();
    let before = snapshot(world, ids, dir, start);
    let sender_retx = |w: &World| match dir {
        Dir::Down => w.server.session().stats().retransmitted_bytes,
        Dir::Up => w.client.session().stats().retransmitted_bytes,
    };
    let retx0 = sender_retx(world);
    if std::env::var_os("BRAID_SIM_DEBUG").is_some() {
        world.sample_every(
            std::env::var("BRAID_SIM_SAMPLE_MS")
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(250)
                * 1_000_000,
        );
    }
    let outcome = run_beside(scn, world, app, &mut probe, start);
    debug_dump(world, ids);
    let end = app.completed.unwrap_or(world.now());
    record_outcome(scn, app, outcome, result);
    let elapsed = (end - start) as f64 / 1e9;
    result.completion_s = elapsed;
    result.verified = app.completed.is_some()
        && app.checker.received() == app.size
        && app.checker.digest() == expected_digest(app.seed, app.size);
    if app.completed.is_some() && !result.verified && result.error.is_none() {
        result.error = Some("received bytes differ from the bytes sent".into());
    }
    result.goodput_bps = if elapsed > 0.0 {
        app.size as f64 * 8.0 / elapsed
    } else {
        0.0
    };
    let (capacity_bits, energy) = path_results(scn, world, ids, dir, before, (start, end), result);
    result.capacity_bps = if elapsed > 0.0 {
        capacity_bits / elapsed
    } else {
        0.0
    };
    result.efficiency = if result.capacity_bps > 0.0 {
        result.goodput_bps / result.capacity_bps
    } else {
        0.0
    };
    result.energy_j = energy;
    result.retransmitted_bytes = sender_retx(world) - retx0;
    if scn.workload.probe && app.completed.is_some() {
        probe_tail(world, &mut probe);
        result.latency = probe.latency();
    }
}

/// The probe alone first: what a call sees on the idle session.
fn probe_idle(world: &mut World, probe: &mut Probe) {
    probe.set_phase(world.now(), Phase::Idle);
    let until = world.now() + IDLE_PROBE.as_nanos() as Nanos;
    world.run(
        until,
        &mut ProbeOnly {
            probe,
            until_answered: None,
        },
    );
    probe.set_phase(world.now(), Phase::Loaded);
}

/// Answers to the last loaded probes are still on their way: wait for them (at most the
/// probe's loss timeout), sending nothing new.
fn probe_tail(world: &mut World, probe: &mut Probe) {
    probe.set_phase(world.now(), Phase::Off);
    let until = world.now() + PROBE_LOSS_AFTER.as_nanos() as Nanos;
    world.run(
        until,
        &mut ProbeOnly {
            probe,
            until_answered: Some(Phase::Loaded),
        },
    );
}

/// Each path's counters at `start`.
fn snapshot(world: &mut World, ids: &[PathId], dir: Dir, start: Nanos) -> Vec<Before> {
    let mut before = Vec::new();
    for &id in ids {
        let Some(link) = world.link_mut(id) else {
            continue;
        };
        let bytes = link.stats(dir).delivered_bytes;
        before.push((
            id,
            bytes,
            link.energy_j_until(start),
            mechanism_counts(world, dir, id),
        ));
    }
    before
}

/// Runs the measured transfer (with the reverse one and the loaded probe beside it, when
/// the workload asks for them) until it ends or the time limit.
fn run_beside(
    scn: &Scenario,
    world: &mut World,
    app: &mut Transfer,
    probe: &mut Probe,
    start: Nanos,
) -> Outcome {
    let reverse = (scn.workload.reverse > 0).then(|| {
        let other = match app.direction {
            Direction::Down => Direction::Up,
            Direction::Up => Direction::Down,
        };
        Transfer::new(other, scn.workload.reverse, splitmix64(app.seed ^ 0x5e7e))
    });
    let mut main = Beside {
        main: app,
        other: reverse,
    };
    if scn.workload.probe {
        let mut both = Probed {
            probe,
            inner: &mut main,
        };
        world.run(start + scn.time_limit, &mut both)
    } else {
        world.run(start + scn.time_limit, &mut main)
    }
}

/// The run's error, if it had one.
fn record_outcome(scn: &Scenario, app: &Transfer, outcome: Outcome, result: &mut RunResult) {
    match outcome {
        Outcome::Done => {}
        Outcome::TimeLimit => {
            result.error = Some(format!(
                "transfer did not complete within the time limit of {} s ({} of {} bytes arrived)",
                scn.time_limit as f64 / 1e9,
                app.checker.received(),
                app.size
            ))
        }
        Outcome::SessionClosed(e) => result.error = Some(e),
        Outcome::Stalled => {
            result.error = Some("simulation stalled: nothing left to happen".into())
        }
    }
    if let Some(f) = &app.failure {
        // The application's own error says more than "not verified" or a time limit.
        result.error = Some(format!("the transfer's stream failed: {f}"));
    }
}

/// Fills in `result.paths` from the counters at `start` and now; returns the capacity in
/// bits and the energy in joules of the transfer's paths over `span`.
fn path_results(
    scn: &Scenario,
    world: &mut World,
    ids: &[PathId],
    dir: Dir,
    before: Vec<Before>,
    span: (Nanos, Nanos),
    result: &mut RunResult,
) -> (f64, f64) {
    let (start, end) = span;
    let mut capacity_bits = 0.0;
    let mut energy = 0.0;
    for (id, bytes0, e0, m0) in before {
        let Some(link) = world.link_mut(id) else {
            continue;
        };
        capacity_bits += link.capacity_bits(dir, start, end);
        let e = link.energy_j_until(end) - e0;
        energy += e;
        result.paths.push(PathResult {
            name: String::new(),
            bytes: link.stats(dir).delivered_bytes - bytes0,
            energy_j: e,
            random_losses: 0,
            blackouts: 0,
            acks_offloaded: 0,
            losses: 0,
            spurious_losses: 0,
        });
        let m = mechanism_counts(world, dir, id);
        if let Some(r) = result.paths.last_mut() {
            r.random_losses = m[0] - m0[0];
            r.blackouts = m[1] - m0[1];
            r.acks_offloaded = m[2] - m0[2];
            r.losses = m[3] - m0[3];
            r.spurious_losses = m[4] - m0[4];
        }
    }
    for (r, &id) in result.paths.iter_mut().zip(ids) {
        r.name = scn.paths[id as usize].name.clone();
    }
    (capacity_bits, energy)
}
/// Loss and super-aggregation counters of path `id`: random losses (sender), blackouts (the
/// larger count of the two ends), ACKs offloaded (receiver), packets declared lost and
/// spurious losses (sender).
fn mechanism_counts(world: &World, dir: Dir, id: PathId) -> [u64; 5] {
    let (sender, receiver) = match dir {
        Dir::Down => (world.server.session(), world.client.session()),
        Dir::Up => (world.client.session(), world.server.session()),
    };
    let s = sender.path_stats(id).unwrap_or_default();
    let r = receiver.path_stats(id).unwrap_or_default();
    [
        s.random_losses,
        s.blackouts.max(r.blackouts),
        r.acks_offloaded,
        s.packets_lost,
        s.spurious_losses,
    ]
}

/// Debug dump of the sender's path statistics (enabled by BRAID_SIM_DEBUG=1).
pub fn debug_dump(world: &World, ids: &[PathId]) {
    if std::env::var_os("BRAID_SIM_DEBUG").is_none() {
        return;
    }
    if let Some(s) = world.sampling() {
        let mut prev: Option<&(Nanos, Vec<(u64, u64)>)> = None;
        for row in &s.samples {
            if let Some(p) = prev {
                let dt = (row.0 - p.0) as f64 / 1e9;
                let rates: Vec<String> = ids
                    .iter()
                    .map(|&i| {
                        format!(
                            "{:6.1}",
                            (row.1[i as usize].1 - p.1[i as usize].1) as f64 * 8.0 / dt / 1e6
                        )
                    })
                    .collect();
                eprintln!("{:7.2}s {}", row.0 as f64 / 1e9, rates.join(" "));
            }
            prev = Some(row);
        }
    }
    for &id in ids {
        eprintln!(
            "t={:.3} path {id}: server {:?}\n    link down {:?}",
            world.now() as f64 / 1e9,
            world.server.session().path_stats(id),
            world.link(id).map(|l| l.stats(Dir::Down).clone())
        );
    }
}
