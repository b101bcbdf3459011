//! Direct mode's knowledge of its paths: which are there (the kernel's view, through a
//! link watcher of its own; a `--path auto` slot takes an interface with a default route
//! as in session mode), which may take a new connection (not failed lately, backups only
//! when no other path may, a path over its cap like a backup), the bytes each carried
//! (counted against caps, shown in status), the rates the scheduler measured (remembered
//! across restarts in the state file, handed to the scheduler at start), and what
//! `braid status` shows of the paths while no session is up.
//!
//! Owns: the measurement tick (every [`TICK`]), the kernel view of direct mode, the
//! per-path byte totals, cap verdicts in direct mode, saving the rates. Must not touch:
//! the scheduler's arithmetic (`braid_core::connsched`), the session's paths (`run`), the
//! state file's format (`crate::policy`), the status board's layout (`report`).

use super::super::report::{DirectPath, StatusBoard};
use super::super::SessionSlot;
use super::Direct;
use crate::netwatch::WatchMsg;
use crate::pathmgr::PathManager;
use crate::policy::{CapLedger, CapStatus};
use crate::status::ShownState;
use crate::udp::PathBind;
use braid_core::connsched::{ConnSched, PathInput};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{info, warn};

/// How often the scheduler reads the direct connections' byte counters.
pub(super) const TICK: Duration = Duration::from_millis(100);
/// Rates are saved at most this often (and when the agent stops).
const SAVE_EVERY: Duration = Duration::from_secs(10);
/// A rate is saved again once it moved this much (relative) from the saved one.
const SAVE_CHANGE: f64 = 0.1;

/// The link watcher's events and its task (aborted when dropped).
pub(super) struct Watch {
    rx: Option<mpsc::UnboundedReceiver<WatchMsg>>,
    task: tokio::task::JoinHandle<()>,
}

