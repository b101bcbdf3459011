//! TUN mode: every application on the machine (and, with forwarding, every host behind it)
//! is carried without a proxy setting. The device's packets go through braid-tun's
//! userspace stack; each TCP connection it terminates becomes one stream of the session,
//! exactly as a SOCKS5 CONNECT does (the server connects to the destination), and each
//! application UDP socket becomes one datagram flow.
//!
//! One task owns the device and the stack. Per connection, a task opens the stream and
//! relays it (`tun_conn`); between the two, bounded channels one way and a byte credit the
//! other, so a slow application or a slow stream holds back only its own connection. While no session
//! is up (direct mode), connections go whole on one path (`direct`) and UDP flows each on
//! one path's socket (`tun_direct`); so, always, do destinations `--bypass`/`--pin` name.
//! DNS, over UDP or TCP (`dns_tcp`), goes to the server's resolver whatever resolver was
//! asked.
//!
//! Owns: the TUN device, its routing, the stack and the connection and flow tables. Must
//! not touch: the session's lifecycle (`run`), the stream-open exchange
//! (`direct::open_stream`).

use super::tun_conn::{conn_task, ToTun, Up, CREDIT, UP_BYTES};
use super::tun_direct::Back;
use super::Shared;
use braid_core::time::Instant;
use braid_proxy::datagram;
use braid_tun::device::TunDevice;
use braid_tun::routing::{Cidr, Routing, RoutingConfig};
use braid_tun::stack::{ConnId, Event, StackConfig, TunStack};
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::sync::{mpsc, Semaphore};
use tracing::{debug, info, warn};

/// TUN mode settings.
#[derive(Debug, Clone)]
pub struct TunSettings {
    /// The device's name.
    pub name: String,
    /// Prefixes carried (empty: every IPv4 and IPv6 destination).
    pub routes: Vec<Cidr>,
    /// Prefixes left out.
    pub exclude: Vec<Cidr>,
}

/// A UDP flow with no datagram either way for this long is forgotten.
const FLOW_IDLE: Duration = Duration::from_secs(120);
/// Datagram flows at once (one per application UDP socket).
const MAX_FLOWS: usize = 4096;
/// UDP to this port is a DNS query, resolved by the server's resolver.
const DNS_PORT: u16 = super::dns_tcp::PORT;

#[path = "tun_udp.rs"]
mod udp;

/// The device's MTU: the largest IP packet whose UDP payload, with the flow header and an
/// IPv6 address, still fits one datagram of the session.
pub fn tun_mtu(max_datagram_payload: usize) -> u32 {
    let v4 = max_datagram_payload.saturating_sub(datagram::FLOW_ID_LEN + 7) + 28;
    let v6 = max_datagram_payload.saturating_sub(datagram::FLOW_ID_LEN + 19) + 48;
    v4.min(v6).clamp(1280, 9000) as u32
}

/// Device and routing, made before any path socket is bound (they carry braid's mark).
pub(super) struct Tun {
    dev: TunDevice,
    routing: Routing,
    mtu: u32,
}

impl Tun {
    pub(super) fn create(s: &TunSettings, max_datagram_payload: usize) -> std::io::Result<Tun> {
        let io = |e: String| std::io::Error::other(e);
        let mtu = tun_mtu(max_datagram_payload);
        let addrs = [
            ("198.18.0.1".parse().expect("literal"), 30),
            ("fd00:b1d::1".parse().expect("literal"), 64),
        ];
        let dev = TunDevice::create(&s.name, mtu, &addrs).map_err(|e| io(e.to_string()))?;
        let cfg = RoutingConfig {
            include: if s.routes.is_empty() {
                Cidr::defaults()
            } else {
                s.routes.clone()
            },
            exclude: s.exclude.clone(),
            // Only when everything is carried: with --tun-route the user chose what goes in.
            dns: s.routes.is_empty(),
            ..RoutingConfig::default()
        };
        crate::udp::set_socket_mark(Some(cfg.fwmark));
        let routing = Routing::install(dev.index(), cfg).map_err(|e| io(e.to_string()))?;
        info!(device = %s.name, mtu, "TUN device ready: applications are carried without a proxy setting");
        Ok(Tun { dev, routing, mtu })
    }
}

