//! Rate-limited logging of what the server drops or refuses: no log line per bad packet.
//!
//! Owns: [`DropLog`], counters per kind of drop. The first drop of a kind in a quiet period
//! is logged at once with its detail; later ones are only counted, and [`DropLog::flush`]
//! (called every [`DropLog::PERIOD`]) writes one line per kind with the count. So a flood
//! adds at most two lines per kind per period to the log, per server worker (each worker's
//! endpoint has its own, so that counting a dropped packet takes no lock). Must not touch:
//! the decisions themselves (the server's) and sockets.

use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// The log's detail of a message 1 without a valid mac1 of `n` bytes: not made for this
/// server's key (issue 38 item 4: the agent's `server_pub` is wrong, if it is an agent).
pub(super) fn bad_mac1(n: usize, key: &braid_crypto::StaticKeypair) -> String {
    format!(
        "{n} bytes; if it is one of your agents, its server_pub is not this server's public \
         key {} (the line of /etc/braid/server.pub): copy that",
        key.public().to_base64()
    )
}

/// What was dropped or refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// Not a braid packet at all (random bytes, scans).
    NotBraid,
    /// A transport packet for a session this server does not know.
    UnknownSession,
    /// A handshake packet without a valid mac1 (not made for this server's key).
    BadMac1,
    /// A handshake packet for a session that already exists, not a retransmission of its
    /// message 1 from its address.
    ExistingSession,
    /// Under load without a valid mac2: answered with a cookie.
    CookieDemanded,
    /// The source address spent its handshake budget.
    RateLimited,
    /// `max_sessions` sessions are live.
    SessionLimit,
    /// The handshake itself refused it (unknown key, replay, clock skew, forged).
    Refused,
    /// A session that never completed its first exchange, closed.
    Unfinished,
    /// Proxied UDP return traffic dropped because the session's queue is full.
    UdpReturnFull,
    /// The replay-guard state could not be written.
    StateWrite,
    /// A key rotation for a live session refused (another agent key, or the key is no
    /// longer authorized).
    RotationRefused,
}

const KINDS: usize = 12;

impl Dropped {
    fn index(self) -> usize {
        self as usize
    }

    fn what(self) -> &'static str {
        match self {
            Dropped::NotBraid => "datagrams that are not braid packets dropped",
            Dropped::UnknownSession => "packets for unknown sessions dropped",
            Dropped::BadMac1 => {
                "handshakes without a valid mac1 dropped (not for this server's key)"
            }
            Dropped::ExistingSession => "handshakes for a session that exists dropped",
            Dropped::CookieDemanded => "handshakes answered with a cookie (server under load)",
            Dropped::RateLimited => "handshakes dropped by the per-address rate limit",
            Dropped::SessionLimit => "handshakes refused: session limit reached",
            Dropped::Refused => "handshakes refused",
            Dropped::Unfinished => "sessions closed before completing their first exchange",
            Dropped::UdpReturnFull => "proxied UDP datagrams dropped: session queue full",
            Dropped::StateWrite => "replay-guard state writes failed",
            Dropped::RotationRefused => "key rotations refused",
        }
    }

    /// Expected on the open internet: logged at debug; the rest at info or warn.
    fn level(self) -> tracing::Level {
        match self {
            Dropped::NotBraid | Dropped::UnknownSession | Dropped::ExistingSession => {
                tracing::Level::DEBUG
            }
            Dropped::BadMac1
            | Dropped::CookieDemanded
            | Dropped::Unfinished
            | Dropped::UdpReturnFull => tracing::Level::INFO,
            _ => tracing::Level::WARN,
        }
    }
}

fn emit(level: tracing::Level, msg: std::fmt::Arguments<'_>) {
    match level {
        tracing::Level::DEBUG => debug!("{msg}"),
        tracing::Level::INFO => info!("{msg}"),
        _ => warn!("{msg}"),
    }
}

/// Counts drops by kind and logs them at a bounded rate.
pub struct DropLog {
    /// Drops counted since the last line of each kind.
    counts: [u64; KINDS],
    /// Whether the kind logged its first drop in this period already.
    seen: [bool; KINDS],
    /// All drops ever, by kind (for tests and reports).
    totals: [u64; KINDS],
    /// Lines written (for tests).
    lines: u64,
    last_flush: Option<Instant>,
    /// Where every line is counted too.
    sink: Option<std::sync::Arc<super::HandshakeCounters>>,
}

