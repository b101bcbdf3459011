//! What applications write to braid's TUN device: a sequence of arbitrary IP packets fed to
//! the userspace stack (each prefixed by a 2-byte length in the input), with time moving
//! between them. The stack never panics, never holds more connections than its limit, and
//! everything it sends back to the device is an IP packet it would parse itself.

#![no_main]

use braid_core::time::Instant;
use braid_tun::stack::{StackConfig, TunStack};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let cfg = StackConfig {
        max_connections: 8,
        tcp_buffer: 8 * 1024,
        ..StackConfig::default()
    };
    let mut s = TunStack::new(cfg, Instant::ZERO);
    let mut rest = data;
    let mut now = Instant::ZERO;
    while rest.len() >= 2 {
        let len = u16::from_be_bytes([rest[0], rest[1]]) as usize % 1600;
        rest = &rest[2..];
        let (p, r) = rest.split_at(len.min(rest.len()));
        rest = r;
        now = Instant(now.0 + 1_000_000 * u64::from(p.first().copied().unwrap_or(0) & 7));
        let _ = s.handle_packet(now, p);
        if s.poll_timeout(now).is_some_and(|t| t <= now) {
            s.handle_timeout(now);
        }
        assert!(s.connections() <= 8);
        while let Some(out) = s.poll_transmit() {
            assert!(out.len() <= 1400);
            assert!(matches!(out.first().map(|b| b >> 4), Some(4 | 6)));
        }
        while s.poll_event().is_some() {}
    }
});
