//! Issue 37, item 1: the server's egress policy through real agents (root, network
//! namespaces; the test says why it skips otherwise). The server's namespace has a service
//! on its loopback and one on 169.254.169.254 (the cloud metadata address, added to its
//! lo); a LAN host behind it (192.168.77.2, a private range) has the same services. Agents
//! in the client namespace ask for them through SOCKS5, over TCP (CONNECT, by address and
//! by a name that resolves to 127.0.0.1) and UDP (ASSOCIATE). Two servers run side by
//! side: one with the defaults, one with `deny_private` and an allow rule for the LAN's
//! block given to one agent key only.

use crate::inbound::Log;
use crate::nsrig::{self, agent_cfg_to, skip, spawn_in, Net, Stop, LAN_HOST};
use braid_crypto::{PublicKey, StaticKeypair};
use braid_net::agent::Agent;
use braid_net::server::egress::{Action, EgressPolicy};
use braid_net::server::{fingerprint, Server, ServerBoard, ServerConfig};
use braid_testkit::socks5::{self, Dest};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, UdpSocket};

/// Every service's port: a TCP banner and a UDP echo.
const PORT: u16 = 7070;
/// The cloud metadata service's address.
const METADATA: &str = "169.254.169.254";

fn at(ip: &str) -> SocketAddr {
    SocketAddr::new(ip.parse().unwrap(), PORT)
}

/// On `ip:PORT`: a TCP service that writes `banner` to each connection and closes it,
/// and a UDP echo.
async fn services(ip: IpAddr, banner: &'static str) {
    let l = TcpListener::bind((ip, PORT)).await.unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let _ = tokio::io::AsyncWriteExt::write_all(&mut s, banner.as_bytes()).await;
        }
    });
    let u = UdpSocket::bind((ip, PORT)).await.unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 2048];
        while let Ok((n, from)) = u.recv_from(&mut buf).await {
            let _ = u.send_to(&buf[..n], from).await;
        }
    });
}

/// A braid server on 10.0.0.1:`port` in the server namespace with `policy`, accepting
/// `agents`; its log goes to `log`.
fn server(
    net: &Net,
    port: u16,
    (policy, agents): (EgressPolicy, Vec<PublicKey>),
    log: Log,
) -> (PublicKey, Arc<ServerBoard>, Stop) {
    let key = StaticKeypair::generate().unwrap();
    let public = key.public();
    let listen = SocketAddr::new("10.0.0.1".parse().unwrap(), port);
    let (board, stop) = spawn_in(&net.s, move |ready| async move {
        let _log = log.capture();
        let mut cfg = ServerConfig::new(listen, key, agents);
        cfg.egress = policy;
        let server = Server::bind(cfg).await.unwrap();
        ready.send(server.status()).unwrap();
        let _ = server.run().await;
    });
    (public, board, stop)
}

/// A SOCKS5 CONNECT through `socks`: the banner read, or the reply code of a refusal.
async fn banner(socks: SocketAddr, to: Dest<'_>) -> Result<String, u8> {
    let mut s = socks5::connect(socks, to).await?;
    let mut got = String::new();
    let read = s.read_to_string(&mut got);
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("the banner within 5 s")
        .expect("the banner");
    Ok(got)
}

