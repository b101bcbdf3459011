//! Running a scenario: every variant, size and repetition, each on a fresh world whose
//! session is established before the transfer starts, with the metrics `braid sim` reports.
//!
//! Owns: turning a variant into session configuration, the jobs (variant, size, repetition)
//! and their order, building and handshaking each world, and merging the results; the
//! transfer application model is in `transfer`, the metrics of one transfer in `measure`.
//! Must not touch: link behaviour or the protocol.

mod measure;
mod transfer;

pub use self::measure::{debug_dump, run_transfer};
pub use self::transfer::Transfer;
use crate::report::{Report, RunResult};
pub use crate::scenario::repetition_seed;
use crate::scenario::{PathSpec, Scenario, ScenarioError, VariantKind, VariantSpec};
use crate::time::Nanos;
use crate::world::{App, Endpoints, Outcome, World};
use braid_core::rng::splitmix64;
use braid_core::{CcAlgorithm, Config, PathId, SchedulerKind};
use std::time::Duration;

/// A variant turned into what the simulator needs.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The variant.
    pub variant: VariantSpec,
    /// Its scheduler.
    pub scheduler: SchedulerKind,
    /// Its congestion controller.
    pub cc: CcAlgorithm,
}

/// Check what only the runner knows (scheduler and controller names, the variant kind).
/// Variants of a kernel kind (`tcp`, `mptcp`, ...) are left out: they need the testbed
/// ([`kernel_variants`] names them); a scenario with nothing else is an error.
pub fn plan(scn: &Scenario) -> Result<Vec<Plan>, ScenarioError> {
    if !scn.variants.is_empty() && scn.variants.iter().all(|v| v.kind != VariantKind::Braid) {
        return Err(ScenarioError::new(
            &scn.file,
            "variant",
            format!(
                "every variant runs a real kernel stack ({}), which needs the testbed (`braid \
                 testbed run`); `braid sim` runs only kind = \"braid\" variants",
                kernel_variants(scn).join(", ")
            ),
        ));
    }
    scn.variants
        .iter()
        .enumerate()
        .filter(|(_, v)| v.kind == VariantKind::Braid)
        .map(|(i, v)| {
            let scheduler = v.scheduler.parse().map_err(|e: String| {
                ScenarioError::new(&scn.file, format!("variant[{i}].scheduler"), e)
            })?;
            let cc = v.cc.parse().map_err(|e: String| {
                ScenarioError::new(&scn.file, format!("variant[{i}].cc"), e)
            })?;
            Ok(Plan {
                variant: v.clone(),
                scheduler,
                cc,
            })
        })
        .collect()
}

/// The names of the variants that run real kernel stacks, which `braid sim` leaves out.
pub fn kernel_variants(scn: &Scenario) -> Vec<String> {
    scn.variants
        .iter()
        .filter(|v| v.kind != VariantKind::Braid)
        .map(|v| format!("{} ({})", v.name, v.kind.name()))
        .collect()
}

/// Session configuration for one side of a variant.
pub fn session_config(scn: &Scenario, plan: &Plan, seed: u64) -> Config {
    Config {
        cc: plan.cc,
        scheduler: plan.scheduler,
        idle_timeout: Duration::from_nanos(scn.path_timeout),
        tail_reinjection: plan.variant.tail_reinjection,
        alpha: plan.variant.alpha,
        ack_offload: plan.variant.ack_offload,
        blackout_freeze: plan.variant.blackout_freeze,
        loss_recovery: plan.variant.loss_recovery,
        ack_frequency: plan.variant.ack_frequency,
        keepalive: plan
            .variant
            .keepalive
            .map_or(Config::default().keepalive, Duration::from_nanos),
        seed,
        // The link model carries any datagram up to `max_datagram_size` (it has no MTU):
        // discovery (braid-core `path/pmtud.rs`) would only add its probes to every
        // scenario's figures. Its coverage is braid-core's session tests and the namespace
        // tests (issue 35).
        pmtu_discovery: false,
        ..Config::default()
    }
}

/// One unit of work: a variant, a transfer size and a repetition.
#[derive(Debug, Clone)]
pub struct Job {
    /// Index into the plans.
    pub plan: usize,
    /// Transfer size in bytes.
    pub size: u64,
    /// Repetition number, from 0.
    pub repetition: u32,
}

/// Every job of a scenario, in report order.
pub fn jobs(scn: &Scenario, plans: &[Plan]) -> Vec<Job> {
    let mut out = Vec::new();
    for p in 0..plans.len() {
        for &size in &scn.workload.sizes {
            for repetition in 0..scn.workload.repetitions {
                out.push(Job {
                    plan: p,
                    size,
                    repetition,
                });
            }
        }
    }
    out
}

