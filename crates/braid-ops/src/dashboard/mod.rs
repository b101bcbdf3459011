//! `--dashboard ADDR:PORT`: a live web page of a running agent or server, served with axum.
//!
//! Routes: `GET /` (the page, `page.html`), `GET /app.js` (the script that draws the charts
//! in SVG; no external library, everything is embedded in the binary), `GET /events`
//! (server-sent events: first `history` with the last 5 minutes of samples and the latest
//! status, then a `tick` every [`history::SAMPLE_EVERY`]; see `history`). The status in
//! each event is the JSON of `braid status --json` (docs/status.md).
//!
//! Access: a non-loopback address is refused unless a token is set or the operator said
//! `--dashboard-public` ([`DashboardConfig::new`]). With a token, `/` and `/events` need it as
//! `?token=TOKEN` or `Authorization: Bearer TOKEN` (the script is static and needs none).
//!
//! Owns: the listener, the routes, access control, response headers. Must not touch: the
//! snapshots (braid-net), the sampling arithmetic (`history`).

pub mod history;

use crate::Source;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use history::Hub;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use thiserror::Error;
use tokio::net::TcpListener;
use tracing::info;

const PAGE: &str = include_str!("page.html");
const SCRIPT: &str = include_str!("app.js");
/// Scripts and styles only from the page itself (the page's style sheet is inline).
const CSP: &str = "default-src 'none'; script-src 'self'; connect-src 'self'; \
                   style-src 'unsafe-inline'; img-src 'self' data:";

/// A dashboard setting that cannot be used.
#[derive(Debug, Error)]
pub enum DashboardError {
    /// Reachable from the network with nothing guarding it.
    #[error("--dashboard {addr}: not a loopback address, and no --dashboard-token is set; give a token (`dashboard_token` in the config file keeps it out of `ps`), or say --dashboard-public to serve it to anyone who can reach {addr}")]
    Public {
        /// The address.
        addr: SocketAddr,
    },
    /// An empty or unusable token.
    #[error("--dashboard-token: {0}")]
    Token(&'static str),
    /// The listener could not be opened.
    #[error(transparent)]
    Listen(#[from] crate::http::ListenError),
}

/// Where and how the dashboard is served.
#[derive(Clone)]
pub struct DashboardConfig {
    /// Listen address.
    pub addr: SocketAddr,
    token: Option<Arc<str>>,
}

impl std::fmt::Debug for DashboardConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DashboardConfig")
            .field("addr", &self.addr)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .finish()
    }
}

impl DashboardConfig {
    /// Check the settings: a non-loopback `addr` needs a `token` or `public`.
    pub fn new(
        addr: SocketAddr,
        token: Option<String>,
        public: bool,
    ) -> Result<DashboardConfig, DashboardError> {
        if let Some(t) = &token {
            if t.len() < 8 {
                return Err(DashboardError::Token(
                    "shorter than 8 characters; use a long random one (e.g. `openssl rand -hex 16`)",
                ));
            }
            if !t
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
            {
                return Err(DashboardError::Token(
                    "use only letters, digits and - . _ ~ (it goes into a URL)",
                ));
            }
        }
        if !addr.ip().is_loopback() && token.is_none() && !public {
            return Err(DashboardError::Public { addr });
        }
        Ok(DashboardConfig {
            addr,
            token: token.map(Arc::from),
        })
    }

    /// Whether a token is required.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }
}

#[derive(Clone)]
struct App {
    hub: Arc<Hub>,
    token: Option<Arc<str>>,
}

/// Equal in time independent of where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl App {
    /// `None` when the request may pass, else the refusal.
    fn refuse(&self, headers: &HeaderMap, uri: &Uri) -> Option<Response> {
        let want = self.token.as_deref()?;
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let query = uri
            .query()
            .unwrap_or("")
            .split('&')
            .find_map(|kv| kv.strip_prefix("token="));
        if [bearer, query]
            .into_iter()
            .flatten()
            .any(|t| same(t.trim().as_bytes(), want.as_bytes()))
        {
            return None;
        }
        Some(
            (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "this braid dashboard needs its token (--dashboard-token): open /?token=TOKEN, \
                 or send Authorization: Bearer TOKEN\n",
            )
                .into_response(),
        )
    }
}

