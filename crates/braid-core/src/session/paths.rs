//! The session's paths as the application manages them: adding, removing and abandoning
//! paths, their state, cost and reliability, and read-only views of each (statistics,
//! scheduler info, condition).
//!
//! Owns: the path-management half of [`Session`]'s public API and [`PathError`]. Must not
//! touch: what a path does per packet (`crate::path`), sending and receiving (`send`,
//! `recv`), streams.

use super::*;

impl Session {
    pub(super) fn insert_path(&mut self, now: Instant, id: PathId) -> &mut Path {
        let mut p = Path::new(id, &self.cfg, self.cfg.cc, now);
        if self.max_burst > 10 {
            p.set_max_burst(now, self.max_burst);
        }
        // A re-added path continues the old incarnation's packet numbers, so the peer
        // (which may never have heard that the path was abandoned) does not take its new
        // packets for duplicates.
        if let Some(old) = self.paths.get(&id) {
            p.next_pn = old.next_pn;
        }
        p.adopt_early_cost(self.early_costs.remove(&id));
        p.set_reliable(self.reliable.contains(&id), self.cfg.cc, now);
        if let Some(&n) = self.max_datagrams.get(&id) {
            p.set_max_datagram(n as u64, self.cfg.cc, now);
        }
        if self.side == Side::Client {
            let mut token = [0u8; 8];
            self.rng.fill(&mut token);
            p.challenge = Some(token);
            p.challenge_due = true;
        }
        self.paths.insert(id, p);
        self.paths.get_mut(&id).expect("just inserted")
    }

    /// Add a path (client only). It is validated by challenge and response before carrying
    /// data. Fails if the id is in use or the session has `max_paths` paths.
    pub fn add_path(&mut self, now: Instant, id: PathId) -> Result<(), PathError> {
        if self.side != Side::Client {
            return Err(PathError::NotClient);
        }
        if self.paths.get(&id).is_some_and(|p| !p.abandoned) {
            return Err(PathError::InUse(id));
        }
        if self.live_paths() >= self.cfg.max_paths {
            return Err(PathError::TooMany(self.cfg.max_paths));
        }
        // An abandonment the peer has not been told about yet is moot now.
        self.pending.path_abandon.remove(&id);
        self.insert_path(now, id);
        self.state_changed(now);
        Ok(())
    }

    /// Path `id`, unless it is unknown or abandoned.
    fn live_path_mut(&mut self, id: PathId) -> Result<&mut Path, PathError> {
        self.paths
            .get_mut(&id)
            .filter(|p| !p.abandoned)
            .ok_or(PathError::Unknown(id))
    }

    pub(super) fn live_paths(&self) -> usize {
        self.paths.values().filter(|p| !p.abandoned).count()
    }

    /// Stop using a path for good; its data in flight is resent on the other paths.
    pub fn remove_path(&mut self, now: Instant, id: PathId) -> Result<(), PathError> {
        match self.paths.get(&id) {
            Some(p) if !p.abandoned => {}
            _ => return Err(PathError::Unknown(id)),
        }
        self.abandon_path(now, id);
        self.pending.path_abandon.insert(id);
        self.state_changed(now);
        Ok(())
    }

    pub(super) fn abandon_path(&mut self, now: Instant, id: PathId) {
        let Some(p) = self.paths.get_mut(&id).filter(|p| !p.abandoned) else {
            return;
        };
        p.abandoned = true;
        // Into the shared list: it may already hold losses that an ACK earlier in the same
        // packet found on another path (dropping them lost that data for good).
        p.drain_all(&mut self.scratch_lost);
        self.events.push_back(Event::PathClosed(id));
        self.process_acked_and_lost(now);
    }

