//! The layer-2 link emulator: braid-sim's `PathModel` applied to every Ethernet frame that
//! crosses a path of the testbed.
//!
//! Owns: one thread per emulated link in the emulator namespace, its two `AF_PACKET` raw
//! sockets (`ETH_P_ALL`, non-blocking, frames we sent ourselves ignored via
//! `PACKET_IGNORE_OUTGOING` and `PACKET_OUTGOING`), the link models, the counters and the
//! thread's CPU time. Must not touch: the namespaces and links themselves (`netns`), frame
//! contents (frames are forwarded byte for byte).
//!
//! Frames from the client-side veth go through the models' **up** direction and leave on the
//! server-side veth; frames from the server side go **down**. A link has one model (a
//! scenario path) or several (the `bond` variant): then each frame goes to the next model in
//! round-robin order, per direction, like the bonding driver's mode 0 (`balance-rr`).
//!
//! **Wire size.** A frame is charged its IP packet length (IPv4 total length; IPv6 40 bytes
//! plus payload length), not the 14-byte Ethernet header, as in the simulator where sizes are
//! IP packets. Other frames (ARP) are charged their length without the Ethernet header.
//!
//! **Time.** The models run on the thread's monotonic clock from the last [`LinkEmu::reset`]
//! (a fresh model and seed before each transfer, so blackouts and traces count from the
//! transfer's start; frames still inside the old model are dropped). The thread waits in
//! `ppoll` with a nanosecond timeout until the next model event or a readable socket, at
//! most 20 ms, with a 1 ns timer slack; when the next model event is less than 100 us away
//! it sleeps 100 us instead and then takes every frame that arrived (`COALESCE`).

use crate::error::{Result, TestbedError};
use braid_sim::{Dir, PathModel, PathSpec};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Largest frame read (veth MTU is 1500; offloads are off).
const FRAME_MAX: usize = 65_536;
/// Frames read from one socket per loop turn before the models run again.
const BATCH: usize = 256;
/// Longest wait in `ppoll`.
const MAX_WAIT: Duration = Duration::from_millis(20);
/// When a model event is due sooner than this, the thread sleeps this long without
/// watching the sockets, then takes every frame that arrived meanwhile: under load it wakes
/// about 10 000 times a second instead of once per frame. Each wake-up of a thread sleeping
/// in `ppoll` cost 10-20 us of CPU here (a virtual machine's timer and interrupt exits):
/// at 2 x 1 Gbit/s, 170 000 frames a second took the two link threads 1.3 cores of this
/// 2-core machine, which the stacks under test then lacked (every variant ran below 1.15
/// Gbit/s). A frame waits at most this much longer than its model says.
const COALESCE: Duration = Duration::from_micros(100);
/// `SCHED_FIFO` priority of the emulator threads (best effort), so that a busy machine does
/// not delay their wake-ups by milliseconds. They sleep in `ppoll` whenever no model event
/// is due, so they cannot starve the machine.
const RT_PRIORITY: libc::c_int = 10;
/// Socket buffers (as root beyond `rmem_max`).
const SOCKET_BUFFER: libc::c_int = 16 << 20;

/// Counters of one model (one scenario path), per direction; index 0 up, 1 down.
#[derive(Debug, Default)]
pub struct ModelCounters {
    /// Frames offered to the model.
    pub offered: [AtomicU64; 2],
    /// Frames delivered out of the model.
    pub delivered: [AtomicU64; 2],
    /// Wire bytes delivered out of the model.
    pub delivered_bytes: [AtomicU64; 2],
}

/// Counters of one emulated link.
#[derive(Debug, Default)]
pub struct EmuCounters {
    /// Per model.
    pub models: Vec<ModelCounters>,
    /// Frames that could not be written to the outgoing veth.
    pub send_errors: AtomicU64,
    /// CPU time the thread used (user + system), updated about every 100 ms.
    pub cpu_ns: AtomicU64,
}

