//! Keeping the agent's session: wait for a path, shake hands on every available path, run
//! the session, and apply the path manager's decisions to it while it runs — bind and add
//! paths that appear, remove at once the ones that go, re-bind the ones that change — plus
//! the per-path policy (backup paths and paths over their cap on standby, power for the
//! energy-aware scheduler) and the byte counts against caps.
//!
//! Owns: the path sockets of the current session and their receive tasks, the session
//! lifecycle, applying [`Action`]s. Must not touch: the decisions (the sans-IO
//! [`Client`]'s: its path manager, silence watch and backoff), the handshake details
//! (`handshake`), the proxy front ends.

mod actions;
mod caps;
mod captive;
mod silence;
mod start;
use silence::Silence;
use start::Live;

use super::client::{Client, PathSetting};
use super::handshake::{self, Established};
use super::links::{Connected, Links, PathSockets, Route, SocketTable, Task};
use super::report::{PolicyView, SessionMeta};
use super::startup::StartSlot;
use super::{AgentConfig, PathStatus, Shared};
use crate::bridge::{Cmd, SessionFn};
use crate::driver::{Clock, Incoming, SessionTask};
use crate::netwatch::WatchMsg;
use crate::pathmgr::Action;
use crate::policy::{CapLedger, CapStatus};
use crate::protect::{Aead, KeyStats};
use braid_core::path::PathStats;
use braid_core::wire::PathState;
use braid_core::{Event, PathId, Session};
use braid_proxy::datagram;
use bytes::Bytes;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

/// How often capped paths' bytes are counted: a path overshoots its cap by at most what it
/// carries in this time.
const CAP_TICK: Duration = Duration::from_millis(200);

type Watcher = std::io::Result<(mpsc::UnboundedReceiver<WatchMsg>, JoinHandle<()>)>;

/// Aborts a task (with any output) when dropped.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Policy state of one configured path.
#[derive(Debug, Default, Clone)]
struct SlotState {
    over_cap: bool,
    warned: bool,
}

struct Runner {
    /// The sans-IO client: backoff, silence and the paths' decisions.
    client: Client,
    cfg: Arc<AgentConfig>,
    net: Option<mpsc::UnboundedReceiver<WatchMsg>>,
    _watcher: Option<Task>,
    epoch: tokio::time::Instant,
    ledger: CapLedger,
    slots: Vec<SlotState>,
    status: watch::Sender<Vec<PathStatus>>,
    /// The server of the current session.
    server: SocketAddr,
    keys: Arc<KeyStats>,
    /// The start-up: told when the first handshake goes out and when the start-up is over.
    startup: StartSlot,
}

/// Establish, run, and re-establish the session for as long as the agent runs.
pub(super) async fn keep_session(
    cfg: Arc<AgentConfig>,
    tx: watch::Sender<Option<mpsc::UnboundedSender<Cmd>>>,
    shared: Shared,
    watcher: Watcher,
    ledger: CapLedger,
    status: watch::Sender<Vec<PathStatus>>,
    keys: Arc<KeyStats>,
) {
    let mut client = client_for(&cfg);
    let server = cfg.servers[0];
    let (net, task) = match watcher {
        Ok((rx, t)) => (Some(rx), Some(Task(t))),
        Err(e) => {
            warn!("cannot watch links through netlink ({e}): every path is assumed present");
            client.paths.assume_present();
            (None, None)
        }
    };
    let slots = slot_states(&cfg, &ledger);
    let mut r = Runner {
        client,
        cfg,
        net,
        _watcher: task,
        epoch: tokio::time::Instant::now(),
        ledger,
        slots,
        status,
        server,
        keys,
        startup: shared.startup.clone(),
    };
    let mut next: Option<Established> = None;
    loop {
        let est = match next.take() {
            Some(est) => est,
            None => {
                r.wait_for_a_path().await;
                let avail = r.avail();
                let sent = tokio::time::Instant::now().into_std();
                r.startup.send_if_modified(|s| s.handshake_sent(sent));
                match handshake::handshake(&r.cfg, &avail, r.client.rounds()).await {
                    Ok(est) => est,
                    Err(e) => {
                        r.start_over();
                        let backoff = r.client.handshake_failed();
                        warn!("cannot establish a session: {e}; retrying in {backoff:?} (or when a path appears)");
                        shared.board.handshake_failed(&e);
                        r.pause(backoff).await;
                        continue;
                    }
                }
            }
        };
        r.client.established();
        let (reason, replacement) = r.run_session(est, &tx, &shared).await;
        let _ = tx.send(None);
        shared.board.session_ended();
        if shared.stopping.load(std::sync::atomic::Ordering::SeqCst) {
            info!("session closed ({reason}): the agent is stopping");
            return;
        }
        next = replacement;
        match r.client.session_ended(next.is_some()) {
            None => warn!("session ended ({reason}); switching to the new session"),
            Some(pause) => {
                warn!("session ended ({reason}); reconnecting");
                r.pause(pause).await;
            }
        }
    }
}

