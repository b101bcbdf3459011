//! braid-ops: what an operator sees of a running agent or server.
//!
//! - [`control`]: the control socket (a Unix socket, mode 0600) that answers `braid status`
//!   with the stable JSON snapshot of `braid_net::status`, and its client;
//! - [`metrics`]: the snapshot as Prometheus (OpenMetrics) text;
//! - [`http`]: `--metrics ADDR:PORT` (axum): `GET /metrics`;
//! - [`dashboard`]: `--dashboard ADDR:PORT` (axum): a live web page with SVG charts fed by
//!   server-sent events.
//!
//! Must not touch: the protocol, sessions, paths (braid-net produces the snapshots; this
//! crate only serves them).

pub mod control;
pub mod dashboard;
pub mod http;
pub mod metrics;

use braid_net::agent::StatusBoard;
use braid_net::server::ServerBoard;
use braid_net::status::Status;
use std::sync::Arc;

/// Where snapshots come from.
#[derive(Clone)]
pub enum Source {
    /// A running agent's board.
    Agent(Arc<StatusBoard>),
    /// A running server's board.
    Server(Arc<ServerBoard>),
}

impl Source {
    /// A snapshot now.
    pub async fn snapshot(&self) -> Status {
        match self {
            Source::Agent(b) => Status::Agent(b.snapshot()),
            Source::Server(b) => Status::Server(b.snapshot().await),
        }
    }

    /// `agent` or `server`.
    pub fn role(&self) -> &'static str {
        match self {
            Source::Agent(_) => "agent",
            Source::Server(_) => "server",
        }
    }
}
