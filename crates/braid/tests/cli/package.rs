//! Issue 24, item 1: the Debian package from scripts/package, installed, run, upgraded and
//! purged for real on two throwaway machines (pkgrig: overlayfs roots, root only), following
//! docs/deployment.md's quick start word for word: a VPS whose public address is on its
//! loopback device (not its primary one) and a router with two links, in network
//! namespaces. The units' `ExecStart=` lines run as their `User=` with their capabilities
//! (pkgrig::Service stands in for systemd, which does not run here: `systemctl enable
//! --now` enables the unit and fails to start it, so the test starts it as systemd would).

use crate::pkgrig::{package, unavailable, Machines, Service, Unit};
use braid_testbed::cmd::{exec_ns, ip_ns, run};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// The VPS's public address (on its loopback device) and the "internet" web server's.
const PUBLIC: &str = "10.201.0.1";
const WEB: &str = "10.201.0.2:8000";
const UNITS: [&str; 3] = [
    "braid-server.service",
    "braid-agent.service",
    "braid-agent-tun.service",
];

/// The two network namespaces (vps, router), joined by two links; removed on drop.
struct Nets {
    vps: String,
    router: String,
}

impl Drop for Nets {
    fn drop(&mut self) {
        for ns in [&self.vps, &self.router] {
            braid_testbed::netns::kill_processes_in(ns);
            let _ = run("ip", &["netns", "del", ns]);
        }
    }
}

fn sh(r: braid_testbed::Result<String>) -> String {
    r.unwrap_or_else(|e| panic!("{e}"))
}

impl Nets {
    fn new() -> Nets {
        let id = std::process::id() % 100_000;
        let n = Nets {
            vps: format!("pkg{id}v"),
            router: format!("pkg{id}r"),
        };
        for ns in [&n.vps, &n.router] {
            sh(run("ip", &["netns", "add", ns]));
            sh(ip_ns(ns, &["link", "set", "lo", "up"]));
        }
        for a in [PUBLIC, WEB.split(':').next().unwrap()] {
            sh(ip_ns(
                &n.vps,
                &["addr", "add", &format!("{a}/32"), "dev", "lo"],
            ));
        }
        for i in 1..=2 {
            let (r, v) = (format!("pkr{i}"), format!("pkv{i}"));
            sh(run(
                "ip",
                &[
                    "link", "add", &r, "netns", &n.router, "type", "veth", "peer", "name", &v,
                    "netns", &n.vps,
                ],
            ));
            sh(ip_ns(
                &n.router,
                &["addr", "add", &format!("10.201.{i}.1/24"), "dev", &r],
            ));
            sh(ip_ns(
                &n.vps,
                &["addr", "add", &format!("10.201.{i}.2/24"), "dev", &v],
            ));
            sh(ip_ns(&n.router, &["link", "set", &r, "up"]));
            sh(ip_ns(&n.vps, &["link", "set", &v, "up"]));
            // Two default routes (two uplinks): what `path = ["auto"]` picks up.
            let gw = format!("10.201.{i}.2");
            let metric = i.to_string();
            sh(ip_ns(
                &n.router,
                &[
                    "route", "add", "default", "via", &gw, "dev", &r, "metric", &metric,
                ],
            ));
        }
        n
    }
}

/// An HTTP server in the VPS namespace serving `data` at `/file` (until the test ends).
fn web_server(ns: &str, data: std::sync::Arc<Vec<u8>>) {
    let listener = braid_testbed::netns::in_netns(ns, || std::net::TcpListener::bind(WEB))
        .unwrap()
        .unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut c) = conn else { continue };
            let data = data.clone();
            std::thread::spawn(move || {
                let mut req = [0u8; 1024];
                let _ = c.read(&mut req);
                let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", data.len());
                let _ = c.write_all(head.as_bytes());
                let _ = c.write_all(&data);
            });
        }
    });
}

fn sha256(path: &Path) -> String {
    let out = sh(run("sha256sum", &[&path.display().to_string()]));
    out.split_whitespace().next().unwrap().to_string()
}