    /// The network driver saw authenticated packets of a path arrive from a new address
    /// (NAT rebinding, or the peer moved): the path carries no data until it is validated
    /// again by challenge and response, and until then this end sends on it at most
    /// `amplification_factor` times the bytes received from the new address. What it had
    /// in flight went to the old address, which a NAT that rebound no longer forwards: its
    /// stream data is sent again on the other paths at once (before, the download waited
    /// for the path's probe timeout: 150-250 ms stalls on a NAT rebinding).
    pub fn path_address_changed(&mut self, now: Instant, id: PathId) {
        let mut token = [0u8; 8];
        self.rng.fill(&mut token);
        if let Some(p) = self.paths.get_mut(&id).filter(|p| !p.abandoned) {
            p.validated = false;
            p.challenge = Some(token);
            p.challenge_due = true;
            p.bytes_received_unvalidated = 0;
            p.bytes_sent_unvalidated = 0;
            self.reinject_in_flight(now, id);
        }
        self.state_changed(now);
    }

    /// Ask for a path to be used as active, standby or frozen; the peer is told too.
    pub fn set_path_state(
        &mut self,
        now: Instant,
        id: PathId,
        state: PathState,
    ) -> Result<(), PathError> {
        let p = self.live_path_mut(id)?;
        p.local_state = state;
        p.status_seq += 1;
        self.pending.path_status.insert(id);
        self.state_changed(now);
        Ok(())
    }

    /// Send a PING on every live path now, whatever its congestion window or probe-timeout
    /// backoff, so that the driver learns at once whether the peer still answers (the agent
    /// uses it to tell a network that came back from a server that forgot the session).
    pub fn ping_paths(&mut self, now: Instant) {
        for p in self.paths.values_mut().filter(|p| !p.abandoned) {
            p.probes_due = p.probes_due.max(1);
        }
        self.state_changed(now);
    }

    /// Say what using a path costs: the interface's power while active, above its idle
    /// power, in milliwatts, and its rate at the IP layer in kbit/s if known (0: let the
    /// scheduler estimate it). The peer is told too (PATH_COST, resent until acknowledged),
    /// since the sender's scheduler needs it and only the device knows its radios. The
    /// `operetta` scheduler uses it; others ignore it.
    pub fn set_path_cost(
        &mut self,
        now: Instant,
        id: PathId,
        power_mw: u64,
        rate_kbps: u64,
    ) -> Result<(), PathError> {
        let p = self.live_path_mut(id)?;
        p.cost = Some(crate::path::PathCost {
            power_mw,
            rate_kbps,
        });
        p.cost_seq += 1;
        self.pending.path_cost.insert(id);
        self.state_changed(now);
        Ok(())
    }

    /// The network driver says whether path `id` now runs over a reliable, ordered
    /// transport (braid packets over a TCP connection, for networks that block UDP) or
    /// over datagrams again. Local only: each end's driver knows its own transport. The
    /// setting holds for the id, also for a path that does not exist yet or is re-added.
    /// On a reliable path nothing is declared lost by threshold (a late ACK is TCP's own
    /// retransmission, not a loss) and the controller is BBR, which bounds the data in
    /// flight without needing losses; the probe timeout still marks the path potentially
    /// failed and reinjects its data on other paths when the connection stalls. When the
    /// transport of a live path changes, its packets in flight are treated as lost.
    pub fn set_path_reliable(&mut self, now: Instant, id: PathId, reliable: bool) {
        if reliable {
            self.reliable.insert(id);
        } else {
            self.reliable.remove(&id);
        }
        let cc = self.cfg.cc;
        if let Some(p) = self.paths.get_mut(&id).filter(|p| !p.abandoned) {
            if p.reliable != reliable {
                p.set_reliable(reliable, cc, now);
                // What went out on the old transport is resent: on a reliable path
                // nothing would ever declare it lost.
                p.drain_all(&mut self.scratch_lost);
                self.process_acked_and_lost(now);
            }
        }
        self.state_changed(now);
    }

