//! Issue 38, item 1: the start-up race (root, network namespaces; `rules_rig`: a VPS
//! namespace with the braid server and a web server the router namespace also reaches
//! straight over its links). Direct mode on, as the `braid` command runs the agent, with
//! SOCKS5 and TUN mode both: connections opened at once after the agent starts wait for
//! its first session instead of going direct (where they would stay), and go direct only
//! after the stated wait (`START_WAIT`) when the server does not answer. Each test prints
//! why it skips without root or namespaces.

use crate::nsrig::{agent_cfg, nft_drop, skip, Net};
use crate::rules_rig::*;
use braid_crypto::StaticKeypair;
use braid_net::agent::{Agent, DirectMode, TunSettings, START_WAIT};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Connections through each front (SOCKS5, TUN).
const CONNS: usize = 20;
const SIZE: usize = 16 * 1024;

/// One connection: through TUN (else SOCKS5), when it was opened and when the first byte
/// of the answer came (both since the agent's start), and the body.
struct Conn {
    tun: bool,
    opened: Duration,
    first: Duration,
    body: Vec<u8>,
}

/// What a burst saw: the connections, when `Agent::start` returned and when the session
/// came up (both since the start), and the mode `braid status` showed halfway through the
/// stated wait and at the end.
struct Burst {
    conns: Vec<Conn>,
    started: Duration,
    established: Option<Duration>,
    modes: (Option<String>, Option<String>),
}

/// GET / on `s`: when its first byte came (since `t0`), and the body.
async fn timed_get(mut s: TcpStream, t0: Instant) -> (Duration, Vec<u8>) {
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut all = vec![0u8; 1 << 16];
    let wait = Duration::from_secs(10);
    let n = tokio::time::timeout(wait, s.read(&mut all)).await.unwrap();
    let first = t0.elapsed();
    all.truncate(n.unwrap());
    tokio::time::timeout(wait, s.read_to_end(&mut all))
        .await
        .expect("the download stalled")
        .unwrap();
    let head = (all.windows(4).position(|w| w == b"\r\n\r\n")).expect("an HTTP answer") + 4;
    (first, all.split_off(head))
}

/// Start the agent (SOCKS5 and TUN) and at once open [`CONNS`] connections through each.
fn burst(net: &Net, d: &Dests, key: Arc<StaticKeypair>, tun: &str) -> Burst {
    let mut cfg = agent_cfg(&["a=p0", "b=p1"], key, d.server_pub);
    cfg.direct.mode = DirectMode::Fallback;
    cfg.tun = Some(TunSettings {
        name: tun.into(),
        routes: Vec::new(),
        exclude: Vec::new(),
    });
    net.client(move || async move {
        let t0 = Instant::now();
        let mut agent = Agent::start(cfg).await.unwrap();
        let started = t0.elapsed();
        let socks = agent.socks.unwrap();
        let tasks: Vec<_> = (0..2 * CONNS)
            .map(|i| {
                tokio::spawn(async move {
                    let (tun, opened) = (i % 2 == 1, t0.elapsed());
                    let s = if tun {
                        TcpStream::connect((OTHER, WEB_PORT)).await.unwrap()
                    } else {
                        socks_connect(socks, Target::Ip(OTHER, WEB_PORT))
                            .await
                            .unwrap_or_else(|c| panic!("SOCKS5 reply {c}"))
                    };
                    let (first, body) = timed_get(s, t0).await;
                    Conn {
                        tun,
                        opened,
                        first,
                        body,
                    }
                })
            })
            .collect();
        let board = agent.status();
        let probe = tokio::spawn(async move {
            tokio::time::sleep_until((t0 + START_WAIT / 2).into()).await;
            board.snapshot().mode
        });
        let up = agent.wait_established(START_WAIT * 2).await;
        let established = up.then(|| t0.elapsed());
        let mut conns = Vec::new();
        for t in tasks {
            conns.push(t.await.unwrap());
        }
        let modes = (probe.await.unwrap(), agent.status().snapshot().mode);
        agent.shutdown(Duration::from_millis(200)).await;
        Burst {
            conns,
            started,
            established,
            modes,
        }
    })
}

