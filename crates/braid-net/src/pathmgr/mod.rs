//! The agent's live path manager: which configured paths the kernel offers right now, and
//! what the running session must do about it.
//!
//! Owns: the decisions only — a plain struct fed with link and address events (from the
//! netlink watcher, [`crate::netwatch`], or synthetic ones in tests), with session feedback
//! (path validated, path closed) and with an explicit `now`; it answers with [`Action`]s.
//! Must not touch: sockets, netlink or the session (the agent applies the actions).
//!
//! Rules, per configured path:
//! - a path is *available* when its interface exists, is up with carrier and has a usable
//!   address of the server's family (for `NAME=IFACE`), or when its local address sits on an
//!   interface that is up with carrier (for `NAME=LOCAL_IP`);
//! - it becomes available: [`Action::Add`] (a new socket, a new path of the session);
//! - it stops being available (carrier loss, interface deleted, address removed):
//!   [`Action::Remove`] at once, so its data in flight is resent on the other paths;
//! - the interface was re-created (new index): remove and add again (the old socket is
//!   bound to the old interface and dead);
//! - the address changed while the link stayed up: make-before-break — the new path is
//!   added under the slot's other id (`slot` or `slot + 8`) and the old one is removed once
//!   the new one is validated (or after [`MBB_DEADLINE`]);
//! - a path that is not validated within its retry interval (a black hole swallowing the
//!   challenge or its answer) is removed and added again on a fresh socket, the interval
//!   doubling from [`VALIDATE_FIRST`] up to [`VALIDATE_MAX`]; validation resets it;
//! - each such retry switches the path's transport between UDP and TCP (braid packets over
//!   a TCP connection to the server's port, [`crate::tcp`]): a network that blocks UDP
//!   gets the path over TCP after [`VALIDATE_FIRST`]; one that blocks both keeps
//!   alternating with backoff. A validated path keeps its transport; a TCP connection that
//!   ends re-adds the path over TCP at once; a re-created interface starts over on UDP.
//! - a validated TCP path tries UDP again ([`Action::Probe`]): [`Recheck::first`] after it
//!   validated, a UDP socket joins the session under the slot's other id (as a
//!   make-before-break replacement would); if that validates within [`PROBE_WINDOW`] it
//!   becomes the path and the TCP one is removed (its data in flight goes on the other
//!   paths, as for any removed path); if not, it is dropped and the next try waits twice
//!   as long, up to [`Recheck::max`]. A network that blocked UDP for a while (a captive
//!   portal, a firewall rule) gets its path back on UDP.
//!
//! - a path that does not validate gets captive-portal checks ([`captive`]): behind a
//!   portal it is shown `captive` with the portal's URL, and re-bound at once
//!   ([`PathManager::retry_now`]) when the portal lets traffic through.
//!
//! `--path auto` ([`PathBind::Auto`] slots): each such slot takes, for good, the first
//! interface that is up, has a default route of the main table in the server's family and
//! is neither loopback nor one of braid's own devices ([`is_own_device`]) nor named by
//! another slot; from then on it is that interface's path (gone while the interface or its
//! default route is gone; back on the same slot when they return).
//!
//! Path ids: slot `i` uses id `i`, or `i + 8` while a make-before-break replacement runs, so
//! a session never uses more than 16 ids (what the server keeps addresses for).

pub mod captive;
mod kernel;
mod probe;
pub use probe::Recheck;
use probe::{probe_allowed, probe_timers};

use crate::udp::PathBind;
use braid_core::PathId;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::IpAddr;
use std::time::Duration;

/// First wait for a new path's validation before it is re-bound.
pub const VALIDATE_FIRST: Duration = Duration::from_secs(2);
/// Longest wait between re-binds of a path that never validates.
pub const VALIDATE_MAX: Duration = Duration::from_secs(30);
/// How long the old path of a make-before-break may outlive its replacement's start.
pub const MBB_DEADLINE: Duration = Duration::from_secs(3);
/// How long a UDP probe of a TCP path may take to validate before it is dropped.
pub const PROBE_WINDOW: Duration = VALIDATE_FIRST;