impl Watch {
    /// A watcher in the caller's network namespace.
    pub(super) fn start() -> std::io::Result<Watch> {
        crate::netwatch::watch().map(|(rx, task)| Watch { rx: Some(rx), task })
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What direct mode knows of its paths beside the scheduler (see the module doc).
pub(super) struct PathsState {
    pub(super) mgr: PathManager,
    /// When direct mode started.
    started: Instant,
    /// Bytes (up, down) of the direct connections that ended, per path.
    pub(super) closed: Vec<(u64, u64)>,
    /// Bytes counted against caps so far, per path.
    counted: Vec<u64>,
    pub(super) over_cap: Vec<bool>,
    warned: Vec<bool>,
    /// The rates last saved, and when.
    saved: Vec<Option<f64>>,
    saved_at: Option<Instant>,
}

impl PathsState {
    pub(super) fn new(binds: &[PathBind], ledger: &CapLedger, names: &[String]) -> PathsState {
        let n = binds.len();
        let mut mgr = PathManager::new(binds.to_vec(), true);
        mgr.set_both_families();
        let now = unix_secs();
        PathsState {
            mgr,
            started: Instant::now(),
            closed: vec![(0, 0); n],
            counted: vec![0; n],
            over_cap: vec![false; n],
            warned: vec![false; n],
            saved: names.iter().map(|p| ledger.rate(p, now)).collect(),
            saved_at: None,
        }
    }
}

fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// How long after start a named path the kernel view does not show yet still counts as
/// there (the first dump may not be complete).
const VIEW_SETTLES: Duration = Duration::from_secs(1);

impl PathsState {
    /// Path `i` is there as far as the kernel view says: an `auto` slot took an interface
    /// that is up with a default route; a named one is up with an address (or the view is
    /// not complete yet).
    fn present(&self, i: usize, auto: bool) -> bool {
        self.mgr.attach(i).is_some() || (!auto && self.started.elapsed() < VIEW_SETTLES)
    }
}

impl Direct {
    /// How path `i` is bound now: an `auto` slot as the interface it took (while that is
    /// up with a default route), `None` while it has none.
    pub(super) fn bind(&self, i: usize) -> Option<PathBind> {
        match self.binds.get(i)? {
            PathBind::Auto => {
                let st = self.paths.lock().ok()?;
                st.mgr.attach(i)?;
                st.mgr.bind_of(i)
            }
            b => {
                let st = self.paths.lock().ok()?;
                st.present(i, false).then(|| b.clone())
            }
        }
    }

    /// Hand the scheduler the rates remembered in the state file.
    pub(super) fn remember_rates(&self, s: &mut ConnSched) {
        let now = self.now();
        let unix = unix_secs();
        for (i, name) in self.names.iter().enumerate() {
            if let Some(r) = self.ledger.rate(name, unix) {
                s.remember(now, i, r);
            }
        }
    }

    /// Tell the scheduler which paths may take a connection now: bound (an `auto` slot
    /// that took an interface), not failed lately, and backups (and paths over their cap)
    /// only when no other path may.
    pub(super) fn refresh(&self, s: &mut ConnSched) {
        let now = Instant::now();
        let failed = self
            .failed_until
            .lock()
            .map(|f| f.clone())
            .unwrap_or_default();
        let over = self
            .paths
            .lock()
            .map(|p| p.over_cap.clone())
            .unwrap_or_default();
        let ok: Vec<bool> = (0..self.binds.len())
            .map(|i| {
                self.bind(i).is_some() && failed.get(i).copied().flatten().is_none_or(|t| now >= t)
            })
            .collect();
        let spare = |i: usize| self.backup[i] || over.get(i).copied().unwrap_or(false);
        let main = (0..ok.len()).any(|i| ok[i] && !spare(i));
        for (i, &fine) in ok.iter().enumerate() {
            s.set_path(
                i,
                PathInput {
                    usable: fine && (!spare(i) || !main),
                    power_w: self.power[i],
                    rate_hint: None,
                },
            );
        }
    }

    /// Path `i` could not be bound or connected: not chosen for a while.
    pub(super) fn fail(&self, path: usize) {
        if let Ok(mut f) = self.failed_until.lock() {
            if let Some(x) = f.get_mut(path) {
                *x = Some(Instant::now() + super::FAILED_FOR);
            }
        }
    }

    /// Per path: bytes (up, down) of its direct connections, ended and open.
    fn carried(&self) -> Vec<(u64, u64)> {
        let mut t = self
            .paths
            .lock()
            .map(|p| p.closed.clone())
            .unwrap_or_default();
        let sched = self.sched.lock();
        if let (Ok(l), Ok(s)) = (self.live.lock(), sched) {
            for (id, c) in l.iter() {
                if let Some(x) = s.path_of(*id).and_then(|p| t.get_mut(p)) {
                    x.0 += c.up.load(Ordering::Relaxed);
                    x.1 += c.down.load(Ordering::Relaxed);
                }
            }
        }
        t
    }

    /// Count the bytes of capped paths against the ledger: warn at 80 %, and a path over
    /// its cap takes new connections only when no other path can (the connections it
    /// carries go on). Returns true if the ledger changed.
    fn count_caps(&self, carried: &[(u64, u64)]) -> bool {
        let Ok(mut st) = self.paths.lock() else {
            return false;
        };
        let now = unix_secs();
        let mut changed = false;
        for (i, &(up, down)) in carried.iter().enumerate() {
            let Some(cap) = self.caps[i] else { continue };
            let total = up + down;
            let delta = total.saturating_sub(st.counted[i]);
            st.counted[i] = total;
            let status = if delta > 0 {
                changed = true;
                self.ledger.add(&self.names[i], &cap, now, delta)
            } else {
                self.ledger.status(&self.names[i], &cap, now)
            };
            let used = self.ledger.used(&self.names[i], &cap, now);
            match status {
                CapStatus::Near if !st.warned[i] => {
                    warn!(path = %self.names[i], used, cap = cap.bytes, "path has used 80 % of its cap");
                    st.warned[i] = true;
                }
                CapStatus::Over if !st.over_cap[i] => {
                    warn!(path = %self.names[i], used, cap = cap.bytes, "path reached its cap: it takes new direct connections only when no other path can, until the period ends");
                    st.over_cap[i] = true;
                }
                CapStatus::Under | CapStatus::Near if st.over_cap[i] => {
                    info!(path = %self.names[i], "a new cap period began: the path takes new connections again");
                    st.over_cap[i] = false;
                    st.warned[i] = false;
                }
                _ => {}
            }
        }
        changed
    }

    /// Put the scheduler's current rates in the ledger if they moved (or `force`), and
    /// write the state file when something changed.
    pub(super) fn save_rates(&self, force: bool, caps_changed: bool) {
        let rates: Vec<Option<f64>> = match self.sched.lock() {
            Ok(s) => (0..self.names.len()).map(|i| s.measured(i)).collect(),
            Err(_) => return,
        };
        let Ok(mut st) = self.paths.lock() else {
            return;
        };
        let due = force || st.saved_at.is_none_or(|t| t.elapsed() >= SAVE_EVERY);
        let moved = |i: usize| match (rates[i], st.saved[i]) {
            (Some(r), Some(s)) => (r - s).abs() > SAVE_CHANGE * s,
            (Some(_), None) => true,
            _ => false,
        };
        let rates_changed = due && (0..rates.len()).any(moved);
        if rates_changed {
            let now = unix_secs();
            for (i, r) in rates.iter().enumerate() {
                if let Some(r) = *r {
                    self.ledger.set_rate(&self.names[i], r, now);
                    st.saved[i] = Some(r);
                }
            }
            st.saved_at = Some(Instant::now());
        }
        drop(st);
        if rates_changed || caps_changed {
            if let Err(e) = self.ledger.save() {
                warn!("{e}");
            }
        }
    }

    /// What `braid status` shows of each path in direct mode.
    fn direct_view(&self, carried: &[(u64, u64)]) -> Vec<DirectPath> {
        let now = Instant::now();
        let failed = self
            .failed_until
            .lock()
            .map(|f| f.clone())
            .unwrap_or_default();
        let rates: Vec<Option<f64>> = match self.sched.lock() {
            Ok(s) => (0..self.names.len()).map(|i| s.rate(i)).collect(),
            Err(_) => vec![None; self.names.len()],
        };
        let Ok(st) = self.paths.lock() else {
            return Vec::new();
        };
        let usable: Vec<bool> = (0..self.binds.len())
            .map(|i| {
                st.present(i, self.binds[i] == PathBind::Auto)
                    && failed.get(i).copied().flatten().is_none_or(|t| now >= t)
            })
            .collect();
        let main = (0..usable.len()).any(|i| usable[i] && !self.backup[i] && !st.over_cap[i]);
        let unix = unix_secs();
        (0..self.binds.len())
            .map(|i| DirectPath {
                state: match (usable[i], st.over_cap[i], self.backup[i] && main) {
                    (false, _, _) => ShownState::Down,
                    (true, true, _) => ShownState::Capped,
                    (true, false, true) => ShownState::Backup,
                    (true, false, false) => ShownState::Active,
                },
                interface: st.mgr.auto_interface(i).map(str::to_string),
                local: st.mgr.attach(i).map(|a| a.addr.to_string()),
                sent: carried[i].0,
                received: carried[i].1,
                rate_bps: rates[i].map(|r| (r * 8.0) as u64),
                cap_used: self.caps[i].map(|c| self.ledger.used(&self.names[i], &c, unix)),
            })
            .collect()
    }

    /// One measurement round: the scheduler reads every direct connection's counters;
    /// caps are counted, rates saved, and (`publish`, with no session up) the paths shown.
    fn round(&self, board: &StatusBoard, publish: bool) {
        self.measure();
        let carried = self.carried();
        let caps_changed = self.count_caps(&carried);
        self.save_rates(false, caps_changed);
        if publish {
            board.publish_direct(&self.direct_view(&carried));
        }
    }
}

/// The scheduler's measurement tick and the kernel view, for as long as the agent runs;
/// `publish`: show the paths in status while no session is up (direct mode on).
pub(in crate::agent) async fn measure(
    d: Arc<Direct>,
    session: SessionSlot,
    board: Arc<StatusBoard>,
    publish: bool,
) {
    let mut watch = match d.watch.lock().ok().and_then(|mut w| w.take()) {
        Some(Ok(w)) => Some(w),
        Some(Err(e)) => {
            warn!("direct mode cannot watch links through netlink ({e}): every named path is assumed present, auto paths get no interface");
            if let Ok(mut st) = d.paths.lock() {
                st.mgr.assume_present();
            }
            None
        }
        None => None,
    };
    let mut t = tokio::time::interval(TICK);
    t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let events = watch.as_mut().and_then(|w| w.rx.as_mut());
        let listening = events.is_some();
        tokio::select! {
            _ = t.tick() => {
                let show = publish && session.borrow().is_none();
                d.round(&board, show);
            }
            ev = async { events?.recv().await }, if listening => match ev {
                Some(ev) => {
                    if let Ok(mut st) = d.paths.lock() {
                        let now = d.epoch.elapsed();
                        match ev {
                            Some(ev) => st.mgr.handle_event(now, ev),
                            None => st.mgr.reset_kernel_view(),
                        }
                    }
                }
                None => {
                    if let Some(w) = watch.as_mut() {
                        w.rx = None;
                    }
                }
            },
        }
    }
}
