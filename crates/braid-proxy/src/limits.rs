//! Limits of a proxy front end against clients that hold resources without using them
//! (slowloris) and against running out of file descriptors.
//!
//! Owns: [`ProxyLimits`] (how many connections at once, how long the handshake and an idle
//! relayed connection may take) and [`AcceptBackoff`] (how long an accept loop waits after a
//! failed `accept`, and when it says so in the log). Must not touch: sockets, clocks or
//! tasks: the network driver's accept loop asks these and does the waiting.
//!
//! Why the backoff: a listening socket with a connection waiting stays readable while
//! `accept` fails (EMFILE at the descriptor limit), so a loop that retries at once spins at
//! 100 % CPU and starves the connections it already has. Waiting 10 ms, doubling to 1 s,
//! lets the process close descriptors and costs a client at most a second.

use std::io;
use std::time::Duration;

/// The limits of one proxy front end (SOCKS5 or HTTP CONNECT).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyLimits {
    /// Most client connections at once (in their handshake or relaying); one more is closed
    /// at once.
    pub max_connections: usize,
    /// How long a client has for its whole SOCKS5 handshake (HTTP: `HttpLimits::timeout`).
    pub handshake_timeout: Duration,
    /// A relayed connection that carries no byte either way for this long is closed (both
    /// ends, with a RST).
    pub idle_timeout: Duration,
}

impl Default for ProxyLimits {
    /// 512 connections (half of a common 1024-descriptor limit: each also needs a stream, and
    /// the agent its sockets), a 10 s handshake, 15 minutes idle (Squid's `read_timeout`).
    fn default() -> Self {
        ProxyLimits {
            max_connections: 512,
            handshake_timeout: crate::socks5::DEFAULT_HANDSHAKE_TIMEOUT,
            idle_timeout: Duration::from_secs(15 * 60),
        }
    }
}

/// The wait after failed accepts: 10 ms, doubling to 1 s; back to none after a success.
#[derive(Debug, Default, Clone)]
pub struct AcceptBackoff {
    failures: u64,
}

impl AcceptBackoff {
    /// Shortest wait.
    pub const MIN: Duration = Duration::from_millis(10);
    /// Longest wait.
    pub const MAX: Duration = Duration::from_secs(1);

    /// A new backoff (no failures).
    pub fn new() -> Self {
        Self::default()
    }

    /// `accept` failed with `e`: how long to wait before the next one, and whether to log it
    /// (the first failure of a run, then every 64th).
    pub fn failed(&mut self, e: &io::Error) -> (Duration, bool) {
        if e.raw_os_error() == Some(ECONNABORTED) {
            // A connection reset before we took it: nothing is wrong with us.
            return (Duration::ZERO, false);
        }
        self.failures += 1;
        let shift = (self.failures - 1).min(7) as u32;
        let wait = (Self::MIN * 2u32.pow(shift)).min(Self::MAX);
        (wait, self.failures == 1 || self.failures.is_multiple_of(64))
    }

    /// `accept` worked: failures since the last success (for a log line), and reset.
    pub fn succeeded(&mut self) -> u64 {
        std::mem::take(&mut self.failures)
    }

    /// Failures in the current run.
    pub fn failures(&self) -> u64 {
        self.failures
    }
}

/// ECONNABORTED on Linux.
const ECONNABORTED: i32 = 103;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_to_a_second_and_reset_after_a_success() {
        let mut b = AcceptBackoff::new();
        let emfile = io::Error::from_raw_os_error(24);
        let waits: Vec<_> = (0..10).map(|_| b.failed(&emfile)).collect();
        assert_eq!(waits[0], (Duration::from_millis(10), true));
        assert_eq!(waits[1], (Duration::from_millis(20), false));
        assert_eq!(waits[6].0, Duration::from_millis(640));
        assert_eq!(waits[7].0, Duration::from_secs(1));
        assert_eq!(waits[9].0, Duration::from_secs(1));
        assert_eq!(b.succeeded(), 10);
        assert_eq!(b.failed(&emfile), (Duration::from_millis(10), true));
        let aborted = io::Error::from_raw_os_error(ECONNABORTED);
        assert_eq!(b.failed(&aborted), (Duration::ZERO, false));
        assert_eq!(b.failures(), 1);
    }

    #[test]
    fn a_long_run_of_failures_is_logged_every_64th() {
        let mut b = AcceptBackoff::new();
        let e = io::Error::from_raw_os_error(24);
        let logged = (0..200).filter(|_| b.failed(&e).1).count();
        assert_eq!(logged, 1 + 3);
    }
}
