//! The rig of the per-destination rule tests (`rules`): nsrig's two namespaces and two
//! links, with destinations in the server namespace that the client namespace reaches
//! over either link without braid (10.0.0.0/24 on the server's loopback, routed over p0,
//! then p1): an HTTP server and a UDP echo on every address, each recording who reached it
//! (a link address of the client: straight from the client; a server address: through the
//! braid server), the braid server itself (10.0.0.1), and a small DNS server on the
//! system's first nameserver address (domain rules resolve there, through the path) and,
//! over UDP and TCP, on [`SERVER_DNS`], the braid server's resolver, which the client
//! namespace has no route to.
#![allow(dead_code)]

use crate::common::body;
use crate::nsrig::{self, Net};
use braid_crypto::StaticKeypair;
use braid_net::server::{Server, ServerBoard, ServerConfig};
use braid_testkit::http;
use braid_testkit::socks5::Dest;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

/// A destination that `--bypass` or `--pin` names in the tests.
pub const RULED: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// A destination no rule names (it goes through the session).
pub const OTHER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 3);
/// What the DNS server answers for every name under [`DOMAIN`].
pub const NAMED: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 4);
pub const DOMAIN: &str = "bank.example";
/// The braid server's resolver (UDP and TCP, at [`SERVER_DNS_PORT`]: a port other than 53,
/// which `--resolver` allows), reached only through the server.
pub const SERVER_DNS: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 53);
pub const SERVER_DNS_PORT: u16 = 5353;
/// A name under [`DOMAIN`] whose answer, [`BIG_COUNT`] addresses from [`BIG_FIRST`] on,
/// does not fit 512 bytes: over UDP it comes truncated (TC, no answer), over TCP whole.
pub const BIG: &str = "big.bank.example";
pub const BIG_FIRST: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 1);
pub const BIG_COUNT: u32 = 60;
/// The cloud metadata address, on the server's loopback with the web and echo services
/// behind it, and refused by the server's egress policy (issue 37).
pub const METADATA: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);
pub const WEB_PORT: u16 = 8080;
pub const ECHO_PORT: u16 = 7007;

/// Who reached the HTTP server: (the address it was reached at, the peer), in order.
pub type Peers = Arc<Mutex<Vec<(IpAddr, SocketAddr)>>>;

/// The server namespace's services; stopped on drop.
pub struct Dests {
    pub data: Arc<Vec<u8>>,
    pub peers: Peers,
    pub server_pub: braid_crypto::PublicKey,
    pub board: Arc<ServerBoard>,
    /// The DNS server's address (the system's first nameserver), if the rig could use it.
    pub resolver: Option<SocketAddr>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Dests {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The system's first nameserver, where direct connections resolve names; `None` when the
/// rig cannot stand in for it (not IPv4, or loopback).
fn nameserver() -> Option<Ipv4Addr> {
    let text = std::fs::read_to_string("/etc/resolv.conf").ok()?;
    let first = text.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        (w.next() == Some("nameserver")).then(|| w.next()).flatten()
    })?;
    match first.parse::<IpAddr>().ok()? {
        IpAddr::V4(a) if !a.is_loopback() && !a.is_unspecified() => Some(a),
        _ => None,
    }
}

