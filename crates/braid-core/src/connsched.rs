//! Connection-level scheduling (direct mode, no braid server): every new connection goes
//! whole on one path, chosen so that the connections' expected throughputs add up across
//! the paths, or (OPERETTA, paper 003, connection-based case) so that the user's throughput
//! target is met with the least energy.
//!
//! Owns: the per-path capacity estimates from measured delivery (and rate hints), the
//! per-path load (open connections and what they are still expected to carry), what is
//! known of each destination (bytes per connection, smoothed as the paper's eq. 1), and the
//! choice of a path. Must not touch: sockets or clocks (`now` is passed in; the caller
//! reports each connection's byte count), packet-level scheduling (`sched`).
//!
//! # The choice
//!
//! Path `j` has a rate `r_j` (bytes/s) and an active power `a_j`; its load `l_j` is the
//! sum of the bytes its open connections are still expected to carry. A new connection
//! expected to carry `L` goes on path `i`; then path `j` needs `D_j = l'_j / r_j` to finish
//! (`l'` the loads with `L` added on `i`), the whole load goes at `T_i = sum l' / max_j D_j`
//! and costs `E_i = sum_j a_j l'_j / r_j` joules. The paper's Algorithm 1, connection-based
//! case, tries every `i`:
//! * [`ConnPolicy::Throughput`] (the default): the largest `T_i` (the least energy among
//!   equals);
//! * [`ConnPolicy::Operetta`]: the target is `T* = r_1 + alpha * sum_{j>1} r_j` (`r_1` the
//!   rate of the path with the least energy per bit `a/r`); among the `i` with `T_i >= T*`
//!   the least `E_i`, or the largest `T_i` when none reaches `T*`. At alpha 0 every
//!   connection goes on the path with the least energy per bit; at alpha 1 the target is
//!   out of reach and the choice is the throughput one.
//!
//! Paths of unknown power cost ten times the most power known (never cheaper as far as the
//! scheduler knows); with no power known at all every path costs 1 W, so the energy only
//! breaks ties towards the faster path.
//!
//! # Estimates
//!
//! * Rate: the largest delivery rate (all the path's connections together, over windows
//!   of [`SAMPLE`]) seen in the last [`ESTIMATE_WINDOW`]; a sample replaces the estimate
//!   when it is larger or the estimate is older than that (so a path whose capacity fell
//!   is believed within the window). Never below a configured rate hint. A path never
//!   measured and without a hint is assumed as fast as the mean of the others, or
//!   [`DEFAULT_RATE`] when none is known.
//! * A connection's remaining bytes: what its destination's connections carried on
//!   average, less what it has carried; a connection that has carried more than that is
//!   expected to carry half as much again (long transfers last); at least [`MIN_REMAINING`]
//!   while it moves. A connection that moved nothing for [`IDLE`] counts as no load.

use crate::time::Instant;
use std::collections::BTreeMap;
use std::time::Duration;

/// A connection's handle.
pub type ConnId = u64;

/// Rate assumed for a path when nothing is known: 10 Mbit/s, in bytes/s.
pub const DEFAULT_RATE: f64 = 1.25e6;
/// Bytes a connection to an unknown destination is expected to carry.
pub const DEFAULT_DEMAND: f64 = 1e6;
/// Least remaining load of a connection that moves.
pub const MIN_REMAINING: f64 = 64e3;
/// Delivery-rate samples are taken over windows of at least this.
pub const SAMPLE: Duration = Duration::from_millis(500);
/// A rate estimate older than this is replaced by the next sample.
pub const ESTIMATE_WINDOW: Duration = Duration::from_secs(10);
/// A connection that moved nothing for this long counts as no load.
pub const IDLE: Duration = Duration::from_secs(2);
/// Smoothing of a destination's bytes per connection (the paper's eq. 1).
const EWMA: f64 = 0.125;

/// How paths are chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ConnPolicy {
    /// Expected throughputs add up across the paths.
    Throughput,
    /// OPERETTA's least energy for the throughput target set by `alpha` (0 to 1).
    Operetta {
        /// 0: least energy per bit; 1: most throughput.
        alpha: f64,
    },
}

/// What the caller knows of a path.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PathInput {
    /// The path can carry a new connection now.
    pub usable: bool,
    /// Active power, watts.
    pub power_w: Option<f64>,
    /// Configured rate, bytes/s.
    pub rate_hint: Option<f64>,
}

/// Why no path was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChooseError {
    /// No path is usable now.
    NoPath,
}

impl std::fmt::Display for ChooseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChooseError::NoPath => write!(f, "no path is usable"),
        }
    }
}

#[derive(Debug, Clone, Default)]
struct PathEst {
    input: PathInput,
    estimate: Option<(f64, Instant)>,
    window_start: Option<Instant>,
    window_bytes: u64,
}

