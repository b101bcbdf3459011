//! The agent's status board: the latest [`AgentStatus`], refreshed by the session loop on
//! its 200 ms tick (and cleared when a session ends), plus the table of open proxied
//! connections and UDP associations with their byte counters, which the front ends keep.
//!
//! Each connection and flow also shows the way it took (`session`, `direct`, `bypass`,
//! `pin PATH`), and the board counts connections and flows per way.
//!
//! Per-path byte and packet counters are cumulative over the agent's life: each session's
//! counts are added to those of the sessions before it (the core's counters start from 0 in
//! every session). The loss rate, RTTs and window are the current session's.
//!
//! Owns: building the agent's snapshot from the core's path views, the socket table's
//! addresses and the policy state handed to it; the per-path meters (silence, energy) and
//! counters carried over from ended sessions; the connection table. Must not touch: the session (it gets views read by the session task),
//! sockets, path decisions, how the snapshot is served (braid-ops).

use super::AgentConfig;
use crate::status::{
    add_counters, display_state, loss_rate, AgentStatus, CorePath, DatagramReport, FlowReport,
    PathMeter, PathReport, PowerModel, RateMeter, SessionReport, ShownState, StreamReport, Totals,
    DOWN_AFTER, STATUS_VERSION,
};
use crate::udp::PathBind;
use braid_core::path::PathStats;
use braid_core::PathId;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What the session loop hands to [`StatusBoard::publish`] besides the core's views.
pub(super) struct PolicyView {
    /// Per configured path: over its cap now.
    pub over_cap: Vec<bool>,
    /// Per configured path: bytes counted against its cap this period.
    pub cap_used: Vec<Option<u64>>,
    /// Per path id: (local address, remote address) of its socket.
    pub addrs: HashMap<PathId, (Option<SocketAddr>, SocketAddr)>,
    /// Per configured path: the interface an `auto` slot took now.
    pub auto: Vec<Option<String>>,
    /// Per configured path: behind a captive portal (`Some`, with its URL where known).
    pub captive: Vec<Option<Option<String>>>,
}

/// The current session, as the loop knows it.
pub(super) struct SessionMeta {
    pub id: u64,
    pub server: SocketAddr,
    pub since: Instant,
}

/// Byte counters of one open connection or flow (shared with the task relaying it).
#[derive(Debug, Default)]
pub struct Counters {
    /// From the application.
    pub up: AtomicU64,
    /// To the application.
    pub down: AtomicU64,
}

#[derive(Debug)]
struct Conn {
    proxy: &'static str,
    client: String,
    destination: Mutex<String>,
    flow: Option<u32>,
    opened: Instant,
    counters: Arc<Counters>,
    path: Mutex<Option<String>>,
    rule: Mutex<Option<String>>,
}

/// Removes its connection from the table when dropped.
pub(super) struct ConnGuard {
    board: Arc<StatusBoard>,
    key: u64,
    conn: Arc<Conn>,
}

impl ConnGuard {
    /// The connection's counters.
    pub fn counters(&self) -> &Counters {
        &self.conn.counters
    }

    /// The connection's counters, shared (direct mode's scheduler reads them).
    pub fn shared_counters(&self) -> Arc<Counters> {
        self.conn.counters.clone()
    }

    /// Where the connection goes: `session` or a path's name (direct mode).
    pub fn set_path(&self, p: String) {
        if let Ok(mut x) = self.conn.path.lock() {
            *x = Some(p);
        }
    }

    /// The way it took (`session`, `direct`, `bypass`, `pin PATH`); each new way is
    /// counted once per connection in the board's per-rule counters.
    pub fn set_rule(&self, r: String) {
        if let Ok(mut x) = self.conn.rule.lock() {
            if x.as_ref() != Some(&r) {
                if let Ok(mut c) = self.board.rule_counts.lock() {
                    *c.entry(r.clone()).or_default() += 1;
                }
                *x = Some(r);
            }
        }
    }

    /// A flow's latest destination.
    pub fn set_destination(&self, d: String) {
        if let Ok(mut x) = self.conn.destination.lock() {
            if *x != d {
                *x = d;
            }
        }
    }
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        if let Ok(mut t) = self.board.conns.lock() {
            t.remove(&self.key);
        }
    }
}

