//! The server's status: a registry of live sessions (agent key, start, command channel,
//! open streams, path addresses) that `spawn_session` fills and the session's end empties,
//! and [`ServerBoard::snapshot`], which asks every session task for its paths' views.
//!
//! Owns: the registry and building [`ServerStatus`]. Must not touch: the listening loop,
//! the handshake policy, the session (read through its command channel only).

use super::fingerprint::fingerprint;
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

/// How long a snapshot waits for a second reading of the counters of paths that have no
/// rate yet.
pub const FIRST_RATE_SAMPLE: Duration = Duration::from_millis(250);

/// One live session in the registry.
pub(super) struct Live {
    pub key: PublicKey,
    pub started: Instant,
    pub cmd: mpsc::UnboundedSender<Cmd>,
    pub open_streams: Arc<AtomicUsize>,
    /// UDP flows open (the relay's count).
    pub udp_flows: Arc<AtomicUsize>,
    pub addrs: super::path_addr::PathAddrs,
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
    /// The egress policy and its refusals (the sessions check with it).
    pub(super) egress: Arc<super::egress::Egress>,
    /// Each agent's share (fair shares, limits, quotas).
    pub(super) shares: Arc<super::shares::Shares>,
    pub(super) live: Mutex<BTreeMap<u64, Live>>,
    /// Each session path's rate meter, fed by every snapshot (a path's rate is known from
    /// the second snapshot on: `braid status --watch`, the dashboard, metrics scrapes).
    rates: Mutex<BTreeMap<(u64, braid_core::PathId), RateMeter>>,
    /// The authorized agent keys (counted in the snapshot).
    /// (The type is `control::Authorized`, spelled out: control reads this board.)
    pub(super) authorized: Option<Arc<std::sync::RwLock<Vec<braid_crypto::PublicKey>>>>,
    /// The file they are read from, if any.
    authorized_file: Option<String>,
}

impl ServerBoard {
    pub(super) fn new(
        cfg: &ServerConfig,
        listen: SocketAddr,
        counters: Arc<HandshakeCounters>,
        (egress, shares): (Arc<super::egress::Egress>, Arc<super::shares::Shares>),
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
            egress,
            shares,
            live: Mutex::new(BTreeMap::new()),
            rates: Mutex::new(BTreeMap::new()),
            authorized: None,
            authorized_file: (cfg.authorized_file.as_ref()).map(|f| f.display().to_string()),
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
    /// within 1 s is listed without paths). A path's rates come from its byte counters in
    /// this and earlier snapshots: when a path has none from the last 3 s (a one-shot
    /// `braid status`), its counters are read again [`FIRST_RATE_SAMPLE`] later, so that
    /// RATE IN/OUT are never `-` for a path in a session.
    pub async fn snapshot(&self) -> ServerStatus {
        let s = self.snapshot_once().await;
        let unmeasured =
            (s.sessions.iter().flat_map(|s| &s.paths)).any(|p| p.receive_rate_bps.is_none());
        if !unmeasured {
            return s;
        }
        tokio::time::sleep(FIRST_RATE_SAMPLE).await;
        self.snapshot_once().await
    }

    /// One snapshot, the rate meters fed once.
    async fn snapshot_once(&self) -> ServerStatus {
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
            let (paths, st) = self.session_paths(id, &core, &addrs, now);
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
        let waiting = HandshakeCounters::get(&self.counters.waiting);
        limits.sessions.used = sessions.len() as u64 + waiting;
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
            handshakes_waiting: waiting,
            totals,
            egress: self.egress.report(),
            shares: self.shares.report(),
            authorized_keys: (self.authorized.as_ref())
                .map(|k| k.read().map_or(0, |k| k.len() as u64)),
            authorized_file: self.authorized_file.clone(),
        }
    }
}

impl ServerBoard {
    /// Session `id`'s paths as the status shows them (`core` from its task, `addrs` its
    /// paths' addresses), their rate meters fed, and their byte totals.
    fn session_paths(
        &self,
        id: u64,
        core: &[crate::status::CorePath],
        addrs: &std::collections::HashMap<braid_core::PathId, super::path_addr::PathAddr>,
        now: Instant,
    ) -> (Vec<PathReport>, Totals) {
        let mut st = Totals::default();
        let mut paths: Vec<PathReport> = core
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
        unique_names(&mut paths, core);
        (paths, st)
    }
}

/// Keep a session's path names unique (they label metrics): the agent names a path and its
/// replacement or UDP probe alike (ids `i` and `i + 8`). Among paths of one name, the
/// validated one in use keeps it (else one in use, else the last); the others become
/// `NAME/ID`. `core[i]` is the path of `paths[i]`.
fn unique_names(paths: &mut [PathReport], core: &[crate::status::CorePath]) {
    let rank = |c: &crate::status::CorePath| match (c.cond.abandoned, c.cond.validated) {
        (false, true) => 2,
        (false, false) => 1,
        (true, _) => 0,
    };
    for i in 0..paths.len() {
        let same: Vec<usize> = (0..paths.len())
            .filter(|&j| paths[j].name == paths[i].name)
            .collect();
        if same.len() < 2 {
            continue;
        }
        let keep = same.iter().copied().max_by_key(|&j| (rank(&core[j]), j));
        for j in same.into_iter().filter(|&j| Some(j) != keep) {
            paths[j].name = format!("{}/{}", paths[j].name, core[j].id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path and its UDP probe (or replacement) share the agent's name: the one in use
    /// keeps it, the other is told apart by its id.
    #[test]
    fn a_name_shared_by_two_paths_stays_on_the_one_in_use() {
        use braid_core::{Config, Instant, Session};
        let mut s = Session::connect(Config::default(), Instant(0), 1, 1);
        s.add_path(Instant(0), 9).unwrap();
        let mut core = crate::status::core_paths(&s, Instant(0));
        let mut paths: Vec<PathReport> = core
            .iter()
            .map(|_| PathReport {
                name: "b".into(),
                ..Default::default()
            })
            .collect();
        let show = |core: &mut Vec<crate::status::CorePath>, v: [(bool, bool); 2]| {
            for (c, (validated, abandoned)) in core.iter_mut().zip(v) {
                c.cond.validated = validated;
                c.cond.abandoned = abandoned;
            }
        };
        // Path 1 over TCP in use, 9 (a UDP probe) validating.
        show(&mut core, [(true, false), (false, false)]);
        unique_names(&mut paths, &core);
        assert_eq!([&paths[0].name, &paths[1].name], ["b", "b/9"]);
        // The probe validated, path 1 abandoned.
        paths.iter_mut().for_each(|p| p.name = "b".into());
        show(&mut core, [(true, true), (true, false)]);
        unique_names(&mut paths, &core);
        assert_eq!([&paths[0].name, &paths[1].name], ["b/1", "b"]);
    }
}
