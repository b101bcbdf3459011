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
//! * Rate: a moving average (gain [`RATE_GAIN`]) of the delivery-rate samples (all the
//!   path's connections together), so that a path whose capacity fell is believed within a
//!   few samples and one lucky burst does not make a path look faster than it is (the
//!   largest sample of the last 10 s, before issue 25, showed a 16 Mbit/s link as 20). A
//!   sample is the bytes over the time the path was *busy* (some connection on it moved at
//!   least [`BUSY_RATE`] between two of its reports) within a window of [`SAMPLE`]
//!   ([`FIRST_SAMPLE`] while the path has no estimate): a few small connections do not make
//!   a fast path look slow, a trickle does not count. Never below a configured rate hint. A
//!   rate remembered from an earlier run ([`ConnSched::remember`], the agent's state file)
//!   is an estimate taken when it was handed in.
//! * A path never measured (no estimate, no hint) is assumed as fast as the fastest known
//!   one (or [`DEFAULT_RATE`] when none is known), so that it is tried and measured; while
//!   it carries nothing that assumption doubles every [`EXPLORE_DOUBLING`] (up to
//!   [`EXPLORE_MAX`] times), so that even a path that looks costly per bit at that rate
//!   (OPERETTA) is tried at last. (Assuming the others' mean, as before issue 25, left an
//!   interface that looked costlier than the rest untried, and so unmeasured, for good.)
//! * The first connection placed on a never-measured path is a probe: while it has not
//!   produced a sample (at most [`PROBE_WAIT`] after it was placed), [`ConnSched::wait`]
//!   tells the caller to hold new connections, so that they are placed by what it
//!   measured rather than by a guess.
//! * A connection's remaining bytes: what its destination's connections carried on
//!   average, less what it has carried; a connection that has carried more than that is
//!   expected to carry half as much again (long transfers last); at least [`MIN_REMAINING`]
//!   while it moves. A connection that moved nothing for [`IDLE`] counts as no load.
//!
//! The choice is the one that finishes the expected load soonest: each path's expected
//! completion time is its load over its rate, so a path twice as fast gets about twice the
//! connections (of a destination whose size is known, twice the bytes).

use crate::time::Instant;
use std::collections::BTreeMap;
use std::time::Duration;

impl PathEst {
    /// Count the current round of reports into the delivery window: the part of its
    /// busy interval not counted yet, and its bytes.
    fn flush_round(&mut self) {
        let Some((since, now, bytes)) = self.round.take() else {
            return;
        };
        let from = if self.busy_end > since {
            self.busy_end
        } else {
            since
        };
        let busy = now.saturating_since(from);
        if now > self.busy_end {
            self.busy_end = now;
        }
        let w = self.window.get_or_insert((since, 0, Duration::ZERO));
        w.1 += bytes;
        w.2 += busy;
    }
}

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
/// A path without an estimate gets its first sample after this.
pub const FIRST_SAMPLE: Duration = Duration::from_millis(300);
/// A window counts as a sample once its path was busy this long.
pub const MIN_BUSY: Duration = Duration::from_millis(50);
/// A connection whose report shows less than this (bytes/s) did not keep its path busy.
pub const BUSY_RATE: f64 = 8e3;
/// How long new connections may be held for a probe's first sample.
pub const PROBE_WAIT: Duration = Duration::from_millis(1000);
/// While a never-measured path carries nothing, its assumed rate doubles this often.
pub const EXPLORE_DOUBLING: Duration = Duration::from_secs(30);
/// ... up to this many times the fastest known rate.
pub const EXPLORE_MAX: f64 = 1000.0;
/// Weight of a new delivery-rate sample in a path's estimate.
pub const RATE_GAIN: f64 = 0.25;
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
    /// The open delivery window: its start, busy bytes and busy time.
    window: Option<(Instant, u64, Duration)>,
    /// The path is known busy until then (the latest round counted).
    busy_end: Instant,
    /// The current round of reports: the earliest start, their end, the bytes.
    round: Option<(Instant, Instant, u64)>,
    /// When the first connection was placed on it while it had no rate (its probe).
    probe_at: Option<Instant>,
    /// Since when it has been usable, never measured, and carried nothing.
    idle_unmeasured_since: Option<Instant>,
}

#[derive(Debug, Clone)]
struct Conn {
    path: usize,
    dest: String,
    bytes: u64,
    opened: Instant,
    moved_at: Instant,
    /// When its bytes were last reported.
    reported_at: Instant,
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

    /// Path `i`'s measured (or remembered) rate, bytes/s, without its hint.
    pub fn measured(&self, i: usize) -> Option<f64> {
        self.paths.get(i)?.estimate.map(|e| e.0)
    }