/// The addresses and routes, then the services with a braid server that accepts `agent`.
/// The client reaches the destinations by routes of their own, or with `default_routes`
/// (TUN mode: the main table's specific routes would win over the tunnel) by a default
/// route over each link, as a router's links have them.
pub fn serve(
    net: &Net,
    size: usize,
    agent: braid_crypto::PublicKey,
    default_routes: bool,
) -> Dests {
    let ns = nameserver();
    let mut addrs = vec![RULED, OTHER, NAMED];
    addrs.extend(ns);
    for a in addrs.iter().chain([&SERVER_DNS, &BIG_FIRST, &METADATA]) {
        net.ip_s(&["addr", "add", &format!("{a}/32"), "dev", "lo"]);
    }
    for (i, metric) in [(0, "1"), (1, "2")] {
        let dev = format!("p{i}");
        if default_routes {
            let gw = format!("10.{}.0.2", i + 1);
            net.ip_c(&[
                "route", "add", "default", "via", &gw, "dev", &dev, "metric", metric,
            ]);
            continue;
        }
        for a in &addrs {
            let to = format!("{a}/32");
            net.ip_c(&["route", "add", &to, "dev", &dev, "metric", metric]);
        }
    }
    let data = Arc::new(body(size));
    let peers: Peers = Arc::default();
    let key = StaticKeypair::generate().unwrap();
    let server_pub = key.public();
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (s_ns, d, p) = (net.s.clone(), data.clone(), peers.clone());
    let thread = std::thread::spawn(move || {
        braid_testbed::netns::enter(&s_ns).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let web = TcpListener::bind(("0.0.0.0", WEB_PORT)).await.unwrap();
            tokio::spawn(web_server(web, d, p));
            let echo = UdpSocket::bind(("0.0.0.0", ECHO_PORT)).await.unwrap();
            tokio::spawn(echo_server(echo));
            let resolver = match ns {
                Some(a) => {
                    let s = UdpSocket::bind((a, 53)).await.unwrap();
                    tokio::spawn(dns_server(s));
                    Some(SocketAddr::from((a, 53)))
                }
                None => None,
            };
            let at = SocketAddr::from((SERVER_DNS, SERVER_DNS_PORT));
            tokio::spawn(dns_server(UdpSocket::bind(at).await.unwrap()));
            tokio::spawn(dns_tcp_server(TcpListener::bind(at).await.unwrap()));
            let mut cfg = ServerConfig::new(nsrig::SERVER.parse().unwrap(), key, vec![agent]);
            cfg.resolver = Some(at);
            // The destinations are addresses of the server's namespace (its own, refused
            // by default).
            let own: Vec<String> = [
                RULED,
                OTHER,
                NAMED,
                SERVER_DNS,
                BIG_FIRST,
                Ipv4Addr::new(10, 0, 0, 1),
            ]
            .iter()
            .chain(&ns)
            .map(|a| a.to_string())
            .collect();
            let own: Vec<&str> = own.iter().map(String::as_str).collect();
            braid_testkit::loopback::allow_targets(&mut cfg, &own);
            let server = Server::bind(cfg).await.unwrap();
            tx.send((server.status(), resolver)).unwrap();
            tokio::select! {
                _ = server.run() => {}
                _ = stop_rx => {}
            }
        });
    });
    let (board, resolver) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    if resolver.is_none() {
        eprintln!("the system's first nameserver is not an IPv4 address the rig can stand in for: domain cases skipped");
    }
    Dests {
        data,
        peers,
        server_pub,
        board,
        resolver,
        stop: Some(stop_tx),
        thread: Some(thread),
    }
}

/// Serves the whole body to every GET, recording the peer.
async fn web_server(l: TcpListener, data: Arc<Vec<u8>>, peers: Peers) {
    http::serve(l, move |mut s, _| {
        let local = s.local_addr().map(|a| a.ip()).unwrap();
        if let Ok(peer) = s.peer_addr() {
            peers.lock().unwrap().push((local, peer));
        }
        let data = data.clone();
        async move { http::respond(&mut s, &data).await }
    })
    .await
}

/// Answers each datagram with as many bytes, starting with the sender's address and a
/// space.
async fn echo_server(s: UdpSocket) {
    let mut buf = vec![0u8; 65536];
    while let Ok((n, from)) = s.recv_from(&mut buf).await {
        let mut out = format!("{from} ").into_bytes();
        out.resize(n.max(out.len()), b'.');
        let _ = s.send_to(&out, from).await;
    }
}

/// A for every name under [`DOMAIN`] ([`NAMED`]; [`BIG`]: [`BIG_COUNT`] addresses),
/// NXDOMAIN for any other.
async fn dns_server(s: UdpSocket) {
    let mut buf = vec![0u8; 1500];
    while let Ok((n, from)) = s.recv_from(&mut buf).await {
        if let Some(out) = dns_answer(&buf[..n], true) {
            let _ = s.send_to(&out, from).await;
        }
    }
}