/// What an emulated link is made of.
#[derive(Debug, Clone)]
pub struct EmuConfig {
    /// Thread name.
    pub name: String,
    /// The emulator namespace.
    pub ns: String,
    /// The veth towards the client.
    pub client_dev: String,
    /// The veth towards the server.
    pub server_dev: String,
    /// One model per entry (several: round-robin striping).
    pub paths: Vec<PathSpec>,
    /// Seed of the first models.
    pub seed: u64,
}

/// A running emulated link; dropping it stops the thread.
pub struct LinkEmu {
    stop: Arc<AtomicBool>,
    reset: Arc<Mutex<Option<u64>>>,
    generation: Arc<AtomicU64>,
    counters: Arc<EmuCounters>,
    started: Instant,
    thread: Option<JoinHandle<()>>,
}

impl LinkEmu {
    /// Starts the thread; returns once both packet sockets are open, or with the error.
    pub fn start(cfg: EmuConfig) -> Result<LinkEmu> {
        if cfg.paths.is_empty() {
            return Err(TestbedError::Other(format!(
                "emulated link {}: no path models given",
                cfg.name
            )));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let reset = Arc::new(Mutex::new(None));
        let generation = Arc::new(AtomicU64::new(0));
        let counters = Arc::new(EmuCounters {
            models: (0..cfg.paths.len())
                .map(|_| ModelCounters::default())
                .collect(),
            ..EmuCounters::default()
        });
        let (tx, rx) = mpsc::channel();
        let shared = Shared {
            stop: stop.clone(),
            reset: reset.clone(),
            generation: generation.clone(),
            counters: counters.clone(),
        };
        let name = cfg.name.clone();
        let thread = std::thread::Builder::new()
            .name(format!("emu-{name}"))
            .spawn(move || {
                let setup = open(&cfg);
                match setup {
                    Ok(socks) => {
                        let _ = tx.send(Ok(()));
                        relay(cfg, socks, shared);
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            })
            .map_err(|e| TestbedError::io("spawning an emulator thread", e))?;
        let mut emu = LinkEmu {
            stop,
            reset,
            generation,
            counters,
            started: Instant::now(),
            thread: Some(thread),
        };
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(())) => Ok(emu),
            Ok(Err(e)) => Err(e),
            Err(_) => {
                emu.stop_thread();
                Err(TestbedError::Other(format!(
                    "emulated link {name}: the emulator thread did not start within 10 s"
                )))
            }
        }
    }

    /// Fresh models seeded with `seed`, time from now; waits (up to 1 s) until applied.
    pub fn reset(&self, seed: u64) {
        let g = self.generation.load(Ordering::SeqCst);
        if let Ok(mut r) = self.reset.lock() {
            *r = Some(seed);
        }
        let deadline = Instant::now() + Duration::from_secs(1);
        while self.generation.load(Ordering::SeqCst) == g && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// The counters.
    pub fn counters(&self) -> &EmuCounters {
        &self.counters
    }

    /// Thread CPU time over wall time since the start.
    pub fn cpu_share(&self) -> f64 {
        let wall = self.started.elapsed().as_nanos() as f64;
        self.counters.cpu_ns.load(Ordering::Relaxed) as f64 / wall.max(1.0)
    }

    fn stop_thread(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for LinkEmu {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

struct Shared {
    stop: Arc<AtomicBool>,
    reset: Arc<Mutex<Option<u64>>>,
    generation: Arc<AtomicU64>,
    counters: Arc<EmuCounters>,
}

/// An owned file descriptor.
struct Fd(libc::c_int);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor and close it once.
        unsafe {
            libc::close(self.0);
        }
    }
}

/// Enters the namespace and opens the two packet sockets (client side, server side).
fn open(cfg: &EmuConfig) -> Result<[Fd; 2]> {
    crate::netns::enter(&cfg.ns)?;
    // SAFETY: prctl with PR_SET_TIMERSLACK takes an integer argument only;
    // sched_setscheduler(0, ..) changes only this thread and `param` outlives the call.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
        let param = libc::sched_param {
            sched_priority: RT_PRIORITY,
        };
        libc::sched_setscheduler(0, libc::SCHED_FIFO, &param);
    }
    Ok([
        packet_socket(&cfg.ns, &cfg.client_dev)?,
        packet_socket(&cfg.ns, &cfg.server_dev)?,
    ])
}

fn packet_socket(ns: &str, dev: &str) -> Result<Fd> {
    let err = |what: &str| {
        TestbedError::io(
            format!("{what} for {dev} in namespace {ns}"),
            io::Error::last_os_error(),
        )
    };
    let cname = std::ffi::CString::new(dev)
        .map_err(|_| TestbedError::Other(format!("bad interface name {dev:?}")))?;
    // SAFETY: cname is a valid NUL-terminated string.
    let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if ifindex == 0 {
        return Err(err("looking up the interface index"));
    }
    // SAFETY: plain socket creation; protocol 0 receives nothing until bind.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(err("opening an AF_PACKET socket"));
    }
    let fd = Fd(fd);
    let one: libc::c_int = 1;
    // SAFETY: option values are valid c_ints that outlive the calls, sizes passed.
    unsafe {
        libc::setsockopt(
            fd.0,
            libc::SOL_PACKET,
            libc::PACKET_IGNORE_OUTGOING,
            &one as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        for opt in [libc::SO_RCVBUFFORCE, libc::SO_SNDBUFFORCE] {
            libc::setsockopt(
                fd.0,
                libc::SOL_SOCKET,
                opt,
                &SOCKET_BUFFER as *const _ as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
    // SAFETY: a zeroed sockaddr_ll is valid; we fill family, protocol and ifindex.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: sll is a valid sockaddr_ll and its size is passed.
    let r = unsafe {
        libc::bind(
            fd.0,
            &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(err("binding the AF_PACKET socket"));
    }
    Ok(fd)
}

/// The IP packet length a frame is charged (see the module documentation).
pub fn wire_size(frame: &[u8]) -> u32 {
    let l2 = frame.len().saturating_sub(14);
    let ip = match frame.get(12..14) {
        Some([0x08, 0x00]) => frame
            .get(16..18)
            .map(|b| u16::from_be_bytes([b[0], b[1]]) as usize),
        Some([0x86, 0xdd]) => frame
            .get(18..20)
            .map(|b| 40 + u16::from_be_bytes([b[0], b[1]]) as usize),
        _ => None,
    };
    ip.map_or(l2, |n| n.min(l2)).max(1) as u32
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec for the call.
    unsafe {
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn relay(cfg: EmuConfig, socks: [Fd; 2], sh: Shared) {
    let new_models = |seed: u64| -> Vec<PathModel<Vec<u8>>> {
        cfg.paths
            .iter()
            .enumerate()
            .map(|(i, p)| PathModel::new(p, braid_core::rng::splitmix64(seed ^ i as u64)))
            .collect()
    };
    let mut models = new_models(cfg.seed);
    let mut origin = Instant::now();
    let mut rr = [0usize; 2];
    let mut buf = vec![0u8; FRAME_MAX];
    let mut out: Vec<(u64, Dir, Vec<u8>)> = Vec::new();
    let mut last_cpu = Instant::now();
    let mut busy = 0u32;
    let c = &sh.counters;
    while !sh.stop.load(Ordering::Relaxed) {
        if let Some(seed) = sh.reset.lock().ok().and_then(|mut r| r.take()) {
            models = new_models(seed);
            origin = Instant::now();
            rr = [0, 0];
            sh.generation.fetch_add(1, Ordering::SeqCst);
        }
        let now = origin.elapsed().as_nanos() as u64;
        deliver(&mut models, now, &mut out, &socks, c);
        take_frames(&mut models, origin, now, &mut rr, &mut buf, &socks, c);
        if last_cpu.elapsed() >= Duration::from_millis(100) {
            c.cpu_ns.store(thread_cpu_ns(), Ordering::Relaxed);
            last_cpu = Instant::now();
        }
        let next = models.iter().filter_map(|m| m.next_event()).min();
        let now = origin.elapsed().as_nanos() as u64;
        let wait = match next {
            Some(t) => Duration::from_nanos(t.saturating_sub(now)),
            None => MAX_WAIT,
        }
        .min(MAX_WAIT);
        if wait.is_zero() {
            busy += 1;
            if busy < 64 {
                continue;
            }
        }
        busy = 0;
        if next.is_some() && wait < COALESCE {
            std::thread::sleep(COALESCE);
        } else {
            braid_emu::wait_readable(
                &[socks[0].0, socks[1].0],
                wait.max(Duration::from_micros(5)),
            );
        }
    }
    c.cpu_ns.store(thread_cpu_ns(), Ordering::Relaxed);
}

/// Sends every frame that has arrived at the far end of a model by `now` out of the
/// other side's socket, counting it.
fn deliver(
    models: &mut [PathModel<Vec<u8>>],
    now: u64,
    out: &mut Vec<(u64, Dir, Vec<u8>)>,
    socks: &[Fd; 2],
    c: &EmuCounters,
) {
    for (i, m) in models.iter_mut().enumerate() {
        m.advance(now, out);
        for (_, dir, frame) in out.drain(..) {
            let (fd, d) = match dir {
                Dir::Up => (socks[1].0, 0),
                Dir::Down => (socks[0].0, 1),
            };
            // SAFETY: frame is a valid buffer of frame.len() bytes.
            let r = unsafe {
                libc::send(
                    fd,
                    frame.as_ptr() as *const libc::c_void,
                    frame.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if r < 0 {
                c.send_errors.fetch_add(1, Ordering::Relaxed);
            } else {
                c.models[i].delivered[d].fetch_add(1, Ordering::Relaxed);
                c.models[i].delivered_bytes[d]
                    .fetch_add(wire_size(&frame) as u64, Ordering::Relaxed);
            }
        }
    }
}

/// Reads up to `BATCH` frames from each side's socket and offers each to a model, in turn
/// per direction, at the time it was read.
fn take_frames(
    models: &mut [PathModel<Vec<u8>>],
    origin: Instant,
    now: u64,
    rr: &mut [usize; 2],
    buf: &mut [u8],
    socks: &[Fd; 2],
    c: &EmuCounters,
) {
    for (side, dir) in [(0usize, Dir::Up), (1usize, Dir::Down)] {
        let d = side;
        for _ in 0..BATCH {
            // SAFETY: a zeroed sockaddr_ll is valid output space; buf is valid for
            // buf.len() bytes.
            let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            let n = unsafe {
                libc::recvfrom(
                    socks[side].0,
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                    libc::MSG_DONTWAIT,
                    &mut from as *mut libc::sockaddr_ll as *mut libc::sockaddr,
                    &mut len,
                )
            };
            if n <= 0 {
                break;
            }
            if from.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            let frame = buf[..n as usize].to_vec();
            let k = rr[d] % models.len();
            rr[d] = rr[d].wrapping_add(1);
            c.models[k].offered[d].fetch_add(1, Ordering::Relaxed);
            // The arrival time of this frame, not of the loop turn: the thread may have
            // been preempted since.
            let at = (origin.elapsed().as_nanos() as u64).max(now);
            models[k].send(at, dir, wire_size(&frame), frame);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::wire_size;

    #[test]
    fn wire_size_is_the_ip_length() {
        let mut f = vec![0u8; 100];
        f[12] = 0x08;
        f[16..18].copy_from_slice(&60u16.to_be_bytes());
        assert_eq!(wire_size(&f), 60);
        f[16..18].copy_from_slice(&9000u16.to_be_bytes());
        assert_eq!(wire_size(&f), 86, "clamped to the frame");
        f[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(wire_size(&f), 86, "ARP: frame without Ethernet header");
        assert_eq!(wire_size(&[]), 1);
        assert_eq!(wire_size(&[1, 2, 3]), 1);
    }
}
