//! Several servers: the agent handshakes with all at once and keeps the first that answers;
//! a server that restarts (forgetting the session) is noticed by the silence watch, a probe
//! handshake is answered, and the agent moves to the new session, retrying the proxied
//! connection that was being opened. Loopback only (no root needed).

use crate::common;

use braid_crypto::StaticKeypair;
use braid_net::agent::{Agent, AgentConfig, AgentPath, PathStatus};
use braid_net::server::{Server, ServerConfig};
use braid_net::udp::PathBind;
use common::{body, curl, http_server, sha, socks_args};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::UdpSocket;

fn log() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("BRAID_TEST_LOG"))
        .with_test_writer()
        .try_init();
}

/// A server on its own thread and runtime, so that stopping it ends its session tasks too
/// (and closes its socket), as when the process dies.
struct Running(
    Option<tokio::sync::oneshot::Sender<()>>,
    Option<std::thread::JoinHandle<()>>,
);

impl Running {
    fn stop(mut self) {
        self.halt();
    }
    fn halt(&mut self) {
        if let Some(s) = self.0.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.1.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.halt();
    }
}

fn serve(cfg: ServerConfig) -> (SocketAddr, Running) {
    let (atx, arx) = std::sync::mpsc::channel();
    let (stx, srx) = tokio::sync::oneshot::channel::<()>();
    let t = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let server = Server::bind(cfg).await.unwrap();
            atx.send(server.local_addr().unwrap()).unwrap();
            tokio::select! {
                _ = server.run() => {}
                _ = srx => {}
            }
        });
    });
    let addr = arx.recv_timeout(Duration::from_secs(5)).unwrap();
    (addr, Running(Some(stx), Some(t)))
}

fn agent_cfg(
    servers: Vec<SocketAddr>,
    key: Arc<StaticKeypair>,
    server_pub: braid_crypto::PublicKey,
) -> AgentConfig {
    let mut cfg = AgentConfig::new(
        servers[0],
        server_pub,
        key,
        vec![AgentPath::new(
            "lo",
            PathBind::Address("127.0.0.1".parse().unwrap()),
        )],
    );
    cfg.servers = servers;
    cfg.socks = Some("127.0.0.1:0".parse().unwrap());
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_first_server_dead_the_agent_uses_the_second_at_once() {
    log();
    let agent_key = Arc::new(StaticKeypair::generate().unwrap());
    let mut scfg = ServerConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        StaticKeypair::generate().unwrap(),
        vec![agent_key.public()],
    );
    braid_testkit::loopback::allow_targets(&mut scfg, &[]);
    let server_pub = scfg.key.public();
    let (live, _server) = serve(scfg);
    // A server that never answers (a socket that swallows everything).
    let dead = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let data = Arc::new(body(4 << 20));
    let web = http_server(data.clone()).await;
    let t = Instant::now();
    let mut agent = Agent::start(agent_cfg(
        vec![dead.local_addr().unwrap(), live],
        agent_key,
        server_pub,
    ))
    .await
    .unwrap();
    assert!(
        agent.wait_established(Duration::from_secs(3)).await,
        "no session"
    );
    let took = t.elapsed();
    eprintln!(
        "first server dead: session with the second after {} ms",
        took.as_millis()
    );
    assert!(took < Duration::from_secs(1), "took {took:?}");
    let got = curl(socks_args(
        agent.socks.unwrap(),
        30,
        vec![format!("http://{web}/file")],
    ))
    .await;
    assert_eq!(sha(&got), sha(&data));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_server_restart_a_new_download_works_within_5_s() {
    log();
    let agent_key = Arc::new(StaticKeypair::generate().unwrap());
    let mut scfg = ServerConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        StaticKeypair::generate().unwrap(),
        vec![agent_key.public()],
    );
    braid_testkit::loopback::allow_targets(&mut scfg, &[]);
    let server_pub = scfg.key.public();
    let (addr, server) = serve(scfg.clone());
    let data = Arc::new(body(4 << 20));
    let web = http_server(data.clone()).await;
    let mut agent = Agent::start(agent_cfg(vec![addr], agent_key, server_pub))
        .await
        .unwrap();
    assert!(
        agent.wait_established(Duration::from_secs(3)).await,
        "no session"
    );
    let socks = agent.socks.unwrap();
    let got = curl(socks_args(socks, 30, vec![format!("http://{web}/file")])).await;
    assert_eq!(sha(&got), sha(&data));
    // Kill the server (its sessions are gone) and start it again on the same address.
    server.stop();
    let mut again = scfg.clone();
    again.listen = addr;
    let (_, _server2) = serve(again);
    let t = Instant::now();
    let got = curl(socks_args(socks, 20, vec![format!("http://{web}/file")])).await;
    let took = t.elapsed();
    eprintln!(
        "server restarted: a new download completed {} ms after the restart",
        took.as_millis()
    );
    assert_eq!(sha(&got), sha(&data));
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

/// Every path blacked out for longer than the silence watch waits, during an upload (the
/// agent sends, nothing comes back): the probe handshake goes unanswered (or is answered
/// once the network is back, when the old session answers too), so the agent keeps its
/// session and the upload in progress completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_total_blackout_longer_than_the_silence_watch_keeps_the_session() {
    let rig = common::rig().await;
    let web = http_server(Arc::new(Vec::new())).await;
    let data = body(40 << 20);
    let file = std::env::temp_dir().join(format!("braid-blackout-{}", std::process::id()));
    std::fs::write(&file, &data).unwrap();
    let args = socks_args(
        rig.agent.socks.unwrap(),
        60,
        vec![
            "-T".into(),
            file.display().to_string(),
            format!("http://{web}/upload"),
        ],
    );
    let up = tokio::spawn(curl(args));
    tokio::time::sleep(Duration::from_millis(400)).await;
    for e in &rig.emus {
        e.set_cut(true);
    }
    tokio::time::sleep(Duration::from_millis(CUT_MS)).await;
    for e in &rig.emus {
        e.set_cut(false);
    }
    let got = up.await.unwrap();
    let _ = std::fs::remove_file(&file);
    assert_eq!(String::from_utf8_lossy(&got), sha(&data));
}

