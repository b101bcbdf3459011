//! The stack driven by an application that is a second smoltcp interface: its packets go
//! straight into `handle_packet`, the stack's packets straight back, with virtual time.

use super::*;
use proptest::prelude::*;
use smoltcp::wire::{IpAddress, IpEndpoint, Ipv4Packet};
use std::net::IpAddr;
use std::time::Duration;

const APP_V4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const APP_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);

/// An application host: a smoltcp interface whose device is a pair of queues.
struct App {
    iface: Interface,
    sockets: SocketSet<'static>,
    dev: Queues,
}

impl App {
    fn new(now: Instant) -> App {
        let mut dev = Queues {
            rx: VecDeque::new(),
            tx: VecDeque::new(),
            mtu: 1400,
            max_tx: 1 << 20,
        };
        let mut config = Config::new(HardwareAddress::Ip);
        config.random_seed = 99;
        let mut iface = Interface::new(config, &mut dev, smol(now));
        iface.update_ip_addrs(|a| {
            a.push(IpCidr::new(APP_V4.into(), 24)).unwrap();
            a.push(IpCidr::new(APP_V6.into(), 64)).unwrap();
        });
        iface
            .routes_mut()
            .add_default_ipv4_route(Ipv4Addr::new(10, 0, 0, 1))
            .unwrap();
        iface
            .routes_mut()
            .add_default_ipv6_route(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1))
            .unwrap();
        App {
            iface,
            sockets: SocketSet::new(Vec::new()),
            dev,
        }
    }

    fn connect(&mut self, to: SocketAddr, port: u16) -> SocketHandle {
        let buf = || tcp::SocketBuffer::new(vec![0u8; 256 * 1024]);
        let mut s = tcp::Socket::new(buf(), buf());
        let remote = IpEndpoint::new(to.ip().into(), to.port());
        s.connect(self.iface.context(), remote, port).unwrap();
        self.sockets.add(s)
    }

    fn tcp(&mut self, h: SocketHandle) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(h)
    }
}

/// Application and stack, wired together.
struct Rig {
    now: Instant,
    app: App,
    stack: TunStack,
    events: Vec<Event>,
}

impl Rig {
    fn new(cfg: StackConfig) -> Rig {
        let now = Instant::ZERO;
        Rig {
            now,
            app: App::new(now),
            stack: TunStack::new(cfg, now),
            events: Vec::new(),
        }
    }

    /// One millisecond: both sides poll, packets cross.
    fn step(&mut self) {
        self.now += Duration::from_millis(1);
        let t = smol(self.now);
        self.app
            .iface
            .poll(t, &mut self.app.dev, &mut self.app.sockets);
        while let Some(p) = self.app.dev.tx.pop_front() {
            let _ = self.stack.handle_packet(self.now, &p);
        }
        if self
            .stack
            .poll_timeout(self.now)
            .is_some_and(|t| t <= self.now)
        {
            self.stack.handle_timeout(self.now);
        }
        while let Some(p) = self.stack.poll_transmit() {
            self.app.dev.rx.push_back(p);
        }
        while let Some(e) = self.stack.poll_event() {
            self.events.push(e);
        }
    }

    fn opened(&self) -> Option<(ConnId, SocketAddr, SocketAddr)> {
        self.events.iter().find_map(|e| match e {
            Event::TcpOpened { id, src, dst } => Some((*id, *src, *dst)),
            _ => None,
        })
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0] ^ seed)
        .collect()
}

