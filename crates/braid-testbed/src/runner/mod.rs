//! Running a scenario on the testbed: every variant, repetition and size, over real kernels.
//!
//! Owns: checking that a scenario can run here, the order of set-up and teardown (lock,
//! topology, emulators, per-variant stacks, transfers), the per-kind stack set-up (`tcp`,
//! `mptcp`, `bond`, `braid`, `ss-mptcp`) and turning transfers into braid-sim's `Report`
//! (`mode: "testbed"`, with each transfer's latency record from `measure`) plus throughput
//! and probe samples. Must not touch: link behaviour (braid-sim's
//! model through `l2emu`), namespace plumbing (`netns`), the transfer protocol (`traffic`).
//!
//! Layout: this module holds the run itself (checks, host preparation, the loop over
//! variants and transfers, teardown); `stack` one variant's stack per kind, `transfer` one
//! transfer and its results, `allowed_cc` the host's allowed congestion controls.
//!
//! Teardown is by ownership: the run lock, the topology, the emulators and each variant's
//! stack are guards dropped in reverse order on success, error or signal (helpers, then
//! traffic server and bond emulator, then path emulators, then namespaces, then the lock).
//!
//! Differences from `braid sim`, on purpose:
//! - Each transfer gets fresh link models (seeded from the scenario seed, the repetition and
//!   the path) started just before it connects, so blackouts and traces count from the
//!   transfer's start; `completion_s` includes connection set-up (see `traffic`).
//! - Every transfer is preceded by the latency probe alone (its warm-up, then 1 s idle, on
//!   the link models the previous transfer left), and the probe and RPM run beside it
//!   (`measure`); the per-path byte counts include their packets (about 20 KB/s).
//! - `energy_j` and `retransmitted_bytes` are not measured (0); `handshake_s` is `None`.
//! - Kernel variants (`tcp`, `mptcp`, `ss-mptcp`, `bond`) use the variant's `cc` as the
//!   namespaces' default congestion control (and on the sockets for `tcp`/`bond`); their
//!   `scheduler` is ignored (MPTCP uses the kernel's default scheduler).
mod allowed_cc;
mod stack;
mod transfer;

use self::allowed_cc::AllowedCc;
pub use self::allowed_cc::ALLOWED_CC_SAVED;
use self::stack::Stack;
use self::transfer::{one_transfer, Transfer};
use crate::cmd;
use crate::error::{Result, TestbedError};
use crate::faults::{Fault, FaultResult};
use crate::l2emu::{EmuConfig, LinkEmu};
use crate::lock::RunLock;
use crate::netns::Topology;
pub use crate::samples::RunSamples;
use braid_core::rng::splitmix64;
use braid_sim::{Report, RunResult, Scenario, ScenarioError, VariantKind, VariantSpec};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

/// What `braid testbed run --json` prints: the `braid sim` report plus samples.
#[derive(Debug, Clone, Serialize)]
pub struct TestbedReport {
    /// The results, `mode = "testbed"`.
    #[serde(flatten)]
    pub report: Report,
    /// One per transfer, in the order of `results`.
    pub samples: Vec<RunSamples>,
    /// What each transfer saw of each fault on its paths (carrier faults given in
    /// [`RunOptions::faults`], the scenario's blackouts as black holes); omitted when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<FaultResult>,
}

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The `braid` binary for `kind = "braid"` variants (default: [`find_braid`]).
    pub braid_bin: Option<PathBuf>,
    /// Install SIGINT/SIGTERM/SIGHUP handlers that tear the run down (the CLI wants this;
    /// a library user with its own handling may not).
    pub handle_signals: bool,
    /// The run lock.
    pub lock_file: PathBuf,
    /// Carrier and address faults to inject into every transfer whose variant uses the
    /// path.
    pub faults: Vec<Fault>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            braid_bin: None,
            handle_signals: true,
            lock_file: PathBuf::from(crate::lock::LOCK_FILE),
            faults: Vec::new(),
        }
    }
}

/// What a progress callback is told.
#[derive(Debug, Clone)]
pub struct Progress<'a> {
    /// Transfers finished.
    pub done: usize,
    /// Transfers in the run.
    pub total: usize,
    /// What is happening now.
    pub what: &'a str,
}

