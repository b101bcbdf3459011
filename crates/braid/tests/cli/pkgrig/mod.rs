//! The package rig: throwaway machines for the Debian package's tests. Each machine is an
//! overlayfs over the host's `/` (upper layer on a tmpfs), in a private mount namespace held
//! by a `sleep` process: dpkg, apt, adduser and the host's dpkg database run for real,
//! copy-on-write, and the host is untouched. Commands run chrooted into a machine (and in a
//! network namespace when asked, through `nsenter`). [`Service`] stands in for systemd:
//! it starts a unit's `ExecStart=` line as the unit's `User=`, with its
//! `AmbientCapabilities=`, `CapabilityBoundingSet=` and `NoNewPrivileges=`, after making its
//! `StateDirectory=` and `RuntimeDirectory=`, and stops it with its `KillSignal=`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BRAID: &str = env!("CARGO_BIN_EXE_braid");

/// Why the package tests cannot run here, or `None`.
pub fn unavailable() -> Option<String> {
    if let Some(why) = braid_testbed::unavailable_reason() {
        return Some(why);
    }
    let tools = [
        "dpkg-deb",
        "dpkg",
        "apt",
        "adduser",
        "systemd-analyze",
        "systemctl",
        "unshare",
        "nsenter",
        "setpriv",
        "chroot",
        "curl",
        "sha256sum",
    ];
    if let Some(t) = tools
        .iter()
        .find(|t| braid_testbed::cmd::which(t).is_none())
    {
        return Some(format!("`{t}` is not installed"));
    }
    let fs = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if !fs.contains("overlay") {
        return Some("this kernel has no overlayfs".into());
    }
    if !Path::new("/dev/net/tun").exists() {
        return Some("no /dev/net/tun (modprobe tun)".into());
    }
    None
}

/// Build the package with scripts/package (uncompressed, for speed) into `out`.
pub fn package(version: &str, out: &Path) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/package");
    let o = Command::new(script)
        .args([
            "--bin",
            BRAID,
            "--version",
            version,
            "--compress",
            "none",
            "--out",
        ])
        .arg(out)
        .output()
        .unwrap();
    assert!(o.status.success(), "scripts/package failed: {o:?}");
    PathBuf::from(String::from_utf8(o.stdout).unwrap().trim())
}

