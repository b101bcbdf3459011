//! The server's handshake gate: how much handshake work and how many replies one source
//! address may cause, and when the server counts as under load.
//!
//! Owns: [`RateLimiter`] (a token bucket per source address: an IPv4 address, or the /64 of
//! an IPv6 one), [`LoadMeter`] (handshake packets per second, all sources together) and
//! [`HintGate`] (how many "unknown session" hints go out, per address and in all).
//! Must not touch: sockets, clocks (the caller passes `now`), cryptography (braid-crypto's
//! `CookieChecker` does the MACs) and sessions.
//!
//! Each worker of the server has its own of each (`&mut self`, no lock, nothing shared
//! between cores), sized to its share of the server's budgets ([`HintGate::with_share`];
//! the endpoint divides `rate`, `burst` and the load threshold).
//!
//! Bounded memory: the limiter holds at most [`RateLimiter::MAX_ADDRESSES`] buckets; idle
//! buckets (full again) are dropped by [`RateLimiter::gc`], and when the table is full an
//! address without a bucket is refused (a flood from many spoofed addresses then costs
//! new agents a retry, never the server its memory).

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// The rate-limit key of an address: IPv4 as is, IPv6 by its /64 (one host usually owns a
/// whole /64, so counting single v6 addresses would not limit it).
fn key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => {
            let mut o = v6.octets();
            o[8..].fill(0);
            IpAddr::from(o)
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Tokens in millionths, so that refill needs no floats.
    micro_tokens: u64,
    last: Instant,
}

/// A token bucket per source address: `rate` tokens a second, at most `burst` saved up.
#[derive(Debug)]
pub struct RateLimiter {
    rate: u64,
    burst: u64,
    buckets: HashMap<IpAddr, Bucket>,
}

impl RateLimiter {
    /// Most addresses tracked at once.
    pub const MAX_ADDRESSES: usize = 65_536;

    /// `rate` per second per address, `burst` at once.
    pub fn new(rate: u32, burst: u32) -> RateLimiter {
        RateLimiter {
            rate: u64::from(rate.max(1)),
            burst: u64::from(burst.max(1)),
            buckets: HashMap::new(),
        }
    }

    fn refill(&self, b: &mut Bucket, now: Instant) {
        let dt = now.saturating_duration_since(b.last);
        let add = (dt.as_micros() as u64).saturating_mul(self.rate);
        b.micro_tokens = b
            .micro_tokens
            .saturating_add(add)
            .min(self.burst * 1_000_000);
        b.last = now;
    }

    /// Take one token for `ip`; false when its bucket is empty (or the table is full).
    pub fn allow(&mut self, ip: IpAddr, now: Instant) -> bool {
        let k = key(ip);
        let full = self.burst * 1_000_000;
        let mut b = match self.buckets.get(&k) {
            Some(b) => *b,
            None if self.buckets.len() >= Self::MAX_ADDRESSES => return false,
            None => Bucket {
                micro_tokens: full,
                last: now,
            },
        };
        self.refill(&mut b, now);
        let ok = b.micro_tokens >= 1_000_000;
        if ok {
            b.micro_tokens -= 1_000_000;
        }
        self.buckets.insert(k, b);
        ok
    }

    /// Drop the buckets that are full again (their addresses have been quiet).
    pub fn gc(&mut self, now: Instant) {
        let idle = Duration::from_micros(self.burst * 1_000_000 / self.rate + 1);
        self.buckets
            .retain(|_, b| now.saturating_duration_since(b.last) < idle);
    }

    /// Addresses tracked now.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// True when no address is tracked.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

/// Bounds the "unknown session" hints: [`HintGate::PER_ADDRESS`] a second per address
/// (burst as many) and [`HintGate::TOTAL`] a second from the whole server (burst a tenth),
/// so spoofed transport packets can make the server send little, and never more bytes than
/// they carried (a hint is 12 bytes, a transport packet at least 28).
#[derive(Debug)]
pub struct HintGate {
    per_address: RateLimiter,
    total: RateLimiter,
}

impl HintGate {
    /// Hints a second to one address.
    pub const PER_ADDRESS: u32 = 4;
    /// Hints a second in all.
    pub const TOTAL: u32 = 1000;

    /// A gate with the limits above.
    pub fn new() -> HintGate {
        HintGate::with_share(1)
    }

    /// One worker's gate of `workers`: its share of the limits above (rounded up).
    pub fn with_share(workers: usize) -> HintGate {
        let n = workers.clamp(1, u32::MAX as usize) as u32;
        let (per, total) = (Self::PER_ADDRESS.div_ceil(n), Self::TOTAL.div_ceil(n));
        HintGate {
            per_address: RateLimiter::new(per, per),
            total: RateLimiter::new(total, total.div_ceil(10)),
        }
    }

