//! The server's egress refusals as shown (`braid status`, the `/metrics` family
//! `braid_server_egress_refused_total`; docs/status.md): the policy's switches and the
//! connections and datagrams refused per agent key since the server started.
//!
//! Owns: [`EgressReport`], [`EgressAgent`]. Must not touch: the policy and its counters
//! (`server::egress` fills these).

use serde::{Deserialize, Serialize};

/// The server's egress policy and what it refused.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EgressReport {
    /// The private and unique-local ranges are refused too (`deny_private`).
    pub deny_private: bool,
    /// The operator's rules (global and per agent key).
    pub rules: u64,
    /// Connections refused since start, all agents.
    pub refused_connections: u64,
    /// UDP datagrams refused (dropped) since start, all agents.
    pub refused_datagrams: u64,
    /// Per agent key with at least one refusal, by fingerprint.
    pub agents: Vec<EgressAgent>,
}

/// One agent key's refusals since the server started (across its sessions).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EgressAgent {
    /// `SHA256:...`, as the sessions' `agent_key_fingerprint`.
    pub agent_key_fingerprint: String,
    /// Connections refused (SOCKS5 reply 2, HTTP 403 at the agent).
    pub refused_connections: u64,
    /// UDP datagrams refused (dropped).
    pub refused_datagrams: u64,
}
