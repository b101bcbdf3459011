//! Faults measured as a call sees them: a path that loses its carrier, turns into a silent
//! black hole, or changes its address during a transfer; what the latency probe and the
//! bulk flow saw.
//!
//! Owns: the fault list ([`Fault`]: `--fault carrier:PATH:AT:DURATION`, `--fault
//! addr:PATH:AT`, and the scenario's own blackouts as black holes), taking a carrier down
//! and up during a transfer ([`CarrierFaults`]: the emulator's client-side interface of the
//! path goes down, so the client's interface loses its carrier as when a cable is pulled),
//! changing a path's address ([`renumber`]), and the measures ([`measure_fault`]). Must not
//! touch: the link model (blackouts are braid-sim's), the probe's and the transfer's
//! sending.
//!
//! Measures, all from the transfer's start (its 100 ms throughput samples, the probe packets
//! sent while loaded):
//! - the probe's longest gap: the longest time without an answer arriving, among the gaps
//!   that overlap the fault or the second after it, and its loss among the packets sent
//!   from the fault's start to 1 s after its end (a packet answered late, within 2 s, is not
//!   lost: over a carrier loss the kernel holds packets and sends them when it returns);
//! - time to fallback: from the fault's start to the end of the first 100 ms sample at or
//!   above half the surviving paths' capacity in that time;
//! - time to recovery: from the fault's end to the end of the first sample at or above 80 %
//!   of the goodput before the fault (the mean of the 2 s before it, at least 1 s of it).
//!
//! An address change has no duration: it ends when it starts, so its probe measures cover
//! the second after it, its fallback compares with the surviving paths' capacity in that
//! second, and its recovery runs from the change to the first sample at 80 % after the
//! last one below it in the second after the change (0 when there is none: the first
//! samples after a change still carry the rate from before it, and a dead subflow may hold
//! its data until its timeout).

pub mod renumber;

pub use renumber::AddressFaults;

use crate::error::{Result, TestbedError};
use crate::netns::Topology;
use braid_sim::{Dir, PathModel, Scenario, VariantKind, VariantSpec};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// The interface loses its carrier (the agent and the kernel can see it).
    Carrier,
    /// Packets vanish silently (a scenario blackout: the interface stays up).
    BlackHole,
    /// The client's address on the path changes (a DHCP renumbering: the old address goes,
    /// a new one of the same subnet comes; the link stays up).
    Address,
}

/// One fault on one scenario path, timed from each transfer's start.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fault {
    /// What goes wrong.
    pub kind: FaultKind,
    /// The scenario path's name.
    pub path: String,
    /// Seconds from the transfer's start.
    pub at_s: f64,
    /// Seconds it lasts.
    pub duration_s: f64,
}

impl std::str::FromStr for Fault {
    type Err = String;

    /// `carrier:PATH:AT:DURATION` or `addr:PATH:AT`, times in seconds (`carrier:wifi:10:5`)
    /// or with a unit (`carrier:wifi:10s:500ms`).
    fn from_str(s: &str) -> std::result::Result<Fault, String> {
        let parts: Vec<&str> = s.split(':').collect();
        let (kind, path, at, dur) = match parts.as_slice() {
            ["carrier", path, at, dur] => (FaultKind::Carrier, path, at, Some(dur)),
            ["addr", path, at] => (FaultKind::Address, path, at, None),
            ["carrier" | "addr", ..] => {
                return Err(format!(
                    "fault {s:?}: expected carrier:PATH:AT:DURATION (e.g. carrier:wifi:10s:5s) \
                     or addr:PATH:AT (e.g. addr:wifi:10s)"
                ))
            }
            other => {
                let kind = other.first().copied().unwrap_or_default();
                return Err(format!(
                    "fault {s:?}: unknown kind {kind:?}; the testbed injects \"carrier\" and \
                     \"addr\" (a black hole is a scenario blackout: \
                     `blackouts = [{{ at = \"10s\", duration = \"5s\" }}]`)"
                ));
            }
        };
        let secs = |v: &str| -> std::result::Result<f64, String> {
            let t = v.trim();
            let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
                (n, 1e-3)
            } else {
                (t.strip_suffix('s').unwrap_or(t), 1.0)
            };
            match num.trim().parse::<f64>() {
                Ok(x) if x.is_finite() && x >= 0.0 => Ok(x * scale),
                _ => Err(format!(
                    "fault {s:?}: {v:?} is not a time like 10s or 500ms"
                )),
            }
        };
        let duration_s = match dur {
            Some(d) => secs(d)?,
            None => 0.0,
        };
        if duration_s <= 0.0 && kind == FaultKind::Carrier {
            return Err(format!("fault {s:?}: the duration must be above 0"));
        }
        if path.is_empty() {
            return Err(format!("fault {s:?}: the path's name is missing"));
        }
        Ok(Fault {
            kind,
            path: path.to_string(),
            at_s: secs(at)?,
            duration_s,
        })
    }
}

