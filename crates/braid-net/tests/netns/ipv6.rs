//! IPv6 end to end (issue 24, item 2) on the namespace rig of `live_paths.rs`: link 0
//! IPv6-only (its IPv4 address removed), link 1 dual-stack; the braid server on `[::]`
//! with [`SERVER6`] on its loopback, and destinations on [`DEST6`] (a TCP blob server and a
//! UDP echo) that the client namespace reaches over both links, directly or through the
//! braid server. Root and namespaces are needed; each test prints why it skips.

use crate::common::{body, sha};
use crate::nsrig::{self, skip, spawn_in, wait, Net, Stop};

use braid_crypto::StaticKeypair;
use braid_net::agent::{Agent, AgentConfig, DirectMode, PathStatus};
use braid_net::server::{Server, ServerConfig};
use std::net::{Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

/// The braid server's IPv6 address.
const SERVER6: Ipv6Addr = Ipv6Addr::new(0xfd66, 0, 0, 0, 0, 0, 0, 1);
/// The destinations' IPv6 address (server namespace, loopback).
const DEST6: Ipv6Addr = Ipv6Addr::new(0xfd66, 0, 0, 0, 0, 0, 0, 0x80);
const BLOB_PORT: u16 = 8080;
const ECHO_PORT: u16 = 5300;
const BRAID_PORT: u16 = 4433;

/// Link `i`'s IPv6 addresses (client, server).
fn link6(i: usize) -> (Ipv6Addr, Ipv6Addr) {
    let n = i as u16 + 1;
    (
        Ipv6Addr::new(0xfd61, n, 0, 0, 0, 0, 0, 1),
        Ipv6Addr::new(0xfd61, n, 0, 0, 0, 0, 0, 2),
    )
}

/// The rig with IPv6: link 0 IPv6-only, link 1 dual-stack, the server's loopback
/// addresses routed over both (link 0 first), each link's source address leaving on it.
fn net6() -> Arc<Net> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("BRAID_TEST_LOG"))
        .with_test_writer()
        .try_init();
    let net = Arc::new(Net::with_prefix("v6n"));
    for a in [SERVER6, DEST6] {
        net.ip_s(&["-6", "addr", "add", &format!("{a}/128"), "dev", "lo"]);
    }
    for i in 0..2 {
        let (p, s) = (format!("p{i}"), format!("s{i}"));
        let (c6, s6) = link6(i);
        net.ip_c(&["-6", "addr", "add", &format!("{c6}/64"), "dev", &p, "nodad"]);
        net.ip_s(&["-6", "addr", "add", &format!("{s6}/64"), "dev", &s, "nodad"]);
        let (gw, metric, table) = (s6.to_string(), (i + 1).to_string(), (100 + i).to_string());
        net.ip_c(&[
            "-6",
            "route",
            "add",
            "fd66::/64",
            "via",
            &gw,
            "dev",
            &p,
            "metric",
            &metric,
        ]);
        net.ip_c(&[
            "-6",
            "rule",
            "add",
            "from",
            &c6.to_string(),
            "table",
            &table,
        ]);
        net.ip_c(&[
            "-6", "route", "add", "default", "via", &gw, "dev", &p, "table", &table,
        ]);
    }
    net.ip_c(&["addr", "del", "10.1.0.1/24", "dev", "p0"]);
    net
}

/// Runs, in the server namespace until the guard drops: a braid server on `[::]:4433`
/// (when `agent` is given; returns its key), a TCP server on `[DEST6]:8080` that sends
/// `blob` to every connection, and a UDP echo on `[DEST6]:5300`.
fn serve6(
    net: &Net,
    blob: Arc<Vec<u8>>,
    agent: Option<braid_crypto::PublicKey>,
) -> (braid_crypto::PublicKey, Stop) {
    let key = StaticKeypair::generate().unwrap();
    let public = key.public();
    let ((), stop) = spawn_in(&net.s, move |ready| async move {
        let tcp = TcpListener::bind((DEST6, BLOB_PORT)).await.unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = tcp.accept().await {
                let blob = blob.clone();
                tokio::spawn(async move {
                    let _ = s.write_all(&blob).await;
                    let _ = s.shutdown().await;
                });
            }
        });
        let udp = UdpSocket::bind((DEST6, ECHO_PORT)).await.unwrap();
        tokio::spawn(async move {
            let mut b = [0u8; 2048];
            while let Ok((n, from)) = udp.recv_from(&mut b).await {
                let mut answer = b"echo:".to_vec();
                answer.extend_from_slice(&b[..n]);
                let _ = udp.send_to(&answer, from).await;
            }
        });
        let server = match agent {
            Some(a) => {
                let listen: SocketAddr = (Ipv6Addr::UNSPECIFIED, BRAID_PORT).into();
                let mut cfg = ServerConfig::new(listen, key, vec![a]);
                // The destinations are on the server's own loopback (refused by default).
                let dest = DEST6.to_string();
                braid_testkit::loopback::allow_targets(&mut cfg, &[&dest]);
                Some(Server::bind(cfg).await.unwrap())
            }
            None => None,
        };
        ready.send(()).unwrap();
        match server {
            Some(s) => {
                let _ = s.run().await;
            }
            None => std::future::pending::<()>().await,
        }
    });
    (public, stop)
}