/// One datagram to each of `dests` through a UDP association of `socks` (in order), the
/// last one the control: the payloads of the echoes that came back (waiting for the
/// control's, then 300 ms more).
async fn udp_echoes(socks: SocketAddr, dests: &[Dest<'_>]) -> Vec<String> {
    let (_ctl, client, relay) = socks5::associate(socks).await;
    for (i, d) in dests.iter().enumerate() {
        let pkt = socks5::udp_packet(*d, format!("echo {i}").as_bytes());
        client.send_to(&pkt, relay).await.unwrap();
    }
    let control = format!("echo {}", dests.len() - 1);
    let (mut got, mut buf) = (Vec::new(), vec![0u8; 2048]);
    let mut limit = Duration::from_secs(5);
    while let Ok(Ok(n)) = tokio::time::timeout(limit, client.recv(&mut buf)).await {
        // The SOCKS5 UDP header of an IPv4 sender is 10 bytes.
        let text = String::from_utf8_lossy(&buf[10.min(n)..n]).into_owned();
        if text == control {
            limit = Duration::from_millis(300);
        }
        got.push(text);
    }
    assert!(got.contains(&control), "no echo from the LAN host: {got:?}");
    got
}

/// An agent with SOCKS5 and HTTP ports in the client namespace, its session up, on server
/// `port`.
async fn agent(key: Arc<StaticKeypair>, server_pub: PublicKey, port: u16) -> Agent {
    let to = SocketAddr::new("10.0.0.1".parse().unwrap(), port);
    let mut cfg = agent_cfg_to(to, &["a=p0"], key, server_pub);
    cfg.http = Some("127.0.0.1:0".parse().unwrap());
    let mut a = Agent::start(cfg).await.unwrap();
    assert!(
        a.wait_established(Duration::from_secs(5)).await,
        "no session"
    );
    a
}

/// The status line of the answer to an HTTP CONNECT to `to` through the agent's HTTP port.
async fn http_connect(http: SocketAddr, to: SocketAddr) -> String {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(http).await.unwrap();
    let req = format!("CONNECT {to} HTTP/1.1\r\nHost: {to}\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut line = String::new();
    let mut s = tokio::io::BufReader::new(s);
    let read = s.read_line(&mut line);
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("an answer within 5 s")
        .unwrap();
    line.trim_end().to_string()
}

/// One agent key's refusals in a server's `braid status --json` (its snapshot's JSON):
/// (connections, datagrams).
async fn refusals(board: &ServerBoard, key: &PublicKey) -> (u64, u64) {
    let v = serde_json::to_value(board.snapshot().await).unwrap();
    let fp = fingerprint(key);
    let agents = v["egress"]["agents"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    agents
        .iter()
        .find(|a| a["agent_key_fingerprint"] == fp.as_str())
        .map_or((0, 0), |a| {
            let n = |k: &str| a[k].as_u64().unwrap_or(0);
            (n("refused_connections"), n("refused_datagrams"))
        })
}

/// By default the server's loopback, the metadata address and a name resolving to
/// 127.0.0.1 are refused (SOCKS5 reply 2, HTTP 403, datagrams dropped), counted per agent
/// and logged once per destination with their rule, while the LAN host behind the server
/// works. With `deny_private` the LAN host is refused too, but for the agent its allow
/// rule names.
#[test]
fn egress_defaults_refuse_the_server_itself_and_deny_private_opens_per_agent() {
    if skip() {
        return;
    }
    let net = Net::with_rates("beg", &["100mbit"]);
    let lan = net.lan_behind_server();
    net.ip_s(&["addr", "add", &format!("{METADATA}/32"), "dev", "lo"]);
    let (_, _svc) = spawn_in(&net.s, |ready| async move {
        services("127.0.0.1".parse().unwrap(), "loopback").await;
        services(METADATA.parse().unwrap(), "metadata").await;
        ready.send(()).unwrap();
        std::future::pending::<()>().await;
    });
    let (_, _lan_svc) = spawn_in(&lan.ns, |ready| async move {
        services(LAN_HOST.parse().unwrap(), "lan").await;
        ready.send(()).unwrap();
        std::future::pending::<()>().await;
    });
    let (a_key, b_key) = (
        Arc::new(StaticKeypair::generate().unwrap()),
        Arc::new(StaticKeypair::generate().unwrap()),
    );
    let (a, b) = (a_key.public(), b_key.public());
    let log = Log::default();
    let (pub1, board1, _s1) = server(&net, 4433, (EgressPolicy::default(), vec![a]), log.clone());
    let mut shared = EgressPolicy::default();
    shared.deny_private = true;
    shared.add_for(a, Action::Allow, "192.168.77.0/24".parse().unwrap());
    let (pub2, board2, _s2) = server(&net, 4434, (shared, vec![a, b]), Log::default());
    let (b1, b2) = (board1.clone(), board2.clone());
    nsrig::on(&net.c, move || async move {
        // The defaults.
        let one = agent(a_key.clone(), pub1, 4433).await;
        let socks = one.socks.unwrap();
        for to in [
            Dest::Addr(at("127.0.0.1")),
            Dest::Addr(at(METADATA)),
            Dest::Name("localhost", PORT),
        ] {
            assert_eq!(banner(socks, to).await, Err(2), "{to:?}");
        }
        assert_eq!(
            banner(socks, Dest::Addr(at(LAN_HOST))).await.as_deref(),
            Ok("lan")
        );
        let dests = [
            Dest::Addr(at("127.0.0.1")),
            Dest::Addr(at(METADATA)),
            Dest::Name("localhost", PORT),
            Dest::Addr(at(LAN_HOST)),
        ];
        assert_eq!(udp_echoes(socks, &dests).await, ["echo 3"]);
        let status = http_connect(one.http.unwrap(), at(METADATA)).await;
        assert!(status.starts_with("HTTP/1.1 403"), "{status}");
        assert_eq!(refusals(&b1, &a).await, (4, 3));
        one.shutdown(Duration::from_secs(1)).await;
        // A shared server: deny_private, and the LAN's block allowed to agent A only.
        let a2 = agent(a_key, pub2, 4434).await;
        let b2_agent = agent(b_key, pub2, 4434).await;
        let (sa, sb) = (a2.socks.unwrap(), b2_agent.socks.unwrap());
        let lan = Dest::Addr(at(LAN_HOST));
        assert_eq!(banner(sa, lan).await.as_deref(), Ok("lan"));
        assert_eq!(banner(sb, lan).await, Err(2));
        // B's datagram to the LAN host is dropped (A's, sent last, is the control).
        let (_ctl, client, relay) = socks5::associate(sb).await;
        client
            .send_to(&socks5::udp_packet(lan, b"b"), relay)
            .await
            .unwrap();
        assert_eq!(udp_echoes(sa, &[lan]).await, ["echo 0"]);
        let mut buf = [0u8; 64];
        let late = tokio::time::timeout(Duration::from_millis(300), client.recv(&mut buf)).await;
        assert!(late.is_err(), "B's datagram to the LAN host was answered");
        assert_eq!(refusals(&b2, &b).await, (1, 1));
        assert_eq!(refusals(&b2, &a).await, (0, 0));
        a2.shutdown(Duration::from_secs(1)).await;
        b2_agent.shutdown(Duration::from_secs(1)).await;
    });
    // The log: each refused destination once (127.0.0.1:7070 was refused three times over
    // TCP and UDP, by address and by name), with its rule.
    let text = log.text();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("egress refused"))
        .collect();
    let of = |dest: &str| {
        lines
            .iter()
            .filter(|l| l.contains(&format!("dest={dest}")))
            .count()
    };
    assert_eq!(of("127.0.0.1:7070"), 1, "{text}");
    assert_eq!(of("169.254.169.254:7070"), 1, "{text}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("deny 127.0.0.0/8 (default: loopback)")),
        "{text}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("deny 169.254.0.0/16 (default: link-local)")),
        "{text}"
    );
    assert!(lines.iter().all(|l| l.contains(&fingerprint(&a))), "{text}");
}