struct Conn {
    up: mpsc::UnboundedSender<Up>,
    up_queued: Arc<AtomicUsize>,
    credit: Arc<Semaphore>,
    down: VecDeque<Bytes>,
    fin_pending: bool,
    app_blocked: bool,
}

/// Runs TUN mode until the agent stops; the device and its routes go with it.
pub(super) async fn run(tun: Tun, shared: Shared) {
    let Tun { dev, routing, mtu } = tun;
    let _routing = routing;
    // SAFETY: the AsyncFd owns the device, so its descriptor stays open (and is not
    // reused) for as long as it is registered.
    let dev = match unsafe { AsyncFd::register(dev) } {
        Ok(d) => d,
        Err(e) => {
            warn!("TUN mode stopped: cannot poll the device: {e}");
            return;
        }
    };
    let epoch = std::time::Instant::now();
    let now = move || Instant(epoch.elapsed().as_nanos() as u64);
    let mut stack = TunStack::new(
        StackConfig {
            mtu: mtu as usize,
            seed: epoch.elapsed().as_nanos() as u64 ^ u64::from(std::process::id()),
            ..StackConfig::default()
        },
        now(),
    );
    let (ctl_tx, mut ctl_rx) = mpsc::unbounded_channel::<ToTun>();
    let (dgram_tx, mut dgram_rx) = mpsc::channel::<Bytes>(1024);
    let (back_tx, mut back_rx) = mpsc::channel::<Back>(1024);
    let mut conns: HashMap<ConnId, Conn> = HashMap::new();
    let mut flows = udp::Flows::new(dgram_tx, back_tx);
    let mut buf = vec![0u8; 65_536];
    let mut sweep = tokio::time::interval(Duration::from_secs(10));
    loop {
        let wake = stack
            .poll_timeout(now())
            .map(|t| Duration::from_nanos(t.as_nanos().saturating_sub(now().as_nanos())))
            .unwrap_or(Duration::from_secs(3600));
        tokio::select! {
            r = dev.readable() => {
                let Ok(mut guard) = r else { break };
                for _ in 0..256 {
                    match guard.try_io(|d| d.get_ref().recv(&mut buf)) {
                        Ok(Ok(n)) => { let _ = stack.handle_packet(now(), &buf[..n]); }
                        Ok(Err(e)) => { warn!("TUN mode stopped: reading the device failed: {e}"); return; }
                        Err(_would_block) => break,
                    }
                }
            }
            Some(m) = ctl_rx.recv() => {
                handle_ctl(&mut stack, &mut conns, m, now(), &mut buf);
                while let Ok(m) = ctl_rx.try_recv() {
                    handle_ctl(&mut stack, &mut conns, m, now(), &mut buf);
                }
            }
            Some(d) = dgram_rx.recv() => flows.session_datagram(&shared, &mut stack, &d),
            Some(back) = back_rx.recv() => flows.direct_answer(&shared, &mut stack, back),
            _ = tokio::time::sleep(wake) => stack.handle_timeout(now()),
            _ = sweep.tick() => flows.sweep(&shared),
        }
        while let Some(e) = stack.poll_event() {
            match e {
                Event::TcpOpened { id, src, dst } => {
                    debug!(%src, %dst, "TUN: a new connection");
                    open_conn(&mut conns, &shared, id, dst, &ctl_tx);
                }
                Event::TcpReadable { id } => read_app(&mut stack, &mut conns, id, now(), &mut buf),
                Event::TcpEof { id } => {
                    if let Some(c) = conns.get(&id) {
                        let _ = c.up.send(Up::Fin);
                    }
                }
                Event::TcpWritable { id } => write_app(&mut stack, &mut conns, id, now()),
                Event::TcpClosed { id, reset } => {
                    if let Some(c) = conns.remove(&id) {
                        if reset {
                            let _ = c.up.send(Up::Reset);
                        }
                        c.credit.close();
                    }
                }
                Event::UdpDatagram { src, dst, payload } => {
                    flows.app_datagram(&shared, src, dst, payload)
                }
            }
        }
        while let Some(p) = stack.poll_transmit() {
            if let Err(e) = dev.get_ref().send(&p) {
                debug!("TUN: a packet for the device dropped: {e}");
            }
        }
    }
}

