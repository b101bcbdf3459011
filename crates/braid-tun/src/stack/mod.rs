//! The userspace TCP/IP stack behind braid's TUN device, sans-IO: IP packets from the device
//! go in (`handle_packet`), IP packets for the device come out (`poll_transmit`), and in
//! between every TCP connection an application opens, to any destination, is terminated
//! here and becomes a byte stream (`TcpOpened`, `tcp_recv`, `tcp_send`), and every UDP
//! datagram becomes an event of its flow (`UdpDatagram`, `send_udp`). TCP is smoltcp's
//! (AnyIP: the stack answers for every address, a listening socket made for each SYN); UDP
//! and the first look at each packet are in `wire`. ICMP echo requests are answered by
//! smoltcp.
//!
//! Owns: the smoltcp interface and sockets, the table of connections, the queues to and
//! from the device, the limits. Must not touch: the TUN device, clocks (every call takes
//! `now`), the braid session (the agent maps connections to streams and flows to datagrams).

#[cfg(test)]
mod tests;
mod wire;

pub use wire::Drop;

use braid_core::time::Instant;
use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{Device, DeviceCapabilities, Medium, RxToken, TxToken};
use smoltcp::socket::tcp;
use smoltcp::wire::{HardwareAddress, IpCidr, IpListenEndpoint};
use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

/// Limits and sizes of one stack.
#[derive(Debug, Clone)]
pub struct StackConfig {
    /// The TUN device's MTU: the largest IP packet either way. TCP's MSS follows from it.
    pub mtu: usize,
    /// Receive and send buffer of each TCP connection, bytes (the window it advertises).
    /// The application is on this machine, microseconds away, so a small window already
    /// runs at gigabits; the buffers are allocated when a connection opens.
    pub tcp_buffer: usize,
    /// Connections at once; a SYN beyond this gets a reset. With `tcp_buffer`, this bounds
    /// the stack's memory: 2 x `tcp_buffer` per connection.
    pub max_connections: usize,
    /// Packets waiting for the device before new ones are dropped.
    pub max_queued_packets: usize,
    /// Seed of smoltcp's initial sequence numbers and ports.
    pub seed: u64,
}

impl Default for StackConfig {
    fn default() -> Self {
        StackConfig {
            mtu: 1400,
            tcp_buffer: 128 * 1024,
            max_connections: 1024,
            max_queued_packets: 4096,
            seed: 0,
        }
    }
}

/// One TCP connection, named by the stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

/// What the stack has for the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// An application completed a TCP handshake from `src` to `dst`.
    TcpOpened {
        id: ConnId,
        src: SocketAddr,
        dst: SocketAddr,
    },
    /// Bytes are waiting in `tcp_recv`.
    TcpReadable { id: ConnId },
    /// The application finished sending (FIN) and every byte has been read.
    TcpEof { id: ConnId },
    /// `tcp_send` takes bytes again after it took fewer than offered.
    TcpWritable { id: ConnId },
    /// The connection is gone: `reset` when it ended without both FINs (the application
    /// reset it, or it was aborted).
    TcpClosed { id: ConnId, reset: bool },
    /// A UDP datagram from an application, checksum verified.
    UdpDatagram {
        src: SocketAddr,
        dst: SocketAddr,
        payload: Vec<u8>,
    },
}

/// Why a call about a connection or a datagram failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StackError {
    #[error("no such TCP connection (it has closed)")]
    UnknownConnection,
    #[error("the connection no longer takes bytes in this direction")]
    Closed,
    #[error("source and destination are of different address families")]
    FamilyMismatch,
    #[error("a {len}-byte IP packet exceeds the TUN device's MTU of {mtu}")]
    TooBig { len: usize, mtu: usize },
    #[error("the queue toward the TUN device is full")]
    QueueFull,
}

/// Counters, for status and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    pub packets_in: u64,
    pub packets_out: u64,
    pub tcp_opened: u64,
    pub udp_in: u64,
    pub udp_out: u64,
    pub dropped: HashMap<Drop, u64>,
}

