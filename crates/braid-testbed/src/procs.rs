//! Helper processes inside the namespaces (`braid server`/`agent`, `ss-server`/`ss-local`).
//!
//! Owns: starting a program inside a network namespace (`setns` between fork and exec, so
//! the PID we hold is the program's own), its log file, and stopping it: SIGTERM, then
//! SIGKILL after 2 s, always reaped. `PR_SET_PDEATHSIG` makes the kernel kill a helper if the
//! testbed dies without running its teardown. Must not touch: namespaces and links (`netns`),
//! what the helpers are configured to do (`runner`).

use crate::error::{Result, TestbedError};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One running helper.
#[derive(Debug)]
pub struct Helper {
    /// A name for messages.
    pub name: String,
    /// Its log (stdout and stderr).
    pub log: PathBuf,
    child: Option<Child>,
}

impl Helper {
    /// Starts `prog args...` in namespace `ns`, logging to `log`.
    pub fn spawn(name: &str, ns: &str, prog: &Path, args: &[String], log: &Path) -> Result<Helper> {
        let nsfile = crate::netns::open_ns(ns)?;
        let out = File::create(log)
            .map_err(|e| TestbedError::io(format!("creating the log {}", log.display()), e))?;
        let err = out
            .try_clone()
            .map_err(|e| TestbedError::io(format!("opening the log {}", log.display()), e))?;
        let nsfd = nsfile.as_raw_fd();
        let mut cmd = Command::new(prog);
        cmd.args(args).stdin(Stdio::null()).stdout(out).stderr(err);
        // SAFETY: the closure only makes async-signal-safe system calls (setns, prctl) on a
        // descriptor that stays open until after spawn returns.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(nsfd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                );
                Ok(())
            });
        }
        let line = format!("{} {}", prog.display(), args.join(" "));
        let child = cmd.spawn().map_err(|source| TestbedError::Spawn {
            command: format!("{line} (in namespace {ns})"),
            source,
        })?;
        drop(nsfile);
        Ok(Helper {
            name: name.to_string(),
            log: log.to_path_buf(),
            child: Some(child),
        })
    }

    /// Its PID, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `Some(status)` if it has exited.
    pub fn exited(&mut self) -> Option<String> {
        let c = self.child.as_mut()?;
        match c.try_wait() {
            Ok(Some(s)) => Some(s.to_string()),
            _ => None,
        }
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(8)..].join(" | ");
        if tail.is_empty() {
            "(empty)".into()
        } else {
            tail
        }
    }

    /// Stops it (SIGTERM, SIGKILL after 2 s) and reaps it.
    pub fn stop(&mut self) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        if let Ok(Some(_)) = c.try_wait() {
            return;
        }
        let pid = c.id() as libc::pid_t;
        // SAFETY: signalling our own child, which has not been reaped yet.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        self.stop();
    }
}