/// What one transfer saw of one fault.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FaultResult {
    /// Variant name.
    pub variant: String,
    /// Repetition, from 0.
    pub repetition: u32,
    /// Transfer size.
    pub size_bytes: u64,
    /// The fault.
    pub fault: Fault,
    /// The probe's longest time without an answer around the fault (seconds).
    pub probe_longest_gap_s: Option<f64>,
    /// The probe's loss from the fault's start to 1 s after its end.
    pub probe_loss_during: Option<f64>,
    /// Fault start to half the surviving paths' capacity (seconds).
    pub time_to_fallback_s: Option<f64>,
    /// Fault end to 80 % of the goodput before it (seconds).
    pub time_to_recovery_s: Option<f64>,
}

/// The measures of one fault from one transfer's samples: `interval_s` throughput samples
/// (bit/s), the probe's loaded packets as (send time from the transfer's start, round trip;
/// infinite when lost), and the surviving paths' capacity during the fault (bit/s).
pub fn measure_fault(
    fault: &Fault,
    interval_s: f64,
    throughput_bps: &[f64],
    probe: &[(f64, f64)],
    surviving_bps: f64,
) -> (Option<f64>, Option<f64>, Option<f64>, Option<f64>) {
    let (at, end) = (fault.at_s, fault.at_s + fault.duration_s);
    let sample_end = |k: usize| (k + 1) as f64 * interval_s;
    let first_from = |t: f64, ok: &dyn Fn(f64) -> bool| {
        let k0 = (t / interval_s).ceil().max(0.0) as usize;
        (k0..throughput_bps.len())
            .find(|&k| ok(throughput_bps[k]))
            .map(|k| sample_end(k) - t)
    };
    let fallback = (surviving_bps > 0.0 && interval_s > 0.0)
        .then(|| first_from(at, &|v| v >= 0.5 * surviving_bps))
        .flatten();
    let before: Vec<f64> = throughput_bps
        .iter()
        .enumerate()
        .filter(|(k, _)| {
            let t = *k as f64 * interval_s;
            t >= at - 2.0 && sample_end(*k) <= at
        })
        .map(|(_, v)| *v)
        .collect();
    let recovery = (interval_s > 0.0 && before.len() as f64 * interval_s >= 1.0)
        .then(|| {
            let pre = before.iter().sum::<f64>() / before.len() as f64;
            let ok = |v: f64| v >= 0.8 * pre;
            if fault.duration_s > 0.0 {
                return first_from(end, &ok);
            }
            // An address change: the rate falls some round trips after it (a dead subflow
            // holds data until its timeout), so count past the last sample below 80 % in
            // the second after it (none: nothing to recover).
            let k0 = (at / interval_s).ceil().max(0.0) as usize;
            let dip = (k0..throughput_bps.len())
                .take_while(|&k| (k as f64) * interval_s < at + 1.0)
                .filter(|&k| !ok(throughput_bps[k]))
                .last();
            match dip {
                None => Some(0.0),
                Some(k) => (k..throughput_bps.len())
                    .find(|&j| ok(throughput_bps[j]))
                    .map(|j| sample_end(j) - at),
            }
        })
        .flatten();
    let mut arrivals: Vec<f64> = probe
        .iter()
        .filter(|(_, rtt)| rtt.is_finite())
        .map(|(sent, rtt)| sent + rtt)
        .collect();
    arrivals.sort_by(f64::total_cmp);
    // Gaps that overlap the fault (or the second after it).
    let gap = arrivals
        .windows(2)
        .filter(|w| w[1] > at && w[0] < end + 1.0)
        .map(|w| w[1] - w[0])
        .reduce(f64::max);
    let during: Vec<&(f64, f64)> = probe
        .iter()
        .filter(|(sent, _)| *sent >= at && *sent < end + 1.0)
        .collect();
    let loss = (!during.is_empty()).then(|| {
        during.iter().filter(|(_, r)| !r.is_finite()).count() as f64 / during.len() as f64
    });
    (gap, loss, fallback, recovery)
}

