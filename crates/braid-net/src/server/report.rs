//! The server's status: a registry of live sessions (agent key, start, command channel,
//! open streams, path addresses) that `spawn_session` fills and the session's end empties,
//! and [`ServerBoard::snapshot`], which asks every session task for its paths' views.
//!
//! Owns: the registry and building [`ServerStatus`]. Must not touch: the listening loop,
//! the handshake policy, the session (read through its command channel only).

use super::{HandshakeCounters, ServerConfig};
use crate::bridge::Cmd;
use crate::status::{
    add_counters, display_state, Limit, PathReport, RateMeter, ServerLimits, ServerSession,
    ServerStatus, Totals, STATUS_VERSION,
};
use braid_core::path::PathStats;
use braid_crypto::PublicKey;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// `SHA256:` and the unpadded base64 of the key's SHA-256, as `ssh-keygen -l` prints.
pub fn fingerprint(key: &PublicKey) -> String {
    use base64::Engine as _;
    let d = ring::digest::digest(&ring::digest::SHA256, &key.0);
    format!(
        "SHA256:{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(d.as_ref())
    )
}

/// One live session in the registry.
pub(super) struct Live {
    pub key: PublicKey,
    pub started: Instant,
    pub cmd: mpsc::UnboundedSender<Cmd>,
    pub open_streams: Arc<AtomicUsize>,
    /// UDP flows open (the relay's count).
    pub udp_flows: Arc<AtomicUsize>,
    pub addrs: super::session::PathAddrs,
    /// Its first exchange completed (set by the session's first-exchange watch).
    pub established: Arc<AtomicBool>,
    /// Its inbound ports.
    pub inbound: Arc<super::inbound::SessionPorts>,
}

/// The server's status, readable while it runs (see `Server::status`).
pub struct ServerBoard {
    started: Instant,
    listen: String,
    limits: ServerLimits,
    counters: Arc<HandshakeCounters>,
    pub(super) live: Mutex<BTreeMap<u64, Live>>,
    /// Each session path's rate meter, fed by every snapshot (a path's rate is known from
    /// the second snapshot on: `braid status --watch`, the dashboard, metrics scrapes).
    rates: Mutex<BTreeMap<(u64, braid_core::PathId), RateMeter>>,
}

impl ServerBoard {
    pub(super) fn new(
        cfg: &ServerConfig,
        listen: SocketAddr,
        counters: Arc<HandshakeCounters>,
    ) -> ServerBoard {
        let lim = |max: u64| Limit { max, used: 0 };
        ServerBoard {
            started: Instant::now(),
            listen: listen.to_string(),
            limits: ServerLimits {
                sessions: lim(cfg.max_sessions as u64),
                streams_per_session: lim(cfg.max_streams),
                buffered_bytes_per_session: lim(cfg.max_buffered),
                udp_flows_per_session: lim(cfg.max_udp_flows as u64),
            },
            counters,
            live: Mutex::new(BTreeMap::new()),
            rates: Mutex::new(BTreeMap::new()),
        }
    }

    pub(super) fn insert(&self, id: u64, live: Live) {
        if let Ok(mut m) = self.live.lock() {
            m.insert(id, live);
        }
    }

    pub(super) fn remove(&self, id: u64) {
        if let Ok(mut m) = self.live.lock() {
            m.remove(&id);
        }
    }

    /// Ids and agent keys of the live sessions.
    pub fn sessions(&self) -> Vec<(u64, PublicKey)> {
        self.live
            .lock()
            .map(|m| m.iter().map(|(id, l)| (*id, l.key)).collect())
            .unwrap_or_default()
    }

    /// A snapshot: every session asked for its paths (a session that does not answer
    /// within 1 s is listed without paths).
    pub async fn snapshot(&self) -> ServerStatus {
        let now = Instant::now();
        let asks: Vec<_> = self
            .live
            .lock()
            .map(|m| {
                m.iter()
                    .map(|(id, l)| {
                        let addrs = l.addrs.lock().map(|a| a.clone()).unwrap_or_default();
                        let ports = l.inbound.ports().iter().map(|p| p.to_string()).collect();
                        (
                            (*id, ports),
                            (fingerprint(&l.key), l.key.to_base64()),
                            now.duration_since(l.started).as_secs_f64(),
                            l.open_streams.load(Ordering::Relaxed) as u64,
                            l.udp_flows.load(Ordering::Relaxed) as u64,
                            l.cmd.clone(),
                            addrs,
                            l.established.load(Ordering::Relaxed),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut sessions = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        let mut totals = Totals::default();
        let (mut busiest, mut most_flows, mut most_buffered) = (0, 0, 0);
        for ((id, inbound_ports), (fp, key), age_s, open_streams, flows, cmd, addrs, established) in
            asks
        {
            let core =
                tokio::time::timeout(Duration::from_secs(1), crate::status::query_core(&cmd))
                    .await
                    .ok()
                    .flatten()
                    .unwrap_or_default();
            most_buffered = most_buffered.max(core.buffered);
            let datagrams = core.datagrams;
            let core = core.paths;
            let mut st = Totals::default();
            let paths: Vec<PathReport> = core
                .iter()
                .map(|c| {
                    let mut p = PathReport {
                        name: c.peer_name.clone().unwrap_or_else(|| c.id.to_string()),
                        remote_address: addrs.get(&c.id).map(|a| a.peer.to_string()),
                        ..Default::default()
                    };
                    let mut sum = PathStats::default();
                    add_counters(&mut sum, &c.stats);
                    p.fill_core(c, &sum);
                    p.state = Some(display_state(Some(c), false));
                    if let Ok(mut rates) = self.rates.lock() {
                        let meter = rates.entry((id, c.id)).or_default();
                        meter.update(now, p.bytes_sent, p.bytes_received);
                        p.set_rates(meter);
                    }
                    st.bytes_sent += p.bytes_sent;
                    st.bytes_received += p.bytes_received;
                    p
                })
                .collect();
            totals.bytes_sent += st.bytes_sent;
            totals.bytes_received += st.bytes_received;
            busiest = busiest.max(open_streams);
            most_flows = most_flows.max(flows);
            seen.insert(id);
            sessions.push(ServerSession {
                id: format!("{id:016x}"),
                agent_key_fingerprint: fp,
                agent_key: key,
                age_s,
                established,
                paths,
                open_streams,
                datagrams,
                totals: st,
                inbound_ports,
            });
        }
        if let Ok(mut rates) = self.rates.lock() {
            rates.retain(|(id, _), _| seen.contains(id));
        }
        let mut limits = self.limits.clone();
        limits.sessions.used = sessions.len() as u64;
        limits.streams_per_session.used = busiest;
        limits.udp_flows_per_session.used = most_flows;
        limits.buffered_bytes_per_session.used = most_buffered;
        ServerStatus {
            version: STATUS_VERSION,
            uptime_s: now.duration_since(self.started).as_secs_f64(),
            listen: self.listen.clone(),
            sessions,
            limits,
            handshakes_accepted: HandshakeCounters::get(&self.counters.accepted),
            handshakes_refused: HandshakeCounters::get(&self.counters.refused),
            totals,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_sha256_base64_like_ssh() {
        let k = PublicKey([7u8; 32]);
        let f = fingerprint(&k);
        assert!(f.starts_with("SHA256:"), "{f}");
        assert_eq!(f.len(), 7 + 43, "{f}");
        assert_ne!(f, fingerprint(&PublicKey([8u8; 32])));
    }
}
