//! The agent's mode for new connections, as the front ends and TUN mode meet it: through
//! the session, waiting for the first one while the agent starts, or direct (direct mode
//! on, no session). The decision is the sans-IO [`Startup`]'s (`client::startup`); this
//! module reads it with tokio's clock, waits on it, and logs and shows the mode.
//!
//! Owns: [`Shared::direct_now`], [`Shared::wait_start`] and the mode task
//! ([`watch_mode`]). Must not touch: when the start-up ends (`run` tells [`Startup`]),
//! opening connections or streams (`direct`, `direct_session`).

use super::client::startup::{Place, Startup, START_WAIT};
use super::{SessionSlot, Shared, StatusBoard};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::info;

/// The start-up state, shared by the session task (which moves it on) and its readers.
pub(super) type StartSlot = Arc<watch::Sender<Startup>>;

/// Where a new connection goes now.
fn place(start: &StartSlot, session: &SessionSlot) -> Place {
    let up = session.borrow().is_some();
    start.borrow().place(Instant::now().into_std(), up)
}

impl Shared {
    /// A new connection goes straight to its destination now: direct mode is on, no
    /// session is up and the start-up wait is over.
    pub(super) fn direct_now(&self) -> bool {
        self.fallback().is_some() && place(&self.startup, &self.session) == Place::Direct
    }

    /// With direct mode on, while the agent starts and no session is up yet: wait for the
    /// session or for the end of the start-up wait, whichever comes first. Returns at once
    /// otherwise.
    pub(super) async fn wait_start(&self) {
        if self.fallback().is_none() {
            return;
        }
        let (mut session, mut start) = (self.session.clone(), self.startup.subscribe());
        loop {
            let until = match place(&self.startup, &session) {
                Place::Wait(until) => until.map(Instant::from_std),
                Place::Session | Place::Direct => return,
            };
            let sleep = async {
                match until {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = session.changed() => if r.is_err() { return },
                r = start.changed() => if r.is_err() { return },
                () = sleep => {}
            }
        }
    }
}

/// Log and show the mode (starting, session or direct) whenever it changes. Nothing is
/// logged once the agent is `stopping`: its session's end is not a change of mode.
pub(super) async fn watch_mode(
    mut session: SessionSlot,
    start: StartSlot,
    board: Arc<StatusBoard>,
    servers: usize,
    stopping: Arc<AtomicBool>,
) {
    let mut rx = start.subscribe();
    let mut shown = None;
    loop {
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        let now = place(&start, &session);
        if shown != Some(kind(now)) {
            shown = Some(kind(now));
            show(now, &board, servers);
        }
        let until = match now {
            Place::Wait(Some(t)) => Some(Instant::from_std(t)),
            _ => None,
        };
        let sleep = async {
            match until {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = session.changed() => if r.is_err() {
                // No session task (no server configured): direct for good.
                std::future::pending::<()>().await;
            },
            r = rx.changed() => if r.is_err() { std::future::pending::<()>().await },
            () = sleep => {}
        }
    }
}

/// The mode `braid status` shows for `place`.
fn kind(place: Place) -> &'static str {
    match place {
        Place::Session => "session",
        Place::Wait(_) => "starting",
        Place::Direct => "direct",
    }
}

fn show(place: Place, board: &StatusBoard, servers: usize) {
    match place {
        Place::Session => {
            info!("mode: session (packet level through the server) for new connections");
            board.set_mode("session");
        }
        Place::Wait(_) => {
            info!(
                "mode: starting: new connections wait for the first session (up to {} ms after the first handshake), then go direct if no server answers",
                START_WAIT.as_millis()
            );
            board.set_mode("starting");
        }
        Place::Direct if servers == 0 => {
            info!(
                "mode: direct (no server configured): each new connection goes whole on one path"
            );
            board.set_mode("direct");
        }
        Place::Direct => {
            info!("mode: direct (no server answers; still trying): each new connection goes whole on one path");
            board.set_mode("direct");
        }
    }
}