/// The sans-IO client for these settings: direct mode, the servers' families and the paths'
/// link settings (a relayed path never goes over TCP around its relay).
fn client_for(cfg: &AgentConfig) -> Client {
    let settings: Vec<PathSetting> = (cfg.paths.iter())
        .map(|p| PathSetting {
            bind: p.bind.clone(),
            relayed: p.via.is_some(),
            udp_recheck: p.policy.udp_recheck,
        })
        .collect();
    let family = (
        cfg.servers[0].is_ipv4(),
        !cfg.server_other_family.is_empty(),
    );
    let direct = cfg.direct.mode != super::DirectMode::Off;
    let now = tokio::time::Instant::now().into_std();
    Client::new(direct, &settings, family, now)
}

/// Each configured path's policy state at start (over its cap for this period: said once).
fn slot_states(cfg: &AgentConfig, ledger: &CapLedger) -> Vec<SlotState> {
    let now = unix_secs();
    let slots = cfg
        .paths
        .iter()
        .map(|p| SlotState {
            over_cap: p
                .policy
                .cap
                .is_some_and(|c| ledger.status(&p.name, &c, now) == CapStatus::Over),
            warned: false,
        })
        .collect::<Vec<_>>();
    for (p, s) in cfg.paths.iter().zip(&slots) {
        if s.over_cap {
            warn!(path = %p.name, "path is over its cap for this period: it is a backup until the period ends");
        }
    }
    slots
}

fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Runner {
    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    fn set_status(&self, slot: usize, st: PathStatus) {
        self.status.send_modify(|v| {
            if let Some(x) = v.get_mut(slot) {
                *x = st;
            }
        });
    }

    /// The start-up is over (`startup`): from now on a connection made while no session
    /// is up goes direct at once.
    fn start_over(&self) {
        self.startup.send_if_modified(|s| {
            let was = *s;
            s.over();
            was != *s
        });
    }

    fn name(&self, slot: usize) -> &str {
        &self.cfg.paths[slot].name
    }

    /// The paths available now, with how to bind each.
    fn avail(&self) -> Vec<handshake::Avail> {
        self.client
            .paths
            .available()
            .into_iter()
            .filter_map(|(slot, a)| Some((slot, a, self.client.paths.bind_of(slot)?)))
            .collect()
    }

    /// Feed one watcher message to the manager.
    fn on_net(&mut self, m: Option<WatchMsg>) {
        let now = self.now();
        match m {
            Some(Some(ev)) => self.client.paths.handle_event(now, ev),
            Some(None) => self.client.paths.reset_kernel_view(),
            None => {
                warn!("the link watcher ended: every path is assumed present from now on");
                self.net = None;
                self.client.paths.assume_present();
            }
        }
    }

    async fn next_net(net: &mut Option<mpsc::UnboundedReceiver<WatchMsg>>) -> Option<WatchMsg> {
        match net {
            Some(rx) => rx.recv().await,
            None => std::future::pending().await,
        }
    }

    fn drain_net(&mut self) {
        while let Some(rx) = self.net.as_mut() {
            match rx.try_recv() {
                Ok(m) => self.on_net(Some(m)),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => self.on_net(None),
            }
        }
    }

    /// Return once at least one configured path is available; say so once if none is.
    async fn wait_for_a_path(&mut self) {
        // Let the watcher's first dump arrive before judging.
        let settle = tokio::time::Instant::now() + Duration::from_millis(50);
        while tokio::time::Instant::now() < settle && self.client.paths.available().is_empty() {
            tokio::select! {
                m = Self::next_net(&mut self.net) => self.on_net(m),
                _ = tokio::time::sleep_until(settle) => {}
            }
        }
        let mut said = false;
        loop {
            self.drain_net();
            if !self.client.paths.available().is_empty() {
                if said {
                    info!("a path is available: connecting");
                }
                return;
            }
            if !said {
                let why: Vec<String> = (0..self.cfg.paths.len())
                    .map(|i| format!("{}: {}", self.name(i), self.client.paths.why_unavailable(i)))
                    .collect();
                warn!("no path is available ({}); waiting for one", why.join("; "));
                said = true;
                // Nothing to shake hands on: connections need not wait for a handshake.
                self.start_over();
            }
            let m = Self::next_net(&mut self.net).await;
            self.on_net(m);
        }
    }

    /// Sleep, but wake up early when a path becomes available that was not.
    async fn pause(&mut self, d: Duration) {
        let until = tokio::time::Instant::now() + d;
        let before = self.client.paths.available().len();
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => return,
                m = Self::next_net(&mut self.net) => {
                    self.on_net(m);
                    if self.client.paths.available().len() > before {
                        return;
                    }
                }
            }
        }
    }

    /// What a path of configured path `slot` is told at once: standby if it is a backup
    /// or over its cap, its power if given.
    fn policy_fn(&self, slot: usize, id: PathId) -> impl FnOnce(&mut Session, braid_core::Instant) {
        let p = &self.cfg.paths[slot].policy;
        let standby = p.backup || self.slots[slot].over_cap;
        let power_mw = p.power_w.map(|w| (w * 1000.0).round() as u64);
        move |s: &mut Session, now| {
            if standby {
                let _ = s.set_path_state(now, id, PathState::Standby);
            }
            if let Some(mw) = power_mw {
                let _ = s.set_path_cost(now, id, mw, 0);
            }
        }
    }

    /// A path's TCP connection ended: the path manager re-adds the path.
    fn on_tcp_closed(&mut self, id: PathId) {
        if let Some(slot) = self.client.paths.slot_of(id) {
            warn!(path = %self.name(slot), id, "the path's TCP connection ended");
        }
        let now = self.now();
        self.client.paths.handle_transport_failed(now, id);
    }

    /// A path validated: say how it carries data now, and tell the path manager.
    fn on_validated(&mut self, id: PathId) {
        let paths = &self.client.paths;
        if let Some(slot) = paths.slot_of(id) {
            // An auto slot says which interface it took.
            let name = match paths.auto_interface(slot) {
                Some(dev) => format!("{} (interface {dev})", self.name(slot)),
                None => self.name(slot).to_string(),
            };
            if paths.is_probe(id) {
                info!(path = %name, id, "UDP answers again: the path moves back from TCP to UDP");
            } else if paths.is_tcp(id) && paths.udp_failed(id) {
                warn!(path = %name, id, "path validated over TCP (UDP went unanswered on it: its network may block UDP): carrying data");
            } else if paths.is_tcp(id) {
                info!(path = %name, id, "path validated over TCP: carrying data");
            } else {
                info!(path = %name, id, "path validated: carrying data");
            }
            self.set_status(slot, PathStatus::Up);
        }
        let now = self.now();
        self.client.paths.handle_validated(now, id);
    }

    /// Run a session until it ends: the reason, and the probe's new session that replaces
    /// it, if one does.
    async fn run_session(
        &mut self,
        est: Established,
        tx: &watch::Sender<Option<mpsc::UnboundedSender<Cmd>>>,
        shared: &Shared,
    ) -> (String, Option<Established>) {
        let Live {
            mut handle,
            mut links,
            cmd_tx,
            mut ev_rx,
            meta,
            _dispatcher,
            _inbound,
        } = self.start_session(est, tx, shared);
        // After the session is in the slot: no connection sees the start-up over without it.
        self.start_over();
        let mut counted: HashMap<PathId, u64> = HashMap::new();
        let hints = self.keys.hints.load(std::sync::atomic::Ordering::Relaxed);
        self.client
            .session_started(tokio::time::Instant::now().into_std(), hints);
        let mut silence = Silence::default();
        let mut replacement = None;
        let mut tick = tokio::time::interval(CAP_TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut checks = captive::Checks::new();
        self.client.captive.checks_dropped();
        let reason = loop {
            self.captive_step(&mut checks);
            self.apply(&cmd_tx, &mut links);
            let check_at = self.client.captive.poll_timeout().map(|d| self.epoch + d);
            let replace_at = self.client.silence.poll_timeout();
            let deadline = self.client.paths.poll_timeout().map_or(
                tokio::time::Instant::now() + Duration::from_secs(3600),
                |d| self.epoch + d,
            );
            tokio::select! {
                r = &mut handle.0 => {
                    break match r {
                        Ok(Some(e)) => e.to_string(),
                        Ok(None) => "closed".to_string(),
                        Err(e) => format!("session task failed: {e}"),
                    };
                }
                m = Self::next_net(&mut self.net) => self.on_net(m),
                Some(c) = links.conn_rx.recv() => self.tcp_connected(c, &cmd_tx, &mut links),
                Some((id, generation)) = links.closed_rx.recv() => {
                    if links.is_current(id, generation) {
                        self.on_tcp_closed(id);
                    }
                }
                Some(ev) = ev_rx.recv() => {
                    if let Event::PathValidated(id) = ev {
                        self.on_validated(id);
                    }
                }
                _ = tokio::time::sleep_until(deadline) => self.client.paths.handle_timeout(self.now()),
                _ = tokio::time::sleep_until(check_at.unwrap_or(deadline)), if check_at.is_some() => {}
                Some(Ok(v)) = checks.join_next(), if !checks.is_empty() => self.captive_verdict(&mut checks, v),
                _ = tokio::time::sleep_until(replace_at.map_or(deadline, tokio::time::Instant::from_std)), if replace_at.is_some() => {
                    let now = tokio::time::Instant::now().into_std();
                    if let Some(quiet) = self.client.silence.handle_timeout(now) {
                        replacement = silence.pending.take();
                        break format!(
                            "no packet from {} for {:.1} s while a new handshake was answered: the server restarted or stopped answering",
                            self.server,
                            quiet.as_secs_f64()
                        );
                    }
                }
                _ = tick.tick() => {
                    let stats = query_stats(&cmd_tx).await;
                    self.count_caps(&cmd_tx, &stats, &mut counted);
                    self.watch_silence(&cmd_tx, &stats, &mut silence);
                    if let Some(q) = crate::status::query_core(&cmd_tx).await {
                        let view = self.policy_view(&links.table);
                        shared.board.publish(&self.cfg, &q.paths, (q.streams, q.datagrams), &view, &meta);
                    }
                }
                r = async { silence.probe.as_mut().expect("checked").await }, if silence.probe.is_some() => {
                    silence.probe = None;
                    self.probe_ended(r, &cmd_tx, &mut silence);
                }
            }
        };
        drop(handle);
        if let Some(p) = silence.probe.take() {
            p.abort();
        }
        self.client.paths.session_ended();
        self.status
            .send_modify(|v| v.iter_mut().for_each(|x| *x = PathStatus::Down));
        let _ = self.ledger.save();
        (reason, replacement)
    }
}

/// Every path's counters, from the session task.
async fn query_stats(cmd: &mpsc::UnboundedSender<Cmd>) -> Vec<(PathId, PathStats)> {
    let (rtx, rrx) = oneshot::channel();
    let _ = cmd.send(Cmd::Session(SessionFn(Box::new(move |s, _| {
        let v: Vec<(PathId, PathStats)> = s
            .path_ids()
            .into_iter()
            .filter_map(|id| s.path_stats(id).map(|st| (id, st)))
            .collect();
        let _ = rtx.send(v);
    }))));
    rrx.await.unwrap_or_default()
}