/// The `braid` binary: `$BRAID_BIN`, else the current executable if it is `braid`, else a
/// `braid` next to it, one directory up (a test binary in `target/<profile>/deps/`) or in
/// `target/release/`; the first that answers `--version` with `braid ...`.
pub fn find_braid() -> Option<PathBuf> {
    let works = |p: &Path| {
        p.is_file()
            && std::process::Command::new(p)
                .arg("--version")
                .stdin(std::process::Stdio::null())
                .output()
                .is_ok_and(|o| o.status.success() && o.stdout.starts_with(b"braid "))
    };
    let mut cands: Vec<PathBuf> = std::env::var_os("BRAID_BIN")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    if let Ok(exe) = std::env::current_exe() {
        if exe.file_name().is_some_and(|n| n == "braid") {
            cands.push(exe.clone());
        }
        let mut dir = exe.parent().map(Path::to_path_buf);
        for _ in 0..2 {
            let Some(d) = dir else { break };
            cands.push(d.join("braid"));
            if let Some(up) = d.parent() {
                cands.push(up.join("release").join("braid"));
            }
            dir = d.parent().map(Path::to_path_buf);
        }
    }
    cands.into_iter().find(|p| works(p))
}

/// Checks everything about a scenario that the testbed needs beyond `braid sim`'s checks.
pub fn check_scenario(scn: &Scenario, opts: &RunOptions) -> Result<()> {
    let err =
        |key: String, msg: String| TestbedError::Scenario(ScenarioError::new(&scn.file, key, msg));
    crate::faults::check_faults(scn, &opts.faults)?;
    let available = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .unwrap_or_default();
    for (i, v) in scn.variants.iter().enumerate() {
        match v.kind {
            VariantKind::Tcp if v.paths.len() != 1 => {
                return Err(err(
                    format!("variant[{i}].paths"),
                    format!(
                        "kind = \"tcp\" runs over one path, but this variant uses {}; \
                         name it, e.g. paths = [{:?}]",
                        v.paths.len(),
                        scn.paths[v.paths[0]].name
                    ),
                ))
            }
            VariantKind::Braid => {
                // Whatever `braid agent` accepts (the same parsers).
                if let Err(e) = v.scheduler.parse::<braid_core::SchedulerKind>() {
                    return Err(err(format!("variant[{i}].scheduler"), e));
                }
                if let Err(e) = v.cc.parse::<braid_core::CcAlgorithm>() {
                    return Err(err(format!("variant[{i}].cc"), e));
                }
                let bin = opts.braid_bin.clone().or_else(find_braid);
                if !bin.as_ref().is_some_and(|b| b.is_file()) {
                    return Err(TestbedError::Other(format!(
                        "variant {:?} (kind = \"braid\") needs a working `braid` binary, which was \
                         not found next to {} (nor in $BRAID_BIN); build it (cargo build -p braid) \
                         or set BRAID_BIN",
                        v.name,
                        std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_default()
                    )));
                }
            }
            _ => {
                if !available.split_whitespace().any(|c| c == v.cc) {
                    return Err(err(
                        format!("variant[{i}].cc"),
                        format!(
                            "the kernel has no congestion control {:?}; available: {}",
                            v.cc,
                            available.trim()
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

static RUN_COUNTER: AtomicU32 = AtomicU32::new(0);

/// Runs every variant, repetition and size of `scn` on a fresh testbed.
pub fn run_scenario(
    scn: &Scenario,
    opts: &RunOptions,
    mut progress: impl FnMut(&Progress<'_>),
) -> Result<TestbedReport> {
    let wall = Instant::now();
    check_scenario(scn, opts)?;
    let lock = prepare_host(scn, opts)?;
    crate::signal::check()?;

    let run_id = format!(
        "{:x}{}",
        std::process::id(),
        RUN_COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    progress(&Progress {
        done: 0,
        total: 0,
        what: "building namespaces",
    });
    let topo = Topology::create(&run_id, scn.paths.len())?;
    crate::signal::check()?;
    let emus = start_emulators(scn, &topo)?;
    let tmp = tempfile::Builder::new()
        .prefix("braid-testbed-")
        .tempdir()
        .map_err(|e| TestbedError::io("creating a temporary directory", e))?;

    let total = scn.variants.len() * scn.workload.repetitions as usize * scn.workload.sizes.len();
    let mut out = Collected {
        results: Vec::with_capacity(total),
        samples: Vec::with_capacity(total),
        faults: Vec::new(),
    };
    let at = Transfer {
        topo: &topo,
        emus: &emus,
        carrier: &opts.faults,
    };
    for v in &scn.variants {
        let what = format!("{}: setting up {}", v.name, v.kind.name());
        progress(&Progress {
            done: out.results.len(),
            total,
            what: &what,
        });
        let stack = Stack::setup(scn, v, &topo, tmp.path(), opts)?;
        run_variant(scn, v, &stack, &at, total, &mut progress, &mut out)?;
        drop(stack);
    }
    progress(&Progress {
        done: out.results.len(),
        total,
        what: "tearing down",
    });
    drop(tmp);
    drop(emus);
    drop(topo);
    drop(lock);
    let wall_s = wall.elapsed().as_secs_f64();
    Ok(TestbedReport {
        report: Report {
            scenario: scn.name.clone(),
            mode: "testbed".into(),
            handshake_s: None,
            results: out.results,
            virtual_s: wall_s,
            wall_s,
        },
        samples: out.samples,
        faults: out.faults,
    })
}

/// What the transfers of a run yield, in order.
struct Collected {
    results: Vec<RunResult>,
    samples: Vec<RunSamples>,
    faults: Vec<FaultResult>,
}

/// Every repetition and size of `v` on its running stack, in report order.
fn run_variant(
    scn: &Scenario,
    v: &VariantSpec,
    stack: &Stack,
    at: &Transfer<'_>,
    total: usize,
    progress: &mut impl FnMut(&Progress<'_>),
    out: &mut Collected,
) -> Result<()> {
    for rep in 0..scn.workload.repetitions {
        for &size in &scn.workload.sizes {
            crate::signal::check()?;
            let what = format!("{} rep {rep} size {size}", v.name);
            progress(&Progress {
                done: out.results.len(),
                total,
                what: &what,
            });
            let seed = scn.seed.wrapping_add(rep as u64);
            let (r, s, f) = one_transfer(scn, v, stack, at, rep, seed, size)?;
            out.results.push(r);
            out.samples.push(s);
            out.faults.extend(f);
        }
    }
    Ok(())
}

/// Gets the host ready for a run: root, the run lock, leftovers of a killed run removed,
/// signal handlers, the tools every kind needs and those the scenario's kinds need.
fn prepare_host(scn: &Scenario, opts: &RunOptions) -> Result<RunLock> {
    crate::lock::require_root()?;
    let lock = RunLock::acquire(&opts.lock_file)?;
    AllowedCc::recover();
    let removed = crate::netns::remove_leftovers();
    if !removed.is_empty() {
        eprintln!(
            "braid testbed: removed namespaces left by an earlier run{}: {}",
            lock.stale_pid
                .map(|p| format!(" (PID {p})"))
                .unwrap_or_default(),
            removed.join(", ")
        );
    }
    if opts.handle_signals {
        crate::signal::install()?;
    }
    cmd::ensure_tool("ip", "iproute2")?;
    cmd::ensure_tool("ethtool", "ethtool")?;
    cmd::ensure_tool("sysctl", "procps")?;
    let kinds: Vec<VariantKind> = scn.variants.iter().map(|v| v.kind).collect();
    if kinds
        .iter()
        .any(|k| matches!(k, VariantKind::Mptcp | VariantKind::SsMptcp))
        && !Path::new("/proc/sys/net/mptcp/enabled").exists()
    {
        return Err(TestbedError::Unsupported {
            what: "MPTCP".into(),
            detail: "/proc/sys/net/mptcp/enabled does not exist".into(),
            hint: "use a kernel with CONFIG_MPTCP, or remove the mptcp and ss-mptcp variants"
                .into(),
        });
    }
    if kinds.contains(&VariantKind::SsMptcp) {
        cmd::ensure_tool("ss-server", "shadowsocks-libev")?;
        cmd::ensure_tool("ss-local", "shadowsocks-libev")?;
        cmd::ensure_tool("mptcpize", "mptcpize")?;
    }
    Ok(lock)
}

/// One emulator per scenario path, each with its own seed.
fn start_emulators(scn: &Scenario, topo: &Topology) -> Result<Vec<LinkEmu>> {
    let mut emus = Vec::with_capacity(scn.paths.len());
    for (i, p) in scn.paths.iter().enumerate() {
        let l = &topo.paths[i];
        emus.push(LinkEmu::start(EmuConfig {
            name: p.name.clone(),
            ns: topo.emu.clone(),
            client_dev: l.emu_client_if.clone(),
            server_dev: l.emu_server_if.clone(),
            paths: vec![p.clone()],
            seed: splitmix64(scn.seed ^ (i as u64) << 32),
        })?);
    }
    Ok(emus)
}
