//! The captive-portal checks' I/O: the HTTP request to the check URL from a path that does
//! not validate (bound to it, as its sockets are), the answer handed to the sans-IO
//! [`CaptiveWatch`] (`pathmgr::captive`, which decides), and its events applied: the log
//! line, the path re-bound at once when the portal lets traffic through. The status board
//! reads the portal from the watch (`actions::policy_view`).
//!
//! Owns: the check's connection and its timeout. Must not touch: the decisions (when to
//! check, what an answer means), the session.

use super::Runner;
use crate::pathmgr::captive::{
    classify, CaptiveEvent, CheckUrl, Verdict, ANSWER_MAX, PROBE_TIMEOUT,
};
use crate::udp::PathBind;
use std::net::{IpAddr, SocketAddr};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;
use tracing::{info, warn};

/// The checks under way: (configured path, verdict) when each ends.
pub(super) type Checks = JoinSet<(usize, Verdict)>;

impl Runner {
    /// Bring the checks up to date with the paths: start those due, act on the events.
    pub(super) fn captive_step(&mut self, checks: &mut Checks) {
        let Some(url) = self.cfg.captive_check.clone() else {
            return;
        };
        let now = self.now();
        let carrying = self.client.paths.carrying();
        self.client.captive.handle_timeout(now, &carrying);
        let avail = self.client.paths.available();
        while let Some(slot) = self.client.captive.poll_probe() {
            let bind = self.client.paths.bind_of(slot);
            let v6 = avail
                .iter()
                .find(|a| a.0 == slot)
                .map(|a| a.1.addr.is_ipv6());
            let (Some(bind), Some(v6)) = (bind, v6) else {
                self.client
                    .captive
                    .handle_verdict(now, slot, Verdict::Unknown);
                continue;
            };
            let url = url.clone();
            checks.spawn(async move { (slot, check(bind, url, v6).await) });
        }
        while let Some(ev) = self.client.captive.poll_event() {
            match ev {
                CaptiveEvent::Captive { slot, url } => {
                    let portal = url
                        .as_deref()
                        .unwrap_or("(it gave no URL: open any http:// page)");
                    warn!(path = %self.name(slot), portal, check = %url_of(&self.cfg.captive_check),
                        "captive portal: the path's network answers web requests with a login page and lets nothing else through; log in at the portal; braid sends none of your traffic there and uses the path as soon as the portal lets traffic through");
                }
                CaptiveEvent::Released { slot } => {
                    info!(path = %self.name(slot), "the captive portal lets traffic through now: using the path");
                    self.client.paths.retry_now(now, slot);
                }
            }
        }
    }

    /// A check ended.
    pub(super) fn captive_verdict(&mut self, checks: &mut Checks, (slot, v): (usize, Verdict)) {
        self.client.captive.handle_verdict(self.now(), slot, v);
        self.captive_step(checks);
    }
}

fn url_of(u: &Option<CheckUrl>) -> &str {
    u.as_ref().map_or("-", |u| u.url.as_str())
}

/// One check from path `bind` (of IPv6 when `v6`): the verdict on the answer, `Unknown`
/// when none came within [`PROBE_TIMEOUT`].
async fn check(bind: PathBind, url: CheckUrl, v6: bool) -> Verdict {
    let answer = async {
        let ip = match url.host.parse::<IpAddr>() {
            Ok(ip) => ip,
            Err(_) => tokio::net::lookup_host((url.host.as_str(), url.port))
                .await
                .ok()?
                .find(|a| a.is_ipv6() == v6)?
                .ip(),
        };
        let mut s = crate::tcp::connect(&bind, SocketAddr::new(ip, url.port))
            .await
            .ok()?;
        s.write_all(&url.request()).await.ok()?;
        let mut buf = Vec::with_capacity(1024);
        let mut chunk = [0u8; 1024];
        while buf.len() < ANSWER_MAX && !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        Some(classify(&buf))
    };
    match tokio::time::timeout(PROBE_TIMEOUT, answer).await {
        Ok(Some(v)) => v,
        _ => Verdict::Unknown,
    }
}
