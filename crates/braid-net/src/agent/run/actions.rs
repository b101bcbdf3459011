//! The runner's hands: the path manager's actions applied to the running session (a new
//! UDP socket, a TCP connection that finished, a path removed or replaced), and the view of
//! caps and addresses the status board shows.
//!
//! Owns: those `Runner` methods. Must not touch: the session loop itself (`run.rs`), the
//! decisions (the path manager's).

use super::*;
use crate::agent::report::shown_local;

impl Runner {
    /// What the status board needs from the policy state and the socket table.
    pub(super) fn policy_view(&self, table: &SocketTable) -> PolicyView {
        let now = unix_secs();
        let cap_used = self
            .cfg
            .paths
            .iter()
            .map(|p| p.policy.cap.map(|c| self.ledger.used(&p.name, &c, now)))
            .collect();
        let paths = &self.client.paths;
        let addrs = table
            .lock()
            .map(|t| {
                t.iter()
                    .filter_map(|(id, r)| match r {
                        Route::Udp(s, peer) => {
                            let attach = paths.attach(*id as usize % 8).map(|a| a.addr);
                            let local = s.local_addr().ok().map(|l| shown_local(l, attach));
                            Some((*id, (local, *peer)))
                        }
                        // A TCP path's addresses are its connection's; not shown yet.
                        Route::Tcp(_) => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let auto = (0..self.cfg.paths.len())
            .map(|slot| self.client.paths.auto_interface(slot).map(str::to_string))
            .collect();
        let captive = (0..self.cfg.paths.len())
            .map(|slot| self.client.captive.portal(slot).cloned())
            .collect();
        PolicyView {
            captive,
            over_cap: self.slots.iter().map(|s| s.over_cap).collect(),
            cap_used,
            addrs,
            auto,
        }
    }

    /// A TCP connection for a path finished connecting: add the path to the session over
    /// it, as a reliable path.
    pub(super) fn tcp_connected(
        &mut self,
        c: Connected,
        cmd: &mpsc::UnboundedSender<Cmd>,
        links: &mut Links,
    ) {
        let (id, slot) = (c.0, c.2);
        if !links.tcp_connected(c, self.name(slot), self.server) {
            return;
        }
        let policy = self.policy_fn(slot, id);
        let name = self.name(slot).to_string();
        let _ = cmd.send(Cmd::Session(SessionFn(Box::new(move |s, now| {
            s.set_path_reliable(now, id, true);
            s.set_path_max_datagram(now, id, 0);
            if let Err(e) = s.add_path(now, id) {
                debug!(id, "add_path: {e}");
            }
            s.set_path_name(now, id, &name);
            policy(s, now);
        }))));
    }

    /// Bind a UDP socket for configured path `slot` at `attach` and add it to the session
    /// as `id`. False when the socket cannot be bound (the manager retries).
    pub(super) fn add_udp(
        &mut self,
        cmd: &mpsc::UnboundedSender<Cmd>,
        links: &mut Links,
        (slot, id, attach): (usize, PathId, crate::pathmgr::Attach),
    ) -> bool {
        let Some(bind) = self.client.paths.bind_of(slot) else {
            return false;
        };
        let server = self.cfg.server_for(self.server, attach.addr);
        let b = match handshake::bind(&self.cfg, &(slot, attach, bind), server) {
            Ok(b) => b,
            Err(e) => {
                // The manager re-binds it when validation does not come.
                warn!(path = %self.name(slot), "cannot bind the path's socket: {e}; retrying");
                return false;
            }
        };
        links.add_udp(id, &b);
        let policy = self.policy_fn(slot, id);
        let (limit, name) = (b.max_datagram, self.name(slot).to_string());
        let _ = cmd.send(Cmd::Session(SessionFn(Box::new(move |s, now| {
            s.set_path_reliable(now, id, false);
            s.set_path_max_datagram(now, id, limit);
            if let Err(e) = s.add_path(now, id) {
                debug!(id, "add_path: {e}");
            }
            s.set_path_name(now, id, &name);
            policy(s, now);
        }))));
        true
    }

    /// Apply everything the path manager decided.
    pub(super) fn apply(&mut self, cmd: &mpsc::UnboundedSender<Cmd>, links: &mut Links) {
        while let Some(a) = self.client.paths.poll_action() {
            match a {
                Action::Add {
                    slot,
                    id,
                    attach,
                    tcp: true,
                } => {
                    if self.client.paths.udp_failed(id) {
                        warn!(path = %self.name(slot), id, ifindex = attach.index, addr = %attach.addr, server = %self.server,
                            "no answer over UDP: trying braid over TCP (the network may block UDP)");
                    } else {
                        info!(path = %self.name(slot), id, ifindex = attach.index, addr = %attach.addr, server = %self.server,
                            "connecting braid over TCP again");
                    }
                    self.set_status(slot, PathStatus::Validating);
                    let Some(bind) = self.client.paths.bind_of(slot) else {
                        continue;
                    };
                    let server = self.cfg.server_for(self.server, attach.addr);
                    links.connect_tcp(slot, bind, id, server);
                }
                Action::Add {
                    slot,
                    id,
                    attach,
                    tcp: false,
                } => {
                    if self.add_udp(cmd, links, (slot, id, attach)) {
                        info!(path = %self.name(slot), id, ifindex = attach.index, addr = %attach.addr, "path up: adding it to the session");
                        self.set_status(slot, PathStatus::Validating);
                    }
                }
                Action::Probe { slot, id, attach } => {
                    if self.add_udp(cmd, links, (slot, id, attach)) {
                        info!(path = %self.name(slot), id, addr = %attach.addr, "the path runs over TCP: trying UDP again");
                    }
                }
                Action::DropProbe { slot, id, next } => {
                    info!(path = %self.name(slot), id, "UDP still unanswered: the path stays on TCP; next try in {next:?}");
                    links.remove(id);
                    let _ = cmd.send(Cmd::Session(SessionFn(Box::new(move |s, now| {
                        let _ = s.remove_path(now, id);
                    }))));
                }
                Action::Remove { slot, id, reason } => {
                    info!(path = %self.name(slot), id, "path down ({reason}): its data in flight goes on the other paths");
                    if !self.client.paths.is_live(slot) {
                        self.set_status(slot, PathStatus::Down);
                    }
                    links.remove(id);
                    let _ = cmd.send(Cmd::Session(SessionFn(Box::new(move |s, now| {
                        let _ = s.remove_path(now, id);
                    }))));
                }
            }
        }
    }
}