/// SOCKS5 greeting and a request of `cmd` (1 CONNECT, 3 UDP ASSOCIATE) for `to`; returns
/// the reply's bound address.
async fn socks5(s: &mut TcpStream, cmd: u8, to: SocketAddr) -> SocketAddr {
    let (code, bound) = braid_testkit::socks5::request(s, cmd, to.into())
        .await
        .unwrap();
    assert_eq!(code, 0, "SOCKS5 request {cmd} to {to} refused: code {code}");
    bound
}

/// Everything `s` sends until it closes (10 s at most between reads).
async fn read_all(mut s: TcpStream) -> Vec<u8> {
    let mut all = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .expect("stalled 10 s")
            .unwrap();
        if n == 0 {
            return all;
        }
        all.extend_from_slice(&buf[..n]);
    }
}

/// The blob through the agent's SOCKS5 port, CONNECT to the IPv6 literal [`DEST6`].
async fn socks5_blob(socks: SocketAddr) -> Vec<u8> {
    let mut s = TcpStream::connect(socks).await.unwrap();
    socks5(&mut s, 1, (DEST6, BLOB_PORT).into()).await;
    read_all(s).await
}

/// A UDP request through the agent's SOCKS5 UDP ASSOCIATE to [`DEST6`]'s echo; the answer.
async fn socks5_udp_echo(socks: SocketAddr) -> Vec<u8> {
    let mut ctl = TcpStream::connect(socks).await.unwrap();
    let relay = socks5(&mut ctl, 3, SocketAddr::from(([0, 0, 0, 0], 0))).await;
    let u = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut dgram = vec![0, 0, 0, 4];
    dgram.extend_from_slice(&DEST6.octets());
    dgram.extend_from_slice(&ECHO_PORT.to_be_bytes());
    dgram.extend_from_slice(b"ping6");
    let mut b = [0u8; 2048];
    for _ in 0..5 {
        u.send_to(&dgram, relay).await.unwrap();
        if let Ok(Ok((n, _))) =
            tokio::time::timeout(Duration::from_millis(500), u.recv_from(&mut b)).await
        {
            assert!(n > 22 && b[3] == 4, "an IPv6 SOCKS5 UDP header");
            assert_eq!(
                &b[4..20],
                &DEST6.octets(),
                "the answer is from the destination"
            );
            return b[22..n].to_vec();
        }
    }
    drop(ctl);
    Vec::new()
}

/// IPv6 fragments the kernel of namespace `ns` made (`Ip6FragCreates`).
fn frag_creates(ns: &str) -> u64 {
    let snmp = braid_testbed::cmd::exec_ns(ns, "cat", &["/proc/net/snmp6"]).unwrap();
    snmp.lines()
        .find_map(|l| l.strip_prefix("Ip6FragCreates"))
        .and_then(|v| v.trim().parse().ok())
        .expect("Ip6FragCreates in /proc/net/snmp6")
}

/// The agent's paths: `a` bound to link 0's IPv6 address (IPv6-only link), `b` to link
/// 1's interface (dual-stack).
fn paths() -> [String; 2] {
    [format!("a={}", link6(0).0), "b=p1".to_string()]
}

/// A session whose two paths reach the server over IPv6 (one over an IPv6-only link, one
/// over a dual-stack link) carries SOCKS5 CONNECT to an IPv6 literal, HTTP CONNECT to an
/// IPv6 literal and a SOCKS5 UDP association to an IPv6 destination, exactly.
#[test]
fn a_session_over_ipv6_paths_carries_socks5_and_http_connect_to_an_ipv6_literal() {
    if skip() {
        return;
    }
    let net = net6();
    let blob = Arc::new(body(4 << 20));
    let key = Arc::new(StaticKeypair::generate().unwrap());
    let (server_pub, _g) = serve6(&net, blob.clone(), Some(key.public()));
    let p = paths();
    let server: SocketAddr = (SERVER6, BRAID_PORT).into();
    let mut cfg = nsrig::agent_cfg_to(server, &[&p[0], &p[1]], key, server_pub);
    cfg.http = Some("127.0.0.1:0".parse().unwrap());
    let (via_socks, via_http, echo) = net.client(move || async move {
        let mut agent = Agent::start(cfg).await.unwrap();
        assert!(
            agent.wait_established(Duration::from_secs(5)).await,
            "no session"
        );
        wait(&mut agent, "a", PathStatus::Up, 5000).await;
        wait(&mut agent, "b", PathStatus::Up, 5000).await;
        let via_socks = socks5_blob(agent.socks.unwrap()).await;
        let mut h = TcpStream::connect(agent.http.unwrap()).await.unwrap();
        let req = format!(
            "CONNECT [{DEST6}]:{BLOB_PORT} HTTP/1.1\r\nHost: [{DEST6}]:{BLOB_PORT}\r\n\r\n"
        );
        h.write_all(req.as_bytes()).await.unwrap();
        let mut all = read_all(h).await;
        let head = all
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("an answer")
            + 4;
        assert!(
            all.starts_with(b"HTTP/1.1 200"),
            "{:?}",
            String::from_utf8_lossy(&all[..head])
        );
        let via_http = all.split_off(head);
        (
            via_socks,
            via_http,
            socks5_udp_echo(agent.socks.unwrap()).await,
        )
    });
    // Every datagram fitted its path: neither end made IPv6 fragments (1472-byte payloads
    // made 1520-byte packets, which the sender's kernel split in two).
    for ns in [&net.c, &net.s] {
        assert_eq!(frag_creates(ns), 0, "IPv6 fragments made in {ns}");
    }
    assert_eq!(via_socks.len(), blob.len(), "SOCKS5: length");
    assert_eq!(sha(&via_socks), sha(&blob), "SOCKS5: SHA-256");
    assert_eq!(via_http.len(), blob.len(), "HTTP CONNECT: length");
    assert_eq!(sha(&via_http), sha(&blob), "HTTP CONNECT: SHA-256");
    assert_eq!(echo, b"echo:ping6", "UDP ASSOCIATE to an IPv6 destination");
}