/// The agent's status, readable at any time (see [`crate::agent::Agent::status`]).
#[derive(Debug)]
pub struct StatusBoard {
    started: Instant,
    base: Vec<PathReport>,
    power: Vec<Option<PowerModel>>,
    /// Per configured path: (counts of the ended sessions, counts of the current one so far).
    counts: Mutex<Vec<(PathStats, PathStats)>>,
    latest: Mutex<AgentStatus>,
    /// Per path shown `frozen`: when it turns `down` if nothing arrives (the silence is
    /// judged when a snapshot is read, not only at the publishing tick).
    down_at: Mutex<Vec<Option<Instant>>>,
    /// Per configured path: its energy meter and its rate meter (both ways).
    meters: Mutex<Vec<(PathMeter, RateMeter)>>,
    conns: Mutex<BTreeMap<u64, Arc<Conn>>>,
    next: AtomicU64,
    /// `session` or `direct` (direct mode on), see [`StatusBoard::set_mode`].
    mode: Mutex<Option<String>>,
    /// Why the last handshake failed, until a session starts.
    session_error: Mutex<Option<String>>,
    /// Connections and flows per way taken (see [`ConnGuard::set_rule`]).
    rule_counts: Mutex<BTreeMap<String, u64>>,
}

fn interface(b: &PathBind) -> Option<String> {
    match b {
        PathBind::Interface(i) => Some(i.clone()),
        PathBind::Address(_) | PathBind::Auto => None,
    }
}

/// The local address a path shows: its socket's, with the address it sends from (`attach`,
/// the path manager's choice) in place of an unspecified one (a socket bound to an
/// interface is bound to `0.0.0.0`; issue 38 item 6).
pub(super) fn shown_local(socket: SocketAddr, attach: Option<std::net::IpAddr>) -> SocketAddr {
    match attach {
        Some(ip) if socket.ip().is_unspecified() => SocketAddr::new(ip, socket.port()),
        _ => socket,
    }
}

impl StatusBoard {
    pub(super) fn new(cfg: &AgentConfig) -> Arc<StatusBoard> {
        let now = Instant::now();
        let base: Vec<PathReport> = cfg
            .paths
            .iter()
            .map(|p| PathReport {
                name: p.name.clone(),
                interface: interface(&p.bind),
                auto: p.bind == PathBind::Auto,
                state: Some(ShownState::Down),
                cap_bytes: p.policy.cap.map(|c| c.bytes),
                power_w: p.policy.power_w,
                nj_per_byte: p.policy.nj_per_byte,
                energy_j: PowerModel::new(p.policy.power_w, p.policy.nj_per_byte).map(|_| 0.0),
                ..Default::default()
            })
            .collect();
        let latest = AgentStatus {
            version: STATUS_VERSION,
            paths: base.clone(),
            ..Default::default()
        };
        Arc::new(StatusBoard {
            started: now,
            power: cfg
                .paths
                .iter()
                .map(|p| PowerModel::new(p.policy.power_w, p.policy.nj_per_byte))
                .collect(),
            counts: Mutex::new(vec![Default::default(); cfg.paths.len()]),
            meters: Mutex::new(
                cfg.paths
                    .iter()
                    .map(|_| (PathMeter::new(), RateMeter::new()))
                    .collect(),
            ),
            base,
            latest: Mutex::new(latest),
            down_at: Mutex::new(vec![None; cfg.paths.len()]),
            conns: Mutex::new(BTreeMap::new()),
            next: AtomicU64::new(1),
            mode: Mutex::new(None),
            session_error: Mutex::new(None),
            rule_counts: Mutex::new(BTreeMap::new()),
        })
    }