/// What the kernel said (a link or address appeared, changed or went away).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetEvent {
    /// A link exists (new or changed). `up`: administratively up and with carrier.
    Link {
        /// Interface index.
        index: u32,
        /// Interface name.
        name: String,
        /// Up and running (carrier).
        up: bool,
    },
    /// A link was deleted.
    LinkGone {
        /// Interface index.
        index: u32,
    },
    /// An address was added to a link.
    Addr {
        /// Interface index.
        index: u32,
        /// The address.
        addr: IpAddr,
    },
    /// An address was removed from a link.
    AddrGone {
        /// Interface index.
        index: u32,
        /// The address.
        addr: IpAddr,
    },
    /// A default route of the main table appeared (or changed).
    DefaultRoute {
        /// Its output interface.
        index: u32,
        /// IPv6 (else IPv4).
        v6: bool,
        /// Its metric.
        metric: u32,
    },
    /// A default route went away.
    DefaultRouteGone {
        /// Its output interface.
        index: u32,
        /// IPv6 (else IPv4).
        v6: bool,
        /// Its metric.
        metric: u32,
    },
}

/// braid's own network devices, never taken by `--path auto`: names starting with `braid`
/// (a tunnel device of braid's) or `brd-` (the testbed's).
pub fn is_own_device(name: &str) -> bool {
    name.starts_with("braid") || name.starts_with("brd-")
}

/// Where a path's socket goes: the interface (by index) and the source address in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attach {
    /// Interface index.
    pub index: u32,
    /// The local address the path sends from.
    pub addr: IpAddr,
}

/// What the agent must do to the session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Bind a new socket for configured path `slot` and add it to the session as `id`.
    Add {
        /// Index of the configured path.
        slot: usize,
        /// The session's path id.
        id: PathId,
        /// Where the kernel offers it.
        attach: Attach,
        /// Over a TCP connection instead of a UDP socket.
        tcp: bool,
    },
    /// Bind a UDP socket for configured path `slot`, which runs over TCP, and add it to
    /// the session as `id` (a probe: it replaces the TCP path if it validates).
    Probe {
        /// Index of the configured path.
        slot: usize,
        /// The session's path id of the probe.
        id: PathId,
        /// Where the kernel offers it.
        attach: Attach,
    },
    /// A probe went unanswered: take it out of the session and close its socket (the TCP
    /// path goes on); the next try comes after `next`.
    DropProbe {
        /// Index of the configured path.
        slot: usize,
        /// The probe's path id.
        id: PathId,
        /// The wait before the next try.
        next: Duration,
    },
    /// Take path `id` out of the session now (its data in flight goes on other paths) and
    /// close its socket.
    Remove {
        /// Index of the configured path.
        slot: usize,
        /// The session's path id.
        id: PathId,
        /// Why, for the log.
        reason: &'static str,
    },
}

#[derive(Debug, Clone)]
struct Live {
    id: PathId,
    attach: Attach,
    /// When it was (re-)added.
    since: Duration,
    validated: bool,
    /// Current wait for validation before a re-bind.
    retry: Duration,
    /// The path being replaced (make-before-break), retired when this one validates.
    old: Option<PathId>,
    /// Carried over TCP.
    tcp: bool,
    /// UDP was tried on this path and never validated (what switched it to TCP); false
    /// for a path that went over TCP without such a test (the handshake's answer came
    /// over TCP first).
    udp_failed: bool,
    /// A UDP probe of this TCP path: its id and when it started.
    probe: Option<(PathId, Duration)>,
    /// When the next UDP probe starts (a validated TCP path), and the wait after it.
    next_probe: Option<Duration>,
    probe_wait: Duration,
}