/// The faults a variant's transfers meet, with the index of the faulted scenario path:
/// the given carrier and address faults on its paths (not for `bond`, whose single
/// interface carries every path), and each of its paths' explicit scenario blackouts as a
/// black hole.
pub fn faults_of(scn: &Scenario, v: &VariantSpec, carrier: &[Fault]) -> Vec<(Fault, usize)> {
    let mut out = Vec::new();
    for &i in &v.paths {
        let p = &scn.paths[i];
        if v.kind != VariantKind::Bond {
            for f in carrier.iter().filter(|f| f.path == p.name) {
                out.push((f.clone(), i));
            }
        }
        for &(start, end) in &p.down.blackouts {
            let fault = Fault {
                kind: FaultKind::BlackHole,
                path: p.name.clone(),
                at_s: start as f64 / 1e9,
                duration_s: end.saturating_sub(start) as f64 / 1e9,
            };
            out.push((fault, i));
        }
    }
    out
}

/// Refuses given faults on paths the scenario does not have.
pub fn check_faults(scn: &Scenario, carrier: &[Fault]) -> Result<()> {
    for f in carrier {
        if !scn.paths.iter().any(|p| p.name == f.path) {
            let names: Vec<&str> = scn.paths.iter().map(|p| p.name.as_str()).collect();
            return Err(TestbedError::Other(format!(
                "a fault names the path {:?}, which scenario {} does not have (its paths: {})",
                f.path,
                scn.name,
                names.join(", ")
            )));
        }
    }
    Ok(())
}

/// What one transfer of `v` saw of each of `faults`: its throughput samples, the probe's
/// loaded packets (send time from the transfer's start, round trip or infinity) and the
/// scenario for the surviving paths' capacity in direction `dir`.
pub fn results_for(
    scn: &Scenario,
    v: &VariantSpec,
    faults: &[(Fault, usize)],
    samples: &crate::samples::RunSamples,
    probe: &[(f64, f64)],
    dir: Dir,
) -> Vec<FaultResult> {
    faults
        .iter()
        .map(|(fault, faulted)| {
            // An address change's capacity: the second after it.
            let span = if fault.duration_s > 0.0 {
                fault.duration_s
            } else {
                1.0
            };
            let (t0, t1) = (fault.at_s, fault.at_s + span);
            let ns = |t: f64| (t * 1e9) as u64;
            let surviving_bits: f64 = v
                .paths
                .iter()
                .filter(|&&j| j != *faulted)
                .map(|&j| PathModel::<()>::new(&scn.paths[j], 0).capacity_bits(dir, ns(t0), ns(t1)))
                .sum();
            let (gap, loss, fallback, recovery) = measure_fault(
                fault,
                samples.interval_s,
                &samples.throughput_bps,
                probe,
                surviving_bits / span,
            );
            FaultResult {
                variant: v.name.clone(),
                repetition: samples.repetition,
                size_bytes: samples.size_bytes,
                fault: fault.clone(),
                probe_longest_gap_s: gap,
                probe_loss_during: loss,
                time_to_fallback_s: fallback,
                time_to_recovery_s: recovery,
            }
        })
        .collect()
}

