//! The topology: three network namespaces and the veth links between them.
//!
//! Owns: creating and removing `brd-<runid>-c` (client), `brd-<runid>-e` (emulators) and
//! `brd-<runid>-s` (server), their links, addresses, routes and policy rules, the sysctls of
//! those namespaces, and entering a namespace from a thread ([`enter`], [`in_netns`]).
//! Must not touch: what runs inside (emulators: `l2emu`; traffic: `traffic`; helper
//! processes: `procs`), and anything outside its own namespaces (nothing is created in the
//! root namespace, so removing the three namespaces removes every link).
//!
//! Per scenario path `i` (interface names are per namespace):
//!
//! ```text
//!  client ns            emulator ns                    server ns
//!  p<i> 10.<i+1>.0.1 -- p<i>c  [l2emu thread]  p<i>s -- p<i> 10.<i+1>.1.1
//!  bond0 10.200.0.1  -- bc     [bond striping] bs    -- bond0 10.200.1.1
//! ```
//!
//! The two addresses of a path are in different /24s on one layer-2 segment (the emulator
//! bridges frames, it does not route), so every route is on-link:
//! - client main table: `10.<i+1>.1.0/24 dev p<i> src 10.<i+1>.0.1` (the server's address
//!   of path i is reached over path i);
//! - client table `100+i`: `default dev p<i>`, with `ip rule add from 10.<i+1>.0.1 table
//!   100+i`, so traffic from path i's address to *any* server address uses path i (what MPTCP
//!   subflows and braid's per-path sockets need);
//! - server main table: `10.<i+1>.0.0/24 dev p<i> src 10.0.0.1`: replies follow the
//!   client's address; [`SERVICE_IP`] 10.0.0.1 sits on the server's loopback and is the
//!   source of anything the server sends from an unbound socket, so a UDP server bound to
//!   0.0.0.0 (`braid server`) answers every path from the one address the agent talks to.
//!
//! Address answers across paths (ARP for 10.1.1.1 on path 2) work because Linux answers
//! ARP for any local address on any interface (`arp_ignore = 0`); `rp_filter` is off and
//! IPv6 is disabled in all three namespaces so that only the test traffic crosses the links.
//! Offloads (TSO, GSO, GRO, checksum) are off on every veth so frames are at most MTU-sized
//! and carry real checksums through the emulator.

use crate::cmd::{exec_ns, ip_ns, sysctl_ns};
use crate::error::{Result, TestbedError};
use std::fs::File;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;

/// The server's service address (on its loopback), reachable over every path; unbound and
/// unconnected sockets of the server (braid's UDP socket) answer from it on every path.
pub const SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);

/// Prefix of every namespace the testbed creates.
pub const NS_PREFIX: &str = "brd-";

/// The addresses and interface names of one emulated path.
#[derive(Debug, Clone)]
pub struct PathLink {
    /// Index of the path in the scenario.
    pub index: usize,
    /// Interface in the client namespace.
    pub client_if: String,
    /// The client's address on this path.
    pub client_ip: Ipv4Addr,
    /// Interface in the server namespace.
    pub server_if: String,
    /// The server's address on this path.
    pub server_ip: Ipv4Addr,
    /// The emulator's interface towards the client.
    pub emu_client_if: String,
    /// The emulator's interface towards the server.
    pub emu_server_if: String,
}

/// The namespaces and links of one run. Dropping it removes them.
#[derive(Debug)]
pub struct Topology {
    /// The run id in the names.
    pub run_id: String,
    /// The client namespace.
    pub client: String,
    /// The server namespace.
    pub server: String,
    /// The emulator namespace.
    pub emu: String,
    /// One per scenario path.
    pub paths: Vec<PathLink>,
    /// The single link the `bond` variant stripes over the paths.
    pub bond: PathLink,
    /// Namespaces created so far (teardown removes exactly these).
    created: Vec<String>,
}

