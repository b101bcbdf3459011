//! Hostile and broken input, each while a transfer runs in another session: random bytes,
//! oversized and truncated datagrams and replays at the server, agents with the wrong
//! server key or an unknown key, garbage on the SOCKS5 and HTTP ports. Each gets a clean
//! error or a silent drop; nothing panics; the running transfer arrives intact.

use crate::common;

use braid_crypto::StaticKeypair;
use braid_net::agent::{Agent, AgentConfig, AgentPath};
use braid_net::udp::PathBind;
use braid_proxy::{AuthPolicy, HttpLimits};
use common::{body, curl, http_server, rig, sha, socks_args};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

fn agent_cfg(
    rig: &common::Rig,
    key: Arc<StaticKeypair>,
    server_pub: braid_crypto::PublicKey,
) -> AgentConfig {
    AgentConfig {
        servers: vec![rig.server],
        server_pub,
        key,
        paths: vec![AgentPath {
            name: "lo".into(),
            bind: PathBind::Address("127.0.0.1".parse().unwrap()),
            via: None,
            policy: Default::default(),
        }],
        socks: Some("127.0.0.1:0".parse().unwrap()),
        http: None,
        socks_auth: AuthPolicy::NoAuth,
        http_limits: HttpLimits::default(),
        proxy_limits: Default::default(),
        open_timeout: Duration::from_secs(5),
        session_wait: Duration::from_secs(2),
        state_file: None,
        transport: braid_core::Config::default(),
        tun: None,
        redirect: None,
        dns: None,
        rekey: Default::default(),
        direct: Default::default(),
        rules: Default::default(),
        ciphers: Default::default(),
        forwards: Vec::new(),
        server_other_family: Vec::new(),
        captive_check: None,
    }
}

