//! SIGINT, SIGTERM and SIGHUP during a run.
//!
//! Owns: the process-wide "interrupted" flag and the signal handlers that set it. The
//! handlers only store the signal number; every blocking wait of the testbed wakes at least
//! every 100 ms and calls [`check`], so the run unwinds through its guards (processes, then
//! emulators, then namespaces) and tears everything down. Must not touch: teardown itself.

use crate::error::{Result, TestbedError};
use std::sync::atomic::{AtomicI32, Ordering};

static CAUGHT: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    CAUGHT.store(sig, Ordering::SeqCst);
}

/// Installs the handlers (without `SA_RESTART`, so blocking calls return `EINTR`).
pub fn install() -> Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction is a valid starting value; the handler is an
        // async-signal-safe function that only stores into an atomic.
        let r = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = 0;
            libc::sigaction(sig, &sa, std::ptr::null_mut())
        };
        if r != 0 {
            return Err(TestbedError::io(
                format!("installing the handler for signal {sig}"),
                std::io::Error::last_os_error(),
            ));
        }
    }
    Ok(())
}

/// The signal caught, if any.
pub fn caught() -> Option<&'static str> {
    match CAUGHT.load(Ordering::SeqCst) {
        0 => None,
        libc::SIGINT => Some("SIGINT"),
        libc::SIGTERM => Some("SIGTERM"),
        libc::SIGHUP => Some("SIGHUP"),
        _ => Some("a signal"),
    }
}

/// `Err(Interrupted)` once a signal was caught.
pub fn check() -> Result<()> {
    match caught() {
        Some(s) => Err(TestbedError::Interrupted(s)),
        None => Ok(()),
    }
}
