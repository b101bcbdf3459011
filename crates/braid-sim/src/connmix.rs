//! Connection mix: the aggregate of a device's links when only a share of its connections
//! can use a braid server (packet level) and the rest go direct, each whole on one link
//! chosen by `braid_core::connsched` (the agent's direct mode). A flow-level model, not a
//! packet one: the paper's (003, OPERETTA) figure on the share of enabled servers.
//!
//! Owns: the model and its run. Must not touch: the packet-level simulator (`world`).
//!
//! # Model
//!
//! `workers` clients each open one connection after another, back to back (a browser's
//! connection pool); a connection carries `small` bytes, or `large` with probability
//! `p_large`, and uses the server with probability `share`. Time advances in steps of
//! `step`. On each link, every direct connection on it and the session (when it has
//! connections) are one flow each, sharing the link's rate equally (per-path congestion
//! control: the session's path competes like one TCP flow); a link with no flow idles.
//! The session's rate is split equally between its connections; with OPERETTA the session
//! sends on each link at most what the packet-level allocation gives it (the links in
//! order of energy per bit up to the target), the direct connections take the rest. The scheduler is told
//! each direct connection's bytes after every step (it measures the links from them, as the
//! agent does) and chooses the link of each new direct connection. Energy: each link's
//! power while it carries anything.

use braid_core::connsched::{ConnId, ConnPolicy, ConnSched, PathInput};
use braid_core::rng::Rng;
use braid_core::Instant;
use std::time::Duration;

/// One link of the model.
#[derive(Debug, Clone, Copy)]
pub struct MixLink {
    /// Bytes per second.
    pub rate: f64,
    /// Watts while active.
    pub power_w: f64,
}

/// A run's settings.
#[derive(Debug, Clone)]
pub struct MixConfig {
    /// The links.
    pub links: Vec<MixLink>,
    /// Share of connections (0 to 1) that can use a server.
    pub share: f64,
    /// Connections open at once.
    pub workers: usize,
    /// Bytes of a small connection.
    pub small: f64,
    /// Bytes of a large connection.
    pub large: f64,
    /// Probability of a large connection.
    pub p_large: f64,
    /// How direct connections are placed.
    pub policy: ConnPolicy,
    /// Simulated time.
    pub duration: Duration,
    /// Time step.
    pub step: Duration,
    /// Random seed.
    pub seed: u64,
}

/// A run's outcome.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MixOutcome {
    /// Bytes per second delivered.
    pub throughput: f64,
    /// Joules per megabyte.
    pub j_per_mb: f64,
    /// Connections completed.
    pub connections: u64,
}

struct Conn {
    left: f64,
    /// `Some`: direct, on this link, with its scheduler id and bytes so far.
    direct: Option<(usize, ConnId, f64)>,
}

/// Run the model.
pub fn run(cfg: &MixConfig) -> MixOutcome {
    let n = cfg.links.len();
    let mut sched = ConnSched::new(n, cfg.policy);
    for (i, l) in cfg.links.iter().enumerate() {
        sched.set_path(
            i,
            PathInput {
                usable: true,
                power_w: Some(l.power_w),
                rate_hint: None,
            },
        );
    }
    let mut rng = Rng::new(cfg.seed);
    let dt = cfg.step.as_secs_f64();
    let steps = (cfg.duration.as_secs_f64() / dt) as u64;
    let mut conns: Vec<Conn> = Vec::new();
    let (mut delivered, mut energy, mut done) = (0.0, 0.0, 0u64);
    for k in 0..steps {
        let now = Instant::from_duration(cfg.step * k as u32);
        // Back-to-back connections: refill the pool.
        refill(cfg, &mut sched, &mut rng, now, &mut conns);
        let (per_direct, per_session) = rates(cfg, &conns, dt, &mut energy);
        // Advance; a connection that finishes early leaves its rate unused this step
        // (small at a 10 ms step).
        conns = advance(
            cfg,
            &mut sched,
            now,
            conns,
            (&per_direct, per_session),
            dt,
            (&mut delivered, &mut done),
        );
        sched.tick(now + cfg.step);
    }
    let secs = cfg.duration.as_secs_f64();
    MixOutcome {
        throughput: delivered / secs,
        j_per_mb: if delivered > 0.0 {
            energy / (delivered / 1e6)
        } else {
            0.0
        },
        connections: done,
    }
}

/// Back-to-back connections: opens new ones until the pool has `cfg.workers`; a direct one
/// asks the scheduler for its link.
fn refill(
    cfg: &MixConfig,
    sched: &mut ConnSched,
    rng: &mut Rng,
    now: Instant,
    conns: &mut Vec<Conn>,
) {
    while conns.len() < cfg.workers {
        let size = if rng.chance(cfg.p_large) {
            cfg.large
        } else {
            cfg.small
        };
        let direct = if rng.chance(cfg.share) {
            None
        } else {
            let dest = if size == cfg.large { "large" } else { "small" };
            sched
                .choose(now, dest)
                .ok()
                .map(|(id, path)| (path, id, 0.0))
        };
        conns.push(Conn { left: size, direct });
    }
}

