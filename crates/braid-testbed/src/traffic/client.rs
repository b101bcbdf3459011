//! The traffic client: one transfer from the client namespace (directly or through a
//! SOCKS5 proxy), its completion time, goodput and samples, and the readiness probe.
//!
//! Owns: `TransferSpec`, `TransferOutcome` and the client side of the protocol. Must not
//! touch: the server side (`server.rs`) or socket options beyond calling `socket.rs`.

use super::socket::{connect, socks5_request};
use super::{read_full, receive_all, send_all, write_full, Abort, Proto, Request};
use crate::error::Result;
use braid_sim::payload::expected_digest;
use braid_sim::Direction;
use std::io;
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

/// How to reach the server through a SOCKS5 proxy.
#[derive(Debug, Clone, Copy)]
pub struct Socks {
    /// The proxy (in the client namespace).
    pub proxy: SocketAddrV4,
    /// The target as the proxy's far end sees it.
    pub target: SocketAddrV4,
}

/// One transfer to run.
#[derive(Debug, Clone)]
pub struct TransferSpec {
    /// The client namespace.
    pub ns: String,
    /// The traffic server (ignored when `socks` is set).
    pub target: SocketAddrV4,
    /// Source address to bind, if any.
    pub bind: Option<Ipv4Addr>,
    /// TCP or MPTCP for the client's socket.
    pub proto: Proto,
    /// Congestion controller for both ends' sockets (`None`: namespace default).
    pub cc: Option<String>,
    /// Go through this SOCKS5 proxy.
    pub socks: Option<Socks>,
    /// Which way the bytes go.
    pub direction: Direction,
    /// Bytes to move.
    pub size: u64,
    /// Payload seed.
    pub seed: u64,
    /// Give up after this long.
    pub timeout: Duration,
}

/// What a transfer achieved.
#[derive(Debug, Clone, Default)]
pub struct TransferOutcome {
    /// Byte count and digest matched.
    pub verified: bool,
    /// Seconds from connect to the last byte.
    pub completion_s: f64,
    /// size × 8 / completion_s.
    pub goodput_bps: f64,
    /// Receiver goodput per [`SAMPLE_INTERVAL`].
    pub samples_bps: Vec<f64>,
    /// Why it failed.
    pub error: Option<String>,
}

/// Runs one transfer from the client namespace. A failed transfer is an outcome with an
/// error; only a signal (or not being able to enter the namespace) is an `Err`.
pub fn transfer(spec: &TransferSpec) -> Result<TransferOutcome> {
    let sp = spec.clone();
    let out = crate::netns::in_netns(&spec.ns, move || {
        let start = Instant::now();
        let r = run_client(&sp, start);
        let elapsed = start.elapsed().as_secs_f64();
        match r {
            Ok((verified, samples, why)) => TransferOutcome {
                verified,
                completion_s: elapsed,
                goodput_bps: if elapsed > 0.0 {
                    sp.size as f64 * 8.0 / elapsed
                } else {
                    0.0
                },
                samples_bps: samples,
                error: why,
            },
            Err(e) => TransferOutcome {
                completion_s: elapsed,
                error: Some(e.to_string()),
                ..TransferOutcome::default()
            },
        }
    })?;
    crate::signal::check()?;
    Ok(out)
}

type ClientResult = (bool, Vec<f64>, Option<String>);

fn run_client(sp: &TransferSpec, start: Instant) -> io::Result<ClientResult> {
    let ab = Abort {
        stop: None,
        deadline: start + sp.timeout,
    };
    let mut s = open_stream(sp, &ab)?;
    let req = Request {
        direction: sp.direction,
        size: sp.size,
        seed: sp.seed,
        cc: if sp.socks.is_some() {
            String::new()
        } else {
            sp.cc.clone().unwrap_or_default()
        },
    };
    write_full(&mut s, &req.encode(), &ab)?;
    let expected = expected_digest(sp.seed, sp.size);
    match sp.direction {
        Direction::Down => {
            let (ck, samples) = receive_all(&mut s, start, sp.size, &ab)?;
            let ok = ck.received() == sp.size && ck.digest() == expected;
            let why = (!ok).then(|| {
                format!(
                    "received {} of {} bytes{}",
                    ck.received(),
                    sp.size,
                    if ck.received() == sp.size {
                        " with the wrong content (hash mismatch)"
                    } else {
                        ""
                    }
                )
            });
            Ok((ok, samples, why))
        }
        Direction::Up => {
            send_all(&mut s, sp.seed, sp.size, &ab)?;
            s.shutdown(Shutdown::Write)?;
            let mut head = [0u8; 28];
            read_full(&mut s, &mut head, &ab)?;
            let mut n8 = [0u8; 8];
            n8.copy_from_slice(&head[..8]);
            let mut d16 = [0u8; 16];
            d16.copy_from_slice(&head[8..24]);
            let mut c4 = [0u8; 4];
            c4.copy_from_slice(&head[24..28]);
            let received = u64::from_le_bytes(n8);
            let digest = u128::from_le_bytes(d16);
            let count = (u32::from_le_bytes(c4) as usize).min(10_000_000);
            let mut raw = vec![0u8; count * 8];
            read_full(&mut s, &mut raw, &ab)?;
            let samples = raw
                .chunks_exact(8)
                .map(|c| {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(c);
                    f64::from_le_bytes(a)
                })
                .collect();
            let ok = received == sp.size && digest == expected;
            let why = (!ok).then(|| {
                format!(
                    "the server received {received} of {} bytes or a wrong hash",
                    sp.size
                )
            });
            Ok((ok, samples, why))
        }
    }
}

/// A connection along the spec's route: through its SOCKS5 proxy (CONNECT to the proxy's
/// target), else from its source address to its target with its transport and controller.
pub(crate) fn open_stream(sp: &TransferSpec, ab: &Abort<'_>) -> io::Result<TcpStream> {
    match sp.socks {
        Some(p) => {
            let mut s = connect(Proto::Tcp, None, None, p.proxy, ab)?;
            socks5_request(&mut s, 1, p.target, ab)?;
            Ok(s)
        }
        None => connect(sp.proto, sp.bind, sp.cc.as_deref(), sp.target, ab),
    }
}

/// Tries a 1000-byte transfer until it succeeds or `within` passes (readiness probe for
/// proxies). Returns the last error on failure.
pub fn wait_ready(
    spec: &TransferSpec,
    within: Duration,
) -> Result<std::result::Result<(), String>> {
    let deadline = Instant::now() + within;
    let mut probe = spec.clone();
    probe.size = 1000;
    probe.timeout = Duration::from_secs(3);
    loop {
        let o = transfer(&probe)?;
        if o.verified {
            return Ok(Ok(()));
        }
        if Instant::now() >= deadline {
            return Ok(Err(o.error.unwrap_or_else(|| "not verified".into())));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
