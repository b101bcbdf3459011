//! Running external commands (`ip`, `ethtool`, `sysctl`, `apt-get`) and making sure the tools
//! a run needs are installed.
//!
//! Owns: spawning short-lived commands, checking their exit status and turning failures into
//! errors that quote the command line and its stderr; installing missing Debian packages.
//! Must not touch: long-running helper processes (`procs`), namespaces' contents (`netns`
//! decides what to run).

use crate::error::{Result, TestbedError};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Directories searched for tools besides `PATH` (root's sbin directories are often missing
/// from `PATH` under sudo or in test harnesses).
const EXTRA_DIRS: [&str; 4] = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"];

/// Runs `prog args...`, returns its stdout; a non-zero exit is an error with its stderr.
pub fn run(prog: &str, args: &[&str]) -> Result<String> {
    let line = command_line(prog, args);
    let exe = which(prog).unwrap_or_else(|| PathBuf::from(prog));
    let out = Command::new(&exe)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| TestbedError::Spawn {
            command: line.clone(),
            source,
        })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(TestbedError::Command {
            command: line,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// `ip -n NS args...`.
pub fn ip_ns(ns: &str, args: &[&str]) -> Result<String> {
    let mut all = vec!["-n", ns];
    all.extend_from_slice(args);
    run("ip", &all)
}

/// `ip netns exec NS prog args...` (for tools without a namespace option).
pub fn exec_ns(ns: &str, prog: &str, args: &[&str]) -> Result<String> {
    let exe = which(prog).unwrap_or_else(|| PathBuf::from(prog));
    let exe = exe.to_string_lossy().into_owned();
    let mut all = vec!["netns", "exec", ns, exe.as_str()];
    all.extend_from_slice(args);
    run("ip", &all)
}

/// `sysctl -qw key=value` inside namespace `ns`.
pub fn sysctl_ns(ns: &str, key: &str, value: &str) -> Result<()> {
    let kv = format!("{key}={value}");
    exec_ns(ns, "sysctl", &["-qw", &kv]).map(|_| ())
}

/// The full path of `prog` if it is an executable file on `PATH` or in the sbin directories.
pub fn which(prog: &str) -> Option<PathBuf> {
    if prog.contains('/') {
        return Path::new(prog).is_file().then(|| PathBuf::from(prog));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(EXTRA_DIRS.iter().map(PathBuf::from))
        .map(|d| d.join(prog))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Makes sure `tool` exists, installing Debian package `package` with apt-get if not.
pub fn ensure_tool(tool: &str, package: &str) -> Result<()> {
    if which(tool).is_some() {
        return Ok(());
    }
    let missing = |detail: String| TestbedError::MissingTool {
        tool: tool.to_string(),
        package: package.to_string(),
        detail,
    };
    if which("apt-get").is_none() {
        return Err(missing(
            "apt-get is not available (not a Debian system?)".into(),
        ));
    }
    eprintln!("braid testbed: installing {package} (for {tool}) with apt-get");
    let install = |update: bool| -> std::result::Result<(), String> {
        if update {
            let _ = Command::new("apt-get")
                .args(["update", "-q"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let out = Command::new("apt-get")
            .args(["install", "-y", "-q", package])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
        }
    };
    if let Err(first) = install(false) {
        // The package lists may be missing or stale: refresh them once.
        install(true).map_err(|e| missing(format!("{first}; after apt-get update: {e}")))?;
    }
    if which(tool).is_some() {
        Ok(())
    } else {
        Err(missing(format!(
            "the package installed but `{tool}` is still not found"
        )))
    }
}

fn command_line(prog: &str, args: &[&str]) -> String {
    let mut s = prog.to_string();
    for a in args {
        s.push(' ');
        s.push_str(a);
    }
    s
}