    /// The latest snapshot, with the uptime, connections and flows as of now.
    pub fn snapshot(&self) -> AgentStatus {
        let now = Instant::now();
        let mut s = self.latest.lock().map(|s| s.clone()).unwrap_or_default();
        s.uptime_s = now.duration_since(self.started).as_secs_f64();
        s.mode = self.mode.lock().ok().and_then(|m| m.clone());
        s.rules = self
            .rule_counts
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default();
        if s.session.is_none() {
            s.session_error = self.session_error.lock().ok().and_then(|e| e.clone());
        }
        if let Ok(d) = self.down_at.lock() {
            for (p, at) in s.paths.iter_mut().zip(d.iter()) {
                if at.is_some_and(|t| now >= t) && p.state == Some(ShownState::Frozen) {
                    p.state = Some(ShownState::Down);
                }
            }
        }
        if let Some(sess) = s.session.as_mut() {
            // `age_s` was stored as the session's start, relative to the agent's.
            sess.age_s = (s.uptime_s - sess.age_s).max(0.0);
        }
        let conns: Vec<Arc<Conn>> = self
            .conns
            .lock()
            .map(|t| t.values().cloned().collect())
            .unwrap_or_default();
        for c in conns {
            let (up, down) = (
                c.counters.up.load(Ordering::Relaxed),
                c.counters.down.load(Ordering::Relaxed),
            );
            let destination = c.destination.lock().map(|d| d.clone()).unwrap_or_default();
            let age_s = now.duration_since(c.opened).as_secs_f64();
            let path = c.path.lock().ok().and_then(|p| p.clone());
            let rule = c.rule.lock().ok().and_then(|p| p.clone());
            match c.flow {
                Some(flow) => s.flows.push(FlowReport {
                    flow,
                    client: c.client.clone(),
                    destination,
                    bytes_up: up,
                    bytes_down: down,
                    age_s,
                    path,
                    rule,
                }),
                None => s.streams.push(StreamReport {
                    proxy: c.proxy.to_string(),
                    client: c.client.clone(),
                    destination,
                    bytes_up: up,
                    bytes_down: down,
                    age_s,
                    path,
                    rule,
                }),
            }
        }
        s
    }