fn no_store(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(header::CACHE_CONTROL, "no-store".parse().expect("valid"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        "nosniff".parse().expect("valid"),
    );
    h.insert(header::CONTENT_SECURITY_POLICY, CSP.parse().expect("valid"));
    h.insert(
        header::REFERRER_POLICY,
        "no-referrer".parse().expect("valid"),
    );
    r
}

async fn page(State(app): State<App>, headers: HeaderMap, uri: Uri) -> Response {
    if let Some(r) = app.refuse(&headers, &uri) {
        return r;
    }
    no_store(([(header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE).into_response())
}

async fn script() -> Response {
    no_store(
        (
            [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
            SCRIPT,
        )
            .into_response(),
    )
}

async fn events(State(app): State<App>, headers: HeaderMap, uri: Uri) -> Response {
    if let Some(r) = app.refuse(&headers, &uri) {
        return r;
    }
    // Subscribe before reading the history, so no tick falls between the two.
    let rx = app.hub.subscribe();
    let first = Event::default().event("history").data(app.hub.history());
    let ticks = futures_util::stream::unfold(rx, |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok(t) => return Some((Event::default().event("tick").data(&*t), rx)),
                // A slow page skips ticks; its charts have a gap.
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    use futures_util::StreamExt as _;
    let stream = futures_util::stream::once(async move { first })
        .chain(ticks)
        .map(Ok::<_, Infallible>);
    no_store(
        Sse::new(stream)
            .keep_alive(KeepAlive::default())
            .into_response(),
    )
}

/// Bind `cfg.addr` and serve the dashboard of `source`; returns the bound address and the
/// task serving it (the sampler runs inside it; both end when it is dropped with the
/// runtime or aborted).
pub async fn serve(
    cfg: DashboardConfig,
    source: Source,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), DashboardError> {
    let addr = cfg.addr;
    let err = |source| crate::http::ListenError {
        what: "--dashboard",
        addr,
        source,
    };
    let l = TcpListener::bind(addr).await.map_err(err)?;
    let bound = l.local_addr().map_err(err)?;
    let hub = Hub::new();
    let guarded = if cfg.token.is_some() {
        "required"
    } else {
        "none"
    };
    let app = App {
        hub: hub.clone(),
        token: cfg.token,
    };
    let router = Router::new()
        .route("/", get(page))
        .route("/app.js", get(script))
        .route("/events", get(events))
        .with_state(app);
    info!(listen = %bound, token = guarded, "live dashboard at http://{bound}/");
    let task = tokio::spawn(async move {
        let sampler = history::run(source, hub);
        tokio::select! {
            _ = sampler => {}
            _ = axum::serve(l, router) => {}
        }
    });
    Ok((bound, task))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_public_address_needs_a_token_or_an_explicit_public() {
        let lo: SocketAddr = "127.0.0.1:9000".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:9000".parse().unwrap();
        assert!(DashboardConfig::new(lo, None, false).is_ok());
        assert!(DashboardConfig::new("[::1]:9000".parse().unwrap(), None, false).is_ok());
        let e = DashboardConfig::new(any, None, false).unwrap_err();
        assert!(e.to_string().contains("--dashboard-token"), "{e}");
        assert!(DashboardConfig::new(any, None, true).is_ok());
        assert!(DashboardConfig::new(any, Some("0123456789abcdef".into()), false).is_ok());
        assert!(DashboardConfig::new(any, Some("short".into()), false).is_err());
        assert!(DashboardConfig::new(any, Some("has space in it".into()), false).is_err());
    }

    #[test]
    fn the_token_is_accepted_in_the_query_or_as_a_bearer_only() {
        let app = App {
            hub: Hub::new(),
            token: Some(Arc::from("s3cret-token")),
        };
        let uri = |s: &str| s.parse::<Uri>().unwrap();
        let none = HeaderMap::new();
        assert!(app.refuse(&none, &uri("/")).is_some());
        assert!(app.refuse(&none, &uri("/?token=wrong-token")).is_some());
        assert!(app
            .refuse(&none, &uri("/?x=1&token=s3cret-token"))
            .is_none());
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            "Bearer s3cret-token".parse().unwrap(),
        );
        assert!(app.refuse(&h, &uri("/events")).is_none());
        let open = App {
            hub: Hub::new(),
            token: None,
        };
        assert!(open.refuse(&none, &uri("/")).is_none());
    }
}