    /// May a hint go to `ip` now?
    pub fn allow(&mut self, ip: IpAddr, now: Instant) -> bool {
        self.per_address.allow(ip, now) && self.total.allow(IpAddr::from([0u8; 4]), now)
    }

    /// Forget quiet addresses.
    pub fn gc(&mut self, now: Instant) {
        self.per_address.gc(now);
    }
}

impl Default for HintGate {
    fn default() -> Self {
        Self::new()
    }
}

/// Counts handshake packets (with a valid mac1) per second; the server is under load when
/// the last full second or the current one saw more than `threshold`.
#[derive(Debug)]
pub struct LoadMeter {
    threshold: u64,
    window_start: Option<Instant>,
    current: u64,
    previous: u64,
}

impl LoadMeter {
    /// Under load above `threshold` handshake packets a second.
    pub fn new(threshold: u64) -> LoadMeter {
        LoadMeter {
            threshold,
            window_start: None,
            current: 0,
            previous: 0,
        }
    }

    fn advance(&mut self, now: Instant) {
        let start = *self.window_start.get_or_insert(now);
        let dt = now.saturating_duration_since(start);
        if dt >= Duration::from_secs(2) {
            self.previous = 0;
            self.current = 0;
            self.window_start = Some(now);
        } else if dt >= Duration::from_secs(1) {
            self.previous = self.current;
            self.current = 0;
            self.window_start = Some(start + Duration::from_secs(1));
        }
    }

    /// Count one handshake packet.
    pub fn record(&mut self, now: Instant) {
        self.advance(now);
        self.current += 1;
    }

    /// True when the server should demand cookies (mac2) before any Diffie-Hellman.
    pub fn under_load(&mut self, now: Instant) -> bool {
        self.advance(now);
        self.current > self.threshold || self.previous > self.threshold
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_rate_per_address() {
        let t0 = Instant::now();
        let mut r = RateLimiter::new(80, 8);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let allowed = (0..100).filter(|_| r.allow(a, t0)).count();
        assert_eq!(allowed, 8, "the burst, then nothing at the same instant");
        assert!(r.allow(b, t0), "another address has its own bucket");
        // Over one second at 10 000 packets a second: the burst was spent, 80 more.
        let mut n = 0;
        for i in 1..=10_000u64 {
            if r.allow(a, t0 + Duration::from_micros(i * 100)) {
                n += 1;
            }
        }
        assert!((79..=81).contains(&n), "{n} allowed in one second");
    }

    #[test]
    fn ipv6_counts_by_slash_64_and_table_is_bounded() {
        let t0 = Instant::now();
        let mut r = RateLimiter::new(80, 2);
        let a: IpAddr = "2001:db8::1".parse().unwrap();
        let b: IpAddr = "2001:db8::ffff:2".parse().unwrap();
        assert!(r.allow(a, t0) && r.allow(b, t0));
        assert!(!r.allow(a, t0), "one /64, one bucket");
        r.gc(t0 + Duration::from_secs(1));
        assert!(r.is_empty(), "a quiet address is forgotten");
        for i in 0..RateLimiter::MAX_ADDRESSES as u32 {
            assert!(r.allow(IpAddr::from(i.to_be_bytes()), t0));
        }
        assert!(!r.allow("203.0.113.9".parse().unwrap(), t0), "table full");
        assert_eq!(r.len(), RateLimiter::MAX_ADDRESSES);
    }

    #[test]
    fn hints_are_bounded_per_address_and_in_all() {
        let t0 = Instant::now();
        let mut g = HintGate::new();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let n = (0..100).filter(|_| g.allow(a, t0)).count();
        assert_eq!(n, HintGate::PER_ADDRESS as usize);
        let total = (0..1000u32)
            .filter(|i| g.allow(IpAddr::from((0x0a00_0000 + i).to_be_bytes()), t0))
            .count();
        assert_eq!(
            total,
            (HintGate::TOTAL / 10) as usize - HintGate::PER_ADDRESS as usize
        );
    }

    #[test]
    fn load_follows_the_last_second() {
        let t0 = Instant::now();
        let mut m = LoadMeter::new(100);
        for i in 0..100 {
            m.record(t0 + Duration::from_millis(i));
        }
        assert!(!m.under_load(t0 + Duration::from_millis(100)));
        m.record(t0 + Duration::from_millis(101));
        assert!(m.under_load(t0 + Duration::from_millis(102)));
        // Still under load during the next second, not after it.
        assert!(m.under_load(t0 + Duration::from_millis(1500)));
        assert!(!m.under_load(t0 + Duration::from_millis(2100)));
        assert!(!m.under_load(t0 + Duration::from_secs(10)));
    }
}
