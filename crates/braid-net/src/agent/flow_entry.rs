//! A datagram flow's entry in the agent's flow table (flow id to the sender its session
//! datagrams go to), held by the flow's task and removed when it ends, however it ends
//! (an error answering the application included).
//!
//! Owns: adding and removing one entry. Must not touch: what the flow relays (`front`,
//! `lan_udp`), the session's side of the table (`run`).

use bytes::Bytes;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// The agent's flow table: the session task hands a flow's datagrams to its sender.
pub(super) type FlowTable = Arc<Mutex<HashMap<u32, mpsc::Sender<Bytes>>>>;

/// One flow's entry; dropping it removes the entry.
pub(super) struct FlowEntry {
    table: FlowTable,
    /// The flow's id (the session's flow id of its datagrams).
    pub id: u32,
}

impl FlowEntry {
    /// A new flow numbered from `next`, its session datagrams sent to `tx`.
    pub(super) fn open(table: &FlowTable, next: &AtomicU32, tx: mpsc::Sender<Bytes>) -> Self {
        let id = next.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut m) = table.lock() {
            m.insert(id, tx);
        }
        FlowEntry {
            table: table.clone(),
            id,
        }
    }
}

impl Drop for FlowEntry {
    fn drop(&mut self) {
        if let Ok(mut m) = self.table.lock() {
            m.remove(&self.id);
        }
    }
}
