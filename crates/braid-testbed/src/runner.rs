//! Running a scenario on the testbed: every variant, repetition and size, over real kernels.
//!
//! Owns: checking that a scenario can run here, the order of set-up and teardown (lock,
//! topology, emulators, per-variant stacks, transfers), the per-kind stack set-up (`tcp`,
//! `mptcp`, `bond`, `braid`, `ss-mptcp`) and turning transfers into braid-sim's `Report`
//! (`mode: "testbed"`, with each transfer's latency record from `measure`) plus throughput
//! and probe samples. Must not touch: link behaviour (braid-sim's
//! model through `l2emu`), namespace plumbing (`netns`), the transfer protocol (`traffic`).
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

use crate::cmd;
use crate::error::{Result, TestbedError};
use crate::faults::{AddressFaults, CarrierFaults, Fault, FaultKind, FaultResult};
use crate::l2emu::{EmuConfig, LinkEmu};
use crate::lock::RunLock;
use crate::measure::Responders;
use crate::netns::{PathLink, Topology};
use crate::procs::Helper;
use crate::traffic::{self, Proto, Socks, TrafficServer, TransferSpec};
use braid_core::rng::splitmix64;
use braid_sim::{
    Dir, Direction, PathModel, PathResult, Report, RunResult, Scenario, ScenarioError, VariantKind,
    VariantSpec,
};
use serde::Serialize;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// UDP port of `braid server` in the server namespace.
const BRAID_PORT: u16 = 4433;
/// SOCKS5 port of `braid agent` in the client namespace.
const BRAID_SOCKS: u16 = 1080;
/// Port of `ss-server`.
const SS_PORT: u16 = 8388;
/// SOCKS5 port of `ss-local`.
const SS_SOCKS: u16 = 1081;
/// How long a proxy stack may take to come up.
const READY_WITHIN: Duration = Duration::from_secs(20);

/// Throughput samples of one transfer (the same fields as `braid_results::RunSamples`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSamples {
    /// Variant name.
    pub variant: String,
    /// Repetition, from 0.
    pub repetition: u32,
    /// Transfer size.
    pub size_bytes: u64,
    /// Seconds between samples.
    pub interval_s: f64,
    /// Receiver goodput of each interval, bit/s; sample `i` covers `[i, i+1) × interval_s`
    /// from the start of the connection.
    pub throughput_bps: Vec<f64>,
    /// Round trips (seconds) of the latency probe's packets sent while the transfer ran, in
    /// send order, 50 a second; a packet never answered is infinite (`null` in JSON).
    pub probe_rtt_s: Vec<f64>,
}

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
    let tmp = tempfile::Builder::new()
        .prefix("braid-testbed-")
        .tempdir()
        .map_err(|e| TestbedError::io("creating a temporary directory", e))?;

    let total = scn.variants.len() * scn.workload.repetitions as usize * scn.workload.sizes.len();
    let mut results = Vec::with_capacity(total);
    let mut samples = Vec::with_capacity(total);
    let mut faults = Vec::new();
    let mut transferred_s = 0.0;
    for v in &scn.variants {
        let what = format!("{}: setting up {}", v.name, v.kind.name());
        progress(&Progress {
            done: results.len(),
            total,
            what: &what,
        });
        let stack = Stack::setup(scn, v, &topo, tmp.path(), opts)?;
        for rep in 0..scn.workload.repetitions {
            for &size in &scn.workload.sizes {
                crate::signal::check()?;
                let what = format!("{} rep {rep} size {size}", v.name);
                progress(&Progress {
                    done: results.len(),
                    total,
                    what: &what,
                });
                let seed = scn.seed.wrapping_add(rep as u64);
                let at = Transfer {
                    topo: &topo,
                    emus: &emus,
                    carrier: &opts.faults,
                };
                let (r, s, f) = one_transfer(scn, v, &stack, &at, rep, seed, size)?;
                transferred_s += r.completion_s;
                results.push(r);
                samples.push(s);
                faults.extend(f);
            }
        }
        drop(stack);
    }
    progress(&Progress {
        done: results.len(),
        total,
        what: "tearing down",
    });
    drop(tmp);
    drop(emus);
    drop(topo);
    drop(lock);
    let _ = transferred_s;
    let wall_s = wall.elapsed().as_secs_f64();
    Ok(TestbedReport {
        report: Report {
            scenario: scn.name.clone(),
            mode: "testbed".into(),
            handshake_s: None,
            results,
            virtual_s: wall_s,
            wall_s,
        },
        samples,
        faults,
    })
}

