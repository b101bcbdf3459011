//! The HTTP endpoints of `--metrics ADDR:PORT`: `GET /metrics` (Prometheus/OpenMetrics text,
//! see [`crate::metrics`]), served with axum on the agent's or server's runtime.
//!
//! Owns: the listener, the routes, content types. Must not touch: the metric names
//! (`metrics`) or the snapshots (braid-net).

use crate::Source;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use std::net::SocketAddr;
use thiserror::Error;
use tokio::net::TcpListener;
use tracing::info;

/// The content type of OpenMetrics text.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A listener that could not be opened.
#[derive(Debug, Error)]
#[error("cannot listen for {what} on {addr}: {source}; choose another ADDR:PORT")]
pub struct ListenError {
    /// What it was for (`--metrics`).
    pub what: &'static str,
    /// The address.
    pub addr: SocketAddr,
    /// Why.
    pub source: std::io::Error,
}

async fn metrics(State(source): State<Source>) -> impl IntoResponse {
    let text = crate::metrics::render(&source.snapshot().await);
    ([(header::CONTENT_TYPE, OPENMETRICS)], text)
}

/// Bind `addr` for `/metrics`; returns the bound address and the task serving it (it ends
/// when dropped with the runtime).
pub async fn serve_metrics(
    addr: SocketAddr,
    source: Source,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), ListenError> {
    let err = |source| ListenError {
        what: "--metrics",
        addr,
        source,
    };
    let l = TcpListener::bind(addr).await.map_err(err)?;
    let bound = l.local_addr().map_err(err)?;
    let app = Router::new()
        .route("/metrics", get(metrics))
        .with_state(source);
    info!(listen = %bound, "Prometheus metrics at /metrics");
    let task = tokio::spawn(async move {
        let _ = axum::serve(l, app).await;
    });
    Ok((bound, task))
}
