//! Each agent's share of the server as shown (`braid status`, the `/metrics` families
//! `braid_server_agent_*`; docs/status.md): bytes moved, its rate limit and the fair-share
//! cap it has now, its quotas and what it used of them.
//!
//! Owns: [`SharesReport`], [`AgentShare`]. Must not touch: the limits and their counting
//! (`server::shares` fills these).

use serde::{Deserialize, Serialize};

/// The agents' shares of the server.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SharesReport {
    /// The capacity the fair-share controller believes the server has, bytes per second
    /// (what all agents were seen to get together, falling slowly).
    pub capacity_bytes_per_sec: u64,
    /// One entry per agent key that had a session since the server started, or that has
    /// limits configured.
    pub agents: Vec<AgentShare>,
}

/// One agent key's share (all its sessions together).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentShare {
    /// `SHA256:...`, as the sessions' `agent_key_fingerprint`.
    pub agent_key_fingerprint: String,
    /// Stream bytes the server sent to this agent since it started.
    pub sent_bytes: u64,
    /// Stream bytes the server received from it since it started.
    pub received_bytes: u64,
    /// Its rate limit on what the server sends it, bytes per second (`None`: none).
    pub rate_limit_bytes_per_sec: Option<u64>,
    /// The fair-share cap it has now, bytes per second (`None`: not capped; it is only
    /// while it takes more than an equal share from agents that want more).
    pub fair_cap_bytes_per_sec: Option<u64>,
    /// Bytes both ways this UTC day, and its daily quota.
    pub day_bytes: u64,
    pub day_quota_bytes: Option<u64>,
    /// Bytes both ways this UTC month, and its monthly quota.
    pub month_bytes: u64,
    pub month_quota_bytes: Option<u64>,
    /// "day" or "month" while a quota is used up (its connections are refused), else
    /// `None`.
    pub quota_reached: Option<String>,
}
