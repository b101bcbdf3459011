//! When a refusal is logged: once per agent and destination (address and port) per
//! [`LOG_EVERY`], in a table of at most [`LOG_ENTRIES`] entries, so an agent hammering a
//! refused destination costs one line a minute and a flood of destinations a bounded table.
//!
//! Owns: [`RefusalLog`] (sans-IO: the caller passes `now`). Must not touch: the decision,
//! the counters, the logger itself.

use braid_crypto::PublicKey;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// A destination refused to an agent is logged again after this long.
pub const LOG_EVERY: Duration = Duration::from_secs(60);

/// Most (agent, destination) pairs remembered; past it, new pairs are not logged until
/// old ones expire (they are still counted).
pub const LOG_ENTRIES: usize = 4096;

/// The last time each (agent, destination) refusal was logged.
#[derive(Debug, Default)]
pub struct RefusalLog {
    last: HashMap<(PublicKey, SocketAddr), Instant>,
}

impl RefusalLog {
    /// Whether the refusal of `dest` to `agent` at `now` should be logged (and if so, it
    /// counts as logged).
    pub fn should_log(&mut self, now: Instant, agent: PublicKey, dest: SocketAddr) -> bool {
        let fresh = |at: &Instant| now.saturating_duration_since(*at) < LOG_EVERY;
        if self.last.get(&(agent, dest)).is_some_and(fresh) {
            return false;
        }
        if self.last.len() >= LOG_ENTRIES {
            self.last.retain(|_, at| fresh(at));
            if self.last.len() >= LOG_ENTRIES {
                return false;
            }
        }
        self.last.insert((agent, dest), now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_destination_is_logged_once_a_minute_per_agent() {
        let (mut log, t0) = (RefusalLog::default(), Instant::now());
        let (a, b) = (PublicKey([1; 32]), PublicKey([2; 32]));
        let d: SocketAddr = "127.0.0.1:5432".parse().unwrap();
        let e: SocketAddr = "127.0.0.1:22".parse().unwrap();
        assert!(log.should_log(t0, a, d));
        assert!(!log.should_log(t0 + Duration::from_secs(59), a, d));
        assert!(log.should_log(t0, a, e), "another destination");
        assert!(log.should_log(t0, b, d), "another agent");
        assert!(log.should_log(t0 + LOG_EVERY, a, d), "a minute later");
    }

    #[test]
    fn the_table_is_bounded() {
        let (mut log, t0) = (RefusalLog::default(), Instant::now());
        let a = PublicKey([1; 32]);
        let dest = |i: usize| SocketAddr::from(([10, 0, (i >> 8) as u8, i as u8], 80));
        for i in 0..LOG_ENTRIES {
            assert!(log.should_log(t0, a, dest(i)));
        }
        assert!(!log.should_log(t0, a, "10.99.0.1:80".parse().unwrap()));
        assert_eq!(log.last.len(), LOG_ENTRIES);
        // Once the old entries expire, there is room again.
        assert!(log.should_log(t0 + LOG_EVERY, a, "10.99.0.1:80".parse().unwrap()));
        assert_eq!(log.last.len(), 1);
    }
}