/// Run a whole scenario; `progress(done, total)` is called after each job.
pub fn run_scenario(
    scn: &Scenario,
    mut progress: impl FnMut(usize, usize),
) -> Result<Report, ScenarioError> {
    let plans = plan(scn)?;
    if let Some(cw) = &scn.workload.connections {
        let r = crate::connlevel::run(scn, cw)?;
        progress(r.results.len(), r.results.len());
        return Ok(r);
    }
    let jobs = jobs(scn, &plans);
    let mut results = Vec::with_capacity(jobs.len());
    let mut handshakes = Vec::new();
    let wall = std::time::Instant::now();
    let mut virtual_ns = 0u64;
    if scn.workload.shared_session {
        let mut done = 0;
        for (p, plan) in plans.iter().enumerate() {
            let mine: Vec<&Job> = jobs.iter().filter(|j| j.plan == p).collect();
            let (rs, hs, t) = run_shared(scn, plan, &mine);
            virtual_ns += t;
            done += rs.len();
            results.extend(rs);
            handshakes.extend(hs);
            progress(done, jobs.len());
        }
    } else {
        for (i, job) in jobs.iter().enumerate() {
            let (r, hs, t) = run_job(scn, &plans[job.plan], job);
            virtual_ns += t;
            results.push(r);
            if let Some(hs) = hs {
                handshakes.push(hs);
            }
            progress(i + 1, jobs.len());
        }
    }
    handshakes.sort_by(f64::total_cmp);
    let handshake_s = handshakes.get(handshakes.len() / 2).copied();
    Ok(Report {
        scenario: scn.name.clone(),
        mode: "sim".into(),
        handshake_s,
        results,
        virtual_s: virtual_ns as f64 / 1e9,
        wall_s: wall.elapsed().as_secs_f64(),
    })
}

/// Run every point of a sweep (see `sweep.rs`) into one report: each result's variant is
/// named `variant label`, e.g. `default path[0].loss=0.01`; `progress(done, total)` counts
/// jobs over all points.
pub fn run_sweep(
    points: &[crate::sweep::SweepPoint],
    mut progress: impl FnMut(usize, usize),
) -> Result<Report, ScenarioError> {
    let mut totals = Vec::with_capacity(points.len());
    for p in points {
        totals.push(jobs(&p.scenario, &plan(&p.scenario)?).len());
    }
    let total: usize = totals.iter().sum();
    let Some(first) = points.first() else {
        return Err(ScenarioError::new(
            "<sweep>",
            "",
            "a sweep with no scenario",
        ));
    };
    let mut merged = Report {
        scenario: first.scenario.name.clone(),
        mode: "sim".into(),
        handshake_s: None,
        results: Vec::new(),
        virtual_s: 0.0,
        wall_s: 0.0,
    };
    let mut offset = 0;
    for (p, n) in points.iter().zip(totals) {
        let mut r = run_scenario(&p.scenario, |done, _| progress(offset + done, total))?;
        offset += n;
        if !p.label.is_empty() {
            for x in &mut r.results {
                x.variant = format!("{} {}", x.variant, p.label);
            }
        }
        merged.handshake_s = merged.handshake_s.or(r.handshake_s);
        merged.results.append(&mut r.results);
        merged.virtual_s += r.virtual_s;
        merged.wall_s += r.wall_s;
    }
    Ok(merged)
}

/// Build the world of a variant: only its paths, path id = index in the scenario.
pub fn build_world(scn: &Scenario, plan: &Plan, seed: u64) -> World {
    let paths: Vec<Option<PathSpec>> = (0..scn.paths.len())
        .map(|i| {
            plan.variant
                .paths
                .contains(&i)
                .then(|| scn.paths[i].clone())
        })
        .collect();
    let client = session_config(scn, plan, splitmix64(seed ^ 1));
    let server = session_config(scn, plan, splitmix64(seed ^ 2));
    let protect = plan.variant.protection;
    let mut world = World::new_protected(&paths, seed, client, server, protect);
    give_path_costs(&mut world, &paths);
    world
}