/// An application connects to `dst`, sends `up` bytes and receives `down` bytes in chunks
/// of `chunk`, then both ends close. Returns the bytes each side got and the events.
fn exchange(
    dst: SocketAddr,
    up: usize,
    down: usize,
    chunk: usize,
) -> (Vec<u8>, Vec<u8>, Vec<Event>) {
    let mut r = Rig::new(StackConfig::default());
    let h = r.app.connect(dst, 40_000);
    let (to_stack, to_app) = (pattern(up, 1), pattern(down, 2));
    let (mut got_stack, mut got_app) = (Vec::new(), Vec::new());
    let (mut sent_up, mut sent_down) = (0, 0);
    let mut buf = vec![0u8; chunk];
    let mut id = None;
    let (mut app_closed, mut stack_closed) = (false, false);
    for _ in 0..200_000 {
        r.step();
        if id.is_none() {
            id = r.opened().map(|o| o.0);
        }
        let s = r.app.tcp(h);
        if s.can_send() && sent_up < up {
            sent_up += s
                .send_slice(&to_stack[sent_up..(sent_up + chunk).min(up)])
                .unwrap();
        }
        if sent_up == up && !app_closed && s.may_send() {
            s.close();
            app_closed = true;
        }
        while s.can_recv() {
            let n = s.recv_slice(&mut buf).unwrap();
            got_app.extend_from_slice(&buf[..n]);
        }
        let Some(id) = id else { continue };
        loop {
            match r.stack.tcp_recv(r.now, id, &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got_stack.extend_from_slice(&buf[..n]),
            }
        }
        if sent_down < down {
            if let Ok(n) =
                r.stack
                    .tcp_send(r.now, id, &to_app[sent_down..(sent_down + chunk).min(down)])
            {
                sent_down += n;
            }
        }
        let eof = r.events.contains(&Event::TcpEof { id });
        if sent_down == down && eof && !stack_closed {
            r.stack.tcp_shutdown(r.now, id).unwrap();
            stack_closed = true;
        }
        if r.events
            .iter()
            .any(|e| matches!(e, Event::TcpClosed { .. }))
            && r.app.tcp(h).state() == tcp::State::Closed
            || r.app.tcp(h).state() == tcp::State::TimeWait && stack_closed && got_app.len() == down
        {
            break;
        }
    }
    for _ in 0..50 {
        r.step();
    }
    (got_stack, got_app, r.events)
}

fn check_exchange(dst: SocketAddr, up: usize, down: usize, chunk: usize) {
    let (got_stack, got_app, events) = exchange(dst, up, down, chunk);
    let (id, src, seen_dst) = events
        .iter()
        .find_map(|e| match e {
            Event::TcpOpened { id, src, dst } => Some((*id, *src, *dst)),
            _ => None,
        })
        .expect("the connection opened");
    assert_eq!(
        seen_dst, dst,
        "the stack sees the application's destination"
    );
    let app_ip: IpAddr = if dst.is_ipv4() {
        APP_V4.into()
    } else {
        APP_V6.into()
    };
    assert_eq!(src, SocketAddr::new(app_ip, 40_000));
    assert!(
        got_stack == pattern(up, 1),
        "upload: {} of {up} bytes, exact: {}",
        got_stack.len(),
        got_stack.len() == up
    );
    assert!(
        got_app == pattern(down, 2),
        "download: {} of {down} bytes",
        got_app.len()
    );
    assert!(events.contains(&Event::TcpEof { id }));
    assert!(
        events.contains(&Event::TcpClosed { id, reset: false }),
        "a clean close: {events:?}"
    );
}

#[test]
fn a_tcp_connection_to_any_ipv4_destination_carries_every_byte_both_ways() {
    check_exchange(
        "93.184.216.34:80".parse().unwrap(),
        300_000,
        1_000_000,
        16_384,
    );
}

#[test]
fn a_tcp_connection_to_an_ipv6_destination_carries_every_byte_both_ways() {
    check_exchange(
        "[2001:db8::80]:443".parse().unwrap(),
        200_000,
        700_000,
        9_000,
    );
}

#[test]
fn two_connections_to_one_destination_are_two_connections() {
    let mut r = Rig::new(StackConfig::default());
    let dst: SocketAddr = "198.51.100.7:80".parse().unwrap();
    let a = r.app.connect(dst, 40_001);
    let b = r.app.connect(dst, 40_002);
    for _ in 0..20 {
        r.step();
    }
    let opened: Vec<_> = r
        .events
        .iter()
        .filter_map(|e| match e {
            Event::TcpOpened { id, src, .. } => Some((*id, src.port())),
            _ => None,
        })
        .collect();
    assert_eq!(opened.len(), 2, "{:?}", r.events);
    r.app.tcp(a).send_slice(b"from a").unwrap();
    r.app.tcp(b).send_slice(b"from b").unwrap();
    for _ in 0..20 {
        r.step();
    }
    for (id, port) in opened {
        let mut buf = [0u8; 64];
        let n = r.stack.tcp_recv(r.now, id, &mut buf).unwrap();
        let want: &[u8] = if port == 40_001 { b"from a" } else { b"from b" };
        assert_eq!(&buf[..n], want);
    }
}