#[derive(Debug, Clone)]
struct Conn {
    path: usize,
    dest: String,
    bytes: u64,
    opened: Instant,
    moved_at: Instant,
}

/// The connection-level scheduler (see the module doc).
#[derive(Debug, Clone)]
pub struct ConnSched {
    policy: ConnPolicy,
    paths: Vec<PathEst>,
    conns: BTreeMap<ConnId, Conn>,
    /// Destination -> smoothed bytes per connection.
    dests: BTreeMap<String, f64>,
    next: ConnId,
}

impl ConnSched {
    /// A scheduler of `paths` paths, none usable yet.
    pub fn new(paths: usize, policy: ConnPolicy) -> ConnSched {
        ConnSched {
            policy,
            paths: vec![PathEst::default(); paths],
            conns: BTreeMap::new(),
            dests: BTreeMap::new(),
            next: 1,
        }
    }

    /// The policy.
    pub fn policy(&self) -> ConnPolicy {
        self.policy
    }

    /// Tell what is known of path `i` (ignored if out of range).
    pub fn set_path(&mut self, i: usize, input: PathInput) {
        if let Some(p) = self.paths.get_mut(i) {
            p.input = input;
        }
    }

    /// Path `i`'s rate estimate, bytes/s (`None`: never measured, no hint).
    pub fn rate(&self, i: usize) -> Option<f64> {
        let p = self.paths.get(i)?;
        match (p.estimate.map(|e| e.0), p.input.rate_hint) {
            (Some(e), Some(h)) => Some(e.max(h)),
            (e, h) => e.or(h),
        }
    }

    /// The rate used for path `i`: its estimate, else the mean of the known ones, else
    /// [`DEFAULT_RATE`].
    fn rate_or_guess(&self, i: usize) -> f64 {
        if let Some(r) = self.rate(i).filter(|r| *r > 0.0) {
            return r;
        }
        let known: Vec<f64> = (0..self.paths.len())
            .filter_map(|j| self.rate(j))
            .filter(|r| *r > 0.0)
            .collect();
        if known.is_empty() {
            DEFAULT_RATE
        } else {
            known.iter().sum::<f64>() / known.len() as f64
        }
    }

    fn power(&self, i: usize) -> f64 {
        let max = self
            .paths
            .iter()
            .filter_map(|p| p.input.power_w)
            .fold(None, |m: Option<f64>, w| Some(m.map_or(w, |m| m.max(w))));
        match (self.paths[i].input.power_w, max) {
            (Some(w), _) => w.max(1e-6),
            (None, Some(m)) => (m * 10.0).max(1e-6),
            (None, None) => 1.0,
        }
    }

    /// Bytes a new connection to `dest` is expected to carry.
    pub fn expected(&self, dest: &str) -> f64 {
        self.dests.get(dest).copied().unwrap_or(DEFAULT_DEMAND)
    }

    fn remaining(&self, c: &Conn, now: Instant) -> f64 {
        if now.saturating_since(c.moved_at) >= IDLE {
            return 0.0;
        }
        let done = c.bytes as f64;
        (self.expected(&c.dest) - done)
            .max(done / 2.0)
            .max(MIN_REMAINING)
    }

    /// Per path: the bytes its open connections are still expected to carry.
    pub fn loads(&self, now: Instant) -> Vec<f64> {
        let mut l = vec![0.0; self.paths.len()];
        for c in self.conns.values() {
            l[c.path] += self.remaining(c, now);
        }
        l
    }

    /// Open connections per path.
    pub fn open_per_path(&self) -> Vec<usize> {
        let mut n = vec![0; self.paths.len()];
        for c in self.conns.values() {
            n[c.path] += 1;
        }
        n
    }

    /// Choose a path for a new connection to `dest` (`host:port`) and register it.
    pub fn choose(&mut self, now: Instant, dest: &str) -> Result<(ConnId, usize), ChooseError> {
        let path = self.pick(now, dest)?;
        let id = self.next;
        self.next += 1;
        // Delivery is measured from the moment the path carries a connection.
        self.paths[path].window_start.get_or_insert(now);
        self.conns.insert(
            id,
            Conn {
                path,
                dest: dest.to_string(),
                bytes: 0,
                opened: now,
                moved_at: now,
            },
        );
        Ok((id, path))
    }