    /// The network driver says how large a datagram path `id` carries: its address
    /// family's and interface's MTU less the IP and UDP headers (1472 for IPv4, 1452 for
    /// IPv6 over a 1500-byte MTU). Local only, like [`Session::set_path_reliable`], and it
    /// holds for the id, also for a path that does not exist yet or is re-added. Clamped to
    /// [`MIN_PATH_DATAGRAM`]..=`max_datagram_size` (the latter when `size` is larger or
    /// the path is forgotten with 0). The path's packets are built no larger, and its
    /// congestion controller counts in packets of that size.
    pub fn set_path_max_datagram(&mut self, now: Instant, id: PathId, size: usize) {
        let max = self.cfg.max_datagram_size;
        let size = if size == 0 {
            max
        } else {
            size.clamp(MIN_PATH_DATAGRAM.min(max), max)
        };
        if size == max {
            self.max_datagrams.remove(&id);
        } else {
            self.max_datagrams.insert(id, size);
        }
        let cc = self.cfg.cc;
        if let Some(p) = self.paths.get_mut(&id).filter(|p| !p.abandoned) {
            p.set_max_datagram(size as u64, cc, now);
        }
        self.state_changed(now);
    }

    /// A path's datagram size fell into a black hole: tell the application once per drop.
    pub(super) fn report_pmtu_drops(&mut self) {
        for p in self.paths.values_mut() {
            if let Some(c) = p.pmtu_dropped.take() {
                self.events.push_back(Event::PathDatagramSizeDropped {
                    path: p.id,
                    from: c.from,
                    to: c.to,
                });
            }
        }
    }

    /// The largest datagram path `id` carries now: the size its discovery confirmed
    /// (`Config::pmtu_discovery`), at most the limit [`Session::set_path_max_datagram`]
    /// set.
    pub fn path_max_datagram(&self, id: PathId) -> usize {
        self.paths
            .get(&id)
            .map_or(self.cfg.max_datagram_size, |p| p.max_datagram())
    }

    /// The limit of path `id`'s datagrams as [`Session::set_path_max_datagram`] set it
    /// (clamped), up to which its discovery searches.
    pub fn path_datagram_limit(&self, id: PathId) -> usize {
        self.paths
            .get(&id)
            .map_or(self.cfg.max_datagram_size, |p| p.pmtud.ceiling())
    }

    /// True when the driver said path `id` runs over a reliable transport.
    pub fn path_reliable(&self, id: PathId) -> bool {
        self.reliable.contains(&id)
    }

    /// What a path costs, as set here or told by the peer.
    pub fn path_cost(&self, id: PathId) -> Option<crate::path::PathCost> {
        self.paths.get(&id).and_then(|p| p.cost)
    }

    /// Paths known to the session (abandoned ones included until the session ends).
    pub fn path_ids(&self) -> Vec<PathId> {
        self.paths.keys().copied().collect()
    }

    /// True when the path exists, passed validation and was not abandoned.
    pub fn path_usable(&self, id: PathId) -> bool {
        self.paths.get(&id).is_some_and(|p| p.usable())
    }

    /// Counters and current window and RTT of a path.
    pub fn path_stats(&self, id: PathId) -> Option<PathStats> {
        self.paths.get(&id).map(|p| p.stats())
    }

    /// A read-only view of a path, as schedulers see it (state, RTTs, window, pacing and
    /// delivery rates), for status displays.
    pub fn path_info(&self, now: Instant, id: PathId) -> Option<PathInfo> {
        self.paths.get(&id).map(|p| p.info(now))
    }

    /// Where a path is in its life: validated, abandoned, frozen by a confirmed blackout.
    /// `None` when the session does not know the path.
    pub fn path_condition(&self, id: PathId) -> Option<PathCondition> {
        self.paths.get(&id).map(|p| PathCondition {
            validated: p.validated,
            abandoned: p.abandoned,
            frozen: p.frozen(),
            last_received: p.last_recv,
        })
    }
}

/// Errors of path management.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// Only the client adds paths.
    #[error("only the client adds paths")]
    NotClient,
    /// A live path already has this id.
    #[error("path {0} already exists")]
    InUse(PathId),
    /// The session already has the most paths allowed.
    #[error("a session has at most {0} paths")]
    TooMany(usize),
    /// No live path with this id.
    #[error("no path {0}")]
    Unknown(PathId),
}

#[cfg(test)]
#[path = "paths_mtu_tests.rs"]
mod mtu_tests;