/// One variant's running stack. Field order is drop order: helpers first.
struct Stack {
    helpers: Vec<Helper>,
    server: TrafficServer,
    bond: Option<LinkEmu>,
    mptcp_ns: Option<String>,
    template: TransferSpec,
    responders: Responders,
    allowed: Option<AllowedCc>,
}

/// The host's `net.ipv4.tcp_allowed_congestion_control`, temporarily extended so that a
/// namespace may make a controller its default (the kernel refuses others outside the
/// initial namespace); restored when dropped. The original value is also saved in
/// [`ALLOWED_CC_SAVED`] so that the next run restores it if this one is killed with SIGKILL.
struct AllowedCc {
    old: Option<String>,
}

const ALLOWED_CC: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";
/// Where the original allowed list is kept while a run has extended it.
pub const ALLOWED_CC_SAVED: &str = "/run/braid-testbed.allowed-cc";

impl AllowedCc {
    fn ensure(cc: &str) -> Result<AllowedCc> {
        let old = std::fs::read_to_string(ALLOWED_CC)
            .map_err(|e| TestbedError::io(format!("reading {ALLOWED_CC}"), e))?;
        let old = old.trim().to_string();
        if old.split_whitespace().any(|c| c == cc) {
            return Ok(AllowedCc { old: None });
        }
        std::fs::write(ALLOWED_CC_SAVED, &old).map_err(|e| {
            TestbedError::io(format!("saving {ALLOWED_CC} to {ALLOWED_CC_SAVED}"), e)
        })?;
        std::fs::write(ALLOWED_CC, format!("{old} {cc}"))
            .map_err(|e| TestbedError::io(format!("allowing {cc:?} in {ALLOWED_CC}"), e))?;
        Ok(AllowedCc { old: Some(old) })
    }

    /// Restores the list a killed run left extended (call while holding the run lock).
    fn recover() {
        if let Ok(old) = std::fs::read_to_string(ALLOWED_CC_SAVED) {
            if std::fs::write(ALLOWED_CC, old.trim()).is_ok() {
                eprintln!(
                    "braid testbed: restored {ALLOWED_CC} to {:?} (left by an earlier run)",
                    old.trim()
                );
                let _ = std::fs::remove_file(ALLOWED_CC_SAVED);
            }
        }
    }
}

impl Drop for AllowedCc {
    fn drop(&mut self) {
        if let Some(old) = self.old.take() {
            match std::fs::write(ALLOWED_CC, &old) {
                Ok(()) => {
                    let _ = std::fs::remove_file(ALLOWED_CC_SAVED);
                }
                Err(e) => eprintln!(
                    "braid testbed: could not restore {ALLOWED_CC} to {old:?}: {e}; \
                     the next run retries from {ALLOWED_CC_SAVED}"
                ),
            }
        }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        for h in &mut self.helpers {
            h.stop();
        }
        if let Some(ns) = self.mptcp_ns.take() {
            let _ = cmd::ip_ns(&ns, &["mptcp", "endpoint", "flush"]);
        }
    }
}

