//! braid-emu: a userspace link emulator for real UDP traffic.
//!
//! Owns: relaying the datagrams of one path between an agent and a server through the
//! simulator's link model ([`braid_sim::PathModel`]) in real time — rate or trace, delay,
//! jitter, loss, duplication, queue, blackouts, half-duplex airtime — plus a manual cut
//! switch, NAT rebinding and in-flight corruption ([`corrupt`]) for tests. Must not touch:
//! the packets' contents (except where [`Emulator::set_corrupt`] asks), or any other path. The kernel on
//! this project's machines has no netem; this is how delay and loss reach real sockets.
//!
//! One OS thread per emulated path waits with nanosecond `ppoll` timeouts, so packets leave
//! within tens of microseconds of the model's time, not at a millisecond timer tick.

pub mod corrupt;

use braid_sim::{Dir, PathModel, PathSpec};
use bytes::Bytes;
use corrupt::{CorruptKnob, Corrupter};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// IPv4 + UDP headers, counted on the emulated wire like in the simulator.
const IP_UDP_OVERHEAD: u32 = 28;

/// Counters of an emulated path.
#[derive(Debug, Default)]
pub struct EmuStats {
    /// Datagrams received from the agent side.
    pub up_in: AtomicU64,
    /// Datagrams delivered to the server.
    pub up_out: AtomicU64,
    /// Datagrams received from the server.
    pub down_in: AtomicU64,
    /// Datagrams delivered to the agent.
    pub down_out: AtomicU64,
    /// Datagrams delivered (either way) with a byte altered ([`Emulator::set_corrupt`]).
    pub corrupted: AtomicU64,
}

/// A running emulated path. Dropping it stops the thread.
#[derive(Debug)]
pub struct Emulator {
    /// Where the agent sends (the emulated path's entrance).
    pub agent_side: SocketAddr,
    /// The address the server sees packets coming from.
    pub server_side: SocketAddr,
    cut: Arc<AtomicBool>,
    rebind: Arc<AtomicBool>,
    corrupt: Arc<CorruptKnob>,
    stop: Arc<AtomicBool>,
    stats: Arc<EmuStats>,
    thread: Option<JoinHandle<()>>,
}

impl Emulator {
    /// Start relaying: datagrams arriving at `agent_bind` go to `server` through the path's
    /// up direction; the server's answers come back through the down direction to the last
    /// agent address seen. `upstream_bind` is the local address towards the server.
    pub fn start(
        spec: &PathSpec,
        seed: u64,
        agent_bind: SocketAddr,
        upstream_bind: SocketAddr,
        server: SocketAddr,
    ) -> io::Result<Emulator> {
        let agent = UdpSocket::bind(agent_bind)?;
        let upstream = UdpSocket::bind(upstream_bind)?;
        agent.set_nonblocking(true)?;
        upstream.set_nonblocking(true)?;
        for sock in [&agent, &upstream] {
            set_buffers(sock.as_raw_fd(), SOCKET_BUFFER);
        }
        let agent_side = agent.local_addr()?;
        let server_side = upstream.local_addr()?;
        let cut = Arc::new(AtomicBool::new(false));
        let rebind = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let corrupt = Arc::new(CorruptKnob::default());
        let stats = Arc::new(EmuStats::default());
        let model = PathModel::new(spec, seed);
        let flags = Flags {
            cut: cut.clone(),
            rebind: rebind.clone(),
            stop: stop.clone(),
            corrupt: corrupt.clone(),
            corrupter: Corrupter::new(seed),
        };
        let st = stats.clone();
        let thread = std::thread::Builder::new()
            .name(format!("emu-{}", spec.name))
            .spawn(move || relay(model, agent, upstream, server, flags, st))?;
        Ok(Emulator {
            agent_side,
            server_side,
            cut,
            rebind,
            corrupt,
            stop,
            stats,
            thread: Some(thread),
        })
    }

