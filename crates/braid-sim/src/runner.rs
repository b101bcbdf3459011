//! Running a scenario: every variant, size and repetition, each on a fresh world whose
//! session is established before the transfer starts, with the metrics `braid sim` reports.
//!
//! Owns: the transfer application model (request, response, hashing), turning a variant
//! into session configuration, and the metrics (completion time, goodput, capacity,
//! efficiency, energy, per-path bytes). Must not touch: link behaviour or the protocol.

use crate::latency::{IDLE_PROBE, PROBE_LOSS_AFTER};
use crate::link::Dir;
use crate::payload::{expected_digest, Checker, Generator};
use crate::probe::{Phase, Probe, ProbeOnly, Probed};
use crate::report::{PathResult, Report, RunResult};
pub use crate::scenario::repetition_seed;
use crate::scenario::{Direction, PathSpec, Scenario, ScenarioError, VariantKind, VariantSpec};
use crate::time::Nanos;
use crate::world::{App, Endpoints, Outcome, World};
use braid_core::rng::splitmix64;
use braid_core::{CcAlgorithm, Config, Event, PathId, SchedulerKind, Session, StreamId};
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
        keepalive: plan
            .variant
            .keepalive
            .map_or(Config::default().keepalive, Duration::from_nanos),
        seed,
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
    let mut world = World::new(&paths, seed, client, server);
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
        let _ = world.client.set_path_cost(
            braid_core::Instant(world.now()),
            i as PathId,
            power_mw,
            rate_kbps,
        );
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
        if failed || world.client.is_closed() {
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
        let _ = world
            .client
            .set_path_state(now, i as PathId, braid_core::PathState::Standby);
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
        // The probe alone first: what a call sees on the idle session.
        probe.set_phase(world.now(), Phase::Idle);
        let until = world.now() + IDLE_PROBE.as_nanos() as Nanos;
        world.run(
            until,
            &mut ProbeOnly {
                probe: &mut probe,
                until_answered: None,
            },
        );
        probe.set_phase(world.now(), Phase::Loaded);
    }
    let start = world.now();
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
    let sender_retx = |w: &World| match dir {
        Dir::Down => w.server.stats().retransmitted_bytes,
        Dir::Up => w.client.stats().retransmitted_bytes,
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
    let outcome = if scn.workload.probe {
        let mut both = Probed {
            probe: &mut probe,
            inner: &mut main,
        };
        world.run(start + scn.time_limit, &mut both)
    } else {
        world.run(start + scn.time_limit, &mut main)
    };
    let app = main.main;
    debug_dump(world, ids);
    let end = app.completed.unwrap_or(world.now());
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
        // Answers to the last loaded probes are still on their way: wait for them (at most
        // the probe's loss timeout), sending nothing new.
        probe.set_phase(world.now(), Phase::Off);
        let until = world.now() + PROBE_LOSS_AFTER.as_nanos() as Nanos;
        world.run(
            until,
            &mut ProbeOnly {
                probe: &mut probe,
                until_answered: Some(Phase::Loaded),
            },
        );
        result.latency = probe.latency();
    }
}

