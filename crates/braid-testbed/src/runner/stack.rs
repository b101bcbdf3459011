//! One variant's running stack: the traffic server, the probe's and RPM's responders, and
//! per kind the bond emulator, the MPTCP endpoints, shadowsocks or braid's server and agent,
//! torn down when dropped.
//!
//! Owns: the per-kind set-up (`tcp`, `mptcp`, `bond`, `braid`, `ss-mptcp`), the helpers'
//! command lines and ports, and waiting until a proxy stack answers. Must not touch: the
//! topology and the path emulators (the run in `mod.rs` owns them), or the transfers
//! (`transfer.rs`).

use super::allowed_cc::AllowedCc;
use super::{find_braid, RunOptions};
use crate::cmd;
use crate::error::{Result, TestbedError};
use crate::faults::FaultKind;
use crate::l2emu::{EmuConfig, LinkEmu};
use crate::measure::Responders;
use crate::netns::{PathLink, Topology};
use crate::procs::Helper;
use crate::traffic::{self, Proto, Socks, TrafficServer, TransferSpec};
use braid_core::rng::splitmix64;
use braid_sim::{Scenario, VariantKind, VariantSpec};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
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

/// One variant's running stack. Field order is drop order: helpers first.
pub(super) struct Stack {
    helpers: Vec<Helper>,
    server: TrafficServer,
    pub(super) bond: Option<LinkEmu>,
    mptcp_ns: Option<String>,
    pub(super) template: TransferSpec,
    pub(super) responders: Responders,
    allowed: Option<AllowedCc>,
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
    pub(super) fn setup(
        scn: &Scenario,
        v: &VariantSpec,
        topo: &Topology,
        tmp: &Path,
        opts: &RunOptions,
    ) -> Result<Stack> {
        let any = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0);
        let allowed = allow_default_cc(v, topo)?;
        let mut template = template(scn, v, topo);
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
                let mut s = stack(server, &template);
                s.mptcp_ns = Some(topo.client.clone());
                s.allowed = allowed;
                s.start_shadowsocks(scn, v, topo, tmp)?;
                Ok(s)
            }
            VariantKind::Braid => {
                let bin =
                    opts.braid_bin.clone().or_else(find_braid).ok_or_else(|| {
                        TestbedError::Other("the braid binary was not found".into())
                    })?;
                let server = TrafficServer::start(&topo.server, any, Proto::Tcp)?;
                let mut s = stack(server, &template);
                s.start_braid(scn, v, topo, tmp, opts, &bin)?;
                Ok(s)
            }
        }
    }

    /// `ss-server` and `ss-local` under `mptcpize`; transfers go through ss-local's SOCKS5.
    fn start_shadowsocks(
        &mut self,
        scn: &Scenario,
        v: &VariantSpec,
        topo: &Topology,
        tmp: &Path,
    ) -> Result<()> {
        let first: &PathLink = &topo.paths[v.paths[0]];
        let port = self.server.addr.port();
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
        self.helpers.push(Helper::spawn(
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
        self.helpers.push(Helper::spawn(
            "ss-local",
            &topo.client,
            &mptcpize,
            &cli_args,
            &tmp.join(format!("{}-ss-local.log", v.name)),
        )?);
        self.template.socks = Some(Socks {
            proxy: SocketAddrV4::new(Ipv4Addr::LOCALHOST, SS_SOCKS),
            target: SocketAddrV4::new(Ipv4Addr::LOCALHOST, port),
        });
        self.template.cc = None;
        self.wait_ready("shadowsocks (ss-local -> ss-server over MPTCP)")
    }

    /// Fresh keys, `braid server` and `braid agent`; transfers go through the agent's
    /// SOCKS5, once the session has had time to validate its other paths.
    fn start_braid(
        &mut self,
        scn: &Scenario,
        v: &VariantSpec,
        topo: &Topology,
        tmp: &Path,
        opts: &RunOptions,
        bin: &Path,
    ) -> Result<()> {
        let port = self.server.addr.port();
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
            // The transfers' server listens on the server's loopback, which its egress
            // policy refuses by default.
            "--egress-allow",
            "127.0.0.0/8",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        self.helpers.push(Helper::spawn(
            "braid server",
            &topo.server,
            bin,
            &srv_args,
            &tmp.join(format!("{}-braid-server.log", v.name)),
        )?);
        let agent_args = braid_agent_args(scn, v, topo, opts, &dir);
        self.helpers.push(Helper::spawn(
            "braid agent",
            &topo.client,
            bin,
            &agent_args,
            &tmp.join(format!("{}-braid-agent.log", v.name)),
        )?);
        self.template.socks = Some(Socks {
            proxy: SocketAddrV4::new(Ipv4Addr::LOCALHOST, BRAID_SOCKS),
            target: SocketAddrV4::new(Ipv4Addr::LOCALHOST, port),
        });
        self.template.cc = None;
        self.wait_ready("braid (agent -> server)")?;
        // Let the session validate its other paths (a few RTTs).
        let max_rtt: u64 = v
            .paths
            .iter()
            .map(|&i| scn.paths[i].up.delay + scn.paths[i].down.delay)
            .max()
            .unwrap_or(0);
        sleep_checked(Duration::from_millis(500) + Duration::from_nanos(max_rtt * 4))
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

/// For `ss-mptcp`, the variant's controller as both namespaces' default (allowed on the
/// host first); `None` for the other kinds.
fn allow_default_cc(v: &VariantSpec, topo: &Topology) -> Result<Option<AllowedCc>> {
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
    Ok(allowed)
}

/// The transfer every run of `v` starts from: over the variant's first path, with its
/// controller, to a port the stack fills in.
fn template(scn: &Scenario, v: &VariantSpec, topo: &Topology) -> TransferSpec {
    let first: &PathLink = &topo.paths[v.paths[0]];
    TransferSpec {
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
    }
}

/// `braid agent`'s command line: the server, the keys in `dir`, SOCKS5, the variant's
/// scheduler and controller, and one `--path` per variant path.
fn braid_agent_args(
    scn: &Scenario,
    v: &VariantSpec,
    topo: &Topology,
    opts: &RunOptions,
    dir: &Path,
) -> Vec<String> {
    let p = |f: &str| dir.join(f).display().to_string();
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
        // The variant's standby paths and the energy model's power, as the agent's path
        // options (what `braid sim` gives its client too). A path whose address changes is
        // given by its interface, as a user whose address changes would (an address would
        // vanish with the change).
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
    agent_args
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
