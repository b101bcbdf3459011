//! Fair shares between agents: every tick, what each agent sent and whether it wanted to
//! send more; agents that want more while another one takes more than an equal share get a
//! cap at that share (max-min fairness over the capacity the server was seen to use).
//!
//! Owns: the capacity estimate and the water-filling. Must not touch: clocks (the caller
//! passes each tick's length), buckets and the relay (`shares` applies the caps).
//!
//! Why it is needed (issue 37): two agents over the same links each have their own
//! congestion control per path; at the links' shared queues the two controllers settle
//! anywhere from 0.37 to 0.70 of the capacity for one of them, whatever their numbers of
//! streams (measured with 8 streams against 1 and with 1 against 1). Only the server sees
//! both: it caps the one above an equal share, and the other's congestion control takes
//! what that frees.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::time::Duration;

/// A capped agent may send this much above the fair share (room for its rate to follow a
/// capacity that grows).
pub const HEADROOM: f64 = 0.05;

/// Per tick, the capacity estimate falls at most this fraction while it is not reached.
const DECAY: f64 = 0.02;

/// Weight of the newest tick in each agent's rate.
const ALPHA: f64 = 0.5;

/// What one agent did in the last tick.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tick {
    /// Bytes it sent.
    pub sent: u64,
    /// It had more to send than went (its streams waited on the session or on its cap).
    pub wanting: bool,
    /// Its own rate limit (bytes per second), if any: it wants no more than that.
    pub limit: Option<u64>,
}

/// The controller.
#[derive(Debug)]
pub struct FairShare<K> {
    rates: HashMap<K, f64>,
    capacity: f64,
    /// Agents capped at the last tick: they stay capped while others want more.
    capped: HashSet<K>,
}

impl<K: Copy + Eq + Hash> Default for FairShare<K> {
    fn default() -> Self {
        FairShare {
            rates: HashMap::new(),
            capacity: 0.0,
            capped: HashSet::new(),
        }
    }
}

impl<K: Copy + Eq + Hash> FairShare<K> {
    /// The capacity the server is believed to have (bytes per second).
    pub fn capacity(&self) -> u64 {
        self.capacity as u64
    }

    /// One tick of `dt` with every active agent's [`Tick`]: the cap of each agent (bytes
    /// per second; `None`: uncapped). Agents missing from `ticks` are forgotten.
    pub fn tick(&mut self, dt: Duration, ticks: &[(K, Tick)]) -> Vec<(K, Option<u64>)> {
        let secs = dt.as_secs_f64().max(1e-3);
        let mut rates = HashMap::with_capacity(ticks.len());
        for (k, t) in ticks {
            let now = t.sent as f64 / secs;
            let r = self.rates.get(k).map_or(now, |r| r + ALPHA * (now - r));
            rates.insert(*k, r);
        }
        self.rates = rates;
        let used: f64 = self.rates.values().sum();
        self.capacity = used.max(self.capacity * (1.0 - DECAY));
        let wanting = ticks.iter().filter(|(_, t)| t.wanting).count();
        if wanting < 2 {
            self.capped.clear();
            return ticks.iter().map(|(k, _)| (*k, None)).collect();
        }
        // Water-filling: agents that want no more than they have (not wanting: what they
        // send; limited: their limit) keep it; the rest share what is left equally.
        let mut demands: Vec<(K, f64)> = ticks
            .iter()
            .map(|(k, t)| {
                let d = match (t.wanting, t.limit) {
                    (false, _) => self.rates[k],
                    (true, Some(l)) => l as f64,
                    (true, None) => f64::INFINITY,
                };
                (*k, d)
            })
            .collect();
        demands.sort_by(|a, b| a.1.total_cmp(&b.1));
        let (mut left, mut n, mut level) = (self.capacity, demands.len(), f64::INFINITY);
        for (_, d) in &demands {
            let share = left / n as f64;
            if *d > share {
                level = share;
                break;
            }
            left -= d;
            n -= 1;
        }
        let cap = (level.is_finite()).then(|| (level * (1.0 + HEADROOM)).max(1.0) as u64);
        // Capped: an agent that wants more and takes more than the level (or was capped
        // already: it stays so while the contention lasts); one below it is left alone.
        let capped = &mut self.capped;
        let rates = &self.rates;
        capped.retain(|k| ticks.iter().any(|(j, t)| j == k && t.wanting));
        ticks
            .iter()
            .map(|(k, t)| {
                let over = t.wanting && (rates[k] > level || capped.contains(k));
                let c = cap.filter(|_| over);
                match c {
                    Some(_) => capped.insert(*k),
                    None => capped.remove(k),
                };
                (*k, c)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DT: Duration = Duration::from_millis(200);

    fn t(sent: u64, wanting: bool) -> Tick {
        Tick {
            sent,
            wanting,
            limit: None,
        }
    }

    /// Two agents that want more, one at 0.7 of the capacity: both are capped at half of
    /// it (and a little headroom), the capacity is the sum of what they sent.
    #[test]
    fn the_agent_above_an_equal_share_is_capped_at_it() {
        let mut f = FairShare::default();
        let caps = f.tick(DT, &[("a", t(700_000, true)), ("b", t(300_000, true))]);
        assert_eq!(f.capacity(), 5_000_000);
        let half = 2_500_000.0 * (1.0 + HEADROOM);
        assert_eq!(
            caps,
            [("a", Some(half as u64)), ("b", None)],
            "b is below it"
        );
        // The capped agent sends less before the other takes it up: the capacity estimate
        // and the caps fall only slowly.
        let caps = f.tick(DT, &[("a", t(520_000, true)), ("b", t(300_000, true))]);
        assert_eq!(f.capacity(), 4_900_000);
        assert_eq!(caps[0].1, Some((2_450_000.0 * (1.0 + HEADROOM)) as u64));
    }

    /// One agent alone, or beside one that wants no more than it has: nobody is capped
    /// below what it can use.
    #[test]
    fn an_agent_that_wants_no_more_leaves_the_rest_to_the_other() {
        let mut f = FairShare::default();
        assert_eq!(f.tick(DT, &[("a", t(1_000_000, true))]), [("a", None)]);
        let caps = f.tick(DT, &[("a", t(900_000, true)), ("b", t(100_000, false))]);
        assert_eq!(caps, [("a", None), ("b", None)]);
        // Both wanting, but b limited to 1 MB/s by its own limit: a may have the rest.
        let mut b = t(200_000, true);
        b.limit = Some(1_000_000);
        let caps = f.tick(DT, &[("a", t(800_000, true)), ("b", b)]);
        let rest = (f.capacity() as f64 - 1_000_000.0) * (1.0 + HEADROOM);
        let a = caps[0].1.unwrap() as f64;
        assert!((a - rest).abs() < 2.0, "{a} vs {rest}");
    }

    /// The capacity estimate falls slowly when less is sent (a capped agent's drop does not
    /// drag the caps down with it), and follows a rise at once.
    #[test]
    fn the_capacity_estimate_falls_slowly_and_rises_at_once() {
        let mut f = FairShare::default();
        f.tick(DT, &[("a", t(1_000_000, true))]);
        f.tick(DT, &[("a", t(0, true))]);
        assert_eq!(f.capacity(), 4_900_000);
        f.tick(DT, &[("a", t(4_000_000, true))]);
        assert!(f.capacity() > 5_000_000, "{}", f.capacity());
    }
}