    /// The path a new connection to `dest` would get, without registering it.
    pub fn pick(&self, now: Instant, dest: &str) -> Result<usize, ChooseError> {
        let usable: Vec<usize> = (0..self.paths.len())
            .filter(|&j| self.paths[j].input.usable)
            .collect();
        if usable.is_empty() {
            return Err(ChooseError::NoPath);
        }
        let rates: Vec<f64> = usable.iter().map(|&j| self.rate_or_guess(j)).collect();
        let powers: Vec<f64> = usable.iter().map(|&j| self.power(j)).collect();
        let all = self.loads(now);
        let loads: Vec<f64> = usable.iter().map(|&j| all[j]).collect();
        let add = self.expected(dest).max(MIN_REMAINING);
        // (T_i, E_i) of every candidate.
        let outcomes: Vec<(f64, f64)> = (0..usable.len())
            .map(|i| {
                let l: Vec<f64> = (0..usable.len())
                    .map(|j| loads[j] + if j == i { add } else { 0.0 })
                    .collect();
                let total: f64 = l.iter().sum();
                let span = (0..l.len()).map(|j| l[j] / rates[j]).fold(0.0, f64::max);
                let energy: f64 = (0..l.len()).map(|j| powers[j] * l[j] / rates[j]).sum();
                (total / span, energy)
            })
            .collect();
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs());
        let most_throughput = |cands: &[usize]| -> usize {
            let mut best = cands[0];
            for &i in &cands[1..] {
                let (t, e) = outcomes[i];
                let (bt, be) = outcomes[best];
                if (t > bt && !close(t, bt)) || (close(t, bt) && e < be && !close(e, be)) {
                    best = i;
                }
            }
            best
        };
        let all_idx: Vec<usize> = (0..usable.len()).collect();
        let best = match self.policy {
            ConnPolicy::Throughput => most_throughput(&all_idx),
            ConnPolicy::Operetta { alpha } => {
                let alpha = if alpha.is_finite() {
                    alpha.clamp(0.0, 1.0)
                } else {
                    1.0
                };
                let cheapest = (0..usable.len())
                    .min_by(|&a, &b| {
                        (powers[a] / rates[a])
                            .partial_cmp(&(powers[b] / rates[b]))
                            .unwrap_or(std::cmp::Ordering::Equal)
                    })
                    .unwrap_or(0);
                let others: f64 = (0..usable.len())
                    .filter(|&j| j != cheapest)
                    .map(|j| rates[j])
                    .sum();
                let target = rates[cheapest] + alpha * others;
                let ok: Vec<usize> = all_idx
                    .iter()
                    .copied()
                    .filter(|&i| outcomes[i].0 >= target * (1.0 - 1e-9))
                    .collect();
                if ok.is_empty() {
                    most_throughput(&all_idx)
                } else {
                    let mut best = ok[0];
                    for &i in &ok[1..] {
                        let (t, e) = outcomes[i];
                        let (bt, be) = outcomes[best];
                        if (e < be && !close(e, be)) || (close(e, be) && t > bt) {
                            best = i;
                        }
                    }
                    best
                }
            }
        };
        Ok(usable[best])
    }

    /// Connection `id` has carried `bytes` in all (both directions) by `now`.
    pub fn progress(&mut self, now: Instant, id: ConnId, bytes: u64) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        let delta = bytes.saturating_sub(c.bytes);
        if delta > 0 {
            c.bytes = bytes;
            c.moved_at = now;
            let p = &mut self.paths[c.path];
            p.window_bytes += delta;
            p.window_start.get_or_insert(now);
        }
    }

    /// Close the delivery windows that are [`SAMPLE`] long and update the rate estimates.
    /// Call it after the connections' [`ConnSched::progress`] of one round.
    pub fn tick(&mut self, now: Instant) {
        let open = self.open_per_path();
        for (j, p) in self.paths.iter_mut().enumerate() {
            let Some(start) = p.window_start else {
                continue;
            };
            let len = now.saturating_since(start);
            if len < SAMPLE {
                continue;
            }
            let sample = p.window_bytes as f64 / len.as_secs_f64();
            let replace = match p.estimate {
                None => true,
                Some((e, at)) => sample > e || now.saturating_since(at) >= ESTIMATE_WINDOW,
            };
            if replace && sample > 0.0 {
                p.estimate = Some((sample, now));
            }
            p.window_bytes = 0;
            // The next window starts now if the path still carries connections.
            p.window_start = (open[j] > 0).then_some(now);
        }
    }

    /// Connection `id` ended: its bytes teach its destination's demand.
    pub fn close(&mut self, now: Instant, id: ConnId) {
        let Some(c) = self.conns.remove(&id) else {
            return;
        };
        let _ = now.saturating_since(c.opened);
        let b = c.bytes as f64;
        let e = self.dests.entry(c.dest).or_insert(b);
        *e = (1.0 - EWMA) * *e + EWMA * b;
        // Keep the table bounded: forget the smallest entries past 4096 destinations.
        if self.dests.len() > 4096 {
            if let Some(k) = self
                .dests
                .iter()
                .min_by(|a, b| a.1.partial_cmp(b.1).unwrap_or(std::cmp::Ordering::Equal))
                .map(|(k, _)| k.clone())
            {
                self.dests.remove(&k);
            }
        }
    }

    /// The path connection `id` is on.
    pub fn path_of(&self, id: ConnId) -> Option<usize> {
        self.conns.get(&id).map(|c| c.path)
    }
}

#[cfg(test)]
#[path = "connsched_tests.rs"]
mod tests;