impl Stack {
    fn setup(
        scn: &Scenario,
        v: &VariantSpec,
        topo: &Topology,
        tmp: &Path,
        opts: &RunOptions,
    ) -> Result<Stack> {
        let first: &PathLink = &topo.paths[v.paths[0]];
        let any = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0);
        let allowed = if v.kind == VariantKind::SsMptcp {
            // Shadowsocks' sockets are not ours to configure: the namespaces' default must
            // be the variant's controller (the other kernel kinds set it per socket).
            let guard = AllowedCc::ensure(&v.cc)?;
            for ns in [&topo.client, &topo.server] {
                cmd::sysctl_ns(ns, "net.ipv4.tcp_congestion_control", &v.cc)?;
            }
            Some(guard)
        } else {
            None
        };
        let mut template = TransferSpec {
            ns: topo.client.clone(),
            target: SocketAddrV4::new(first.server_ip, 0),
            bind: Some(first.client_ip),
            proto: Proto::Tcp,
            cc: Some(v.cc.clone()),
            socks: None,
            direction: scn.workload.direction,
            size: 0,
            seed: 0,
            timeout: Duration::from_nanos(scn.time_limit),
        };
        // The probe's and RPM's responders; RPM over MPTCP for the kernel MPTCP variant.
        let proto = match v.kind {
            VariantKind::Mptcp => Proto::Mptcp,
            _ => Proto::Tcp,
        };
        let responders = Responders::start(&topo.server, proto)?;
        let stack = |server: TrafficServer, template: &TransferSpec| Stack {
            helpers: Vec::new(),
            server,
            bond: None,
            mptcp_ns: None,
            template: template.clone(),
            responders,
            allowed: None,
        };
        match v.kind {
            VariantKind::Tcp => {
                let server = TrafficServer::start(&topo.server, any, Proto::Tcp)?;
                let mut s = stack(server, &template);
                s.template.target.set_port(s.server.addr.port());
                Ok(s)
            }
            VariantKind::Bond => {
                let server = TrafficServer::start(&topo.server, any, Proto::Tcp)?;
                let bond = LinkEmu::start(EmuConfig {
                    name: format!("bond-{}", v.name),
                    ns: topo.emu.clone(),
                    client_dev: topo.bond.emu_client_if.clone(),
                    server_dev: topo.bond.emu_server_if.clone(),
                    paths: v.paths.iter().map(|&i| scn.paths[i].clone()).collect(),
                    seed: scn.seed,
                })?;
                template.target = SocketAddrV4::new(topo.bond.server_ip, 0);
                template.bind = Some(topo.bond.client_ip);
                let mut s = stack(server, &template);
                s.template.target.set_port(s.server.addr.port());
                s.bond = Some(bond);
                Ok(s)
            }
            VariantKind::Mptcp => {
                configure_mptcp(topo, v)?;
                template.proto = Proto::Mptcp;
                let server = TrafficServer::start(&topo.server, any, Proto::Mptcp)?;
                let mut s = stack(server, &template);
                s.mptcp_ns = Some(topo.client.clone());
                s.template.target.set_port(s.server.addr.port());
                Ok(s)
            }
            VariantKind::SsMptcp => {
                configure_mptcp(topo, v)?;
                let server = TrafficServer::start(&topo.server, any, Proto::Tcp)?;
                let port = server.addr.port();
                let mut s = stack(server, &template);
                s.mptcp_ns = Some(topo.client.clone());
                s.allowed = allowed;
                let pass = format!("{:016x}", splitmix64(std::process::id() as u64 ^ scn.seed));
                let method = "chacha20-ietf-poly1305";
                let mptcpize = cmd::which("mptcpize").unwrap_or_else(|| "mptcpize".into());
                let ss = |bin: &str| {
                    cmd::which(bin)
                        .unwrap_or_else(|| bin.into())
                        .display()
                        .to_string()
                };
                let srv_args: Vec<String> = vec![
                    "run".into(),
                    ss("ss-server"),
                    "-s".into(),
                    "0.0.0.0".into(),
                    "-p".into(),
                    SS_PORT.to_string(),
                    "-k".into(),
                    pass.clone(),
                    "-m".into(),
                    method.into(),
                    "-u".into(),
                ];
                s.helpers.push(Helper::spawn(
                    "ss-server",
                    &topo.server,
                    &mptcpize,
                    &srv_args,
                    &tmp.join(format!("{}-ss-server.log", v.name)),
                )?);
                let cli_args: Vec<String> = vec![
                    "run".into(),
                    ss("ss-local"),
                    "-s".into(),
                    first.server_ip.to_string(),
                    "-p".into(),
                    SS_PORT.to_string(),
                    "-b".into(),
                    "127.0.0.1".into(),
                    "-l".into(),
                    SS_SOCKS.to_string(),
                    "-k".into(),
                    pass,
                    "-m".into(),
                    method.into(),
                    "-u".into(),
                ];
                s.helpers.push(Helper::spawn(
                    "ss-local",
                    &topo.client,
                    &mptcpize,
                    &cli_args,
                    &tmp.join(format!("{}-ss-local.log", v.name)),
                )?);
                s.template.socks = Some(Socks {
                    proxy: SocketAddrV4::new(Ipv4Addr::LOCALHOST, SS_SOCKS),
                    target: SocketAddrV4::new(Ipv4Addr::LOCALHOST, port),
                });
                s.template.cc = None;
                s.wait_ready("shadowsocks (ss-local -> ss-server over MPTCP)")?;
                Ok(s)
            }
            VariantKind::Braid => {
                let bin =
                    opts.braid_bin.clone().or_else(find_braid).ok_or_else(|| {
                        TestbedError::Other("the braid binary was not found".into())
                    })?;
                let server = TrafficServer::start(&topo.server, any, Proto::Tcp)?;
                let port = server.addr.port();
                let mut s = stack(server, &template);
                let dir = unique_dir(&tmp.join("keys"))?;
                let binstr = bin.display().to_string();
                for who in ["server", "agent"] {
                    let prefix = dir.join(who).display().to_string();
                    cmd::run(&binstr, &["keygen", "--out", &prefix])?;
                }
                let p = |f: &str| dir.join(f).display().to_string();
                let srv_args: Vec<String> = [
                    "server",
                    "--listen",
                    &format!("0.0.0.0:{BRAID_PORT}"),
                    "--key",
                    &p("server.key"),
                    "--authorized",
                    &p("agent.pub"),
                    "--log-level",
                    "info",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect();
                s.helpers.push(Helper::spawn(
                    "braid server",
                    &topo.server,
                    &bin,
                    &srv_args,
                    &tmp.join(format!("{}-braid-server.log", v.name)),
                )?);
                let mut agent_args: Vec<String> = [
                    "agent",
                    "--server",
                    &format!("{}:{BRAID_PORT}", crate::netns::SERVICE_IP),
                    "--server-pub",
                    &p("server.pub"),
                    "--key",
                    &p("agent.key"),
                    "--socks",
                    &format!("127.0.0.1:{BRAID_SOCKS}"),
                    "--scheduler",
                    &v.scheduler,
                    "--cc",
                    &v.cc,
                    "--log-level",
                    "info",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect();
                if v.scheduler == "operetta" {
                    agent_args.push("--alpha".into());
                    agent_args.push(v.alpha.to_string());
                }
                for &i in &v.paths {
                    let name: String = scn.paths[i]
                        .name
                        .chars()
                        .map(|c| {
                            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                                c
                            } else {
                                '_'
                            }
                        })
                        .collect();
                    // The variant's standby paths and the energy model's power, as the
                    // agent's path options (what `braid sim` gives its client too). A path
                    // whose address changes is given by its interface, as a user whose
                    // address changes would (an address would vanish with the change).
                    let renumbered = opts
                        .faults
                        .iter()
                        .any(|f| f.kind == FaultKind::Address && f.path == scn.paths[i].name);
                    let mut spec = if renumbered {
                        format!("{name}={}", topo.paths[i].client_if)
                    } else {
                        format!("{name}={}", topo.paths[i].client_ip)
                    };
                    if v.standby.contains(&i) {
                        spec.push_str(",backup");
                    }
                    let e = &scn.paths[i].energy;
                    if e.active_w > e.idle_w {
                        spec.push_str(&format!(",power={}", e.active_w - e.idle_w));
                    }
                    agent_args.push("--path".into());
                    agent_args.push(spec);
                }
                s.helpers.push(Helper::spawn(
                    "braid agent",
                    &topo.client,
                    &bin,
                    &agent_args,
                    &tmp.join(format!("{}-braid-agent.log", v.name)),
                )?);
                s.template.socks = Some(Socks {
                    proxy: SocketAddrV4::new(Ipv4Addr::LOCALHOST, BRAID_SOCKS),
                    target: SocketAddrV4::new(Ipv4Addr::LOCALHOST, port),
                });
                s.template.cc = None;
                s.wait_ready("braid (agent -> server)")?;
                // Let the session validate its other paths (a few RTTs).
                let max_rtt: u64 = v
                    .paths
                    .iter()
                    .map(|&i| scn.paths[i].up.delay + scn.paths[i].down.delay)
                    .max()
                    .unwrap_or(0);
                sleep_checked(Duration::from_millis(500) + Duration::from_nanos(max_rtt * 4))?;
                Ok(s)
            }
        }
    }

