//! Each agent key's share of the server (docs/deployment.md, "Sharing a server"): fair
//! shares between agents, optional per-agent rate limits, and byte quotas per UTC day and
//! month that survive restarts.
//!
//! - `bucket`: a token bucket in bytes (sans-IO),
//! - `fair`: the fair-share controller (sans-IO: rates and wants in, caps out),
//! - `quota`: bytes per day and month against the limits (sans-IO),
//! - `agent`: one agent key's state: the send gate of its sessions (the rate it may send
//!   at: its limit, or its fair-share cap when lower), and the meter of its streams
//!   (quotas, whether it wants more).
//!
//! Owns: [`SharesPolicy`] (the settings), [`Shares`] (one server's agents, the controller
//! tick, the usage file). Must not touch: the session's congestion control (the gate only
//! holds a session's sending back, like a slower link), the relay's sockets, the
//! handshake.
//!
//! The rate limit and the fair-share cap count every datagram the server sends to the
//! agent (UDP payload: data, retransmissions, acknowledgements), over all its sessions and
//! paths; quotas count stream bytes both ways.

mod agent;
mod bucket;
mod fair;
mod quota;

pub use agent::{AgentShare, QUOTA_REACHED};
pub use bucket::TokenBucket;
pub use fair::{FairShare, Tick, HEADROOM};
pub use quota::{QuotaLimits, Usage};

use super::fingerprint::fingerprint;
use crate::status::SharesReport;
use braid_crypto::PublicKey;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// How often the fair-share controller looks at what each agent sent.
pub const TICK: Duration = Duration::from_millis(200);

/// How often the usage file is written (when something changed).
pub const SAVE: Duration = Duration::from_secs(5);

/// One agent key's limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AgentLimits {
    /// What the server may send it, bytes per second (all its sessions and paths).
    pub rate: Option<u64>,
    /// Its byte quotas (stream bytes both ways).
    pub quota: QuotaLimits,
}

/// The server's sharing settings (`[limits]` in its config file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharesPolicy {
    /// Cap an agent that takes more than an equal share while others want more (on by
    /// default).
    pub fair: bool,
    /// Limits of every agent key not in `agents`.
    pub default: AgentLimits,
    /// Limits per agent key.
    pub agents: HashMap<PublicKey, AgentLimits>,
}

impl Default for SharesPolicy {
    fn default() -> Self {
        SharesPolicy {
            fair: true,
            default: AgentLimits::default(),
            agents: HashMap::new(),
        }
    }
}

impl SharesPolicy {
    /// `key`'s limits.
    pub fn limits(&self, key: &PublicKey) -> AgentLimits {
        self.agents.get(key).copied().unwrap_or(self.default)
    }
}

/// One server's agents and their shares.
#[derive(Debug)]
pub struct Shares {
    policy: SharesPolicy,
    agents: Mutex<HashMap<PublicKey, Arc<AgentShare>>>,
    fair: Mutex<FairShare<PublicKey>>,
    usage_file: Option<PathBuf>,
    dirty: Arc<AtomicBool>,
}

impl Shares {
    /// The shares under `policy`, with the usage kept in `usage_file` (read now: quotas
    /// go on from where the last run left them).
    pub fn new(policy: SharesPolicy, usage_file: Option<PathBuf>) -> Arc<Shares> {
        let dirty = Arc::new(AtomicBool::new(false));
        let mut agents = HashMap::new();
        let saved = usage_file.as_deref().map(load).unwrap_or_default();
        for (key, usage) in saved {
            let a = AgentShare::new(key, policy.limits(&key), usage, dirty.clone());
            agents.insert(key, Arc::new(a));
        }
        Arc::new(Shares {
            policy,
            agents: Mutex::new(agents),
            fair: Mutex::default(),
            usage_file,
            dirty,
        })
    }

    /// The usage file beside the state file `state` (`STATE.usage`).
    pub fn usage_file_of(state: &Path) -> PathBuf {
        let mut p = state.as_os_str().to_owned();
        p.push(".usage");
        PathBuf::from(p)
    }

    /// `key`'s share (one for all its sessions).
    pub fn agent(&self, key: PublicKey) -> Arc<AgentShare> {
        let mut m = self.agents.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(key)
            .or_insert_with(|| {
                let u = Usage::default();
                Arc::new(AgentShare::new(
                    key,
                    self.policy.limits(&key),
                    u,
                    self.dirty.clone(),
                ))
            })
            .clone()
    }