impl Topology {
    /// Builds the namespaces and links for `n_paths` paths. On error everything created so
    /// far is removed again.
    pub fn create(run_id: &str, n_paths: usize) -> Result<Topology> {
        let name = |s: &str| format!("{NS_PREFIX}{run_id}-{s}");
        let link =
            |i: usize, cif: String, sif: String, c: Ipv4Addr, s: Ipv4Addr, e: &str| PathLink {
                index: i,
                client_if: cif,
                client_ip: c,
                server_if: sif,
                server_ip: s,
                emu_client_if: format!("{e}c"),
                emu_server_if: format!("{e}s"),
            };
        let paths = (0..n_paths)
            .map(|i| {
                let o = (i + 1) as u8;
                link(
                    i,
                    format!("p{i}"),
                    format!("p{i}"),
                    Ipv4Addr::new(10, o, 0, 1),
                    Ipv4Addr::new(10, o, 1, 1),
                    &format!("p{i}"),
                )
            })
            .collect();
        let bond = link(
            usize::MAX,
            "bond0".into(),
            "bond0".into(),
            Ipv4Addr::new(10, 200, 0, 1),
            Ipv4Addr::new(10, 200, 1, 1),
            "b",
        );
        let mut t = Topology {
            run_id: run_id.to_string(),
            client: name("c"),
            server: name("s"),
            emu: name("e"),
            paths,
            bond,
            created: Vec::new(),
        };
        t.build()?;
        Ok(t)
    }

    fn build(&mut self) -> Result<()> {
        for ns in [self.client.clone(), self.emu.clone(), self.server.clone()] {
            crate::cmd::run("ip", &["netns", "add", &ns])?;
            self.created.push(ns.clone());
            ip_ns(&ns, &["link", "set", "lo", "up"])?;
            for (k, v) in [
                ("net.ipv6.conf.all.disable_ipv6", "1"),
                ("net.ipv6.conf.default.disable_ipv6", "1"),
                ("net.ipv4.conf.all.rp_filter", "0"),
                ("net.ipv4.conf.default.rp_filter", "0"),
            ] {
                sysctl_ns(&ns, k, v)?;
            }
        }
        let links: Vec<PathLink> = self
            .paths
            .iter()
            .cloned()
            .chain(std::iter::once(self.bond.clone()))
            .collect();
        ip_ns(
            &self.server,
            &["addr", "add", &format!("{SERVICE_IP}/32"), "dev", "lo"],
        )?;
        for l in &links {
            self.add_link(l)?;
        }
        for l in &self.paths {
            let table = (100 + l.index).to_string();
            let cip = l.client_ip.to_string();
            ip_ns(
                &self.client,
                &["rule", "add", "from", &cip, "table", &table],
            )?;
            ip_ns(
                &self.client,
                &[
                    "route",
                    "add",
                    "default",
                    "dev",
                    &l.client_if,
                    "table",
                    &table,
                ],
            )?;
        }
        Ok(())
    }