/// Loss and super-aggregation counters of path `id`: random losses (sender), blackouts (the
/// larger count of the two ends), ACKs offloaded (receiver), packets declared lost and
/// spurious losses (sender).
fn mechanism_counts(world: &World, dir: Dir, id: PathId) -> [u64; 5] {
    let (sender, receiver) = match dir {
        Dir::Down => (&world.server, &world.client),
        Dir::Up => (&world.client, &world.server),
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

/// The application model of one transfer on a new stream. Download: the client sends an
/// 8-byte request (the size) and a FIN, the server answers with `size` bytes and a FIN.
/// Upload: the client sends `size` bytes and a FIN. Completion: the receiving application
/// has read the last byte and the FIN.
pub struct Transfer {
    /// Which way the bytes go.
    pub direction: Direction,
    /// Bytes to move.
    pub size: u64,
    /// Seed of the payload.
    pub seed: u64,
    started: bool,
    client_stream: Option<StreamId>,
    server_stream: Option<StreamId>,
    request: Vec<u8>,
    responding: bool,
    gen: Generator,
    staging: Vec<u8>,
    staged: (usize, usize),
    /// Receiver-side hash.
    pub checker: Checker,
    /// When the receiving application had everything.
    pub completed: Option<Nanos>,
    /// An application-level failure.
    pub failure: Option<String>,
}

impl Transfer {
    /// A transfer not yet started.
    pub fn new(direction: Direction, size: u64, seed: u64) -> Self {
        Transfer {
            direction,
            size,
            seed,
            started: false,
            client_stream: None,
            server_stream: None,
            request: Vec::new(),
            responding: false,
            gen: Generator::new(seed, size),
            staging: vec![0u8; 64 * 1024],
            staged: (0, 0),
            checker: Checker::new(),
            completed: None,
            failure: None,
        }
    }

    /// Write as much payload as the session accepts; finish when all is written.
    fn push(&mut self, s: &mut Session, id: StreamId) {
        loop {
            if self.staged.0 == self.staged.1 {
                let n = self.gen.fill(&mut self.staging);
                if n == 0 {
                    let _ = s.stream_finish(id);
                    return;
                }
                self.staged = (0, n);
            }
            match s.stream_write(id, &self.staging[self.staged.0..self.staged.1]) {
                Ok(0) | Err(_) => return,
                Ok(n) => self.staged.0 += n,
            }
        }
    }

    /// Read everything available; true at the end of the stream.
    fn pull(&mut self, s: &mut Session, id: StreamId) -> bool {
        loop {
            match s.stream_read(id, usize::MAX) {
                Ok(Some(b)) if b.is_empty() => return true,
                Ok(Some(b)) => self.checker.update(&b),
                Ok(None) => return false,
                Err(e) => {
                    self.failure = Some(e.to_string());
                    return false;
                }
            }
        }
    }
}

impl App for Transfer {
    fn on_wake(&mut self, now: Nanos, w: &mut Endpoints<'_>) -> bool {
        if self.completed.is_some() {
            return true;
        }
        if !self.started {
            self.started = true;
            match w.client.open_stream() {
                Ok(id) => {
                    self.client_stream = Some(id);
                    if self.direction == Direction::Down {
                        let _ = w.client.stream_write(id, &self.size.to_le_bytes());
                        let _ = w.client.stream_finish(id);
                    }
                }
                Err(e) => {
                    self.failure = Some(e.to_string());
                    return true;
                }
            }
        }
        while let Some(ev) = w.server.poll_event() {
            if let Event::StreamOpened(id) = ev {
                self.server_stream.get_or_insert(id);
            }
        }
        while w.client.poll_event().is_some() {}
        let (Some(cid), sid) = (self.client_stream, self.server_stream) else {
            return false;
        };
        match self.direction {
            Direction::Down => {
                if let Some(sid) = sid {
                    if !self.responding {
                        while let Ok(Some(b)) = w.server.stream_read(sid, 8) {
                            if b.is_empty() {
                                self.responding = self.request.len() == 8;
                                break;
                            }
                            self.request.extend_from_slice(&b);
                        }
                    }
                    if self.responding {
                        self.push(w.server, sid);
                    }
                }
                if self.pull(w.client, cid) {
                    self.completed = Some(now);
                }
            }
            Direction::Up => {
                self.push(w.client, cid);
                if let Some(sid) = sid {
                    if self.pull(w.server, sid) {
                        self.completed = Some(now);
                    }
                }
            }
        }
        self.completed.is_some() || self.failure.is_some()
    }
}

/// The measured transfer, with a bulk transfer the other way beside it when the workload
/// asks for one (`reverse`): it runs until the measured one ends. The server's stream
/// events are handed to whichever transfer opened the stream.
struct Beside<'a> {
    main: &'a mut Transfer,
    other: Option<Transfer>,
}

impl App for Beside<'_> {
    fn on_wake(&mut self, now: Nanos, w: &mut Endpoints<'_>) -> bool {
        let Some(other) = &mut self.other else {
            return self.main.on_wake(now, w);
        };
        while let Some(ev) = w.server.poll_event() {
            if let Event::StreamOpened(id) = ev {
                for t in [&mut *self.main, &mut *other] {
                    if t.client_stream == Some(id) {
                        t.server_stream = Some(id);
                    }
                }
            }
        }
        if other.on_wake(now, w) && other.failure.is_some() {
            self.main.failure = other
                .failure
                .take()
                .map(|f| format!("the reverse transfer: {f}"));
        }
        self.main.on_wake(now, w)
    }
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
            world.server.path_stats(id),
            world.link(id).map(|l| l.stats(Dir::Down).clone())
        );
    }
}