/// A connection the stack terminated: its entry and the task that opens its stream (or
/// direct connection) to `dst` and relays it (`tun_conn`).
fn open_conn(
    conns: &mut HashMap<ConnId, Conn>,
    shared: &Shared,
    id: ConnId,
    dst: SocketAddr,
    ctl_tx: &mpsc::UnboundedSender<ToTun>,
) {
    let (up_tx, up_rx) = mpsc::unbounded_channel();
    let credit = Arc::new(Semaphore::new(CREDIT));
    let up_queued = Arc::new(AtomicUsize::new(0));
    conns.insert(
        id,
        Conn {
            up: up_tx,
            up_queued: up_queued.clone(),
            credit: credit.clone(),
            down: VecDeque::new(),
            fin_pending: false,
            app_blocked: false,
        },
    );
    tokio::spawn(conn_task(
        shared.clone(),
        id,
        dst,
        (up_rx, up_queued),
        ctl_tx.clone(),
        credit,
    ));
}

/// Application bytes of `id` toward its stream, as far as the stream's queue takes them.
fn read_app(
    stack: &mut TunStack,
    conns: &mut HashMap<ConnId, Conn>,
    id: ConnId,
    now: Instant,
    buf: &mut [u8],
) {
    let Some(c) = conns.get_mut(&id) else { return };
    loop {
        if c.up_queued.load(Ordering::Acquire) >= UP_BYTES {
            c.app_blocked = true;
            return;
        }
        match stack.tcp_recv(now, id, buf) {
            Ok(n) if n > 0 => {
                c.up_queued.fetch_add(n, Ordering::AcqRel);
                let _ = c.up.send(Up::Data(Bytes::copy_from_slice(&buf[..n])));
            }
            _ => {
                c.app_blocked = false;
                return;
            }
        }
    }
}

/// Stream bytes of `id` into the stack, as far as its send buffer takes them; the credit
/// returns to the stream side for what was taken.
fn write_app(stack: &mut TunStack, conns: &mut HashMap<ConnId, Conn>, id: ConnId, now: Instant) {
    let Some(c) = conns.get_mut(&id) else { return };
    while let Some(front) = c.down.front_mut() {
        let Ok(n) = stack.tcp_send(now, id, front) else {
            c.down.clear();
            return;
        };
        c.credit.add_permits(n);
        if n < front.len() {
            let _ = front.split_to(n);
            return;
        }
        c.down.pop_front();
    }
    if c.fin_pending {
        c.fin_pending = false;
        let _ = stack.tcp_shutdown(now, id);
    }
}

fn handle_ctl(
    stack: &mut TunStack,
    conns: &mut HashMap<ConnId, Conn>,
    m: ToTun,
    now: Instant,
    buf: &mut [u8],
) {
    match m {
        ToTun::Data(id, b) => {
            if let Some(c) = conns.get_mut(&id) {
                c.down.push_back(b);
                write_app(stack, conns, id, now);
            }
        }
        ToTun::Fin(id) => {
            if let Some(c) = conns.get_mut(&id) {
                c.fin_pending = true;
                write_app(stack, conns, id, now);
            }
        }
        ToTun::Reset(id) => {
            if conns.contains_key(&id) {
                let _ = stack.tcp_abort(now, id);
            }
        }
        ToTun::Drained(id) => {
            if conns.get(&id).is_some_and(|c| c.app_blocked) {
                read_app(stack, conns, id, now, buf);
            }
        }
    }
}