    fn add_link(&self, l: &PathLink) -> Result<()> {
        let (c, e, s) = (&self.client, &self.emu, &self.server);
        ip_ns(
            e,
            &[
                "link",
                "add",
                &l.emu_client_if,
                "type",
                "veth",
                "peer",
                "name",
                &l.client_if,
                "netns",
                c,
            ],
        )?;
        ip_ns(
            e,
            &[
                "link",
                "add",
                &l.emu_server_if,
                "type",
                "veth",
                "peer",
                "name",
                &l.server_if,
                "netns",
                s,
            ],
        )?;
        for (ns, dev) in [
            (c, &l.client_if),
            (e, &l.emu_client_if),
            (e, &l.emu_server_if),
            (s, &l.server_if),
        ] {
            exec_ns(
                ns,
                "ethtool",
                &[
                    "-K", dev, "tso", "off", "gso", "off", "gro", "off", "tx", "off",
                ],
            )?;
            ip_ns(ns, &["link", "set", "dev", dev, "up"])?;
        }
        for dev in [&l.emu_client_if, &l.emu_server_if] {
            ip_ns(e, &["link", "set", "dev", dev, "promisc", "on"])?;
        }
        let (cip, sip) = (l.client_ip, l.server_ip);
        ip_ns(
            c,
            &["addr", "add", &format!("{cip}/24"), "dev", &l.client_if],
        )?;
        ip_ns(
            s,
            &["addr", "add", &format!("{sip}/24"), "dev", &l.server_if],
        )?;
        let snet = Ipv4Addr::from(u32::from(sip) & 0xffff_ff00);
        let cnet = Ipv4Addr::from(u32::from(cip) & 0xffff_ff00);
        ip_ns(
            c,
            &[
                "route",
                "add",
                &format!("{snet}/24"),
                "dev",
                &l.client_if,
                "src",
                &cip.to_string(),
            ],
        )?;
        ip_ns(
            s,
            &[
                "route",
                "add",
                &format!("{cnet}/24"),
                "dev",
                &l.server_if,
                "src",
                &SERVICE_IP.to_string(),
            ],
        )?;
        Ok(())
    }

    /// Removes every namespace this topology created (their links go with them). Returns
    /// what could not be removed.
    pub fn teardown(&mut self) -> Vec<String> {
        let mut failed = Vec::new();
        for ns in std::mem::take(&mut self.created).into_iter().rev() {
            if let Err(e) = crate::cmd::run("ip", &["netns", "del", &ns]) {
                failed.push(format!("namespace {ns}: {e}"));
            }
        }
        failed
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for f in self.teardown() {
            eprintln!("braid testbed: teardown: {f}");
        }
    }
}

/// Namespaces whose names start with [`NS_PREFIX`] (from this or earlier runs).
pub fn list_testbed_namespaces() -> Vec<String> {
    crate::cmd::run("ip", &["netns", "list"])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(NS_PREFIX))
        .map(str::to_string)
        .collect()
}

/// Removes the namespaces a dead run left behind (call only while holding the run lock).
pub fn remove_leftovers() -> Vec<String> {
    let mut removed = Vec::new();
    for ns in list_testbed_namespaces() {
        kill_processes_in(&ns);
        if crate::cmd::run("ip", &["netns", "del", &ns]).is_ok() {
            removed.push(ns);
        }
    }
    removed
}

/// Kills (SIGKILL) every process in namespace `ns` (`ip netns pids`).
pub fn kill_processes_in(ns: &str) {
    let pids = crate::cmd::run("ip", &["netns", "pids", ns]).unwrap_or_default();
    for pid in pids
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
    {
        if pid as u32 != std::process::id() {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

/// Opens the namespace file of `ns` (`/run/netns/NAME`).
pub fn open_ns(ns: &str) -> Result<File> {
    let p = format!("/run/netns/{ns}");
    File::open(&p).map_err(|e| TestbedError::io(format!("opening network namespace {p}"), e))
}

/// Moves the calling thread into network namespace `ns`. Sockets the thread creates
/// afterwards belong to it (and keep belonging to it whichever thread uses them).
pub fn enter(ns: &str) -> Result<()> {
    let f = open_ns(ns)?;
    // SAFETY: the descriptor is valid for the call; setns only changes this thread.
    let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if r != 0 {
        return Err(TestbedError::io(
            format!("entering network namespace {ns} (setns)"),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Runs `f` on a new thread inside namespace `ns` and returns its result.
pub fn in_netns<T, F>(ns: &str, f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let name = ns.to_string();
    let h = std::thread::Builder::new()
        .name(format!("in-{ns}"))
        .spawn(move || enter(&name).map(|()| f()))
        .map_err(|e| TestbedError::io("spawning a thread", e))?;
    h.join()
        .map_err(|_| TestbedError::Other(format!("a thread in namespace {ns} panicked")))?
}