/// The agent knows its radios: each path's power while active above idle (the scenario's
/// `energy.active_w - energy.idle_w`, the paper's `a_j`) and, when the scenario gives one,
/// its rate (`rate_hint`) go to the client's session, which tells the server (PATH_COST).
/// Paths with neither are left unknown.
pub fn give_path_costs(world: &mut World, paths: &[Option<PathSpec>]) {
    for (i, p) in paths.iter().enumerate() {
        let Some(p) = p else { continue };
        let power_w = (p.energy.active_w - p.energy.idle_w).max(0.0);
        let power_mw = (power_w * 1000.0).round() as u64;
        let rate_kbps = p.rate_hint.map_or(0, |r| r.div_ceil(1000));
        if power_mw == 0 && rate_kbps == 0 {
            continue;
        }
        let now = braid_core::Instant(world.now());
        let _ = world
            .client
            .session_mut()
            .set_path_cost(now, i as PathId, power_mw, rate_kbps);
    }
}

/// Waits until every path is validated at both ends.
pub struct Handshake {
    /// The paths to wait for.
    pub paths: Vec<PathId>,
}

impl App for Handshake {
    fn on_wake(&mut self, _now: Nanos, w: &mut Endpoints<'_>) -> bool {
        while w.client.poll_event().is_some() {}
        while w.server.poll_event().is_some() {}
        w.client.is_established()
            && self
                .paths
                .iter()
                .all(|&p| w.client.path_usable(p) && w.server.path_usable(p))
    }
}

/// One job: its result, the handshake time and the virtual time it simulated.
fn run_job(scn: &Scenario, plan: &Plan, job: &Job) -> (RunResult, Option<f64>, Nanos) {
    let seed = repetition_seed(scn, job.repetition);
    let mut world = build_world(scn, plan, seed);
    let ids: Vec<PathId> = plan.variant.paths.iter().map(|&i| i as PathId).collect();
    let mut result = RunResult::new(&plan.variant.name, job.repetition, seed, job.size);
    let hs = world.run(scn.time_limit, &mut Handshake { paths: ids.clone() });
    if hs != Outcome::Done {
        result.error = Some(format!("session could not be established: {hs:?}"));
        return (result, None, world.now());
    }
    let handshake_s = world.now() as f64 / 1e9;
    apply_standby(plan, &mut world);
    let mut app = Transfer::new(scn.workload.direction, job.size, splitmix64(seed ^ 0x7a5));
    run_transfer(scn, &mut world, &ids, &mut app, &mut result);
    (result, Some(handshake_s), world.now())
}

/// All transfers of one variant, one after the other on one session (the scenario seed).
fn run_shared(scn: &Scenario, plan: &Plan, jobs: &[&Job]) -> (Vec<RunResult>, Option<f64>, Nanos) {
    let seed = scn.seed;
    let mut world = build_world(scn, plan, seed);
    let ids: Vec<PathId> = plan.variant.paths.iter().map(|&i| i as PathId).collect();
    let hs = world.run(scn.time_limit, &mut Handshake { paths: ids.clone() });
    let mut out = Vec::with_capacity(jobs.len());
    if hs != Outcome::Done {
        for job in jobs {
            let mut r = RunResult::new(&plan.variant.name, job.repetition, seed, job.size);
            r.error = Some(format!("session could not be established: {hs:?}"));
            out.push(r);
        }
        return (out, None, world.now());
    }
    let handshake_s = world.now() as f64 / 1e9;
    apply_standby(plan, &mut world);
    for (k, job) in jobs.iter().enumerate() {
        if k > 0 && scn.workload.gap > 0 {
            let until = world.now() + scn.workload.gap;
            world.run(until, &mut Idle);
        }
        let mut r = RunResult::new(&plan.variant.name, job.repetition, seed, job.size);
        let payload_seed = splitmix64(seed ^ 0x7a5 ^ (k as u64) << 20);
        let mut app = Transfer::new(scn.workload.direction, job.size, payload_seed);
        run_transfer(scn, &mut world, &ids, &mut app, &mut r);
        let failed = r.error.is_some();
        out.push(r);
        if failed || world.client.session().is_closed() {
            break;
        }
    }
    (out, Some(handshake_s), world.now())
}

/// The variant's `standby` paths: the client sets them to standby (and tells the server with
/// PATH_STATUS) once the session is up.
fn apply_standby(plan: &Plan, world: &mut World) {
    let now = braid_core::Instant(world.now());
    for &i in &plan.variant.standby {
        // The handshake validated every path of the variant, so the path exists.
        let _ = world.client.session_mut().set_path_state(
            now,
            i as PathId,
            braid_core::PathState::Standby,
        );
    }
}

/// An application that does nothing (idle time on a shared session).
struct Idle;

impl App for Idle {
    fn on_wake(&mut self, _now: Nanos, w: &mut Endpoints<'_>) -> bool {
        while w.client.poll_event().is_some() {}
        while w.server.poll_event().is_some() {}
        false
    }
}
