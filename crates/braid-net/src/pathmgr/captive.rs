//! Captive portals (a hotel WiFi that answers every web request with its login page and
//! drops the rest), sans-IO: when a path of the session has not validated for [`GRACE`],
//! an HTTP request to a connectivity-check URL goes out on it (bound to the path, as its
//! sockets are), every [`PROBE_EVERY`] while the path does not validate. The answer decides
//! ([`classify`]): the URL's own answer (`204 No Content`) means the network lets traffic
//! through; a redirect (its `Location` is the portal's URL), a page of its own or `511`
//! mean a portal. A path behind a portal is shown `captive` with the URL and logged once;
//! once the check URL answers itself again, the path is re-bound at once
//! ([`PathManager::retry_now`]) instead of at its backed-off retry, so it carries data
//! within a few seconds of the login. Nothing of the user's goes to the portal: an
//! unvalidated path carries no data, and only this check is sent over HTTP.
//!
//! Owns: the check URL, the verdict on an answer, the per-path probe timers and the
//! captive state. Must not touch: sockets, DNS, tokio (the agent's `run::captive` sends the
//! request and feeds the answer back), the paths' validation (the core's).

use super::PathManager;
use std::collections::VecDeque;
use std::time::Duration;

/// The default check URL: a well-known connectivity check that answers `204 No Content`.
pub const DEFAULT_CHECK_URL: &str = "http://connectivitycheck.gstatic.com/generate_204";
/// How long a path of the session may stay unvalidated before its network is checked.
pub const GRACE: Duration = Duration::from_secs(1);
/// The wait between checks of a path that does not validate (captive or not).
pub const PROBE_EVERY: Duration = Duration::from_millis(1500);
/// How long one check may take (connect, send, answer) before it counts as no answer.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// The most of an answer read (its status line and headers).
pub const ANSWER_MAX: usize = 4096;

/// A bad check URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("captive portal check URL {url:?}: {reason}; give an http:// URL that answers 204 No Content, like {DEFAULT_CHECK_URL}")]
pub struct CheckUrlError {
    url: String,
    reason: &'static str,
}

/// The connectivity-check URL (plain HTTP: a portal cannot intercept HTTPS usefully).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckUrl {
    /// The URL as given.
    pub url: String,
    /// Its host (a name, or an IP address; IPv6 without brackets).
    pub host: String,
    /// Its port (80 unless given).
    pub port: u16,
    /// Its path and query (`/` at least).
    pub path: String,
}

impl CheckUrl {
    /// Parse `http://HOST[:PORT][/PATH]`.
    pub fn parse(url: &str) -> Result<CheckUrl, CheckUrlError> {
        let err = |reason| CheckUrlError {
            url: url.to_string(),
            reason,
        };
        let rest = url
            .strip_prefix("http://")
            .ok_or(err("not an http:// URL"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or(err("an unclosed [ in the host"))?;
            (h, after.strip_prefix(':'))
        } else {
            match authority.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        let port = match port {
            Some(p) => p.parse().map_err(|_| err("a bad port"))?,
            None => 80,
        };
        if host.is_empty() || host.contains(|c: char| c.is_whitespace() || c == '@') {
            return Err(err("no usable host"));
        }
        Ok(CheckUrl {
            url: url.to_string(),
            host: host.to_string(),
            port,
            path: path.to_string(),
        })
    }

    /// The request sent on the path.
    pub fn request(&self) -> Vec<u8> {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!(
            "GET {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: braid captive portal check\r\n\
             Accept: */*\r\nConnection: close\r\n\r\n",
            self.path
        )
        .into_bytes()
    }
}

/// What an answer to the check says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The check URL answered itself: the network lets traffic through.
    Open,
    /// A portal answered: its URL where it gave one (a redirect's `Location`).
    Portal(Option<String>),
    /// No answer, or one that says neither (a refused connection, a server error).
    Unknown,
}

/// The verdict on an answer's first bytes (status line and headers; the rest is ignored).
pub fn classify(answer: &[u8]) -> Verdict {
    let text = String::from_utf8_lossy(&answer[..answer.len().min(ANSWER_MAX)]);
    let mut lines = text.split("\r\n");
    let status = lines.next().and_then(|l| {
        let mut w = l.split_whitespace();
        let v = w.next()?;
        v.starts_with("HTTP/").then_some(())?;
        w.next()?.parse::<u16>().ok()
    });
    let header = |name: &str| {
        text.split("\r\n")
            .skip(1)
            .take_while(|l| !l.is_empty())
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| v.trim().to_string())
            })
    };
    match status {
        Some(204) => Verdict::Open,
        Some(200) if header("content-length").as_deref() == Some("0") => Verdict::Open,
        Some(301 | 302 | 303 | 307 | 308) => {
            Verdict::Portal(header("location").filter(|l| !l.is_empty()))
        }
        // A page of the portal's own in place of the check's empty answer, or RFC 6585's
        // "network authentication required".
        Some(200..=299 | 511) => Verdict::Portal(None),
        _ => Verdict::Unknown,
    }
}