/// The results as a text table ("–" where not measured), empty when there are none.
pub fn table(results: &[FaultResult]) -> String {
    use std::fmt::Write;
    if results.is_empty() {
        return String::new();
    }
    let secs = |v: Option<f64>| v.map_or("–".to_string(), |x| format!("{x:.2} s"));
    let w = results
        .iter()
        .map(|r| r.variant.len())
        .max()
        .unwrap_or(0)
        .max(7);
    let mut s = String::from("faults, timed from each transfer's start:\n");
    let _ = writeln!(
        s,
        "{:<w$} {:>4} {:<28} {:>11} {:>10} {:>9} {:>9}",
        "variant", "rep", "fault", "probe gap", "probe loss", "fallback", "recovery"
    );
    for r in results {
        let f = &r.fault;
        let kind = match f.kind {
            FaultKind::Carrier => "carrier loss",
            FaultKind::BlackHole => "black hole",
            FaultKind::Address => "address change",
        };
        let what = match f.kind {
            FaultKind::Address => format!("{kind} {} {:.1} s", f.path, f.at_s),
            _ => format!("{kind} {} {:.1}+{:.1} s", f.path, f.at_s, f.duration_s),
        };
        let loss = r
            .probe_loss_during
            .map_or("–".to_string(), |l| format!("{:.1} %", l * 100.0));
        let _ = writeln!(
            s,
            "{:<w$} {:>4} {:<28} {:>11} {:>10} {:>9} {:>9}",
            r.variant,
            r.repetition,
            what,
            secs(r.probe_longest_gap_s),
            loss,
            secs(r.time_to_fallback_s),
            secs(r.time_to_recovery_s)
        );
    }
    s
}

/// A fault schedule's thread: `run` gets the stop flag and the schedule's start time.
/// Stopping it ([`ScheduleThread::finish`] or dropping it) sets the flag and waits for the
/// thread, so whatever the thread restores on its way out is back when it returns.
pub(crate) struct ScheduleThread {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ScheduleThread {
    pub(crate) fn spawn(
        name: &str,
        run: impl FnOnce(&AtomicBool, Instant) + Send + 'static,
    ) -> Result<ScheduleThread> {
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let t0 = Instant::now();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || run(&st, t0))
            .map_err(|e| TestbedError::io(format!("spawning the {name} thread"), e))?;
        Ok(ScheduleThread {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the schedule and waits for its thread.
    pub(crate) fn finish(self) {}
}

impl Drop for ScheduleThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Sleeps until `t0 + at`; false when the schedule was stopped first.
pub(crate) fn wait_until(stop: &AtomicBool, t0: Instant, at: Duration) -> bool {
    while Instant::now() < t0 + at && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(5));
    }
    !stop.load(Ordering::Relaxed)
}

/// Carrier faults of one transfer: a thread takes each path's emulator-side interface down
/// at its time and up again; dropping it (or [`CarrierFaults::finish`]) brings every
/// interface it took down back up.
pub struct CarrierFaults(ScheduleThread);

impl CarrierFaults {
    /// Starts the schedule now (the transfer's start): `(emulator-side interface, at,
    /// duration)` in the emulator namespace `ns`.
    pub fn start(ns: &str, faults: Vec<(String, Duration, Duration)>) -> Result<CarrierFaults> {
        let ns = ns.to_string();
        let thread = ScheduleThread::spawn("carrier-faults", move |stop, t0| {
            let mut events: Vec<(Duration, &str, &String)> = Vec::new();
            for (dev, at, dur) in &faults {
                events.push((*at, "down", dev));
                events.push((*at + *dur, "up", dev));
            }
            events.sort_by_key(|e| e.0);
            for (t, state, dev) in &events {
                if !wait_until(stop, t0, *t) {
                    break;
                }
                set_link(&ns, dev, state);
            }
            for (dev, _, _) in &faults {
                set_link(&ns, dev, "up");
            }
        })?;
        Ok(CarrierFaults(thread))
    }

