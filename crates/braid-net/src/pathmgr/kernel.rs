//! The path manager's view of the kernel: links, addresses and default routes as the
//! netlink watcher reports them; which interface each `--path auto` slot takes; whether a
//! configured path is available now, where it attaches, and why not when it is not.
//!
//! Owns: the kernel-view half of [`PathManager`]'s methods. Must not touch: the session's
//! side (validation, failures, probes and the actions they produce stay in `mod.rs`).

use super::{is_own_device, Attach, NetEvent, PathManager, Slot};
use crate::udp::PathBind;
use std::net::IpAddr;
use std::time::Duration;

impl PathManager {
    /// Feed one kernel event.
    pub fn handle_event(&mut self, now: Duration, ev: NetEvent) {
        match ev {
            NetEvent::Link { index, name, up } => {
                self.links.insert(index, (name, up));
            }
            NetEvent::LinkGone { index } => {
                self.links.remove(&index);
                self.addrs.remove(&index);
                self.routes.retain(|r| r.0 != index);
            }
            NetEvent::DefaultRoute { index, v6, metric } => {
                self.routes.insert((index, v6, metric));
            }
            NetEvent::DefaultRouteGone { index, v6, metric } => {
                self.routes.remove(&(index, v6, metric));
            }
            NetEvent::Addr { index, addr } => {
                self.addrs.entry(index).or_default().insert(addr);
            }
            NetEvent::AddrGone { index, addr } => {
                if let Some(s) = self.addrs.get_mut(&index) {
                    s.remove(&addr);
                }
            }
        }
        self.assign_auto();
        self.reconcile(now);
    }

    /// True when link `index` has a default route of the server's family.
    pub(super) fn has_default_route(&self, index: u32) -> bool {
        self.routes
            .iter()
            .any(|r| r.0 == index && (r.1 != self.ipv4 || self.both))
    }