struct Conn {
    handle: SocketHandle,
    src: SocketAddr,
    dst: SocketAddr,
    opened: bool,
    readable_pending: bool,
    eof_sent: bool,
    write_blocked: bool,
}

/// The packet queues smoltcp reads and writes.
struct Queues {
    rx: VecDeque<Vec<u8>>,
    tx: VecDeque<Vec<u8>>,
    mtu: usize,
    max_tx: usize,
}

/// The stack. See the module doc.
pub struct TunStack {
    cfg: StackConfig,
    iface: Interface,
    sockets: SocketSet<'static>,
    dev: Queues,
    conns: HashMap<ConnId, Conn>,
    by_tuple: HashMap<(SocketAddr, SocketAddr), ConnId>,
    next_id: u64,
    events: VecDeque<Event>,
    counters: Counters,
}

fn smol(now: Instant) -> smoltcp::time::Instant {
    smoltcp::time::Instant::from_micros((now.as_nanos() / 1000) as i64)
}

/// The stack's own addresses: never seen by applications (every address answers), but
/// smoltcp's AnyIP needs routes whose gateway is one of its addresses.
const OWN_V4: Ipv4Addr = Ipv4Addr::new(169, 254, 77, 1);
const OWN_V6: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0xb1d, 1);

impl TunStack {
    pub fn new(cfg: StackConfig, now: Instant) -> Self {
        let mut dev = Queues {
            rx: VecDeque::new(),
            tx: VecDeque::new(),
            mtu: cfg.mtu,
            max_tx: cfg.max_queued_packets,
        };
        let mut config = Config::new(HardwareAddress::Ip);
        config.random_seed = cfg.seed;
        let mut iface = Interface::new(config, &mut dev, smol(now));
        iface.update_ip_addrs(|a| {
            // Two addresses always fit smoltcp's address table.
            let _ = a.push(IpCidr::new(OWN_V4.into(), 32));
            let _ = a.push(IpCidr::new(OWN_V6.into(), 128));
        });
        let _ = iface.routes_mut().add_default_ipv4_route(OWN_V4);
        let _ = iface.routes_mut().add_default_ipv6_route(OWN_V6);
        iface.set_any_ip(true);
        TunStack {
            cfg,
            iface,
            sockets: SocketSet::new(Vec::new()),
            dev,
            conns: HashMap::new(),
            by_tuple: HashMap::new(),
            next_id: 0,
            events: VecDeque::new(),
            counters: Counters::default(),
        }
    }

    /// One IP packet read from the TUN device. A packet the stack does not take is counted
    /// and its reason returned; nothing an application sends can harm other connections.
    pub fn handle_packet(&mut self, now: Instant, packet: &[u8]) -> Result<(), Drop> {
        self.counters.packets_in += 1;
        let verdict = self.take(now, packet);
        if let Err(d) = verdict {
            *self.counters.dropped.entry(d).or_default() += 1;
        }
        verdict
    }

    fn take(&mut self, now: Instant, packet: &[u8]) -> Result<(), Drop> {
        if packet.len() > self.cfg.mtu {
            return Err(Drop::Malformed);
        }
        match wire::classify(packet)? {
            wire::Kind::Udp { src, dst, payload } => {
                self.counters.udp_in += 1;
                self.events.push_back(Event::UdpDatagram {
                    src,
                    dst,
                    payload: payload.to_vec(),
                });
                return Ok(());
            }
            wire::Kind::Tcp { src, dst, syn } => {
                let fresh = syn && !self.by_tuple.contains_key(&(src, dst));
                let listening = if fresh {
                    self.listen_for(src, dst)
                } else {
                    None
                };
                self.dev.rx.push_back(packet.to_vec());
                self.poll(now);
                if let Some(id) = listening {
                    // smoltcp refused the SYN (a bad checksum, say): the socket must not
                    // stay listening for someone else's SYN to this destination.
                    let h = self.conns[&id].handle;
                    if self.sockets.get::<tcp::Socket>(h).state() == tcp::State::Listen {
                        self.forget(id);
                        return Err(Drop::Malformed);
                    }
                } else if fresh {
                    // Over the limit: no socket took the SYN and smoltcp answered a reset.
                    return Err(Drop::ConnectionLimit);
                }
                return Ok(());
            }
            wire::Kind::Other => {}
        }
        self.dev.rx.push_back(packet.to_vec());
        self.poll(now);
        Ok(())
    }

