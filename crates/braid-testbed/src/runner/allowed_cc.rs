//! The host's list of congestion controls a namespace may make its default, extended for
//! the run and restored afterwards (also after a run killed with SIGKILL).
//!
//! Owns: `/proc/sys/net/ipv4/tcp_allowed_congestion_control` and the saved copy in
//! [`ALLOWED_CC_SAVED`]. Must not touch: the namespaces' own settings (`stack.rs` sets
//! those).

use crate::error::{Result, TestbedError};

/// The host's `net.ipv4.tcp_allowed_congestion_control`, temporarily extended so that a
/// namespace may make a controller its default (the kernel refuses others outside the
/// initial namespace); restored when dropped. The original value is also saved in
/// [`ALLOWED_CC_SAVED`] so that the next run restores it if this one is killed with SIGKILL.
pub(super) struct AllowedCc {
    old: Option<String>,
}

const ALLOWED_CC: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";
/// Where the original allowed list is kept while a run has extended it.
pub const ALLOWED_CC_SAVED: &str = "/run/braid-testbed.allowed-cc";

impl AllowedCc {
    pub(super) fn ensure(cc: &str) -> Result<AllowedCc> {
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
    pub(super) fn recover() {
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
