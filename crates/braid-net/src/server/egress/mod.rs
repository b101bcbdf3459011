//! The server's egress policy at work: where an agent's connections and datagrams may go
//! (docs/deployment.md, "Egress"). The relay asks [`AgentEgress::check`] with the address
//! it is about to connect or send to, after name resolution, so a name that resolves to
//! 127.0.0.1 is refused like 127.0.0.1 itself; a refusal is counted per agent key (`braid
//! status`, metrics) and logged once per agent and destination a minute, naming the rule.
//!
//! - `rule`: one rule, `CIDR[:PORTS]`, parsed and matched,
//! - `policy`: the decision (sans-IO: built-in rules, the operator's, which one wins),
//! - `host`: the server's own addresses (interfaces, re-read every 2 s),
//! - `log`: when a refusal is logged.
//!
//! Owns: [`Egress`] (the policy, the addresses, the counters and the log of one server)
//! and [`AgentEgress`] (one session's handle). Must not touch: connecting and sending (the
//! relay's), the SOCKS5 and HTTP answers (the agent's).

mod host;
mod log;
mod policy;
mod rule;

pub use host::HostCache;
pub use policy::{Action, Builtin, Decision, EgressPolicy, HostAddrs, Matched, Source};
pub use rule::{Cidr, Ports, Rule};

use super::fingerprint::fingerprint;
use crate::status::{EgressAgent, EgressReport};
use braid_crypto::PublicKey;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What was refused: a connection (a stream's target) or a datagram (a UDP flow's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A TCP connection.
    Connection,
    /// A UDP datagram.
    Datagram,
}

/// One agent key's refusals.
#[derive(Debug, Default)]
struct Refusals {
    connections: AtomicU64,
    datagrams: AtomicU64,
}

/// One server's egress policy, its view of the server's addresses, and the refusals.
#[derive(Debug)]
pub struct Egress {
    policy: EgressPolicy,
    host: HostCache,
    agents: Mutex<HashMap<PublicKey, Arc<Refusals>>>,
    log: Mutex<log::RefusalLog>,
}

impl Egress {
    /// The server's egress with `policy`.
    pub fn new(policy: EgressPolicy) -> Arc<Egress> {
        Arc::new(Egress {
            policy,
            host: HostCache::default(),
            agents: Mutex::default(),
            log: Mutex::default(),
        })
    }

    /// The handle a session of agent `key` checks its destinations with.
    pub fn agent(self: &Arc<Self>, key: PublicKey) -> AgentEgress {
        let mut m = self.agents.lock().unwrap_or_else(|p| p.into_inner());
        AgentEgress {
            egress: self.clone(),
            key,
            counts: m.entry(key).or_default().clone(),
        }
    }

    /// The server's addresses now (cached; see `host`).
    pub fn host(&self) -> Arc<HostAddrs> {
        self.host.get()
    }

    /// The policy's switches and the refusals so far, per agent key.
    pub fn report(&self) -> EgressReport {
        let m = self.agents.lock().unwrap_or_else(|p| p.into_inner());
        let mut r = EgressReport {
            deny_private: self.policy.deny_private,
            rules: self.policy.rule_count() as u64,
            ..Default::default()
        };
        for (key, c) in m.iter() {
            let a = EgressAgent {
                agent_key_fingerprint: fingerprint(key),
                refused_connections: c.connections.load(Ordering::Relaxed),
                refused_datagrams: c.datagrams.load(Ordering::Relaxed),
            };
            r.refused_connections += a.refused_connections;
            r.refused_datagrams += a.refused_datagrams;
            if a.refused_connections + a.refused_datagrams > 0 {
                r.agents.push(a);
            }
        }
        r.agents
            .sort_by(|a, b| a.agent_key_fingerprint.cmp(&b.agent_key_fingerprint));
        r
    }
}

/// One agent's view of the server's egress (each session holds one).
#[derive(Debug, Clone)]
pub struct AgentEgress {
    egress: Arc<Egress>,
    key: PublicKey,
    counts: Arc<Refusals>,
}

impl AgentEgress {
    /// May this agent reach `dest` (the address about to be connected or sent to)? A
    /// refusal is counted and logged ([`AgentEgress::refused`]).
    pub fn check(&self, dest: SocketAddr, kind: Kind) -> bool {
        self.check_with(dest, kind, &self.egress.host())
    }

    /// [`AgentEgress::check`] with the server's addresses read by the caller (once for a
    /// batch of datagrams).
    pub fn check_with(&self, dest: SocketAddr, kind: Kind, host: &HostAddrs) -> bool {
        let d = self.decide(dest, host);
        if !d.allowed {
            self.refused(dest, &d, kind);
        }
        d.allowed
    }

    /// The decision for `dest`, neither counted nor logged.
    pub fn decide(&self, dest: SocketAddr, host: &HostAddrs) -> Decision {
        self.egress.policy.decide(&self.key, dest, host)
    }

    /// The server's addresses now (see [`Egress::host`]).
    pub fn host(&self) -> Arc<HostAddrs> {
        self.egress.host()
    }

    /// Count one more refusal (of a destination whose refusal was just logged or checked
    /// for logging); always `false`, the answer to "allowed?".
    pub fn count_refused(&self, kind: Kind) -> bool {
        let c = match kind {
            Kind::Connection => &self.counts.connections,
            Kind::Datagram => &self.counts.datagrams,
        };
        c.fetch_add(1, Ordering::Relaxed);
        false
    }

    /// Count a refusal of `dest` by `d` and log it if this agent's refusals of `dest`
    /// were not logged in the last minute.
    pub fn refused(&self, dest: SocketAddr, d: &Decision, kind: Kind) {
        self.count_refused(kind);
        let now = std::time::Instant::now();
        let mut log = self.egress.log.lock().unwrap_or_else(|p| p.into_inner());
        if log.should_log(now, self.key, dest) {
            tracing::warn!(
                agent = %fingerprint(&self.key),
                %dest,
                rule = %d.rule,
                ?kind,
                "egress refused by the server's policy (logged once a minute per destination; \
                 open it with an [egress] allow rule or --egress-allow if it is meant to be reached)"
            );
        }
    }
}