/// `braid status --json` on machine `m` (its default control socket), once it satisfies
/// `f`; panics with the service's log after `limit`.
fn status_until(ms: &Machines, m: &str, svc: &Service, f: impl Fn(&Value) -> bool) -> Value {
    let t = Instant::now();
    loop {
        let o = ms
            .cmd(m, None, &["braid", "status", "--json"])
            .output()
            .unwrap();
        if o.status.success() {
            let v: Value = serde_json::from_slice(&o.stdout).unwrap();
            if f(&v) {
                return v;
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{m}: status not reached in 10 s; braid status: {}{}\nservice log:\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
            svc.logged()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The agent's session is up with both links active.
fn both_paths_up(v: &Value) -> bool {
    !v["session"].is_null()
        && v["paths"]
            .as_array()
            .is_some_and(|p| p.iter().filter(|p| p["state"] == "active").count() == 2)
}

/// The default `path = ["auto"]` on a router with two uplinks (issue 38 item 6): the two
/// slots that took an interface show it and the address they send from, in the JSON and the
/// table; the six others are one line, not `down` rows.
fn check_auto_slots(ms: &Machines, v: &Value) {
    let paths = v["paths"].as_array().unwrap();
    for p in paths.iter().filter(|p| p["state"] == "active") {
        assert_eq!(p["auto"], true, "{p}");
        assert!(p["interface"].is_string(), "{p}");
        let local = p["local_address"].as_str().unwrap_or("");
        assert!(!local.starts_with("0.0.0.0"), "{p}");
    }
    let text = ms.sh("router", "braid status");
    assert!(text.contains("unused auto slots: auto3-auto8"), "{text}");
    assert!(!text.lines().any(|l| l.starts_with("auto3")), "{text}");
}

/// `systemctl enable --now UNIT` as the quick start says: the enabling must work; the start
/// fails only because no systemd runs here.
fn enable_now(ms: &Machines, m: &str, unit: &str) {
    let o = ms.try_sh(m, &format!("systemctl enable --now {unit}"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success() || err.contains("not been booted with systemd"),
        "{m}: systemctl enable --now {unit}: {err}"
    );
    let link = format!("/etc/systemd/system/multi-user.target.wants/{unit}.service");
    ms.sh(m, &format!("test -L {link}"));
}

fn unit(ms: &Machines, m: &str, name: &str) -> Unit {
    let text = ms
        .read(m, &format!("/usr/lib/systemd/system/{name}"))
        .unwrap_or_else(|| panic!("{m}: {name} is not installed"));
    Unit::parse(name, &text)
}

/// The .deb's files, conffiles and fields.
fn check_contents(deb: &Path) {
    let deb = deb.display().to_string();
    let files = sh(run("dpkg-deb", &["-c", &deb]));
    let mut want: Vec<String> = [
        "usr/bin/braid",
        "etc/braid/server.toml",
        "etc/braid/agent.toml",
    ]
    .iter()
    .map(|f| f.to_string())
    .collect();
    want.extend(UNITS.iter().map(|u| format!("usr/lib/systemd/system/{u}")));
    for f in want {
        assert!(
            files.lines().any(|l| l.ends_with(&format!(" ./{f}"))),
            "{f} missing:\n{files}"
        );
    }
    assert!(
        !files.contains(".key"),
        "no key may ship in the package:\n{files}"
    );
    assert_eq!(
        sh(run("dpkg-deb", &["-f", &deb, "Package"])).trim(),
        "braid"
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    sh(run("dpkg-deb", &["-e", &deb, &d]));
    let conffiles = std::fs::read_to_string(dir.path().join("conffiles")).unwrap();
    let mut c: Vec<&str> = conffiles.lines().collect();
    c.sort();
    assert_eq!(
        c,
        [
            "/etc/braid/agent.toml",
            "/etc/braid/agents.txt",
            "/etc/braid/server.toml"
        ]
    );
    let depends = sh(run("dpkg-deb", &["-f", &deb, "Depends"]));
    assert!(depends.contains("adduser"), "{depends}");
    check_stripped(&deb, dir.path());
}

/// Issue 38, item 3: the install printed both public keys on every machine, while the
/// quick start asks for one per machine: it prints none, and says which file to `cat`.
fn check_install_output(ms: &Machines, m: &str, said: &str) {
    for f in ["server.pub", "agent.pub"] {
        let key = ms.sh(m, &format!("cut -d' ' -f1 /etc/braid/{f}"));
        let key = key.trim();
        assert!(
            !key.is_empty() && !said.contains(key),
            "{m}: the install printed {f}:\n{said}"
        );
    }
    for tell in ["cat /etc/braid/server.pub", "cat /etc/braid/agent.pub"] {
        assert!(
            said.contains(tell),
            "{m}: the install does not say `{tell}`:\n{said}"
        );
    }
}

/// Issue 38, item 2: the packaged binary carries no debug sections and the package
/// installs in under 25 MB (it was 99 MB unstripped).
fn check_stripped(deb: &str, dir: &Path) {
    let kb: u64 = sh(run("dpkg-deb", &["-f", deb, "Installed-Size"]))
        .trim()
        .parse()
        .unwrap();
    assert!(kb < 25 * 1024, "Installed-Size {kb} KB");
    let root = dir.join("root");
    sh(run("dpkg-deb", &["-x", deb, &root.display().to_string()]));
    let bin = root.join("usr/bin/braid").display().to_string();
    let sections = sh(run("readelf", &["-S", "-W", &bin]));
    // (`.debug_gdb_scripts`, loaded with the program, is no debug information.)
    for s in [".debug_info", ".debug_line", ".symtab"] {
        assert!(!sections.contains(s), "{s} in the binary:\n{sections}");
    }
    let len = std::fs::metadata(&bin).unwrap().len();
    assert!(len < 25 << 20, "the binary is {len} bytes");
    eprintln!(
        "package: Installed-Size {kb} KB, the binary {} KB",
        len >> 10
    );
}

/// The TUN unit has what TUN and router mode need: `--tun`, CAP_NET_ADMIN (device, routes,
/// rules, SO_MARK) and CAP_NET_RAW (paths bound to interfaces), /dev/net/tun, netlink.
fn check_units(ms: &Machines, m: &str) {
    let (server, agent, tun) = (
        unit(ms, m, UNITS[0]),
        unit(ms, m, UNITS[1]),
        unit(ms, m, UNITS[2]),
    );
    for u in [&server, &agent, &tun] {
        assert_eq!(u.exec_start()[0], "/usr/bin/braid", "{}", u.name);
        assert_eq!(u.get("User"), "braid", "{}", u.name);
        assert!(u.get("DynamicUser") != "yes", "{}", u.name);
    }
    assert_ne!(
        server.get("RuntimeDirectory"),
        agent.get("RuntimeDirectory")
    );
    assert_eq!(agent.get("RuntimeDirectory"), tun.get("RuntimeDirectory"));
    let exec = tun.exec_start();
    assert!(
        exec.windows(2)
            .any(|w| w[0] == "--tun" && !w[1].starts_with('-')),
        "{exec:?}"
    );
    for key in ["AmbientCapabilities", "CapabilityBoundingSet"] {
        let caps = tun.caps(key);
        assert!(
            caps.contains(&"net_admin".into()) && caps.contains(&"net_raw".into()),
            "{key}: {caps:?}"
        );
    }
    assert_ne!(tun.get("PrivateDevices"), "yes");
    assert!(
        tun.get("DeviceAllow").starts_with("/dev/net/tun rw"),
        "{}",
        tun.get("DeviceAllow")
    );
    assert!(tun.get("RestrictAddressFamilies").contains("AF_NETLINK"));
    let paths: Vec<String> = UNITS
        .iter()
        .map(|u| format!("/usr/lib/systemd/system/{u}"))
        .collect();
    ms.sh(m, &format!("systemd-analyze verify {}", paths.join(" ")));
}

/// The process runs as user braid with exactly the unit's ambient capabilities.
fn check_privileges(ms: &Machines, m: &str, svc: &Service, caps: u64) {
    let uid = ms.sh(m, "id -u braid");
    let uids = svc.proc_status("Uid");
    assert_eq!(
        uids.split_whitespace().next(),
        Some(uid.trim()),
        "Uid: {uids}"
    );
    let eff = u64::from_str_radix(&svc.proc_status("CapEff"), 16).unwrap();
    assert_eq!(eff, caps, "CapEff {eff:x}, want {caps:x}");
}

/// `f` on both machines at once.
fn both(f: impl Fn(&'static str) + Sync) {
    std::thread::scope(|sc| {
        let v = sc.spawn(|| f("vps"));
        f("router");
        v.join().unwrap();
    });
}

const CAP_NET_ADMIN: u64 = 1 << 12;
const CAP_NET_RAW: u64 = 1 << 13;
const CAP_NET_BIND_SERVICE: u64 = 1 << 10;

/// The two machines, their networks, and the file the web server serves.
struct Rig {
    // Dropped in this order: the machines (and what runs in them), then the namespaces.
    ms: Machines,
    nets: Nets,
    /// The host folder shared with the machines as /mnt: packages, logs, downloads.
    dir: std::path::PathBuf,
    /// SHA-256 of the served file.
    want: String,
    t0: Instant,
}

impl Rig {
    fn say(&self, what: &str) {
        eprintln!("[{:.1} s] {what}", self.t0.elapsed().as_secs_f64());
    }

    /// Start unit `UNITS[i]` on machine `m` as systemd would.
    fn start(&self, m: &str, i: usize, log: &str) -> Service {
        let net = if m == "vps" {
            &self.nets.vps
        } else {
            &self.nets.router
        };
        Service::start(
            &self.ms,
            m,
            net,
            &unit(&self.ms, m, UNITS[i]),
            self.dir.join(log),
        )
    }

    /// GET the file in the router's namespace with curl `args`; its SHA-256 must match.
    fn download(&self, name: &str, args: &[&str]) {
        let dl = self.dir.join(name).display().to_string();
        let url = format!("http://{WEB}/file");
        let mut all = vec!["-sS", "--max-time", "20", "-o", &dl];
        all.extend_from_slice(args);
        all.push(&url);
        sh(exec_ns(&self.nets.router, "curl", &all));
        assert_eq!(sha256(Path::new(&dl)), self.want, "{name}: SHA-256");
    }

    /// docs/deployment.md, "Quick start", word for word (the two machines install at the
    /// same time, as they would); returns the running server and TUN agent.
    fn quick_start(&self, deb: &str) -> (Service, Service) {
        let ms = &self.ms;
        let install = format!("cd /mnt && apt install -y ./{deb}");
        both(|m| {
            let said = ms.sh(m, &install);
            check_install_output(ms, m, &said);
        });
        // The test's "internet" web server sits on the VPS's own loopback, which the
        // server's egress policy refuses by default (a real one is elsewhere).
        let web = WEB.split(':').next().unwrap_or(WEB);
        ms.sh(
            "vps",
            &format!("printf '[egress]\\nallow = [\"{web}\"]\\n' >> /etc/braid/server.toml"),
        );
        enable_now(ms, "vps", "braid-server");
        let server_pub = ms.sh("vps", "cat /etc/braid/server.pub");
        check_units(ms, "vps");
        let server = self.start("vps", 0, "server.log");
        let agent_pub = ms.sh("router", "cat /etc/braid/agent.pub");
        ms.sh(
            "router",
            &format!(
                "cat >> /etc/braid/agent.toml <<'EOF'\nserver = \"{PUBLIC}:4433\"\nserver_pub = \"{}\"\nEOF",
                server_pub.trim()
            ),
        );
        ms.sh(
            "vps",
            &format!("echo '{}' >> /etc/braid/agents.txt", agent_pub.trim()),
        );
        // "The file is read at once" (issue 38 item 10): the server counts the key before
        // any agent asks, in its JSON and its text status.
        status_until(ms, "vps", &server, |v| v["authorized_keys"] == 1);
        let text = ms.sh("vps", "braid status");
        assert!(
            text.contains("authorized agent keys: 1 (from /etc/braid/agents.txt)"),
            "{text}"
        );
        enable_now(ms, "router", "braid-agent-tun");
        let tun = self.start("router", 2, "agent-tun.log");
        // (Checked once they answer: until then the process may still be nsenter or setpriv.)
        let v = status_until(ms, "router", &tun, both_paths_up);
        check_auto_slots(ms, &v);
        // "`braid check-config /etc/braid/agent.toml` checks an edited file".
        ms.sh("router", "braid check-config /etc/braid/agent.toml");
        check_privileges(ms, "vps", &server, CAP_NET_BIND_SERVICE);
        check_privileges(ms, "router", &tun, CAP_NET_ADMIN | CAP_NET_RAW);
        (server, tun)
    }

    /// Upgrade both machines (dpkg rather than apt: the same maintainer scripts, without
    /// apt reading the host's package lists, 5 s a run on a busy machine): keys and an
    /// edited conffile are kept.
    fn upgrade(&self, deb: &str) {
        let ms = &self.ms;
        let keys = |m: &str| {
            ms.sh(
                m,
                "sha256sum /etc/braid/server.key /etc/braid/agent.key /etc/braid/*.pub",
            )
        };
        let before = (keys("vps"), keys("router"));
        ms.sh(
            "vps",
            "echo '# edited by the operator' >> /etc/braid/server.toml",
        );
        both(|m| {
            ms.sh(m, &format!("dpkg -i /mnt/{deb}"));
            assert_eq!(ms.sh(m, "dpkg-query -W -f '${Version}' braid"), "0.1.0-2");
        });
        assert_eq!(
            (keys("vps"), keys("router")),
            before,
            "keys kept on upgrade"
        );
        let server_toml = ms.read("vps", "/etc/braid/server.toml").unwrap();
        assert!(server_toml.ends_with("# edited by the operator\n"));
        let agent_toml = ms.read("router", "/etc/braid/agent.toml").unwrap();
        assert!(agent_toml.contains(&format!("server = \"{PUBLIC}:4433\"")));
    }

    /// Purge both machines: no file named braid in what they changed, no user or group,
    /// the account files as the host's.
    fn purge(&self) {
        let ms = &self.ms;
        both(|m| {
            ms.sh(m, "dpkg --purge braid");
            for db in ["passwd", "group"] {
                let o = ms.try_sh(m, &format!("getent {db} braid"));
                assert!(!o.status.success(), "{m}: braid left in {db}");
            }
            let left: Vec<String> = ms
                .changed(m)
                .into_iter()
                .filter(|p| p.contains("braid"))
                .collect();
            assert!(left.is_empty(), "{m}: left behind: {left:?}");
            for f in ["/etc/passwd", "/etc/group", "/etc/shadow", "/etc/gshadow"] {
                let host = std::fs::read_to_string(f).unwrap();
                assert_eq!(ms.read(m, f).unwrap(), host, "{m}: {f} differs from before");
            }
        });
    }
}

#[test]
fn the_package_installs_runs_upgrades_and_purges_as_the_quick_start_says() {
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let t0 = Instant::now();
    let share = tempfile::Builder::new()
        .prefix("pkg-share")
        .tempdir()
        .unwrap();
    // Kept for a look when BRAID_PKG_KEEP is set (logs, downloads).
    let dir = match std::env::var_os("BRAID_PKG_KEEP") {
        Some(_) => share.keep(),
        None => share.path().to_path_buf(),
    };
    let (v1, v2) = (package("0.1.0-1", &dir), package("0.1.0-2", &dir));
    check_contents(&v1);
    let name = |p: &Path| p.file_name().unwrap().to_str().unwrap().to_string();
    let data: Vec<u8> = (0..8u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(dir.join("file"), &data).unwrap();
    let nets = Nets::new();
    web_server(&nets.vps, std::sync::Arc::new(data));
    let rig = Rig {
        ms: Machines::new(&["vps", "router"], &dir),
        nets,
        want: sha256(&dir.join("file")),
        dir,
        t0,
    };
    rig.say("packages built, machines up");

    let (server, tun) = rig.quick_start(&name(&v1));
    rig.say("installed, session up over both links");
    // An application that knows nothing of braid (TUN mode).
    rig.download("dl-tun", &[]);
    let st = status_until(&rig.ms, "vps", &server, |v| {
        v["sessions"].as_array().is_some_and(|s| s.len() == 1)
    });
    assert_eq!(
        st["sessions"][0]["paths"].as_array().map(Vec::len),
        Some(2),
        "{st}"
    );
    // The newcomer's path (issue 24): a session at the first try, no false "blocks UDP".
    for (who, log) in [("server", server.logged()), ("agent", tun.logged())] {
        for bad in ["blocks UDP", "no handshake answer", "WARN", "ERROR"] {
            assert!(!log.contains(bad), "the {who} logged {bad:?}:\n{log}");
        }
    }
    assert_eq!(tun.stop(), Some(0), "the TUN agent's clean stop");
    assert_eq!(server.stop(), Some(0), "the server's clean stop");
    rig.say("downloaded through TUN mode");

    rig.upgrade(&name(&v2));
    // The proxy unit after the upgrade: a download through its SOCKS5 port.
    let server = rig.start("vps", 0, "server2.log");
    let agent = rig.start("router", 1, "agent.log");
    status_until(&rig.ms, "router", &agent, both_paths_up);
    check_privileges(&rig.ms, "router", &agent, CAP_NET_RAW);
    rig.download("dl-socks", &["--socks5-hostname", "127.0.0.1:1080"]);
    assert_eq!(agent.stop(), Some(0));
    assert_eq!(server.stop(), Some(0));
    rig.say("upgraded, downloaded through SOCKS5");

    rig.purge();
    rig.say("purged, nothing left");
}