impl Default for DropLog {
    fn default() -> Self {
        Self::new()
    }
}

impl DropLog {
    /// How often counts are written.
    pub const PERIOD: Duration = Duration::from_secs(10);

    /// Nothing counted yet.
    pub fn new() -> DropLog {
        DropLog {
            counts: [0; KINDS],
            seen: [false; KINDS],
            totals: [0; KINDS],
            lines: 0,
            last_flush: None,
            sink: None,
        }
    }

    /// Also count every line written in `counters.log_lines` (shared by all workers).
    pub fn counting_into(mut self, counters: std::sync::Arc<super::HandshakeCounters>) -> Self {
        self.sink = Some(counters);
        self
    }

    fn line(&mut self) {
        self.lines += 1;
        if let Some(c) = &self.sink {
            c.log_lines
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Count one drop of `kind` from `from`; `detail` is logged only for the first of its
    /// kind in a period (it is not even formatted for the others).
    pub fn count(
        &mut self,
        kind: Dropped,
        from: Option<SocketAddr>,
        detail: impl FnOnce() -> String,
    ) {
        let i = kind.index();
        self.totals[i] += 1;
        if self.seen[i] {
            self.counts[i] += 1;
            return;
        }
        self.seen[i] = true;
        self.line();
        let from = from.map_or(String::new(), |a| format!(" from {a}"));
        emit(
            kind.level(),
            format_args!(
                "{}{from}: {} (further ones are counted and logged every {} s)",
                kind.what(),
                detail(),
                Self::PERIOD.as_secs()
            ),
        );
    }

    /// Write one line per kind counted since the last flush; call every [`Self::PERIOD`].
    pub fn flush(&mut self, now: Instant) {
        let secs = self
            .last_flush
            .map_or(Self::PERIOD, |t| now.saturating_duration_since(t))
            .as_secs_f64();
        self.last_flush = Some(now);
        for kind in [
            Dropped::NotBraid,
            Dropped::UnknownSession,
            Dropped::BadMac1,
            Dropped::ExistingSession,
            Dropped::CookieDemanded,
            Dropped::RateLimited,
            Dropped::SessionLimit,
            Dropped::Refused,
            Dropped::Unfinished,
            Dropped::UdpReturnFull,
            Dropped::StateWrite,
        ] {
            let i = kind.index();
            let n = std::mem::take(&mut self.counts[i]);
            if n > 0 {
                self.line();
                emit(
                    kind.level(),
                    format_args!("{n} more {} in the last {secs:.0} s", kind.what()),
                );
            } else {
                // A quiet period: the next drop is logged with its detail again.
                self.seen[i] = false;
            }
        }
    }

    /// Drops of `kind` since the start.
    pub fn total(&self, kind: Dropped) -> u64 {
        self.totals[kind.index()]
    }

    /// Log lines written since the start.
    pub fn lines(&self) -> u64 {
        self.lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_writes_two_lines_per_period() {
        let t0 = Instant::now();
        let mut log = DropLog::new();
        let mut formatted = 0;
        for _ in 0..100_000 {
            log.count(Dropped::Refused, None, || {
                formatted += 1;
                "replayed".into()
            });
        }
        assert_eq!(formatted, 1, "detail formatted once");
        assert_eq!(log.lines(), 1);
        log.flush(t0 + DropLog::PERIOD);
        assert_eq!(log.lines(), 2);
        for _ in 0..1000 {
            log.count(Dropped::Refused, None, String::new);
        }
        log.flush(t0 + 2 * DropLog::PERIOD);
        assert_eq!(log.lines(), 3, "still counting: one summary line");
        // A quiet period resets: the next drop is logged with its detail.
        log.flush(t0 + 3 * DropLog::PERIOD);
        log.count(Dropped::Refused, None, String::new);
        assert_eq!(log.lines(), 4);
        assert_eq!(log.total(Dropped::Refused), 101_001);
        assert_eq!(log.total(Dropped::BadMac1), 0);
    }
}