async fn socks_exchange(port: std::net::SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(port).await.unwrap();
    let _ = s.write_all(bytes).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(12), s.read_to_end(&mut out)).await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_everywhere_leaves_a_running_transfer_intact() {
    let rig = rig().await;
    let data = Arc::new(body(40 << 20));
    let web = http_server(data.clone()).await;
    let socks = rig.agent.socks.unwrap();
    let http = rig.agent.http.unwrap();
    let args = socks_args(socks.to_string(), 120, vec![format!("http://{web}/file")]);
    let transfer = tokio::spawn(curl(args));

    // 1. Random bytes, oversized and truncated datagrams at the server port.
    let junk = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut x = 7u64;
    for i in 0..2000usize {
        x = braid_core::rng::splitmix64(x);
        let len = match i % 4 {
            0 => (x % 1500) as usize,
            1 => 65_000,
            2 => (x % 20) as usize,
            _ => 1200,
        };
        let mut d: Vec<u8> = (0..len).map(|k| (x >> (k % 56)) as u8).collect();
        if i % 4 == 3 && d.len() > 12 {
            // Looks like a braid transport packet for a random session; a bad tag.
            d[0] = 1;
            d[1] = (i % 2) as u8;
        }
        let _ = junk.send_to(&d, rig.server).await;
        if i % 100 == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    // 2. An agent that pins the wrong server key never gets a session.
    let wrong = StaticKeypair::generate().unwrap().public();
    let mut bad = Agent::start(agent_cfg(&rig, rig.agent_key.clone(), wrong))
        .await
        .unwrap();
    assert!(
        !bad.wait_established(Duration::from_secs(3)).await,
        "wrong server key accepted"
    );
    // Its SOCKS port answers "network unreachable" (code 3) rather than hanging.
    let rep = socks_exchange(
        bad.socks.unwrap(),
        &[5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1, 0, 80],
    )
    .await;
    assert_eq!(rep.get(..2), Some(&[5u8, 0][..]));
    assert_eq!(rep.get(3), Some(&3u8), "reply {rep:?}");
    drop(bad);

    // 3. An agent whose key the server does not know is refused.
    let stranger = Arc::new(StaticKeypair::generate().unwrap());
    let mut unknown = Agent::start(agent_cfg(&rig, stranger, rig.server_pub))
        .await
        .unwrap();
    assert!(
        !unknown.wait_established(Duration::from_secs(3)).await,
        "unknown agent accepted"
    );
    drop(unknown);

    // 4. Garbage on the SOCKS5 port: wrong version, no methods, truncated request, a
    //    request with an unknown address type; each gets its error reply or a close.
    assert!(socks_exchange(socks, b"GET / HTTP/1.1\r\n\r\n")
        .await
        .is_empty());
    assert_eq!(socks_exchange(socks, &[5, 0]).await, vec![5, 0xff]);
    let r = socks_exchange(socks, &[5, 1, 0, 5, 1, 0, 9, 1, 2, 3]).await;
    assert_eq!(r.get(..2), Some(&[5u8, 0][..]));
    assert_eq!(r.get(3), Some(&8u8), "unknown address type: {r:?}");
    let r = socks_exchange(socks, &[5, 1, 0, 5, 2, 0, 1, 127, 0, 0, 1, 0, 80]).await;
    assert_eq!(r.get(3), Some(&7u8), "BIND: {r:?}");
    assert_eq!(socks_exchange(socks, &[5, 1]).await, Vec::<u8>::new());

    // 5. HTTP garbage on the HTTP CONNECT port.
    let r = socks_exchange(http, b"\x16\x03\x01garbage\r\n\r\n").await;
    assert!(
        String::from_utf8_lossy(&r).starts_with("HTTP/1.1 400"),
        "{}",
        String::from_utf8_lossy(&r)
    );
    let r = socks_exchange(http, b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n").await;
    assert!(String::from_utf8_lossy(&r).starts_with("HTTP/1.1 405"));
    // A CONNECT to a closed port comes back as 502, refused by the server side.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let r = socks_exchange(
        http,
        format!("CONNECT {closed} HTTP/1.1\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(
        String::from_utf8_lossy(&r).starts_with("HTTP/1.1 502"),
        "{}",
        String::from_utf8_lossy(&r)
    );

    // The transfer that ran through all of this is intact.
    let got = transfer.await.unwrap();
    assert_eq!(got.len(), data.len());
    assert_eq!(sha(&got), sha(&data));
}

/// Replays: every packet the agent sends on one path is sent to the server a second time
/// 5 ms later (within the transfer, which takes tens of milliseconds on loopback), from
/// another address, by a tampering relay. Without the AEAD replay window
/// the server would take the authentic replay as the path moving to the replayer's address
/// (protocol section 18) and send there; with it, the replayer gets nothing and the
/// transfers are exact. (A replay from the agent's own address would prove nothing: the
/// core drops duplicate packet numbers itself.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_packets_are_dropped() {
    let rig = rig().await;
    // A relay in front of the server that replays everything from the agent, from a
    // second socket.
    let front = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let back = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let replayer = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let front = Arc::new(front);
    let (server, f2, b2, r2) = (rig.server, front.clone(), back.clone(), replayer.clone());
    let agent_addr = Arc::new(std::sync::Mutex::new(None));
    let aa = agent_addr.clone();
    let replayed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let rp = replayed.clone();
    let relayed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let rl = relayed.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok((n, from)) = f2.recv_from(&mut buf).await {
            *aa.lock().unwrap() = Some(from);
            rl.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let pkt = buf[..n].to_vec();
            let _ = b2.send_to(&pkt, server).await;
            let (r3, rp) = (r2.clone(), rp.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                if r3.send_to(&pkt, server).await.is_ok() {
                    rp.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
    });
    // Whatever the server sends to the replayer's address.
    let misdirected = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (r4, md) = (replayer.clone(), misdirected.clone());
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while r4.recv_from(&mut buf).await.is_ok() {
            md.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    let (f3, b3) = (front.clone(), back.clone());
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok((n, _)) = b3.recv_from(&mut buf).await {
            let to = *agent_addr.lock().unwrap();
            if let Some(to) = to {
                let _ = f3.send_to(&buf[..n], to).await;
            }
        }
    });
    let mut cfg = agent_cfg(&rig, rig.agent_key.clone(), rig.server_pub);
    cfg.paths[0].via = Some(front.local_addr().unwrap());
    let mut agent = Agent::start(cfg).await.unwrap();
    assert!(agent.wait_established(Duration::from_secs(5)).await);
    let data = Arc::new(body(8 << 20));
    let web = http_server(data.clone()).await;
    let up = body(4 << 20);
    let file = std::env::temp_dir().join(format!("braid-replay-{}", std::process::id()));
    std::fs::write(&file, &up).unwrap();
    let socks = agent.socks.unwrap().to_string();
    let got = curl(socks_args(
        socks.clone(),
        60,
        vec![format!("http://{web}/file")],
    ))
    .await;
    assert_eq!(sha(&got), sha(&data));
    let got = curl(socks_args(
        socks,
        60,
        vec![
            "-T".into(),
            file.display().to_string(),
            format!("http://{web}/up"),
        ],
    ))
    .await;
    let _ = std::fs::remove_file(&file);
    assert_eq!(String::from_utf8_lossy(&got), sha(&up));
    // The transfers take a few tens of milliseconds on loopback, less than the replay delay:
    // wait until every relayed packet has been replayed (regression: the count was read
    // while most replays were still pending), then give the server time to answer them.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let relayed = relayed.load(std::sync::atomic::Ordering::Relaxed);
    while replayed.load(std::sync::atomic::Ordering::Relaxed) < relayed
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let replayed = replayed.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        replayed >= relayed && replayed > 1000,
        "only {replayed} of {relayed} packets replayed"
    );
    assert_eq!(
        misdirected.load(std::sync::atomic::Ordering::Relaxed),
        0,
        "the server sent to the replayer's address after {replayed} replays"
    );
}