/// What the agent must tell the user or do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaptiveEvent {
    /// Path `slot` is behind a captive portal (at `url`, where known).
    Captive {
        /// The configured path.
        slot: usize,
        /// The portal's URL.
        url: Option<String>,
    },
    /// The portal in front of path `slot` lets traffic through now: re-bind the path.
    Released {
        /// The configured path.
        slot: usize,
    },
}

#[derive(Debug, Clone, Default)]
struct Watch {
    /// When the next check goes out (`None`: the path carries data, or is not in the
    /// session).
    next: Option<Duration>,
    /// A check is out.
    probing: bool,
    /// Behind a portal (its URL where known).
    portal: Option<Option<String>>,
}

/// The captive-portal checks of every configured path (see the module doc).
#[derive(Debug, Clone, Default)]
pub struct CaptiveWatch {
    paths: Vec<Watch>,
    probes: VecDeque<usize>,
    events: VecDeque<CaptiveEvent>,
}

impl CaptiveWatch {
    /// Checks for `n` configured paths.
    pub fn new(n: usize) -> CaptiveWatch {
        CaptiveWatch {
            paths: vec![Watch::default(); n],
            ..CaptiveWatch::default()
        }
    }

    /// The paths' condition at `now` (per configured path: `None` not in the session,
    /// else validated or not, as [`PathManager::carrying`] says); checks that are due.
    pub fn handle_timeout(&mut self, now: Duration, carrying: &[Option<bool>]) {
        for (slot, (w, c)) in self.paths.iter_mut().zip(carrying).enumerate() {
            match c {
                Some(false) => {
                    let next = *w.next.get_or_insert(now + GRACE);
                    if now >= next && !w.probing {
                        w.probing = true;
                        self.probes.push_back(slot);
                    }
                }
                Some(true) | None => {
                    if w.portal.take().is_some() && *c == Some(true) {
                        self.events.push_back(CaptiveEvent::Released { slot });
                    }
                    w.next = None;
                }
            }
        }
    }

    /// The answer to path `slot`'s check came (or none did, in [`PROBE_TIMEOUT`]).
    pub fn handle_verdict(&mut self, now: Duration, slot: usize, v: Verdict) {
        let Some(w) = self.paths.get_mut(slot) else {
            return;
        };
        w.probing = false;
        if w.next.is_none() {
            return; // The path validated (or went) meanwhile.
        }
        w.next = Some(now + PROBE_EVERY);
        match v {
            Verdict::Portal(url) if w.portal.as_ref() != Some(&url) => {
                w.portal = Some(url.clone());
                self.events.push_back(CaptiveEvent::Captive { slot, url });
            }
            Verdict::Open if w.portal.take().is_some() => {
                self.events.push_back(CaptiveEvent::Released { slot });
            }
            _ => {}
        }
    }

    /// The checks under way were dropped unanswered (their session ended): none is out.
    pub fn checks_dropped(&mut self) {
        self.paths.iter_mut().for_each(|w| w.probing = false);
    }

    /// The next path to check (the agent sends the request on it).
    pub fn poll_probe(&mut self) -> Option<usize> {
        self.probes.pop_front()
    }

    /// The next thing to tell the user or do.
    pub fn poll_event(&mut self) -> Option<CaptiveEvent> {
        self.events.pop_front()
    }

    /// When [`CaptiveWatch::handle_timeout`] has a check to start.
    pub fn poll_timeout(&self) -> Option<Duration> {
        (self.paths.iter())
            .filter(|w| !w.probing)
            .filter_map(|w| w.next)
            .min()
    }

    /// Path `slot`'s portal: `Some(url)` while it is captive.
    pub fn portal(&self, slot: usize) -> Option<&Option<String>> {
        self.paths.get(slot).and_then(|w| w.portal.as_ref())
    }
}

impl PathManager {
    /// Per configured path: `None` while it is not in the session, else whether it
    /// validated (carries data).
    pub fn carrying(&self) -> Vec<Option<bool>> {
        (self.slots.iter())
            .map(|s| s.live.as_ref().map(|l| l.validated))
            .collect()
    }

    /// The captive portal in front of path `slot` lets traffic through now: re-bind it on
    /// a fresh UDP socket at once (its retry wait starts over), unless it validated.
    pub fn retry_now(&mut self, now: Duration, slot: usize) {
        let Some(s) = self.slots.get_mut(slot) else {
            return;
        };
        let Some(l) = s.live.as_mut().filter(|l| !l.validated && l.old.is_none()) else {
            return;
        };
        l.cancel_probe(slot, &mut self.actions);
        self.actions.push_back(super::Action::Remove {
            slot,
            id: l.id,
            reason: "its captive portal lets traffic through now; re-binding",
        });
        l.tcp = false;
        l.udp_failed = false;
        self.actions.push_back(super::Action::Add {
            slot,
            id: l.id,
            attach: l.attach,
            tcp: false,
        });
        l.since = now;
        l.retry = super::VALIDATE_FIRST;
    }
}

#[cfg(test)]
mod tests;