    /// A listening socket for the SYN `src` -> `dst`, made just before smoltcp sees it;
    /// `None` at the connection limit.
    fn listen_for(&mut self, src: SocketAddr, dst: SocketAddr) -> Option<ConnId> {
        if self.conns.len() >= self.cfg.max_connections {
            return None;
        }
        let buf = || tcp::SocketBuffer::new(vec![0u8; self.cfg.tcp_buffer]);
        let mut sock = tcp::Socket::new(buf(), buf());
        sock.set_nagle_enabled(false);
        let ep = IpListenEndpoint {
            addr: Some(dst.ip().into()),
            port: dst.port(),
        };
        // Port 0 cannot be listened on; smoltcp then resets the SYN.
        sock.listen(ep).ok()?;
        let handle = self.sockets.add(sock);
        let id = ConnId(self.next_id);
        self.next_id += 1;
        self.conns.insert(
            id,
            Conn {
                handle,
                src,
                dst,
                opened: false,
                readable_pending: false,
                eof_sent: false,
                write_blocked: false,
            },
        );
        self.by_tuple.insert((src, dst), id);
        Some(id)
    }

    fn forget(&mut self, id: ConnId) -> Option<Conn> {
        let c = self.conns.remove(&id)?;
        self.by_tuple.remove(&(c.src, c.dst));
        self.sockets.remove(c.handle);
        Some(c)
    }