impl Live {
    /// A path just added, not validated yet.
    fn new(id: PathId, attach: Attach, now: Duration) -> Live {
        Live {
            id,
            attach,
            since: now,
            validated: false,
            retry: VALIDATE_FIRST,
            old: None,
            tcp: false,
            udp_failed: false,
            probe: None,
            next_probe: None,
            probe_wait: Duration::ZERO,
        }
    }
}

#[derive(Debug, Clone)]
struct Slot {
    bind: PathBind,
    live: Option<Live>,
    /// For an auto slot: the interface it took.
    auto: Option<String>,
    /// Never fall back to TCP (a path through a UDP relay or link emulator: TCP to the
    /// server would go around it).
    udp_only: bool,
    /// When it tries UDP again while over TCP.
    recheck: Recheck,
}

/// The decisions of the path manager (see the module docs).
#[derive(Debug)]
pub struct PathManager {
    slots: Vec<Slot>,
    /// index -> (name, up with carrier)
    links: HashMap<u32, (String, bool)>,
    addrs: HashMap<u32, BTreeSet<IpAddr>>,
    /// Default routes of the main table: (interface, IPv6, metric).
    routes: BTreeSet<(u32, bool, u32)>,
    ipv4: bool,
    /// The server has an address of the other family too: a link with only that family
    /// is usable (the server's family is preferred where a link has both).
    both: bool,
    in_session: bool,
    /// No kernel view (netlink unavailable): every path counts as present.
    assume: bool,
    actions: VecDeque<Action>,
}

impl PathManager {
    /// A manager for these configured paths towards a server of this address family.
    pub fn new(binds: Vec<PathBind>, server_is_ipv4: bool) -> PathManager {
        PathManager {
            slots: binds
                .into_iter()
                .map(|bind| Slot {
                    bind,
                    live: None,
                    auto: None,
                    udp_only: false,
                    recheck: Recheck::default(),
                })
                .collect(),
            links: HashMap::new(),
            addrs: HashMap::new(),
            routes: BTreeSet::new(),
            ipv4: server_is_ipv4,
            both: false,
            in_session: false,
            assume: false,
            actions: VecDeque::new(),
        }
    }

    /// When path `slot`, over TCP, tries UDP again (default: [`Recheck::default`]).
    pub fn set_recheck(&mut self, slot: usize, r: Recheck) {
        if let Some(s) = self.slots.get_mut(slot) {
            s.recheck = r;
        }
    }

    /// The server is reachable over both families: links with an address of either
    /// family are usable, the server's family first where a link has both.
    pub fn set_both_families(&mut self) {
        self.both = true;
    }

    /// A session started with these paths (slot, id, where bound) in it.
    pub fn session_started(&mut self, now: Duration, paths: &[(usize, PathId, Attach)]) {
        self.in_session = true;
        self.actions.clear();
        for s in &mut self.slots {
            s.live = None;
        }
        for &(slot, id, attach) in paths {
            if let Some(s) = self.slots.get_mut(slot) {
                s.live = Some(Live::new(id, attach, now));
            }
        }
        self.reconcile(now);
    }

    /// The session ended: no more actions until the next one starts.
    pub fn session_ended(&mut self) {
        self.in_session = false;
        self.actions.clear();
        for s in &mut self.slots {
            s.live = None;
        }
    }