/// Every connection opened within 10 ms of the agent's start and got the whole body.
fn check_burst(b: &Burst, data: &[u8]) {
    for (i, c) in b.conns.iter().enumerate() {
        let front = if c.tun { "TUN" } else { "SOCKS5" };
        assert!(
            c.opened - b.started < Duration::from_millis(10),
            "connection {i} ({front}) opened {:?} after the start",
            c.opened - b.started
        );
        assert!(c.body == data, "connection {i} ({front}): a wrong body");
    }
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

/// The server answers: all 40 connections opened at once after the start are carried by
/// the session (the web server sees the VPS's addresses, never a link address of the
/// router), none waited more than 100 ms after the session came up (one handshake round
/// trip after its first message); then, with the server's port dropped, the same burst
/// waits [`START_WAIT`] (`braid status` says `starting` meanwhile) and goes direct from
/// the router's links, not before. Failed on the code before issue 38: the connections
/// opened in the first milliseconds went direct and stayed there.
#[test]
fn connections_made_while_the_agent_starts_wait_for_its_first_session() {
    if skip() {
        return;
    }
    let t0 = Instant::now();
    let net = Net::with_prefix("stup");
    let key = Arc::new(StaticKeypair::generate().unwrap());
    let d = serve(&net, SIZE, key.public(), true);
    let b = burst(&net, &d, key.clone(), "stup0");
    let est = b.established.expect("no session");
    let slowest = b.conns.iter().map(|c| c.first).max().unwrap();
    eprintln!(
        "server up: agent started in {} ms, session at {} ms, last first byte at {} ms",
        ms(b.started),
        ms(est),
        ms(slowest)
    );
    check_burst(&b, &d.data);
    let peers = peers_at(&d.peers, OTHER);
    assert_eq!(peers.len(), 2 * CONNS, "{peers:?}");
    let direct: Vec<_> = peers.iter().filter(|p| from_client_link(**p)).collect();
    assert!(direct.is_empty(), "went direct: {direct:?}");
    assert!(est < START_WAIT, "the first handshake took {est:?}");
    for (i, c) in b.conns.iter().enumerate() {
        assert!(
            c.first <= est + Duration::from_millis(100),
            "connection {i} (TUN: {}) answered at {:?}, the session came at {est:?}",
            c.tun,
            c.first
        );
    }

    // The server does not answer (its port dropped): direct after the stated wait.
    d.peers.lock().unwrap().clear();
    for proto in ["udp", "tcp"] {
        nft_drop(&net.s, "input", &format!("{proto} dport 4433"));
    }
    let b = burst(&net, &d, key, "stup1");
    let first = b.conns.iter().map(|c| c.first).min().unwrap();
    let last = b.conns.iter().map(|c| c.first).max().unwrap();
    eprintln!(
        "server dropped: first byte from {} to {} ms (stated wait {} ms); modes {:?}",
        ms(first),
        ms(last),
        ms(START_WAIT),
        b.modes
    );
    check_burst(&b, &d.data);
    assert!(b.established.is_none(), "a session through a dropped port");
    let peers = peers_at(&d.peers, OTHER);
    assert_eq!(peers.len(), 2 * CONNS, "{peers:?}");
    assert!(peers.iter().all(|p| from_client_link(*p)), "{peers:?}");
    assert!(
        first >= START_WAIT,
        "went direct at {first:?}, before the wait"
    );
    let bound = b.started + START_WAIT + Duration::from_millis(400);
    assert!(last <= bound, "the last went direct at {last:?}");
    assert_eq!(b.modes.0.as_deref(), Some("starting"), "{:?}", b.modes);
    assert_eq!(b.modes.1.as_deref(), Some("direct"), "{:?}", b.modes);
    eprintln!("start-up test took {:.1} s", t0.elapsed().as_secs_f64());
}