    /// Register an open proxied connection (`flow`: a UDP association's flow id).
    pub(super) fn open(
        self: &Arc<Self>,
        proxy: &'static str,
        client: String,
        destination: String,
        flow: Option<u32>,
    ) -> ConnGuard {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            proxy,
            client,
            destination: Mutex::new(destination),
            flow,
            opened: Instant::now(),
            counters: Arc::default(),
            path: Mutex::new(None),
            rule: Mutex::new(None),
        });
        if let Ok(mut t) = self.conns.lock() {
            t.insert(key, conn.clone());
        }
        ConnGuard {
            board: self.clone(),
            key,
            conn,
        }
    }

    /// Where new connections go now (`session` or `direct`).
    pub(super) fn set_mode(&self, mode: &str) {
        if let Ok(mut m) = self.mode.lock() {
            *m = Some(mode.to_string());
        }
    }

    /// The counts of the session that ended go to the carried ones (once).
    fn fold_counts(&self) {
        if let Ok(mut c) = self.counts.lock() {
            for (carried, current) in c.iter_mut() {
                add_counters(carried, current);
                *current = PathStats::default();
            }
        }
    }

    /// A session started: its counts add to those of the sessions before.
    pub(super) fn session_started(&self) {
        self.fold_counts();
        if let Ok(mut e) = self.session_error.lock() {
            *e = None;
        }
    }

    /// A handshake failed: `braid status` shows why while there is no session.
    pub(super) fn handshake_failed(&self, why: &str) {
        if let Ok(mut e) = self.session_error.lock() {
            *e = Some(why.to_string());
        }
    }

    /// No session: every path down, with its counters and energy so far.
    pub(super) fn session_ended(&self) {
        self.fold_counts();
        let mut paths = self.base.clone();
        if let Ok(m) = self.meters.lock() {
            for (p, m) in paths.iter_mut().zip(m.iter()) {
                p.energy_j = p.energy_j.map(|_| m.0.energy_j());
            }
        }
        if let Ok(c) = self.counts.lock() {
            for (p, (carried, _)) in paths.iter_mut().zip(c.iter()) {
                set_counters(p, carried);
            }
        }
        let (sent, received) = paths
            .iter()
            .fold((0, 0), |(s, r), p| (s + p.bytes_sent, r + p.bytes_received));
        let energy = paths.iter().filter_map(|p| p.energy_j).reduce(|a, b| a + b);
        if let Ok(mut d) = self.down_at.lock() {
            d.iter_mut().for_each(|x| *x = None);
        }
        if let Ok(mut l) = self.latest.lock() {
            *l = AgentStatus {
                version: STATUS_VERSION,
                paths,
                totals: Totals {
                    bytes_sent: sent,
                    bytes_received: received,
                    energy_j: energy,
                },
                ..Default::default()
            };
        }
    }

    /// Build and store a snapshot from the session's views.
    pub(super) fn publish(
        &self,
        cfg: &AgentConfig,
        core: &[CorePath],
        (open_streams, datagrams): (u64, DatagramReport),
        policy: &PolicyView,
        session: &SessionMeta,
    ) {
        let now = Instant::now();
        let mut paths = self.base.clone();
        let mut totals = Totals::default();
        let mut down_at = vec![None; paths.len()];
        let Ok(mut meters) = self.meters.lock() else {
            return;
        };
        let Ok(mut counts) = self.counts.lock() else {
            return;
        };
        for (slot, p) in paths.iter_mut().enumerate() {
            // A path's incarnations: ids `slot` and `slot + 8` (make-before-break, or a UDP
            // probe of a TCP path): the validated one first, then the newest.
            let mine: Vec<&CorePath> = core.iter().filter(|c| c.id as usize % 8 == slot).collect();
            let open = || mine.iter().rev().filter(|c| !c.cond.abandoned);
            let live = open()
                .find(|c| c.cond.validated)
                .or_else(|| open().next())
                .or(mine.last())
                .copied();
            let mut sum = PathStats::default();
            mine.iter().for_each(|c| add_counters(&mut sum, &c.stats));
            let mut life = counts[slot].0;
            add_counters(&mut life, &sum);
            counts[slot].1 = sum;
            let (energy, rates) = &mut meters[slot];
            energy.update(now, life.bytes_sent + life.bytes_received, self.power[slot]);
            rates.update(now, life.bytes_sent, life.bytes_received);
            set_counters(p, &life);
            p.set_rates(rates);
            if let Some(c) = live {
                p.fill_core(c, &life);
                p.loss_rate = loss_rate(&sum);
                if let Some((local, remote)) = policy.addrs.get(&c.id) {
                    p.local_address = local.map(|a| a.to_string());
                    p.remote_address = Some(remote.to_string());
                    p.set_packet_bytes();
                }
            }
            let over = policy.over_cap.get(slot).copied().unwrap_or(false);
            p.state = Some(display_state(live, over));
            let unvalidated = matches!(p.state, Some(ShownState::Validating | ShownState::Down));
            if let (Some(Some(portal)), true) = (policy.captive.get(slot), unvalidated) {
                p.state = Some(ShownState::Captive);
                p.portal_url = portal.clone();
            }
            if let (Some(ShownState::Frozen), Some(c)) = (p.state, live) {
                down_at[slot] = Some(now - c.silent + DOWN_AFTER);
            }
            p.cap_used_bytes = policy.cap_used.get(slot).copied().flatten();
            // An auto slot shows the interface it took (issue 38: it showed `-`).
            if let Some(Some(dev)) = policy.auto.get(slot) {
                p.interface = Some(dev.clone());
            }
            p.energy_j = p.energy_j.map(|_| meters[slot].0.energy_j());
            totals.bytes_sent += p.bytes_sent;
            totals.bytes_received += p.bytes_received;
            if let Some(e) = p.energy_j {
                *totals.energy_j.get_or_insert(0.0) += e;
            }
        }
        drop(meters);
        drop(counts);
        let report = SessionReport {
            id: format!("{:016x}", session.id),
            server: session.server.to_string(),
            // The session's start in agent uptime; `snapshot` turns it into an age.
            age_s: session.since.duration_since(self.started).as_secs_f64(),
            scheduler: cfg.transport.scheduler.to_string(),
            cc: cfg.transport.cc.to_string(),
            open_streams,
            datagrams,
        };
        if let Ok(mut d) = self.down_at.lock() {
            *d = down_at;
        }
        if let Ok(mut l) = self.latest.lock() {
            *l = AgentStatus {
                version: STATUS_VERSION,
                uptime_s: 0.0,
                session: Some(report),
                paths,
                streams: Vec::new(),
                flows: Vec::new(),
                totals,
                mode: None,
                session_error: None,
                rules: Default::default(),
            };
        }
    }
}

#[path = "report_direct.rs"]
mod direct;
pub(super) use direct::DirectPath;