/// A command's stdout; panics with its output if it failed.
pub fn ok(what: &str, o: Output) -> String {
    assert!(
        o.status.success(),
        "{what}: {}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// The machines; their mount namespace (and everything in it) goes on drop.
pub struct Machines {
    holder: Child,
    /// Host folder of the mount points.
    dir: PathBuf,
}

impl Drop for Machines {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Machines {
    /// One machine per name, each with `share` (a host folder) at `/mnt`.
    pub fn new(names: &[&str], share: &Path) -> Machines {
        let dir = std::env::temp_dir().join(format!("pkg-roots-{}", std::process::id()));
        let mut script = String::from("set -e\n");
        script += &format!("mount -t tmpfs pkg-layers {}/layers\n", dir.display());
        for n in names {
            std::fs::create_dir_all(dir.join(n)).unwrap();
            let (r, l) = (dir.join(n), dir.join("layers").join(n));
            script += &format!(
                "mkdir -p {l}/u {l}/w\n\
                 mount -t overlay pkg-{n} -o lowerdir=/,upperdir={l}/u,workdir={l}/w {r}\n\
                 mount -t proc proc {r}/proc\n\
                 mount --rbind /dev {r}/dev\n\
                 mount -t tmpfs tmpfs {r}/run\n\
                 mount --bind {share} {r}/mnt\n",
                l = l.display(),
                r = r.display(),
                share = share.display()
            );
        }
        std::fs::create_dir_all(dir.join("layers")).unwrap();
        script += "echo ready\nexec sleep 600\n";
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        // SAFETY: prctl in the child before exec; the holder dies with the test's thread.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut holder = cmd.spawn().unwrap();
        let mut line = String::new();
        BufReader::new(holder.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "setting up the overlay roots failed");
        Machines { holder, dir }
    }

    /// `nsenter` into the machines' mount namespace (and network namespace `net`).
    fn enter(&self, net: Option<&str>) -> Command {
        let mut c = Command::new("nsenter");
        c.arg("-t").arg(self.holder.id().to_string()).arg("-m");
        if let Some(ns) = net {
            c.arg(format!("--net=/run/netns/{ns}"));
        }
        c.arg("--").stdin(Stdio::null());
        c
    }

    /// A command chrooted into machine `m` (in network namespace `net`).
    pub fn cmd(&self, m: &str, net: Option<&str>, argv: &[&str]) -> Command {
        let mut c = self.enter(net);
        c.arg("chroot").arg(self.dir.join(m)).args(argv);
        c
    }

    /// `sh -c script` on machine `m`, as root; its stdout (panics if it fails).
    pub fn sh(&self, m: &str, script: &str) -> String {
        let o = self.cmd(m, None, &["sh", "-c", script]).output().unwrap();
        ok(&format!("{m}: {script}"), o)
    }

    /// `sh -c script` on machine `m`, whatever its exit status.
    pub fn try_sh(&self, m: &str, script: &str) -> Output {
        self.cmd(m, None, &["sh", "-c", script]).output().unwrap()
    }

    /// A file of machine `m` (`None` if it is absent).
    pub fn read(&self, m: &str, path: &str) -> Option<String> {
        let o = self.cmd(m, None, &["cat", path]).output().unwrap();
        o.status
            .success()
            .then(|| String::from_utf8(o.stdout).unwrap())
    }

    /// Every path in machine `m`'s upper layer: what it changed from the host, relative to
    /// its root.
    pub fn changed(&self, m: &str) -> Vec<String> {
        let upper = self.dir.join("layers").join(m).join("u");
        let o = self.enter(None).arg("find").arg(&upper).output().unwrap();
        let up = upper.display().to_string();
        ok("find", o)
            .lines()
            .filter_map(|l| l.strip_prefix(&up).map(str::to_string))
            .filter(|l| !l.is_empty())
            .collect()
    }
}

/// A systemd unit's settings (`[Service]` and others, the last value of each key; our
/// units have no quoting or continuation lines).
pub struct Unit {
    pub name: String,
    pub keys: BTreeMap<String, String>,
}

impl Unit {
    pub fn parse(name: &str, text: &str) -> Unit {
        let keys = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.starts_with('#') && !l.starts_with('['))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        Unit {
            name: name.into(),
            keys,
        }
    }

    pub fn get(&self, key: &str) -> &str {
        self.keys.get(key).map(String::as_str).unwrap_or("")
    }

    /// `ExecStart=` split into words.
    pub fn exec_start(&self) -> Vec<String> {
        self.get("ExecStart")
            .split_whitespace()
            .map(str::to_string)
            .collect()
    }

    /// Capability names of `key` as setpriv takes them (`net_admin`).
    pub fn caps(&self, key: &str) -> Vec<String> {
        self.get(key)
            .split_whitespace()
            .map(|c| c.trim_start_matches("CAP_").to_lowercase())
            .collect()
    }
}

/// A unit's `ExecStart=` running on a machine as systemd would start it; stopped with
/// SIGTERM (its `KillSignal=`) on drop.
pub struct Service {
    pub child: Child,
    pub log: PathBuf,
}

impl Drop for Service {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

impl Service {
    /// Start `unit` (read from machine `m`) in network namespace `net`; its stderr goes to
    /// `log`.
    pub fn start(ms: &Machines, m: &str, net: &str, unit: &Unit, log: PathBuf) -> Service {
        assert_eq!(unit.get("KillSignal"), "SIGTERM");
        let user = unit.get("User");
        assert!(!user.is_empty(), "{}: no User=", unit.name);
        let state = unit.get("StateDirectory");
        let run = unit.get("RuntimeDirectory");
        let smode = unit.get("StateDirectoryMode");
        let rmode = unit.get("RuntimeDirectoryMode");
        ms.sh(
            m,
            &format!(
                "install -d -o {user} -g {user} -m {smode} /var/lib/{state} && \
                 install -d -o {user} -g {user} -m {rmode} /run/{run}"
            ),
        );
        let ambient = unit.caps("AmbientCapabilities");
        let bounding = unit.caps("CapabilityBoundingSet");
        let set = |caps: &[String]| {
            let mut s = String::from("-all");
            for c in caps {
                s += &format!(",+{c}");
            }
            s
        };
        let mut argv: Vec<String> = ["setpriv", "--reuid", user, "--regid", user, "--init-groups"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        argv.extend([
            "--inh-caps".into(),
            set(&ambient),
            "--ambient-caps".into(),
            set(&ambient),
            "--bounding-set".into(),
            set(&bounding),
        ]);
        if unit.get("NoNewPrivileges") == "yes" {
            argv.push("--no-new-privs".into());
        }
        argv.push("--".into());
        argv.extend(unit.exec_start());
        let args: Vec<&str> = argv.iter().map(String::as_str).collect();
        let child = ms
            .cmd(m, Some(net), &args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Service { child, log }
    }

    /// SIGTERM, then the exit status within `TimeoutStopSec=` (10 s).
    pub fn stop(mut self) -> Option<i32> {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// What the service logged so far.
    pub fn logged(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A line of the service's /proc status, like `CapEff` or `Uid`.
    pub fn proc_status(&self, key: &str) -> String {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}:")))
            .unwrap_or_default()
            .trim()
            .to_string()
    }
}