/// Longer than the silence watch's 2 s: the probe handshake goes out during the cut and, with
/// its retransmission, often just after it (then the old session must answer the PING).
const CUT_MS: u64 = 2900;

/// An ordinary UDP load balancer in front of a server: one public address; each client
/// address gets its own upstream socket to the server, and replies go back from the public
/// address. Returns the public address and how many handshake and transport packets it
/// relayed towards the server.
async fn balancer(server: SocketAddr) -> (SocketAddr, Arc<[AtomicU64; 2]>) {
    let public = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let addr = public.local_addr().unwrap();
    let counts: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let c = counts.clone();
    tokio::spawn(async move {
        let mut ups: HashMap<SocketAddr, Arc<UdpSocket>> = HashMap::new();
        let mut buf = vec![0u8; 65536];
        while let Ok((n, from)) = public.recv_from(&mut buf).await {
            let up = match ups.get(&from) {
                Some(u) => u.clone(),
                None => {
                    let u = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
                    let (u2, p2) = (u.clone(), public.clone());
                    tokio::spawn(async move {
                        let mut b = vec![0u8; 65536];
                        while let Ok((n, _)) = u2.recv_from(&mut b).await {
                            let _ = p2.send_to(&b[..n], from).await;
                        }
                    });
                    ups.insert(from, u.clone());
                    u
                }
            };
            match buf.get(1) {
                Some(1) => c[0].fetch_add(1, Ordering::Relaxed),
                _ => c[1].fetch_add(1, Ordering::Relaxed),
            };
            let _ = up.send_to(&buf[..n], server).await;
        }
    });
    (addr, counts)
}

/// Several servers behind one address (a load balancer): the server names its own unicast
/// address (127.0.0.3 here, the balancer is 127.0.0.1) in its handshake answer, and the
/// agent sends every path of the session there: after the handshake the balancer relays no
/// transport packet at all, and the download over two paths is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_behind_a_balancer_gets_every_path_at_its_own_address() {
    log();
    let agent_key = Arc::new(StaticKeypair::generate().unwrap());
    // The server's own address, with a port picked now (it must be known before it starts).
    let own = std::net::UdpSocket::bind("127.0.0.3:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut scfg = ServerConfig::new(
        own,
        StaticKeypair::generate().unwrap(),
        vec![agent_key.public()],
    );
    scfg.unicast = Some(own);
    braid_testkit::loopback::allow_targets(&mut scfg, &[]);
    let server_pub = scfg.key.public();
    let (addr, _server) = serve(scfg);
    assert_eq!(addr, own);
    let (lb, counts) = balancer(own).await;
    let data = Arc::new(body(4 << 20));
    let web = http_server(data.clone()).await;
    let mut cfg = agent_cfg(vec![lb], agent_key, server_pub);
    cfg.paths.push(AgentPath::new(
        "lo2",
        PathBind::Address("127.0.0.2".parse().unwrap()),
    ));
    let mut agent = Agent::start(cfg).await.unwrap();
    assert!(agent.wait_established(Duration::from_secs(3)).await);
    for p in ["lo", "lo2"] {
        assert!(
            agent
                .wait_path(p, PathStatus::Up, Duration::from_secs(3))
                .await,
            "path {p}: {:?}",
            agent.paths()
        );
    }
    let got = curl(socks_args(
        agent.socks.unwrap(),
        30,
        vec![format!("http://{web}/file")],
    ))
    .await;
    assert_eq!(sha(&got), sha(&data));
    let (hs, transport) = (
        counts[0].load(Ordering::Relaxed),
        counts[1].load(Ordering::Relaxed),
    );
    eprintln!("balancer relayed {hs} handshake and {transport} transport packets");
    assert!(hs >= 1, "the handshake did not go through the balancer");
    assert_eq!(transport, 0, "transport packets went through the balancer");
}
