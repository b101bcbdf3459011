//! Sessions whose agent never completes the first exchange expire on time while
//! handshakes keep arriving, on a server run the way `braid server` runs it (one worker, a
//! current-thread runtime blocking on `Server::run`). Loopback only.

use braid_crypto::{write_header, Ciphers, ClientHandshake, PacketType, PublicKey, StaticKeypair};
use braid_net::server::{Server, ServerConfig};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a session may wait for its agent's first authenticated packet here.
const EXPIRE: Duration = Duration::from_millis(200);
/// When the live sessions are counted, from the start of the load.
const LOOK: Duration = Duration::from_millis(1500);

/// Handshakes from `keys.len()` source ports, one in flight on each, until `stop`; each
/// completed one (message 2 checked) is counted in `done` and followed by one transport
/// packet, which starts the session on the server (a session is made at its first packet);
/// the sessions never complete their first exchange.
fn generate(
    server: SocketAddr,
    server_pub: PublicKey,
    keys: Vec<StaticKeypair>,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicUsize>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut set = tokio::task::JoinSet::new();
            for key in keys {
                let (stop, done) = (stop.clone(), done.clone());
                set.spawn(async move {
                    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
                    sock.connect(server).await.unwrap();
                    let mut buf = vec![0u8; 2048];
                    let mut ts = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let now = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .unwrap()
                            .as_millis() as u64;
                        ts = now.max(ts + 1);
                        let sid = braid_crypto::random::session_id().unwrap();
                        let (mut hs, m1) = ClientHandshake::offering(
                            &key,
                            &server_pub,
                            sid,
                            0,
                            ts,
                            &Ciphers::auto(),
                        )
                        .unwrap();
                        sock.send(&m1).await.unwrap();
                        let wait = Duration::from_millis(500);
                        while let Ok(Ok(n)) = tokio::time::timeout(wait, sock.recv(&mut buf)).await
                        {
                            let ours = braid_crypto::parse_header(&buf[..n]).is_ok_and(|h| {
                                h.ptype == PacketType::Handshake && h.session_id == sid
                            });
                            if ours {
                                if hs.finish(&buf[..n]).is_ok() {
                                    done.fetch_add(1, Ordering::Relaxed);
                                    // A first packet makes the server start the session
                                    // (its task then finds it forged and waits on).
                                    let mut p = Vec::new();
                                    write_header(&mut p, PacketType::Transport, sid, 0, 0).unwrap();
                                    p.resize(64, 0);
                                    sock.send(&p).await.unwrap();
                                }
                                break;
                            }
                        }
                    }
                });
            }
            while set.join_next().await.is_some() {}
        });
    })
}

/// Before, the worker ran inside the future the runtime blocked on, which tokio polls
/// before every 61 tasks: busy with handshakes, it held its sessions' tasks (and so their
/// expiry) far behind, and it took one expiry a turn; sessions piled up, 30 KiB each, until
/// the load stopped (1.5 s into the load: 1.2 s of handshakes live, where 0.2 s should be).
#[tokio::test]
async fn unfinished_sessions_expire_while_handshakes_keep_coming() {
    let keys: Vec<StaticKeypair> = (0..16)
        .map(|_| StaticKeypair::generate().unwrap())
        .collect();
    let mut cfg = ServerConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        StaticKeypair::generate().unwrap(),
        keys.iter().map(|k| k.public()).collect(),
    );
    braid_testkit::loopback::allow_targets(&mut cfg, &[]);
    cfg.first_exchange_timeout = EXPIRE;
    cfg.max_sessions = 1_000_000;
    // All from 127.0.0.1: no per-address budget, no cookies.
    cfg.handshake_rate = 1_000_000;
    cfg.handshake_burst = 1_000_000;
    cfg.load_threshold = u64::MAX;
    let server_pub = cfg.key.public();
    let server = Server::bind(cfg).await.unwrap();
    let addr = server.local_addr().unwrap();
    let board = server.status();
    let (stop, done) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    let load = generate(addr, server_pub, keys, stop.clone(), done.clone());
    let t0 = Instant::now();
    let look = async {
        tokio::time::sleep(LOOK).await;
        (
            board.sessions().len(),
            done.load(Ordering::Relaxed),
            t0.elapsed(),
        )
    };
    let (live, completed, at) = tokio::select! {
        r = server.run() => panic!("the server stopped: {r:?}"),
        x = look => x,
    };
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
    let rate = completed as f64 / at.as_secs_f64();
    eprintln!(
        "{completed} handshakes in {at:?} ({rate:.0}/s); {live} sessions live, {:.2} s of handshakes",
        live as f64 / rate
    );
    assert!(completed > 500, "too few handshakes to judge: {completed}");
    // The last EXPIRE of handshakes, and what the checks' timer and the session tasks lag.
    assert!(
        (live as f64) < rate * (EXPIRE.as_secs_f64() + 0.3),
        "{live} sessions live after {at:?} of {rate:.0} handshakes a second that expire after {EXPIRE:?}"
    );
}
