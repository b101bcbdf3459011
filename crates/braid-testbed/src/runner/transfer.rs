//! One transfer on a variant's running stack: fresh link models, the scheduled faults, the
//! measured transfer (`measure`) and turning what it saw into a `RunResult`, samples and
//! fault results.
//!
//! Owns: the per-transfer seeds and the per-path byte counts and capacity. Must not touch:
//! the stack's set-up (`stack.rs`) or how a transfer is measured (`measure`).

use super::stack::Stack;
use crate::error::Result;
use crate::faults::{AddressFaults, CarrierFaults, Fault, FaultResult};
use crate::l2emu::LinkEmu;
use crate::netns::Topology;
use crate::samples::RunSamples;
use crate::traffic::{self, TransferOutcome};
use braid_core::rng::splitmix64;
use braid_sim::{Dir, Direction, PathModel, PathResult, RunResult, Scenario, VariantSpec};
use std::sync::atomic::Ordering;

/// Delivered wire bytes per variant path in direction `d` (0 up, 1 down).
fn delivered(stack: &Stack, emus: &[LinkEmu], v: &VariantSpec, d: usize) -> Vec<u64> {
    match &stack.bond {
        Some(b) => b
            .counters()
            .models
            .iter()
            .map(|m| m.delivered_bytes[d].load(Ordering::Relaxed))
            .collect(),
        None => v
            .paths
            .iter()
            .map(|&i| emus[i].counters().models[0].delivered_bytes[d].load(Ordering::Relaxed))
            .collect(),
    }
}

/// What a transfer runs on besides its variant's stack.
pub(super) struct Transfer<'a> {
    pub(super) topo: &'a Topology,
    pub(super) emus: &'a [LinkEmu],
    pub(super) carrier: &'a [Fault],
}

/// One transfer of `v` on its running stack: fresh link models, the faults, the measured
/// transfer with the probe and RPM beside it, and what it yields.
pub(super) fn one_transfer(
    scn: &Scenario,
    v: &VariantSpec,
    stack: &Stack,
    at: &Transfer<'_>,
    rep: u32,
    seed: u64,
    size: u64,
) -> Result<(RunResult, RunSamples, Vec<FaultResult>)> {
    let emus = at.emus;
    let link_seed = |i: usize| splitmix64(seed ^ ((i as u64 + 1) << 40));
    let (dir, d) = match scn.workload.direction {
        Direction::Down => (Dir::Down, 1),
        Direction::Up => (Dir::Up, 0),
    };
    let mut spec = stack.template.clone();
    spec.size = size;
    spec.seed = splitmix64(seed ^ size);
    let faults = crate::faults::faults_of(scn, v, at.carrier);
    let carrier = crate::faults::carrier_schedule(at.topo, &faults);
    let renumber = crate::faults::renumber::address_schedule(at.topo, &faults);
    // Fresh link models after the idle probe, just before the transfer connects; the
    // carrier faults' clock starts there too.
    let fresh_links = || {
        match &stack.bond {
            Some(b) => b.reset(link_seed(usize::MAX >> 1)),
            None => {
                for &i in &v.paths {
                    emus[i].reset(link_seed(i));
                }
            }
        }
        let before = delivered(stack, emus, v, d);
        let injector = (!carrier.is_empty())
            .then(|| CarrierFaults::start(&at.topo.emu, carrier.clone()))
            .transpose();
        let renumberer = (!renumber.is_empty())
            .then(|| AddressFaults::start(&at.topo.client, renumber.clone()))
            .transpose();
        (before, injector, renumberer)
    };
    let (m, (before, injector, renumberer)) =
        crate::measure::transfer(&spec, &stack.responders, fresh_links)?;
    if let Some(inj) = injector? {
        inj.finish();
    }
    if let Some(r) = renumberer? {
        r.finish();
    }
    if let Some(w) = &m.warning {
        eprintln!("braid testbed: {} rep {rep} size {size}: {w}", v.name);
    }
    let out = m.outcome;
    let after = delivered(stack, emus, v, d);
    let mut r = run_result(scn, v, (rep, seed, size), &out, (&before, &after), dir);
    r.latency = m.latency;
    let s = RunSamples {
        variant: v.name.clone(),
        repetition: rep,
        size_bytes: size,
        interval_s: traffic::SAMPLE_INTERVAL.as_secs_f64(),
        throughput_bps: out.samples_bps,
        probe_rtt_s: m.loaded.iter().map(|p| p.1).collect(),
    };
    let f = crate::faults::results_for(scn, v, &faults, &s, &m.loaded, dir);
    Ok((r, s, f))
}

/// The `RunResult` of a transfer: its outcome, each path's delivered bytes (`before` and
/// `after` it) and the capacity of its paths over its completion time in direction `dir`.
fn run_result(
    scn: &Scenario,
    v: &VariantSpec,
    (rep, seed, size): (u32, u64, u64),
    out: &TransferOutcome,
    (before, after): (&[u64], &[u64]),
    dir: Dir,
) -> RunResult {
    let mut r = RunResult::new(&v.name, rep, seed, size);
    r.verified = out.verified;
    r.completion_s = out.completion_s;
    r.goodput_bps = if out.verified { out.goodput_bps } else { 0.0 };
    r.error = out.error.clone();
    let t1 = (out.completion_s * 1e9) as u64;
    let mut cap_bits = 0.0;
    for (k, &i) in v.paths.iter().enumerate() {
        let model: PathModel<()> = PathModel::new(&scn.paths[i], 0);
        cap_bits += model.capacity_bits(dir, 0, t1);
        r.paths.push(PathResult {
            name: scn.paths[i].name.clone(),
            bytes: after
                .get(k)
                .copied()
                .unwrap_or(0)
                .saturating_sub(before.get(k).copied().unwrap_or(0)),
            energy_j: 0.0,
            ..Default::default()
        });
    }
    if out.completion_s > 0.0 {
        r.capacity_bps = cap_bits / out.completion_s;
    }
    if r.capacity_bps > 0.0 {
        r.efficiency = r.goodput_bps / r.capacity_bps;
    }
    r
}