    /// Stops the schedule; every interface is up again when it returns.
    pub fn finish(self) {
        self.0.finish();
    }
}

fn set_link(ns: &str, dev: &str, state: &str) {
    if let Err(e) = crate::cmd::ip_ns(ns, &["link", "set", "dev", dev, state]) {
        eprintln!("braid testbed: carrier fault: setting {dev} {state} failed: {e}");
    }
}

/// The carrier faults among `faults` as [`CarrierFaults::start`] takes them: the
/// emulator-side interface that carries the path's carrier towards the client, when and
/// for how long.
pub fn carrier_schedule(
    topo: &Topology,
    faults: &[(Fault, usize)],
) -> Vec<(String, Duration, Duration)> {
    let secs = |s: f64| Duration::try_from_secs_f64(s).unwrap_or(Duration::ZERO);
    faults
        .iter()
        .filter(|(f, _)| f.kind == FaultKind::Carrier)
        .filter_map(|(f, i)| {
            let dev = topo.paths.get(*i)?.emu_client_if.clone();
            Some((dev, secs(f.at_s), secs(f.duration_s)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_carrier_and_address_faults_and_refuses_the_rest() {
        let f: Fault = "carrier:wifi:10s:500ms".parse().unwrap();
        assert_eq!((f.path.as_str(), f.at_s, f.duration_s), ("wifi", 10.0, 0.5));
        assert_eq!(f.kind, FaultKind::Carrier);
        let f: Fault = "carrier:lte:2:3".parse().unwrap();
        assert_eq!((f.at_s, f.duration_s), (2.0, 3.0));
        let f: Fault = "addr:wifi:7.5s".parse().unwrap();
        assert_eq!(
            (f.kind, f.path.as_str(), f.at_s, f.duration_s),
            (FaultKind::Address, "wifi", 7.5, 0.0)
        );
        for bad in [
            "blackhole:a:1:1",
            "carrier:a:1",
            "carrier:a:x:1",
            "carrier:a:1:0",
            "addr:a",
            "addr:a:1:1",
            "addr:a:soon",
            "addr::1",
            "",
        ] {
            assert!(bad.parse::<Fault>().is_err(), "{bad}");
        }
    }

    #[test]
    fn fallback_recovery_and_probe_gap() {
        // 20 Mbit/s, then 5 for a while after a fault at 3 s lasting 2 s, 10 Mbit/s
        // surviving; back to 20 at 5.5 s.
        let tp: Vec<f64> = (0..80)
            .map(|k| match k {
                0..=29 => 20e6,
                30..=31 => 2e6,
                32..=54 => 6e6,
                _ => 20e6,
            })
            .collect();
        let fault = Fault {
            kind: FaultKind::BlackHole,
            path: "a".into(),
            at_s: 3.0,
            duration_s: 2.0,
        };
        // Probes every 20 ms, 20 ms round trip, lost from 3.0 to 3.5 s.
        let probe: Vec<(f64, f64)> = (0..400)
            .map(|i| {
                let t = f64::from(i) * 0.02;
                (
                    t,
                    if (3.0..3.5).contains(&t) {
                        f64::INFINITY
                    } else {
                        0.02
                    },
                )
            })
            .collect();
        let (gap, loss, fb, rec) = measure_fault(&fault, 0.1, &tp, &probe, 10e6);
        assert!((gap.unwrap() - 0.52).abs() < 1e-9, "{gap:?}");
        assert!((loss.unwrap() - 25.0 / 150.0).abs() < 1e-9, "{loss:?}");
        assert!((fb.unwrap() - 0.3).abs() < 1e-9, "{fb:?}");
        assert!((rec.unwrap() - 0.6).abs() < 1e-9, "{rec:?}");
        // No samples before the fault: no recovery measure.
        let early = Fault { at_s: 0.5, ..fault };
        assert_eq!(measure_fault(&early, 0.1, &tp, &probe, 10e6).3, None);
    }

    #[test]
    fn an_address_change_recovers_from_its_dip() {
        let change = Fault {
            kind: FaultKind::Address,
            path: "a".into(),
            at_s: 3.0,
            duration_s: 0.0,
        };
        // The first samples after the change still carry the old rate; the dip comes
        // 0.3 s later, with one sample back up at 3.6 s, and lasts until 4.5 s.
        let tp: Vec<f64> = (0..80)
            .map(|k| match k {
                36 => 20e6,
                33..=44 => 5e6,
                _ => 20e6,
            })
            .collect();
        let (_, _, _, rec) = measure_fault(&change, 0.1, &tp, &[], 10e6);
        assert!((rec.unwrap() - 1.6).abs() < 1e-9, "{rec:?}");
        // No dip in the second after it: nothing to recover.
        let flat = vec![20e6; 80];
        assert_eq!(measure_fault(&change, 0.1, &flat, &[], 10e6).3, Some(0.0));
    }
}