#[test]
fn a_syn_beyond_the_connection_limit_is_reset_and_counted() {
    let mut r = Rig::new(StackConfig {
        max_connections: 1,
        ..StackConfig::default()
    });
    let dst: SocketAddr = "198.51.100.7:80".parse().unwrap();
    let _a = r.app.connect(dst, 40_001);
    for _ in 0..10 {
        r.step();
    }
    let b = r.app.connect(dst, 40_002);
    for _ in 0..10 {
        r.step();
    }
    assert_eq!(r.app.tcp(b).state(), tcp::State::Closed, "reset");
    let opened = r
        .events
        .iter()
        .filter(|e| matches!(e, Event::TcpOpened { .. }))
        .count();
    assert_eq!(opened, 1);
    assert_eq!(
        r.stack.counters().dropped.get(&Drop::ConnectionLimit),
        Some(&1)
    );
    assert_eq!(r.stack.connections(), 1);
}

#[test]
fn an_aborted_connection_resets_the_application_and_reports_it() {
    let mut r = Rig::new(StackConfig::default());
    let h = r.app.connect("203.0.113.9:22".parse().unwrap(), 40_003);
    for _ in 0..10 {
        r.step();
    }
    let (id, _, _) = r.opened().unwrap();
    r.stack.tcp_abort(r.now, id).unwrap();
    for _ in 0..10 {
        r.step();
    }
    assert_eq!(r.app.tcp(h).state(), tcp::State::Closed);
    assert!(
        r.events.contains(&Event::TcpClosed { id, reset: true }),
        "{:?}",
        r.events
    );
    assert_eq!(r.stack.connections(), 0);
    assert_eq!(
        r.stack.tcp_recv(r.now, id, &mut [0u8; 4]),
        Err(StackError::UnknownConnection)
    );
}

#[test]
fn an_application_reset_is_reported_as_a_reset() {
    let mut r = Rig::new(StackConfig::default());
    let h = r.app.connect("203.0.113.9:22".parse().unwrap(), 40_004);
    for _ in 0..10 {
        r.step();
    }
    let (id, _, _) = r.opened().unwrap();
    r.app.tcp(h).abort();
    for _ in 0..10 {
        r.step();
    }
    assert!(
        r.events.contains(&Event::TcpClosed { id, reset: true }),
        "{:?}",
        r.events
    );
    assert_eq!(r.stack.connections(), 0);
}