    /// Start path `i` from a rate remembered from an earlier run (bytes/s): an estimate
    /// taken `now`, which the samples then move. Ignored if the path was measured already or the rate is not positive.
    pub fn remember(&mut self, now: Instant, i: usize, rate: f64) {
        if let Some(p) = self.paths.get_mut(i) {
            if p.estimate.is_none() && rate.is_finite() && rate > 0.0 {
                p.estimate = Some((rate, now));
                p.idle_unmeasured_since = None;
            }
        }
    }

    /// The rate used for path `i`: its estimate, else the fastest known one (more while
    /// the path carries nothing, see the module doc), else [`DEFAULT_RATE`].
    fn rate_or_guess(&self, i: usize, now: Instant) -> f64 {
        if let Some(r) = self.rate(i).filter(|r| *r > 0.0) {
            return r;
        }
        let base = (0..self.paths.len())
            .filter_map(|j| self.rate(j))
            .filter(|r| *r > 0.0)
            .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.max(r))))
            .unwrap_or(DEFAULT_RATE);
        let growth = match self.paths[i].idle_unmeasured_since {
            Some(t) => {
                let d = now.saturating_since(t).as_secs_f64() / EXPLORE_DOUBLING.as_secs_f64();
                2f64.powf(d.min(EXPLORE_MAX.log2()))
            }
            None => 1.0,
        };
        base * growth
    }

    /// How long a new connection should be held before it is placed: while a probe on a
    /// never-measured path may still produce its first sample (see the module doc).
    /// `None`: place it now.
    pub fn wait(&self, now: Instant) -> Option<Duration> {
        let usable = self.paths.iter().filter(|p| p.input.usable).count();
        if usable < 2 {
            return None;
        }
        (0..self.paths.len())
            .filter(|&i| self.paths[i].input.usable && self.rate(i).is_none())
            .filter_map(|i| self.paths[i].probe_at)
            .map(|t| (t + PROBE_WAIT).saturating_since(now))
            .filter(|d| !d.is_zero())
            .max()
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
        if self.rate(path).is_none() {
            self.paths[path].probe_at.get_or_insert(now);
        }
        self.paths[path].idle_unmeasured_since = None;
        self.conns.insert(
            id,
            Conn {
                path,
                dest: dest.to_string(),
                bytes: 0,
                opened: now,
                moved_at: now,
                reported_at: now,
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
        let rates: Vec<f64> = usable.iter().map(|&j| self.rate_or_guess(j, now)).collect();
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

    /// Connection `id` has carried `bytes` in all (both directions) by `now`. Reports
    /// must come in time order.
    pub fn progress(&mut self, now: Instant, id: ConnId, bytes: u64) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        let delta = bytes.saturating_sub(c.bytes);
        let since = c.reported_at;
        c.reported_at = now;
        if delta == 0 {
            return;
        }
        c.bytes = bytes;
        c.moved_at = now;
        let p = &mut self.paths[c.path];
        let span = now.saturating_since(since);
        if span.is_zero() || delta as f64 / span.as_secs_f64() < BUSY_RATE {
            // A trickle (or no time to judge): not a measure of the path.
            return;
        }
        // Reports of one round share `now`: their busy intervals (since, now] are merged
        // first (the union of intervals ending together is the longest), then counted.
        match &mut p.round {
            Some((from, to, b)) if *to == now => {
                if since < *from {
                    *from = since;
                }
                *b += delta;
            }
            _ => {
                p.flush_round();
                p.round = Some((since, now, delta));
            }
        }
    }

    /// Close the delivery windows that are long enough and update the rate estimates.
    /// Call it after the connections' [`ConnSched::progress`] of one round.
    pub fn tick(&mut self, now: Instant) {
        let open = self.open_per_path();
        for (j, p) in self.paths.iter_mut().enumerate() {
            // Exploration clock of a never-measured path that carries nothing.
            if p.input.usable && p.estimate.is_none() && p.input.rate_hint.is_none() && open[j] == 0
            {
                p.idle_unmeasured_since.get_or_insert(now);
            } else {
                p.idle_unmeasured_since = None;
            }
            p.flush_round();
            let Some((start, bytes, busy)) = p.window else {
                continue;
            };
            let len = if p.estimate.is_some() {
                SAMPLE
            } else {
                FIRST_SAMPLE
            };
            if now.saturating_since(start) < len && open[j] > 0 {
                continue;
            }
            p.window = None;
            if busy < MIN_BUSY {
                continue;
            }
            let sample = bytes as f64 / busy.as_secs_f64();
            if sample > 0.0 {
                let e = p
                    .estimate
                    .map_or(sample, |(e, _)| e + RATE_GAIN * (sample - e));
                p.estimate = Some((e, now));
            }
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
