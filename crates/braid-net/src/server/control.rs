//! What an operator does to a running server: reload its authorized keys (SIGHUP) and shut
//! it down (SIGTERM), both through [`ServerControl`], a handle that works while
//! `Server::run` runs.
//!
//! Owns: the authorized-key list the handshake reads (shared, replaced on reload), ending
//! the sessions of keys no longer listed, closing every session with CLOSE and waiting for
//! their tasks. Must not touch: the handshake policy, the listening loop, the session's
//! protocol (it asks each session task to `close`).

use super::report::ServerBoard;
use crate::bridge::{Cmd, SessionFn};
use braid_crypto::PublicKey;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tracing::info;

pub use crate::common::CLOSE_ORDERLY;

/// The authorized agent keys, shared by the listening loop and the control handle.
pub type Authorized = Arc<RwLock<Vec<PublicKey>>>;

/// What a reload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reload {
    /// Keys now authorized.
    pub keys: usize,
    /// Sessions kept (their key is still listed).
    pub kept: usize,
    /// Sessions ended (their key was removed).
    pub ended: usize,
}

/// Reload and shutdown of a running server (cheap to clone).
#[derive(Clone)]
pub struct ServerControl {
    pub(super) board: Arc<ServerBoard>,
    pub(super) authorized: Authorized,
}

fn close(cmd: &tokio::sync::mpsc::UnboundedSender<Cmd>, reason: &'static str) {
    let _ = cmd.send(Cmd::Session(SessionFn(Box::new(move |s, now| {
        s.close(now, CLOSE_ORDERLY, reason)
    }))));
}

impl ServerControl {
    /// Replace the authorized keys: new handshakes are checked against `keys` from now on,
    /// sessions of keys still listed go on, the others are closed (CLOSE to the agent).
    pub fn reload_authorized(&self, keys: Vec<PublicKey>) -> Reload {
        let n = keys.len();
        let (mut kept, mut ended) = (0, 0);
        if let Ok(mut a) = self.authorized.write() {
            *a = keys.clone();
        }
        if let Ok(live) = self.board.live.lock() {
            for (id, l) in live.iter() {
                if keys.contains(&l.key) {
                    kept += 1;
                } else {
                    info!(session = format_args!("{id:016x}"), agent = %super::fingerprint(&l.key), "the agent's key is no longer authorized: ending its session");
                    close(&l.cmd, "agent key no longer authorized");
                    ended += 1;
                }
            }
        }
        Reload {
            keys: n,
            kept,
            ended,
        }
    }

    /// Close every session (each agent gets a CLOSE and connects elsewhere or again later)
    /// and wait up to `timeout` for their tasks to end. Returns how many sessions were
    /// still there when the wait ended (0: all closed). The caller then stops `run`.
    pub async fn shutdown(&self, timeout: Duration) -> usize {
        if let Ok(live) = self.board.live.lock() {
            for l in live.values() {
                close(&l.cmd, "server shutting down");
            }
        }
        let until = tokio::time::Instant::now() + timeout;
        loop {
            let left = self.board.live.lock().map_or(0, |m| m.len());
            if left == 0 || tokio::time::Instant::now() >= until {
                return left;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