    /// The session validated path `id`.
    pub fn handle_validated(&mut self, now: Duration, id: PathId) {
        for (slot, s) in self.slots.iter_mut().enumerate() {
            let recheck = s.recheck;
            let Some(l) = s.live.as_mut() else { continue };
            if l.probe.is_some_and(|p| p.0 == id) {
                // UDP answers again: the probe becomes the path, the TCP one goes.
                self.actions.push_back(Action::Remove {
                    slot,
                    id: l.id,
                    reason: "UDP answers again: the path is back on UDP",
                });
                l.id = id;
                l.probe = None;
                l.next_probe = None;
                l.tcp = false;
                l.udp_failed = false;
                l.validated = true;
                l.retry = VALIDATE_FIRST;
                continue;
            }
            if l.id == id {
                if l.tcp && !s.udp_only && l.next_probe.is_none() {
                    l.probe_wait = recheck.first;
                    l.next_probe = Some(now + recheck.first);
                }
                l.validated = true;
                l.retry = VALIDATE_FIRST;
                if let Some(old) = l.old.take() {
                    self.actions.push_back(Action::Remove {
                        slot,
                        id: old,
                        reason: "replaced by a validated path (make-before-break)",
                    });
                }
            }
        }
    }

    /// The TCP connection of path `id` ended (the server restarted, a middlebox cut it).
    /// A validated path is added again over TCP at once; one still validating is left to
    /// its retry timer (a connection refused at once must not spin).
    pub fn handle_transport_failed(&mut self, now: Duration, id: PathId) {
        if !self.in_session {
            return;
        }
        for (slot, s) in self.slots.iter_mut().enumerate() {
            let Some(l) = s.live.as_mut().filter(|l| l.id == id && l.tcp) else {
                continue;
            };
            if !l.validated {
                continue;
            }
            self.actions.push_back(Action::Remove {
                slot,
                id,
                reason: "its TCP connection ended; connecting again",
            });
            self.actions.push_back(Action::Add {
                slot,
                id,
                attach: l.attach,
                tcp: true,
            });
            l.validated = false;
            l.since = now;
            l.retry = VALIDATE_FIRST;
        }
    }

    /// Path `id` of the new session already runs over TCP (its handshake was answered
    /// there).
    pub fn mark_tcp(&mut self, id: PathId) {
        for l in self.slots.iter_mut().filter_map(|s| s.live.as_mut()) {
            if l.id == id {
                l.tcp = true;
            }
        }
    }

    /// True when path `id` is a UDP probe of a path that runs over TCP.
    pub fn is_probe(&self, id: PathId) -> bool {
        self.slots
            .iter()
            .filter_map(|s| s.live.as_ref())
            .any(|l| l.probe.is_some_and(|p| p.0 == id))
    }

    /// True when path `id` is (being) carried over TCP.
    pub fn is_tcp(&self, id: PathId) -> bool {
        self.slots
            .iter()
            .filter_map(|s| s.live.as_ref())
            .any(|l| l.id == id && l.tcp)
    }

    /// True when path `id` went to TCP because UDP was tried on it and not validated in
    /// time: only then may the agent say its network blocks UDP.
    pub fn udp_failed(&self, id: PathId) -> bool {
        self.slots
            .iter()
            .filter_map(|s| s.live.as_ref())
            .any(|l| l.id == id && l.udp_failed)
    }

    /// Keep path `slot` on UDP: re-binding never switches it to TCP (a path through a
    /// relay, which only relays UDP).
    pub fn set_udp_only(&mut self, slot: usize) {
        if let Some(s) = self.slots.get_mut(slot) {
            s.udp_only = true;
        }
    }

    /// Timers: re-bind paths that never validated; end overdue make-before-breaks.
    pub fn handle_timeout(&mut self, now: Duration) {
        if !self.in_session {
            return;
        }
        for (slot, s) in self.slots.iter_mut().enumerate() {
            let recheck = s.recheck;
            let Some(l) = s.live.as_mut() else { continue };
            probe_timers(slot, l, now, recheck, &mut self.actions);
            if !l.validated && now >= l.since + l.retry {
                if let Some(old) = l.old.take() {
                    self.actions.push_back(Action::Remove {
                        slot,
                        id: old,
                        reason: "its replacement did not validate in time",
                    });
                }
                self.actions.push_back(Action::Remove {
                    slot,
                    id: l.id,
                    reason: "not validated in time; re-binding",
                });
                if !l.tcp && !s.udp_only {
                    l.udp_failed = true;
                }
                l.tcp = !l.tcp && !s.udp_only;
                self.actions.push_back(Action::Add {
                    slot,
                    id: l.id,
                    attach: l.attach,
                    tcp: l.tcp,
                });
                l.since = now;
                l.retry = (l.retry * 2).min(VALIDATE_MAX);
            } else if l.old.is_some() && now >= l.since + MBB_DEADLINE {
                let old = l.old.take().expect("checked");
                self.actions.push_back(Action::Remove {
                    slot,
                    id: old,
                    reason: "its replacement took too long to validate",
                });
            }
        }
    }

