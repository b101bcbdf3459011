//! One agent key's share of the server: the gate its sessions send through (its rate
//! limit, or its fair-share cap when lower) and the meter its streams go through (quotas,
//! whether it wants more than it gets).
//!
//! Owns: [`AgentShare`] and its counters. Must not touch: the controller's decisions
//! (`fair`), the sessions (they call the gate), the relay (it calls the meter).

use super::bucket::TokenBucket;
use super::fair::Tick;
use super::quota::Usage;
use super::{unix_secs, AgentLimits};
use crate::driver::SendGate;
use crate::server::fingerprint::fingerprint;
use crate::status;
use braid_crypto::PublicKey;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tracing::warn;

/// Application error code of a stream reset because its agent's quota is used up.
pub const QUOTA_REACHED: u64 = 0x12;

/// The least a bucket holds: one batch of full-size datagrams.
const MIN_BURST: u64 = 64 * 1024;

#[derive(Debug)]
struct State {
    /// At the lower of the limit and the cap; `None` when neither is set.
    bucket: Option<TokenBucket>,
    cap: Option<u64>,
    /// Nothing may be sent before this.
    until: Option<Instant>,
    usage: Usage,
    /// The quota period last logged as reached.
    logged: Option<&'static str>,
}

/// One agent key's share (all its sessions).
#[derive(Debug)]
pub struct AgentShare {
    key: PublicKey,
    limits: AgentLimits,
    st: Mutex<State>,
    /// Datagram bytes sent to it since the last tick.
    tick_sent: AtomicU64,
    /// It wanted more than it got since the last tick.
    wanting: AtomicBool,
    stream_sent: AtomicU64,
    stream_received: AtomicU64,
    dirty: Arc<AtomicBool>,
}

impl AgentShare {
    pub(super) fn new(
        key: PublicKey,
        limits: AgentLimits,
        usage: Usage,
        dirty: Arc<AtomicBool>,
    ) -> AgentShare {
        let now = Instant::now();
        AgentShare {
            key,
            limits,
            st: Mutex::new(State {
                bucket: limits.rate.map(|r| bucket(now, r)),
                cap: None,
                until: None,
                usage,
                logged: None,
            }),
            tick_sent: AtomicU64::new(0),
            wanting: AtomicBool::new(false),
            stream_sent: AtomicU64::new(0),
            stream_received: AtomicU64::new(0),
            dirty,
        }
    }

    fn st(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn key(&self) -> PublicKey {
        self.key
    }

    pub(super) fn usage(&self) -> Usage {
        self.st().usage
    }

    /// What it did since the last tick (and start the next).
    pub(super) fn take_tick(&self) -> Tick {
        Tick {
            sent: self.tick_sent.swap(0, Ordering::Relaxed),
            wanting: self.wanting.swap(false, Ordering::Relaxed),
            limit: self.limits.rate,
        }
    }

    /// Its fair-share cap from `now` on (`None`: uncapped).
    pub(super) fn set_cap(&self, now: Instant, cap: Option<u64>) {
        let mut st = self.st();
        if st.cap == cap {
            return;
        }
        st.cap = cap;
        let rate = match (self.limits.rate, cap) {
            (Some(l), Some(c)) => Some(l.min(c)),
            (l, c) => l.or(c),
        };
        match (rate, st.bucket.as_mut()) {
            (None, _) => st.bucket = None,
            (Some(r), Some(b)) => b.set_rate(now, r),
            (Some(r), None) => st.bucket = Some(bucket(now, r)),
        }
    }

    /// The gate its sessions send through.
    pub fn gate(self: &Arc<Self>) -> Box<dyn SendGate> {
        Box::new(Gate(self.clone()))
    }

    /// "day" or "month" when a quota is used up (logged once per period reached, naming
    /// the agent).
    pub fn quota_reached(&self) -> Option<&'static str> {
        let mut st = self.st();
        let reached = st.usage.reached(unix_secs(), self.limits.quota);
        if reached.is_some() && st.logged != reached {
            warn!(
                agent = %fingerprint(&self.key),
                period = reached.unwrap_or_default(),
                "quota used up: this agent's connections are refused until the period ends"
            );
        }
        st.logged = reached;
        reached
    }

    /// Count `n` stream bytes against the quotas: `Err` once one is used up.
    fn count(&self, n: usize) -> Result<(), u64> {
        let has_quota = self.limits.quota.day.is_some() || self.limits.quota.month.is_some();
        self.st().usage.add(unix_secs(), n as u64);
        self.dirty.store(true, Ordering::Relaxed);
        match has_quota && self.quota_reached().is_some() {
            true => Err(QUOTA_REACHED),
            false => Ok(()),
        }
    }

    /// As shown at unix time `secs`.
    pub(super) fn report(&self, secs: u64) -> status::AgentShare {
        let st = self.st();
        let (day, month) = st.usage.used(secs);
        status::AgentShare {
            agent_key_fingerprint: fingerprint(&self.key),
            sent_bytes: self.stream_sent.load(Ordering::Relaxed),
            received_bytes: self.stream_received.load(Ordering::Relaxed),
            rate_limit_bytes_per_sec: self.limits.rate,
            fair_cap_bytes_per_sec: st.cap,
            day_bytes: day,
            day_quota_bytes: self.limits.quota.day,
            month_bytes: month,
            month_quota_bytes: self.limits.quota.month,
            quota_reached: st
                .usage
                .reached(secs, self.limits.quota)
                .map(str::to_string),
        }
    }
}

fn bucket(now: Instant, rate: u64) -> TokenBucket {
    TokenBucket::new(now, rate, (rate / 50).max(MIN_BURST))
}

impl crate::splice::Meter for AgentShare {
    fn to_stream(&self, n: usize, blocked: bool) -> Result<(), u64> {
        if blocked {
            self.wanting.store(true, Ordering::Relaxed);
        }
        self.stream_sent.fetch_add(n as u64, Ordering::Relaxed);
        self.count(n)
    }

    fn to_tcp(&self, n: usize) -> Result<(), u64> {
        self.stream_received.fetch_add(n as u64, Ordering::Relaxed);
        self.count(n)
    }
}

/// The gate of one session of the agent.
struct Gate(Arc<AgentShare>);

impl SendGate for Gate {
    fn wait_until(&mut self) -> Option<tokio::time::Instant> {
        let mut st = self.0.st();
        let until = st.until.filter(|t| *t > Instant::now());
        st.until = until;
        drop(st);
        if until.is_some() {
            self.0.wanting.store(true, Ordering::Relaxed);
        }
        until.map(tokio::time::Instant::from_std)
    }

    fn sent(&mut self, bytes: usize) {
        self.0.tick_sent.fetch_add(bytes as u64, Ordering::Relaxed);
        let mut st = self.0.st();
        let now = Instant::now();
        if let Some(b) = st.bucket.as_mut() {
            let wait = b.take(now, bytes);
            st.until = (!wait.is_zero()).then_some(now + wait);
        }
    }
}