    /// Give free auto slots the interfaces that qualify and no slot names.
    pub(super) fn assign_auto(&mut self) {
        let mut free = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.bind == PathBind::Auto && s.auto.is_none())
            .map(|(i, _)| i)
            .peekable();
        if free.peek().is_none() {
            return;
        }
        let taken = |slots: &[Slot], name: &str| {
            slots.iter().any(|s| {
                s.auto.as_deref() == Some(name) || s.bind == PathBind::Interface(name.into())
            })
        };
        let mut candidates: Vec<(u32, String)> = self
            .links
            .iter()
            .filter(|(i, (name, up))| {
                *up && name != "lo" && !is_own_device(name) && self.has_default_route(**i)
            })
            .map(|(i, (n, _))| (*i, n.clone()))
            .collect();
        candidates.sort();
        let free: Vec<usize> = free.collect();
        let mut free = free.into_iter();
        for (_, name) in candidates {
            if taken(&self.slots, &name) {
                continue;
            }
            let Some(slot) = free.next() else { break };
            self.slots[slot].auto = Some(name);
        }
    }

    /// How configured path `slot` is bound: an auto slot as the interface it took.
    pub fn bind_of(&self, slot: usize) -> Option<PathBind> {
        let s = self.slots.get(slot)?;
        match (&s.bind, &s.auto) {
            (PathBind::Auto, Some(name)) => Some(PathBind::Interface(name.clone())),
            (PathBind::Auto, None) => None,
            (b, _) => Some(b.clone()),
        }
    }

    /// The interface an auto slot took, if it is one.
    pub fn auto_interface(&self, slot: usize) -> Option<&str> {
        self.slots.get(slot)?.auto.as_deref()
    }

    /// Forget everything the kernel said (the watcher lost events and dumps again).
    pub fn reset_kernel_view(&mut self) {
        self.links.clear();
        self.addrs.clear();
        self.routes.clear();
    }

    /// Without a kernel view (netlink unavailable), count every path as present: sockets
    /// that cannot be bound are retried by the validation timer.
    pub fn assume_present(&mut self) {
        self.assume = true;
    }

    /// Where configured path `slot` can be bound now, if anywhere.
    pub fn attach(&self, slot: usize) -> Option<Attach> {
        let bind = &self.slots.get(slot)?.bind;
        let unspecified: IpAddr = if self.ipv4 {
            std::net::Ipv4Addr::UNSPECIFIED.into()
        } else {
            std::net::Ipv6Addr::UNSPECIFIED.into()
        };
        if self.assume {
            let addr = match bind {
                PathBind::Address(ip) => *ip,
                PathBind::Interface(_) => unspecified,
                // Without a kernel view there is nothing to choose from.
                PathBind::Auto => return None,
            };
            return Some(Attach { index: 0, addr });
        }
        match bind {
            // The whole loopback prefix is local without being listed (127.0.0.2, ...).
            PathBind::Address(ip) if ip.is_loopback() => Some(Attach {
                index: self
                    .links
                    .iter()
                    .find(|(_, (n, _))| n == "lo")
                    .map_or(1, |(i, _)| *i),
                addr: *ip,
            }),
            PathBind::Interface(name) => self.attach_interface(name),
            PathBind::Auto => {
                let name = self.slots[slot].auto.as_deref()?;
                let a = self.attach_interface(name)?;
                self.has_default_route(a.index).then_some(a)
            }
            PathBind::Address(ip) => {
                let (&index, _) = self
                    .addrs
                    .iter()
                    .find(|(i, s)| s.contains(ip) && self.links.get(i).is_some_and(|l| l.1))?;
                Some(Attach { index, addr: *ip })
            }
        }
    }

    pub(super) fn attach_interface(&self, name: &str) -> Option<Attach> {
        let (&index, _) = self.links.iter().find(|(_, (n, up))| n == name && *up)?;
        let addrs = self.addrs.get(&index)?;
        let addr = addrs
            .iter()
            .find(|a| self.usable_addr(a, self.ipv4))
            .or_else(|| {
                let other = !self.ipv4;
                addrs
                    .iter()
                    .find(|a| self.both && self.usable_addr(a, other))
            })?;
        Some(Attach { index, addr: *addr })
    }

    /// An address a path towards a server of the family `ipv4` can send from (IPv6: not
    /// link-local).
    pub(super) fn usable_addr(&self, a: &IpAddr, ipv4: bool) -> bool {
        match a {
            IpAddr::V4(_) => ipv4,
            IpAddr::V6(v6) => !ipv4 && (v6.segments()[0] & 0xffc0) != 0xfe80,
        }
    }

    /// The configured paths available now, with where to bind them.
    pub fn available(&self) -> Vec<(usize, Attach)> {
        (0..self.slots.len())
            .filter_map(|i| self.attach(i).map(|a| (i, a)))
            .collect()
    }

    /// Why path `slot` is not available, for the log.
    pub fn why_unavailable(&self, slot: usize) -> String {
        let Some(s) = self.slots.get(slot) else {
            return "no such path".into();
        };
        match &s.bind {
            PathBind::Interface(name) => match self.links.iter().find(|(_, (n, _))| n == name) {
                None => format!("interface {name} does not exist"),
                Some((_, (_, false))) => format!("interface {name} is down or has no carrier"),
                Some(_) => format!(
                    "interface {name} has no {} address",
                    match (self.ipv4, self.both) {
                        (_, true) => "IPv4 or global IPv6",
                        (true, false) => "IPv4",
                        (false, false) => "global IPv6",
                    }
                ),
            },
            PathBind::Address(ip) => format!("no interface that is up has the address {ip}"),
            PathBind::Auto => match &s.auto {
                None => "no (other) interface that is up has a default route".into(),
                Some(name) => {
                    format!("interface {name} is gone, down, or has no default route or address")
                }
            },
        }
    }
}
