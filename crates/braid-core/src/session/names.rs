//! Path names: the names each end gives its paths (the agent's "lte", "wifi"), told to the
//! peer in PATH_NAME frames so that its status and logs use them.
//!
//! Owns: the local names to announce, the names the peer announced, and when a PATH_NAME
//! may be sent: only to a peer whose HELLO carries `features::PATH_NAMES` (an older peer
//! would refuse the unknown frame, and with it the packet). Names are kept per path id
//! across a path's incarnations (a path re-added under its id keeps its name). Must not
//! touch: paths' state, scheduling.

use super::Session;
use crate::ids::PathId;
use crate::time::Instant;
use crate::wire::frame::emit;
use crate::wire::{features, Writer};
use std::collections::BTreeMap;

/// Most names kept from a peer (path ids are one byte; a session uses at most 16).
const MAX_PEER_NAMES: usize = 32;

/// Both ends' path names.
#[derive(Debug, Default)]
pub(super) struct PathNames {
    local: BTreeMap<PathId, String>,
    peer: BTreeMap<PathId, String>,
}

impl Session {
    /// Name path `id` for the peer (PATH_NAME, resent until acknowledged; cut to
    /// [`crate::wire::MAX_PATH_NAME`] bytes). A peer that does not announce
    /// `features::PATH_NAMES` in its HELLO is never sent one. Setting the same name again
    /// sends nothing; an empty name is ignored.
    pub fn set_path_name(&mut self, now: Instant, id: PathId, name: &str) {
        let name = emit::clip_name(name);
        if name.is_empty() || self.names.local.get(&id).is_some_and(|n| n == name) {
            return;
        }
        self.names.local.insert(id, name.to_string());
        if self.peer_reads_names() {
            self.pending.path_name.insert(id);
            self.state_changed(now);
        }
    }

    /// The peer's name for path `id`, if it sent one.
    pub fn peer_path_name(&self, id: PathId) -> Option<&str> {
        self.names.peer.get(&id).map(String::as_str)
    }

    /// The name of path `id` for logs: ours if we named it, else the peer's.
    pub fn path_name(&self, id: PathId) -> Option<&str> {
        self.names
            .local
            .get(&id)
            .or_else(|| self.names.peer.get(&id))
            .map(String::as_str)
    }

    /// True when the peer's HELLO says it reads PATH_NAME frames.
    pub(super) fn peer_reads_names(&self) -> bool {
        self.peer_params
            .is_some_and(|h| h.features & features::PATH_NAMES != 0)
    }

    /// The peer's HELLO arrived: queue every name set so far if it reads them.
    pub(super) fn names_on_hello(&mut self) {
        if self.peer_reads_names() {
            let ids: Vec<PathId> = self.names.local.keys().copied().collect();
            self.pending.path_name.extend(ids);
        }
    }

    /// A PATH_NAME was lost: send it again.
    pub(super) fn name_lost(&mut self, id: PathId) {
        if self.names.local.contains_key(&id) {
            self.pending.path_name.insert(id);
        }
    }

    /// A PATH_NAME arrived (its name already checked by the parser).
    pub(super) fn on_path_name(&mut self, id: PathId, name: &str) {
        let n = &mut self.names.peer;
        if n.len() < MAX_PEER_NAMES || n.contains_key(&id) {
            n.insert(id, name.to_string());
        }
    }

    /// Write the pending PATH_NAME frames that fit; returns the ids written.
    pub(super) fn write_path_names(&mut self, w: &mut Writer<'_>, wrote: &mut Vec<PathId>) {
        if !self.peer_reads_names() {
            self.pending.path_name.clear();
            return;
        }
        while let Some(&id) = self.pending.path_name.first() {
            let Some(name) = self.names.local.get(&id) else {
                self.pending.path_name.remove(&id);
                continue;
            };
            if emit::path_name(w, id, name).is_none() {
                break;
            }
            self.pending.path_name.remove(&id);
            wrote.push(id);
        }
    }
}

#[cfg(test)]
#[path = "names_tests.rs"]
pub(in crate::session) mod tests;