    fn wait_ready(&mut self, what: &str) -> Result<()> {
        let secs = READY_WITHIN.as_secs();
        let r = traffic::wait_ready(&self.template, READY_WITHIN)?;
        if let Err(why) = r {
            let mut tails = Vec::new();
            let mut log = PathBuf::new();
            for h in &mut self.helpers {
                let ex = h
                    .exited()
                    .map(|s| format!("exited ({s}); "))
                    .unwrap_or_default();
                tails.push(format!("[{}: {ex}{}]", h.name, h.log_tail()));
                log = h.log.clone();
            }
            return Err(TestbedError::Helper {
                what: format!("{what} (last probe: {why})"),
                secs,
                log,
                tail: tails.join(" "),
            });
        }
        Ok(())
    }
}

fn unique_dir(base: &Path) -> Result<PathBuf> {
    for k in 0..1000 {
        let d = base.with_extension(k.to_string());
        if std::fs::create_dir(&d).is_ok() {
            return Ok(d);
        }
    }
    Err(TestbedError::Other(format!(
        "cannot create a key directory next to {}",
        base.display()
    )))
}

fn sleep_checked(d: Duration) -> Result<()> {
    let end = Instant::now() + d;
    while Instant::now() < end {
        crate::signal::check()?;
        std::thread::sleep(Duration::from_millis(50).min(end - Instant::now()));
    }
    Ok(())
}