/// Each link's rate per direct connection and the session's rate per connection this step;
/// adds the active links' energy to `energy`.
fn rates(cfg: &MixConfig, conns: &[Conn], dt: f64, energy: &mut f64) -> (Vec<f64>, f64) {
    let n = cfg.links.len();
    // Flows per link: its direct connections, plus the session if it has any.
    let session_conns = conns.iter().filter(|c| c.direct.is_none()).count();
    let mut direct_on = vec![0usize; n];
    for c in conns {
        if let Some((p, _, _)) = c.direct {
            direct_on[p] += 1;
        }
    }
    let caps = session_caps(cfg);
    let mut session_rate = 0.0;
    let mut per_direct = vec![0.0; n];
    for j in 0..n {
        let on = session_conns > 0 && caps[j] > 0.0;
        let flows = direct_on[j] + usize::from(on);
        if flows == 0 {
            continue;
        }
        let fair = cfg.links[j].rate / flows as f64;
        let mine = if on { fair.min(caps[j]) } else { 0.0 };
        session_rate += mine;
        if direct_on[j] > 0 {
            per_direct[j] = (cfg.links[j].rate - mine) / direct_on[j] as f64;
        }
        *energy += cfg.links[j].power_w * dt;
    }
    let per_session = if session_conns > 0 {
        session_rate / session_conns as f64
    } else {
        0.0
    };
    (per_direct, per_session)
}

/// Moves each connection's bytes for one step; returns those still open (finished ones are
/// counted in `done` and closed at the scheduler).
fn advance(
    cfg: &MixConfig,
    sched: &mut ConnSched,
    now: Instant,
    conns: Vec<Conn>,
    (per_direct, per_session): (&[f64], f64),
    dt: f64,
    (delivered, done): (&mut f64, &mut u64),
) -> Vec<Conn> {
    let mut keep = Vec::with_capacity(conns.len());
    for mut c in conns {
        let rate = match c.direct {
            Some((p, _, _)) => per_direct[p],
            None => per_session,
        };
        let moved = (rate * dt).min(c.left);
        c.left -= moved;
        *delivered += moved;
        if let Some((_, id, ref mut bytes)) = c.direct {
            *bytes += moved;
            sched.progress(now + cfg.step, id, *bytes as u64);
        }
        if c.left <= 0.5 {
            *done += 1;
            if let Some((_, id, _)) = c.direct {
                sched.close(now + cfg.step, id);
            }
        } else {
            keep.push(c);
        }
    }
    keep
}

/// Most the session may send on each link: every link for the throughput policy; for
/// OPERETTA the packet-level allocation (eq. 9, as `braid_core::sched::operetta`): links in
/// order of energy per bit, each full until the target `r_1 + alpha * (the others)` is met.
fn session_caps(cfg: &MixConfig) -> Vec<f64> {
    let rates: Vec<f64> = cfg.links.iter().map(|l| l.rate).collect();
    let ConnPolicy::Operetta { alpha } = cfg.policy else {
        return rates;
    };
    let mut order: Vec<usize> = (0..rates.len()).collect();
    let epb = |j: usize| cfg.links[j].power_w / rates[j];
    order.sort_by(|&a, &b| epb(a).total_cmp(&epb(b)));
    let total: f64 = rates.iter().sum();
    let first = order.first().map_or(0.0, |&j| rates[j]);
    let mut want = first + alpha.clamp(0.0, 1.0) * (total - first);
    let mut caps = vec![0.0; rates.len()];
    for j in order {
        caps[j] = rates[j].min(want);
        want -= caps[j];
    }
    caps
}

/// The paper's three interfaces (Table III: 1, 0.7 and 2 Mbit/s; 634, 95 and 900 mW).
pub fn paper_links() -> Vec<MixLink> {
    [(1.0, 0.634), (0.7, 0.095), (2.0, 0.9)]
        .iter()
        .map(|&(mbit, w)| MixLink {
            rate: mbit * 1e6 / 8.0,
            power_w: w,
        })
        .collect()
}

impl MixConfig {
    /// The paper's links, 8 connections at once (90 % of 20 KB, 10 % of 500 KB), 600 s.
    pub fn paper(share: f64, policy: ConnPolicy) -> MixConfig {
        MixConfig {
            links: paper_links(),
            share,
            workers: 8,
            small: 20e3,
            large: 500e3,
            p_large: 0.1,
            policy,
            duration: Duration::from_secs(600),
            step: Duration::from_millis(10),
            seed: 15,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn short(share: f64) -> MixConfig {
        MixConfig {
            duration: Duration::from_secs(120),
            ..MixConfig::paper(share, ConnPolicy::Throughput)
        }
    }

    #[test]
    fn all_through_a_server_fills_every_link() {
        let o = run(&short(1.0));
        let sum: f64 = paper_links().iter().map(|l| l.rate).sum();
        assert!(o.throughput > 0.97 * sum, "{o:?}");
    }

    #[test]
    fn direct_connections_beat_one_link_and_a_server_share_helps() {
        let best_one = paper_links().iter().map(|l| l.rate).fold(0.0, f64::max);
        let none = run(&short(0.0));
        let quarter = run(&short(0.25));
        assert!(none.throughput > 1.3 * best_one, "{none:?}");
        assert!(quarter.throughput > none.throughput, "{none:?} {quarter:?}");
    }

    #[test]
    fn the_model_is_deterministic() {
        assert_eq!(run(&short(0.5)), run(&short(0.5)));
    }
}
