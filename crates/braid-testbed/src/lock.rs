//! Who may run: root only, and one run at a time.
//!
//! Owns: the root check and the run lock `/run/braid-testbed.lock` (an exclusive `flock` on
//! the file, which the kernel releases when the holder dies, plus the holder's PID written in
//! it for the messages and stale-lock detection). Must not touch: namespaces or processes
//! (the runner cleans up a stale run's leftovers when [`RunLock::acquire`] reports one).

use crate::error::{Result, TestbedError};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The default lock file.
pub const LOCK_FILE: &str = "/run/braid-testbed.lock";

/// Fails unless the effective user is root.
pub fn require_root() -> Result<()> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 {
        Ok(())
    } else {
        Err(TestbedError::NotRoot { uid })
    }
}

/// The held run lock; dropping it releases the lock and removes the file.
#[derive(Debug)]
pub struct RunLock {
    file: File,
    path: PathBuf,
    /// The PID of an earlier run that died without releasing its lock file, if any.
    pub stale_pid: Option<u32>,
}

impl RunLock {
    /// Takes the lock at `path`, or fails with [`TestbedError::Busy`] naming the holder.
    pub fn acquire(path: &Path) -> Result<RunLock> {
        let lock_err = |source| TestbedError::Lock {
            path: path.to_path_buf(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(lock_err)?;
        let mut old = String::new();
        let _ = file.read_to_string(&mut old);
        let old = old.trim().to_string();
        // SAFETY: the descriptor is valid for the lifetime of `file`.
        let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                return Err(TestbedError::Busy {
                    pid: if old.is_empty() {
                        "unknown".into()
                    } else {
                        old
                    },
                    lock: path.to_path_buf(),
                });
            }
            return Err(lock_err(e));
        }
        // We hold the lock. A PID left in the file is a run that ended without cleaning up
        // (killed with SIGKILL, or a crash) unless it is ourselves.
        let me = std::process::id();
        let stale_pid = old.parse::<u32>().ok().filter(|&p| p != me);
        file.set_len(0).map_err(lock_err)?;
        file.seek(SeekFrom::Start(0)).map_err(lock_err)?;
        writeln!(file, "{me}").map_err(lock_err)?;
        file.flush().map_err(lock_err)?;
        Ok(RunLock {
            file,
            path: path.to_path_buf(),
            stale_pid,
        })
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        // Empty the file before unlocking so nobody mistakes us for a stale run.
        let _ = self.file.set_len(0);
        let _ = std::fs::remove_file(&self.path);
        // SAFETY: the descriptor is valid; unlocking cannot violate memory safety.
        unsafe {
            libc::flock(self.file.as_raw_fd(), libc::LOCK_UN);
        }
    }
}

/// Whether process `pid` exists.
pub fn process_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_is_refused_and_stale_pid_reported() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("l.lock");
        std::fs::write(&p, "999999999\n").unwrap();
        let a = RunLock::acquire(&p).unwrap();
        assert_eq!(a.stale_pid, Some(999_999_999));
        let e = RunLock::acquire(&p).unwrap_err().to_string();
        assert!(e.contains(&format!("PID {}", std::process::id())), "{e}");
        drop(a);
        let b = RunLock::acquire(&p).unwrap();
        assert_eq!(b.stale_pid, None);
    }
}