/// [`dns_server`] over TCP (each message behind its two-byte length).
async fn dns_tcp_server(l: TcpListener) {
    while let Ok((mut s, _)) = l.accept().await {
        tokio::spawn(async move {
            let mut len = [0u8; 2];
            while s.read_exact(&mut len).await.is_ok() {
                let mut q = vec![0u8; usize::from(u16::from_be_bytes(len))];
                if s.read_exact(&mut q).await.is_err() {
                    return;
                }
                let Some(a) = dns_answer(&q, false) else {
                    return;
                };
                let mut out = (a.len() as u16).to_be_bytes().to_vec();
                out.extend_from_slice(&a);
                if s.write_all(&out).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// The answer to `query`; over `udp`, one longer than 512 bytes is truncated (TC set, no
/// records), as a resolver does.
fn dns_answer(query: &[u8], udp: bool) -> Option<Vec<u8>> {
    use simple_dns::{rdata::RData, Packet, PacketFlag, ResourceRecord, CLASS, RCODE};
    let q = Packet::parse(query).ok()?;
    let mut a = q.clone().into_reply();
    let want = q.questions.first().map(|x| x.qname.clone());
    let is_a = q
        .questions
        .first()
        .is_some_and(|x| x.qtype == simple_dns::QTYPE::TYPE(simple_dns::TYPE::A));
    match want {
        Some(name) if name.to_string().ends_with(DOMAIN) => {
            let ips: Vec<Ipv4Addr> = if name.to_string() == BIG {
                (0..BIG_COUNT)
                    .map(|i| (u32::from(BIG_FIRST) + i).into())
                    .collect()
            } else {
                vec![NAMED]
            };
            for ip in ips.into_iter().filter(|_| is_a) {
                a.answers.push(ResourceRecord::new(
                    name.clone(),
                    CLASS::IN,
                    60,
                    RData::A(simple_dns::rdata::A {
                        address: u32::from(ip),
                    }),
                ));
            }
        }
        _ => *a.rcode_mut() = RCODE::NameError,
    }
    let out = a.build_bytes_vec().ok()?;
    if udp && out.len() > 512 {
        a.answers.clear();
        a.set_flags(PacketFlag::TRUNCATION);
        return a.build_bytes_vec().ok();
    }
    Some(out)
}

/// A SOCKS5 target: an IPv4 address or a name.
pub enum Target<'a> {
    Ip(Ipv4Addr, u16),
    Name(&'a str, u16),
}

/// SOCKS5 CONNECT through `socks`; `Err(code)` when the agent refuses.
pub async fn socks_connect(socks: SocketAddr, t: Target<'_>) -> Result<TcpStream, u8> {
    let to = match t {
        Target::Ip(ip, port) => Dest::Addr(SocketAddr::from((ip, port))),
        Target::Name(n, port) => Dest::Name(n, port),
    };
    braid_testkit::socks5::connect(socks, to).await
}

/// GET / on `s` (any byte stream to a [`web_server`]): the body.
pub async fn get<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(mut s: S) -> Vec<u8> {
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut all = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut all))
        .await
        .expect("the download stalled")
        .unwrap();
    let head = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP answer")
        + 4;
    all.split_off(head)
}

pub use braid_testkit::socks5::associate;

/// Send `count` datagrams of `len` bytes to `to` over an association, return the answers'
/// payloads (each waited for up to 1 s).
pub async fn udp_rounds(
    client: &UdpSocket,
    relay: SocketAddr,
    to: SocketAddr,
    count: usize,
    len: usize,
) -> Vec<Vec<u8>> {
    let pkt = braid_testkit::socks5::udp_packet(to.into(), &vec![b'x'; len]);
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    for _ in 0..count {
        client.send_to(&pkt, relay).await.unwrap();
        if let Ok(Ok((n, _))) =
            tokio::time::timeout(Duration::from_secs(1), client.recv_from(&mut buf)).await
        {
            got.push(buf[10..n].to_vec());
        }
    }
    got
}

/// The client's link addresses (p0, p1): a peer with one of them came straight from the
/// client.
pub fn from_client_link(peer: IpAddr) -> bool {
    ["10.1.0.1", "10.2.0.1"]
        .iter()
        .any(|a| peer == a.parse::<IpAddr>().unwrap())
}

/// The sender address an echo answer names.
pub fn echo_sender(answer: &[u8]) -> IpAddr {
    let text = String::from_utf8_lossy(answer);
    let addr: SocketAddr = text.split(' ').next().unwrap().parse().unwrap();
    addr.ip()
}

/// The peers that reached the HTTP server at `at`.
pub fn peers_at(peers: &Peers, at: Ipv4Addr) -> Vec<IpAddr> {
    peers
        .lock()
        .unwrap()
        .iter()
        .filter(|(l, _)| *l == IpAddr::V4(at))
        .map(|(_, p)| p.ip())
        .collect()
}

/// Bytes the braid server's sessions carried, both ways, all together.
pub async fn session_bytes(board: &ServerBoard) -> u64 {
    let s = board.snapshot().await;
    s.sessions
        .iter()
        .map(|x| x.totals.bytes_sent + x.totals.bytes_received)
        .sum()
}