    /// One controller tick of `dt`: what each agent sent and whether it wanted more, and
    /// the caps that follow (none when fair shares are off).
    pub fn tick(&self, now: Instant, dt: Duration) {
        let agents: Vec<Arc<AgentShare>> = {
            let m = self.agents.lock().unwrap_or_else(|p| p.into_inner());
            m.values().cloned().collect()
        };
        let ticks: Vec<(PublicKey, Tick)> =
            agents.iter().map(|a| (a.key(), a.take_tick())).collect();
        let active: Vec<(PublicKey, Tick)> = ticks
            .into_iter()
            .filter(|(_, t)| t.sent > 0 || t.wanting)
            .collect();
        let caps = if self.policy.fair {
            let mut f = self.fair.lock().unwrap_or_else(|p| p.into_inner());
            f.tick(dt, &active)
        } else {
            Vec::new()
        };
        for a in &agents {
            let cap = caps.iter().find(|(k, _)| *k == a.key()).and_then(|c| c.1);
            a.set_cap(now, cap);
        }
    }

    /// Tick every [`TICK`] and write the usage file every [`SAVE`] (when it changed),
    /// until dropped.
    pub async fn run(self: Arc<Self>) {
        let mut every = tokio::time::interval(TICK);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (mut last, mut saved) = (Instant::now(), Instant::now());
        loop {
            every.tick().await;
            let now = Instant::now();
            self.tick(now, now - last);
            last = now;
            if now - saved >= SAVE {
                saved = now;
                self.save();
            }
        }
    }

    /// Write the usage file if anything was counted since the last write.
    pub fn save(&self) {
        let Some(path) = &self.usage_file else { return };
        if !self.dirty.swap(false, Ordering::Relaxed) {
            return;
        }
        let mut text = String::from(
            "# braid server: stream bytes each agent key moved this UTC day and month \
             (quotas): KEY DAY DAY_BYTES MONTH MONTH_BYTES\n",
        );
        let m = self.agents.lock().unwrap_or_else(|p| p.into_inner());
        for (k, a) in m.iter() {
            text.push_str(&format!("{} {}\n", k.to_base64(), a.usage().to_line()));
        }
        drop(m);
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let r = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path));
        if let Err(e) = r {
            warn!(file = %path.display(), "cannot write the agents' usage ({e}): quotas start again from zero after a restart; make the state directory writable");
        }
    }

    /// The agents' shares as shown (`braid status`, metrics).
    pub fn report(&self) -> SharesReport {
        let secs = unix_secs();
        let mut agents: Vec<_> = {
            let m = self.agents.lock().unwrap_or_else(|p| p.into_inner());
            m.values().map(|a| a.report(secs)).collect()
        };
        for (k, l) in &self.policy.agents {
            let fp = fingerprint(k);
            if !agents.iter().any(|a| a.agent_key_fingerprint == fp) {
                let a = AgentShare::new(*k, *l, Usage::default(), self.dirty.clone());
                agents.push(a.report(secs));
            }
        }
        agents.sort_by(|a, b| a.agent_key_fingerprint.cmp(&b.agent_key_fingerprint));
        let capacity = self.fair.lock().map_or(0, |f| f.capacity());
        SharesReport {
            capacity_bytes_per_sec: capacity,
            agents,
        }
    }
}

/// Seconds since the unix epoch now.
pub(crate) fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The usage kept in `path` (nothing if there is no file; a line that is not one is
/// skipped with a warning).
fn load(path: &Path) -> Vec<(PublicKey, Usage)> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            warn!(file = %path.display(), "cannot read the agents' usage ({e}): quotas start from zero");
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let parsed = line.split_once(' ').and_then(|(k, rest)| {
            let key = braid_crypto::parse_public_key(k).ok()?;
            Some((key, Usage::from_line(rest)?))
        });
        match parsed {
            Some(p) => out.push(p),
            None => {
                warn!(file = %path.display(), line = i + 1, "not a usage line (KEY DAY DAY_BYTES MONTH MONTH_BYTES): skipped")
            }
        }
    }
    info!(file = %path.display(), agents = out.len(), "agents' usage loaded");
    out
}

#[cfg(test)]
mod tests;