    /// Timers (retransmissions, delayed ACKs) due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.poll(now);
    }

    /// When `handle_timeout` is next due, if ever.
    pub fn poll_timeout(&mut self, now: Instant) -> Option<Instant> {
        self.iface
            .poll_delay(smol(now), &self.sockets)
            .map(|d| now + std::time::Duration::from_micros(d.total_micros()))
    }

    /// The next IP packet for the TUN device.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        let p = self.dev.tx.pop_front()?;
        self.counters.packets_out += 1;
        Some(p)
    }

    /// The next event for the agent.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Connections in the table (any state).
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    fn sock(&mut self, id: ConnId) -> Result<&mut tcp::Socket<'static>, StackError> {
        let h = self
            .conns
            .get(&id)
            .filter(|c| c.opened)
            .ok_or(StackError::UnknownConnection)?
            .handle;
        Ok(self.sockets.get_mut::<tcp::Socket>(h))
    }

    /// Bytes the application sent on `id`, into `buf`; 0 when none are waiting (a
    /// `TcpReadable` event says when there are more).
    pub fn tcp_recv(
        &mut self,
        now: Instant,
        id: ConnId,
        buf: &mut [u8],
    ) -> Result<usize, StackError> {
        let n = self.sock(id)?.recv_slice(buf).unwrap_or(0);
        if n == 0 {
            if let Some(c) = self.conns.get_mut(&id) {
                c.readable_pending = false;
            }
        }
        // A window update may be due.
        self.poll(now);
        Ok(n)
    }

    /// Bytes for the application on `id`; returns how many were taken (fewer than offered
    /// when its buffer is full: a `TcpWritable` event follows when there is room).
    pub fn tcp_send(&mut self, now: Instant, id: ConnId, data: &[u8]) -> Result<usize, StackError> {
        let sock = self.sock(id)?;
        if !sock.may_send() {
            return Err(StackError::Closed);
        }
        let n = sock.send_slice(data).unwrap_or(0);
        if n < data.len() {
            if let Some(c) = self.conns.get_mut(&id) {
                c.write_blocked = true;
            }
        }
        self.poll(now);
        Ok(n)
    }

    /// No more bytes for the application on `id`: a FIN after those queued.
    pub fn tcp_shutdown(&mut self, now: Instant, id: ConnId) -> Result<(), StackError> {
        self.sock(id)?.close();
        self.poll(now);
        Ok(())
    }

    /// Ends `id` at once with a reset (its stream failed).
    pub fn tcp_abort(&mut self, now: Instant, id: ConnId) -> Result<(), StackError> {
        self.sock(id)?.abort();
        self.poll(now);
        Ok(())
    }

    /// Queues one UDP datagram `from` (the remote end) `to` (the application).
    pub fn send_udp(
        &mut self,
        from: SocketAddr,
        to: SocketAddr,
        payload: &[u8],
    ) -> Result<(), StackError> {
        let len = wire::udp_packet_len(&from, payload.len());
        if len > self.cfg.mtu {
            return Err(StackError::TooBig {
                len,
                mtu: self.cfg.mtu,
            });
        }
        if self.dev.tx.len() >= self.dev.max_tx {
            *self.counters.dropped.entry(Drop::QueueFull).or_default() += 1;
            return Err(StackError::QueueFull);
        }
        let p = wire::build_udp(from, to, payload).ok_or(StackError::FamilyMismatch)?;
        self.dev.tx.push_back(p);
        self.counters.udp_out += 1;
        Ok(())
    }

    /// The largest UDP payload that fits one packet of the device toward `to`.
    pub fn max_udp_payload(&self, to: &SocketAddr) -> usize {
        self.cfg.mtu.saturating_sub(wire::udp_packet_len(to, 0))
    }

    /// Runs smoltcp, then turns what changed into events.
    fn poll(&mut self, now: Instant) {
        self.iface.poll(smol(now), &mut self.dev, &mut self.sockets);
        let mut gone = Vec::new();
        let mut ids: Vec<ConnId> = self.conns.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            let s = self.sockets.get::<tcp::Socket>(c.handle);
            let state = s.state();
            if !c.opened {
                match state {
                    tcp::State::Listen | tcp::State::SynReceived => continue,
                    tcp::State::Closed | tcp::State::TimeWait => {
                        gone.push((id, None));
                        continue;
                    }
                    _ => {
                        c.opened = true;
                        self.counters.tcp_opened += 1;
                        self.events.push_back(Event::TcpOpened {
                            id,
                            src: c.src,
                            dst: c.dst,
                        });
                    }
                }
            }
            if s.can_recv() && !c.readable_pending {
                c.readable_pending = true;
                self.events.push_back(Event::TcpReadable { id });
            }
            let peer_finished = !s.may_recv()
                && matches!(
                    state,
                    tcp::State::CloseWait
                        | tcp::State::LastAck
                        | tcp::State::Closing
                        | tcp::State::TimeWait
                );
            if peer_finished && !s.can_recv() && !c.eof_sent {
                c.eof_sent = true;
                self.events.push_back(Event::TcpEof { id });
            }
            if c.write_blocked && s.can_send() && s.send_queue() < s.send_capacity() {
                c.write_blocked = false;
                self.events.push_back(Event::TcpWritable { id });
            }
            if matches!(state, tcp::State::Closed | tcp::State::TimeWait) && !s.can_recv() {
                gone.push((id, Some(!c.eof_sent)));
            }
        }
        for (id, report) in gone {
            if self.forget(id).is_none() {
                continue;
            }
            if let Some(reset) = report {
                self.events.push_back(Event::TcpClosed { id, reset });
            }
        }
    }
}

impl Device for Queues {
    type RxToken<'a> = Rx;
    type TxToken<'a> = Tx<'a>;

    fn receive(
        &mut self,
        _t: smoltcp::time::Instant,
    ) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        let p = self.rx.pop_front()?;
        Some((Rx(p), Tx(&mut self.tx)))
    }

    fn transmit(&mut self, _t: smoltcp::time::Instant) -> Option<Self::TxToken<'_>> {
        (self.tx.len() < self.max_tx).then_some(Tx(&mut self.tx))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ip;
        caps.max_transmission_unit = self.mtu;
        caps
    }
}

struct Rx(Vec<u8>);
struct Tx<'a>(&'a mut VecDeque<Vec<u8>>);

impl RxToken for Rx {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}

impl TxToken for Tx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut p = vec![0u8; len];
        let r = f(&mut p);
        self.0.push_back(p);
        r
    }
}