    /// Cut the path (every packet is dropped) or restore it.
    pub fn set_cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::Relaxed);
    }

    /// Move the server-facing side to a new local port, as a NAT rebinding does: from now
    /// on the server sees this path's packets come from a new address.
    pub fn rebind(&self) {
        self.rebind.store(true, Ordering::Relaxed);
    }

    /// Alter one byte of each datagram with probability `p` as it leaves the path (both
    /// directions), as a faulty link or middlebox would; 0 (the default) turns it off.
    pub fn set_corrupt(&self, p: f64) {
        self.corrupt.set(p);
    }

    /// Counters.
    pub fn stats(&self) -> &EmuStats {
        &self.stats
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Flags {
    cut: Arc<AtomicBool>,
    rebind: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    corrupt: Arc<CorruptKnob>,
    corrupter: Corrupter,
}

fn relay(
    mut model: PathModel<Bytes>,
    agent: UdpSocket,
    mut upstream: UdpSocket,
    server: SocketAddr,
    flags: Flags,
    stats: Arc<EmuStats>,
) {
    let Flags {
        cut,
        rebind,
        stop,
        corrupt,
        mut corrupter,
    } = flags;
    let start = Instant::now();
    let mut last_agent: Option<SocketAddr> = None;
    let mut buf = vec![0u8; 65536];
    let mut out = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        if rebind.swap(false, Ordering::Relaxed) {
            let ip = upstream.local_addr().map(|a| a.ip());
            if let Ok(s) = ip.and_then(|ip| UdpSocket::bind(SocketAddr::new(ip, 0))) {
                if s.set_nonblocking(true).is_ok() {
                    set_buffers(s.as_raw_fd(), SOCKET_BUFFER);
                    upstream = s;
                }
            }
        }
        let now = start.elapsed().as_nanos() as u64;
        model.advance(now, &mut out);
        let p_corrupt = corrupt.get();
        for (_, dir, pkt) in out.drain(..) {
            let mut altered;
            let pkt: &[u8] = if p_corrupt > 0.0 {
                altered = pkt.to_vec();
                if corrupter.maybe_corrupt(p_corrupt, &mut altered) {
                    stats.corrupted.fetch_add(1, Ordering::Relaxed);
                }
                &altered
            } else {
                &pkt
            };
            match dir {
                Dir::Up => {
                    if upstream.send_to(pkt, server).is_ok() {
                        stats.up_out.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Dir::Down => {
                    if let Some(a) = last_agent {
                        if agent.send_to(pkt, a).is_ok() {
                            stats.down_out.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
        }
        let is_cut = cut.load(Ordering::Relaxed);
        // Read the clock again: sending above may have taken milliseconds (a send on
        // loopback also runs the kernel's receive work for whatever else is queued, such as
        // a flood), and what arrived meanwhile must not enter the path back-dated, which
        // would deliver it early and show round trips shorter than the path's delay.
        let now = start.elapsed().as_nanos() as u64;
        while let Ok((n, from)) = agent.recv_from(&mut buf) {
            stats.up_in.fetch_add(1, Ordering::Relaxed);
            last_agent = Some(from);
            if !is_cut {
                model.send(
                    now,
                    Dir::Up,
                    n as u32 + IP_UDP_OVERHEAD,
                    Bytes::copy_from_slice(&buf[..n]),
                );
            }
        }
        while let Ok((n, from)) = upstream.recv_from(&mut buf) {
            if from != server {
                continue;
            }
            stats.down_in.fetch_add(1, Ordering::Relaxed);
            if !is_cut {
                model.send(
                    now,
                    Dir::Down,
                    n as u32 + IP_UDP_OVERHEAD,
                    Bytes::copy_from_slice(&buf[..n]),
                );
            }
        }
        let wait = match model.next_event() {
            Some(t) => Duration::from_nanos(t.saturating_sub(start.elapsed().as_nanos() as u64)),
            None => Duration::from_millis(50),
        }
        .min(Duration::from_millis(50));
        if !wait.is_zero() {
            wait_readable(&[agent.as_raw_fd(), upstream.as_raw_fd()], wait);
        }
    }
}

/// Socket buffers big enough to hold a queue's worth of packets between two polls.
pub const SOCKET_BUFFER: usize = 8 << 20;

/// Ask for `bytes` of send and receive buffer; as root beyond `rmem_max` (`SO_*BUFFORCE`).
/// Best effort: a smaller buffer only means drops under bursts, which the stats show.
pub fn set_buffers(fd: i32, bytes: usize) {
    let v = bytes as libc::c_int;
    for (force, plain) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    ] {
        for opt in [force, plain] {
            // SAFETY: `v` is a valid c_int that outlives the call and its size is passed.
            let r = unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    opt,
                    &v as *const libc::c_int as *const libc::c_void,
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if r == 0 {
                break;
            }
        }
    }
}

/// Block until one of `fds` is readable or `timeout` passed (nanosecond resolution).
pub fn wait_readable(fds: &[i32], timeout: Duration) {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `pfds` is a valid array of `pfds.len()` pollfd structs that outlives the call,
    // `ts` is a valid timespec, and a null signal mask means "leave the mask unchanged".
    unsafe {
        libc::ppoll(
            pfds.as_mut_ptr(),
            pfds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        );
    }
}