/// MPTCP in both namespaces: enabled, limits, one subflow endpoint per extra client path.
fn configure_mptcp(topo: &Topology, v: &VariantSpec) -> Result<()> {
    for ns in [&topo.client, &topo.server] {
        cmd::sysctl_ns(ns, "net.mptcp.enabled", "1")?;
        cmd::ip_ns(
            ns,
            &[
                "mptcp",
                "limits",
                "set",
                "subflow",
                "8",
                "add_addr_accepted",
                "8",
            ],
        )?;
        cmd::ip_ns(ns, &["mptcp", "endpoint", "flush"])?;
    }
    for &i in &v.paths[1..] {
        let l = &topo.paths[i];
        cmd::ip_ns(
            &topo.client,
            &[
                "mptcp",
                "endpoint",
                "add",
                &l.client_ip.to_string(),
                "dev",
                &l.client_if,
                "subflow",
            ],
        )?;
    }
    Ok(())
}

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
struct Transfer<'a> {
    topo: &'a Topology,
    emus: &'a [LinkEmu],
    carrier: &'a [Fault],
}

fn one_transfer(
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
    let mut r = RunResult::new(&v.name, rep, seed, size);
    r.verified = out.verified;
    r.completion_s = out.completion_s;
    r.goodput_bps = if out.verified { out.goodput_bps } else { 0.0 };
    r.error = out.error.clone();
    r.latency = m.latency;
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