/// Direct mode (no braid server) over the same links: a SOCKS5 UDP association's request
/// to an IPv6 destination gets its answer, and a SOCKS5 CONNECT to an IPv6 literal
/// carries the blob; first with the dual-stack interface path alone, then with both.
/// Failed before: the association's socket on an interface path was IPv4 only, so its
/// datagrams to IPv6 destinations were dropped.
#[test]
fn direct_mode_carries_udp_and_tcp_to_ipv6_destinations() {
    if skip() {
        return;
    }
    let net = net6();
    let blob = Arc::new(body(1 << 20));
    let (_, _g) = serve6(&net, blob.clone(), None);
    let p = paths();
    for which in [vec![p[1].as_str()], vec![p[0].as_str(), p[1].as_str()]] {
        let key = Arc::new(StaticKeypair::generate().unwrap());
        let server: SocketAddr = (SERVER6, BRAID_PORT).into();
        let mut cfg: AgentConfig = nsrig::agent_cfg_to(server, &which, key.clone(), key.public());
        cfg.servers.clear();
        cfg.direct.mode = DirectMode::Fallback;
        let (echo, got) = net.client(move || async move {
            let agent = Agent::start(cfg).await.unwrap();
            tokio::time::sleep(Duration::from_millis(300)).await;
            let socks = agent.socks.unwrap();
            (socks5_udp_echo(socks).await, socks5_blob(socks).await)
        });
        assert_eq!(
            echo, b"echo:ping6",
            "UDP over IPv6 in direct mode, paths {which:?}"
        );
        assert_eq!(
            sha(&got),
            sha(&blob),
            "direct TCP to an IPv6 literal, paths {which:?}"
        );
    }
}

/// One session mixing an IPv4 path and an IPv6 path: the agent knows the server as
/// 10.0.0.1 and, for paths with only IPv6, as [`SERVER6`] (`--server
/// 10.0.0.1:4433,[fd66::1]:4433`). Path `a` (link 0, IPv6 only) joins the session over
/// IPv6, path `b` (link 1, dual-stack) over IPv4, and a download through both is exact
/// with link 0 carrying its share. Failed before: an IPv6-only link had "no IPv4
/// address", so its path never came up.
#[test]
fn a_session_mixes_an_ipv4_path_and_an_ipv6_only_path() {
    if skip() {
        return;
    }
    let net = net6();
    let blob = Arc::new(body(8 << 20));
    let key = Arc::new(StaticKeypair::generate().unwrap());
    let (server_pub, _g) = serve6(&net, blob.clone(), Some(key.public()));
    let v4: SocketAddr = nsrig::SERVER.parse().unwrap();
    let mut cfg = nsrig::agent_cfg_to(v4, &["a=p0", "b=p1"], key, server_pub);
    cfg.server_other_family = vec![(v4, (SERVER6, BRAID_PORT).into())];
    let before = net.rx_bytes(0);
    let got = net.client(move || async move {
        let mut agent = Agent::start(cfg).await.unwrap();
        assert!(
            agent.wait_established(Duration::from_secs(5)).await,
            "no session"
        );
        wait(&mut agent, "a", PathStatus::Up, 5000).await;
        wait(&mut agent, "b", PathStatus::Up, 5000).await;
        socks5_blob(agent.socks.unwrap()).await
    });
    assert_eq!(sha(&got), sha(&blob), "the download through both paths");
    let on_v6_link = net.rx_bytes(0) - before;
    assert!(
        on_v6_link > blob.len() as u64 / 5,
        "the IPv6-only link carried {on_v6_link} bytes of {}",
        blob.len()
    );
}