/// Show the counters `c` on `p`.
fn set_counters(p: &mut PathReport, c: &PathStats) {
    p.bytes_sent = c.bytes_sent;
    p.bytes_received = c.bytes_received;
    p.packets_sent = c.packets_sent;
    p.packets_received = c.packets_received;
    p.packets_lost = c.packets_lost;
    p.retransmitted_bytes = c.retransmitted_bytes;
    p.blackouts = c.blackouts;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::AgentPath;
    use braid_core::{Config, Session};

    /// Regression (issue 38 item 6): a path bound to an interface (an `auto` slot among
    /// them) showed LOCAL `0.0.0.0:PORT`; it shows the address it sends from.
    #[test]
    fn a_socket_bound_to_an_interface_shows_the_address_it_sends_from() {
        let any: SocketAddr = "0.0.0.0:40001".parse().unwrap();
        let ip = "10.0.1.2".parse().ok();
        assert_eq!(shown_local(any, ip), "10.0.1.2:40001".parse().unwrap());
        assert_eq!(shown_local(any, None), any, "nothing better known");
        let bound: SocketAddr = "10.0.2.2:40002".parse().unwrap();
        assert_eq!(shown_local(bound, ip), bound, "a bound address stays");
    }

    fn board() -> (AgentConfig, Arc<StatusBoard>) {
        let key = Arc::new(braid_crypto::StaticKeypair::generate().unwrap());
        let mut path = AgentPath::new("a", PathBind::Auto);
        path.policy.nj_per_byte = Some(1000.0);
        let cfg = AgentConfig::new(
            "127.0.0.1:9".parse().unwrap(),
            key.public(),
            key,
            vec![path],
        );
        let b = StatusBoard::new(&cfg);
        (cfg, b)
    }

    fn publish(cfg: &AgentConfig, b: &StatusBoard, sent: u64, lost: u64) {
        let s = Session::connect(Config::default(), braid_core::Instant(0), 1, 0);
        let mut c = crate::status::core_paths(&s, braid_core::Instant(0)).remove(0);
        c.stats.bytes_sent = sent * 1000;
        c.stats.packets_sent = sent;
        c.stats.packets_lost = lost;
        let policy = PolicyView {
            over_cap: vec![false],
            cap_used: vec![None],
            addrs: HashMap::new(),
            auto: vec![None],
            captive: vec![None],
        };
        let meta = SessionMeta {
            id: 1,
            server: cfg.servers[0],
            since: Instant::now(),
        };
        b.publish(cfg, &[c], (0, Default::default()), &policy, &meta);
    }

    #[test]
    fn counters_are_cumulative_over_sessions_and_the_loss_rate_is_the_sessions() {
        let (cfg, b) = board();
        b.session_started();
        publish(&cfg, &b, 10, 0);
        publish(&cfg, &b, 100, 10);
        b.session_ended();
        let gone = b.snapshot();
        assert_eq!(gone.paths[0].packets_sent, 100, "kept while no session");
        assert_eq!(gone.totals.bytes_sent, 100_000);
        b.session_started();
        publish(&cfg, &b, 50, 0);
        let s = b.snapshot();
        assert_eq!(s.paths[0].packets_sent, 150);
        assert_eq!(s.paths[0].bytes_sent, 150_000);
        assert_eq!(s.paths[0].packets_lost, 10);
        assert_eq!(s.paths[0].loss_rate, 0.0, "this session lost nothing");
        assert_eq!(s.totals.bytes_sent, 150_000);
        // 1000 nJ per byte: 1 mJ per kB over 150 kB, charged as the counters moved.
        let e = s.paths[0].energy_j.unwrap();
        assert!((e - 0.14).abs() < 1e-9, "{e}");
    }

    /// Issue 24: `braid status` showed no current rate per path. Two snapshots 200 ms
    /// apart (the session loop's tick) with 100 kB sent between them: a send rate of about
    /// 4 Mbit/s, none received.
    #[test]
    fn a_path_shows_its_current_send_and_receive_rates() {
        let (cfg, b) = board();
        b.session_started();
        publish(&cfg, &b, 10, 0);
        assert_eq!(
            b.snapshot().paths[0].send_rate_bps,
            None,
            "one sample: no rate yet"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
        publish(&cfg, &b, 110, 0);
        let p = &b.snapshot().paths[0];
        let tx = p.send_rate_bps.expect("a rate from two samples");
        // 800 kbit over the time between the two publishes (200 ms and a little more).
        assert!((2_000_000..=4_000_000).contains(&tx), "{tx}");
        assert_eq!(p.receive_rate_bps, Some(0));
    }
}