fn udp_from_app(src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> Vec<u8> {
    // Built with smoltcp's own emitters, independently of the stack's parser.
    wire::build_udp(src, dst, payload).unwrap()
}

#[test]
fn udp_datagrams_become_events_and_answers_become_packets() {
    let mut s = TunStack::new(StackConfig::default(), Instant::ZERO);
    for (src, dst) in [
        ("10.0.0.2:5353", "9.9.9.9:53"),
        ("[fd00::2]:5353", "[2620:fe::fe]:53"),
    ] {
        let (src, dst): (SocketAddr, SocketAddr) = (src.parse().unwrap(), dst.parse().unwrap());
        let p = udp_from_app(src, dst, b"query");
        s.handle_packet(Instant::ZERO, &p).unwrap();
        assert_eq!(
            s.poll_event(),
            Some(Event::UdpDatagram {
                src,
                dst,
                payload: b"query".to_vec()
            })
        );
        s.send_udp(dst, src, b"answer").unwrap();
        let back = s.poll_transmit().unwrap();
        match wire::classify(&back).unwrap() {
            wire::Kind::Udp {
                src: f,
                dst: t,
                payload,
            } => {
                assert_eq!((f, t, payload), (dst, src, &b"answer"[..]));
            }
            k => panic!("{k:?}"),
        }
    }
    assert_eq!(s.counters().udp_in, 2);
    assert_eq!(s.counters().udp_out, 2);
}

#[test]
fn a_udp_datagram_with_a_bad_checksum_is_dropped() {
    let mut s = TunStack::new(StackConfig::default(), Instant::ZERO);
    let mut p = udp_from_app(
        "10.0.0.2:1".parse().unwrap(),
        "9.9.9.9:53".parse().unwrap(),
        b"x",
    );
    let last = p.len() - 1;
    p[last] ^= 0xff;
    assert_eq!(s.handle_packet(Instant::ZERO, &p), Err(Drop::Malformed));
    assert_eq!(s.poll_event(), None);
}

#[test]
fn udp_too_big_for_the_mtu_or_across_families_is_refused() {
    let mut s = TunStack::new(StackConfig::default(), Instant::ZERO);
    let (a, b): (SocketAddr, SocketAddr) =
        ("9.9.9.9:53".parse().unwrap(), "10.0.0.2:1".parse().unwrap());
    let max = s.max_udp_payload(&a);
    assert_eq!(max, 1400 - 28);
    assert!(s.send_udp(a, b, &vec![0; max]).is_ok());
    assert!(matches!(
        s.send_udp(a, b, &vec![0; max + 1]),
        Err(StackError::TooBig { .. })
    ));
    let v6: SocketAddr = "[fd00::2]:1".parse().unwrap();
    assert_eq!(s.send_udp(a, v6, b"x"), Err(StackError::FamilyMismatch));
}

#[test]
fn a_fragment_is_dropped() {
    let mut s = TunStack::new(StackConfig::default(), Instant::ZERO);
    let mut p = udp_from_app(
        "10.0.0.2:1".parse().unwrap(),
        "9.9.9.9:53".parse().unwrap(),
        b"x",
    );
    let mut ip = Ipv4Packet::new_unchecked(&mut p[..]);
    ip.set_more_frags(true);
    ip.fill_checksum();
    assert_eq!(s.handle_packet(Instant::ZERO, &p), Err(Drop::Fragment));
}

#[test]
fn an_icmp_echo_request_is_answered() {
    use smoltcp::wire::{Icmpv4Packet, Icmpv4Repr, IpProtocol, Ipv4Repr};
    let caps = smoltcp::phy::ChecksumCapabilities::default();
    let echo = Icmpv4Repr::EchoRequest {
        ident: 7,
        seq_no: 1,
        data: b"ping",
    };
    let ip = Ipv4Repr {
        src_addr: APP_V4,
        dst_addr: Ipv4Addr::new(1, 1, 1, 1),
        next_header: IpProtocol::Icmp,
        payload_len: echo.buffer_len(),
        hop_limit: 64,
    };
    let mut p = vec![0u8; 20 + echo.buffer_len()];
    ip.emit(&mut Ipv4Packet::new_unchecked(&mut p[..]), &caps);
    echo.emit(&mut Icmpv4Packet::new_unchecked(&mut p[20..]), &caps);
    let mut s = TunStack::new(StackConfig::default(), Instant::ZERO);
    s.handle_packet(Instant::ZERO, &p).unwrap();
    let reply = s.poll_transmit().expect("an echo reply");
    let rp = Ipv4Packet::new_checked(&reply[..]).unwrap();
    assert_eq!(IpAddress::from(rp.src_addr()), IpAddress::v4(1, 1, 1, 1));
    let icmp = Icmpv4Packet::new_checked(rp.payload()).unwrap();
    let repr = Icmpv4Repr::parse(&icmp, &caps).unwrap();
    assert_eq!(
        repr,
        Icmpv4Repr::EchoReply {
            ident: 7,
            seq_no: 1,
            data: b"ping"
        }
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Whatever an application writes to the TUN device, the stack neither panics nor
    /// opens a connection without a handshake.
    #[test]
    fn arbitrary_packets_never_panic(packets in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..1500), 1..20)) {
        let mut s = TunStack::new(StackConfig::default(), Instant::ZERO);
        for (i, p) in packets.iter().enumerate() {
            let _ = s.handle_packet(Instant(i as u64 * 1_000_000), p);
        }
        while s.poll_transmit().is_some() {}
        while let Some(e) = s.poll_event() {
            let opened = matches!(e, Event::TcpOpened { .. });
            prop_assert!(!opened, "a connection opened without a handshake");
        }
    }

    /// Every byte exactly once, in order, whatever the sizes and the chunking.
    #[test]
    fn every_byte_exactly_once_in_order(up in 0usize..200_000, down in 0usize..200_000, chunk in 1usize..20_000, v6 in any::<bool>()) {
        let dst: SocketAddr = if v6 { "[2001:db8::1]:8080".parse().unwrap() } else { "192.0.2.1:8080".parse().unwrap() };
        let (got_stack, got_app, _) = exchange(dst, up, down, chunk);
        prop_assert!(got_stack == pattern(up, 1), "upload {} of {}", got_stack.len(), up);
        prop_assert!(got_app == pattern(down, 2), "download {} of {}", got_app.len(), down);
    }
}