    /// When [`PathManager::handle_timeout`] wants to run next.
    pub fn poll_timeout(&self) -> Option<Duration> {
        if !self.in_session {
            return None;
        }
        self.slots
            .iter()
            .filter_map(|s| s.live.as_ref())
            .flat_map(|l| {
                let v = (!l.validated).then_some(l.since + l.retry);
                let m = l.old.map(|_| l.since + MBB_DEADLINE);
                let p = match l.probe {
                    Some((_, since)) => Some(since + PROBE_WINDOW),
                    None => l.next_probe.filter(|_| probe_allowed(l)),
                };
                [v, m, p]
            })
            .flatten()
            .min()
    }

    /// The next thing to do to the session.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// True when configured path `slot` is in the session (validated or not).
    pub fn is_live(&self, slot: usize) -> bool {
        self.slots.get(slot).is_some_and(|s| s.live.is_some())
    }

    /// The slot that path `id` belongs to.
    pub fn slot_of(&self, id: PathId) -> Option<usize> {
        self.slots.iter().position(|s| {
            s.live.as_ref().is_some_and(|l| {
                l.id == id || l.old == Some(id) || l.probe.is_some_and(|p| p.0 == id)
            })
        })
    }

    fn reconcile(&mut self, now: Duration) {
        if !self.in_session {
            return;
        }
        for slot in 0..self.slots.len() {
            let want = self.attach(slot);
            let s = &mut self.slots[slot];
            match (want, s.live.as_mut()) {
                (None, Some(l)) => {
                    l.cancel_probe(slot, &mut self.actions);
                    let reason = "its link or address went away";
                    if let Some(old) = l.old {
                        self.actions.push_back(Action::Remove {
                            slot,
                            id: old,
                            reason,
                        });
                    }
                    self.actions.push_back(Action::Remove {
                        slot,
                        id: l.id,
                        reason,
                    });
                    s.live = None;
                }
                (Some(attach), None) => {
                    let id = slot as PathId;
                    self.actions.push_back(Action::Add {
                        slot,
                        id,
                        attach,
                        tcp: false,
                    });
                    s.live = Some(Live::new(id, attach, now));
                }
                (Some(attach), Some(l)) if attach != l.attach => {
                    l.cancel_probe(slot, &mut self.actions);
                    if attach.index != l.attach.index || l.old.is_some() {
                        // Re-created interface (the old socket is bound to a dead index),
                        // or a second change while a replacement runs: start over.
                        self.actions.push_back(Action::Remove {
                            slot,
                            id: l.id,
                            reason: "its interface was re-created or changed again",
                        });
                        l.tcp = l.tcp && attach.index == l.attach.index;
                        self.actions.push_back(Action::Add {
                            slot,
                            id: l.id,
                            attach,
                            tcp: l.tcp,
                        });
                        l.validated = false;
                        l.retry = VALIDATE_FIRST;
                    } else {
                        // New address, same link: make-before-break.
                        let new = l.other_id();
                        self.actions.push_back(Action::Add {
                            slot,
                            id: new,
                            attach,
                            tcp: l.tcp,
                        });
                        l.old = Some(l.id);
                        l.id = new;
                        l.validated = false;
                        l.retry = VALIDATE_FIRST;
                    }
                    l.attach = attach;
                    l.since = now;
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests;
