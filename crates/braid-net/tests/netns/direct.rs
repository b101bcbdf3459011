//! Direct mode (no braid server; root, network namespaces): a client namespace with two
//! links of different rates (tbf towards the client: p0 40 Mbit/s, p1 20 Mbit/s) to a
//! server namespace whose HTTP server both links reach directly. Parallel curl downloads
//! through the agent's SOCKS5 port go whole on one path each (the connection-level
//! scheduler); a braid server that appears later is used for new connections.
//! Without root or namespaces each test prints why it skips.

use crate::common;

use braid_crypto::StaticKeypair;
use braid_net::agent::{Agent, AgentConfig, AgentPath, ConnPolicy, DirectMode, START_WAIT};
use braid_net::server::{Server, ServerConfig};
use braid_testkit::http;
pub(crate) use braid_testkit::netns::{rx_bytes_in, skip, thread_in, Net};
use braid_testkit::netns::{spawn_in, Stop};
use common::{body, curl, sha};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const RATES_MBIT: [f64; 2] = [40.0, 20.0];
/// TCP payload per byte tbf counts on a 1500-byte MTU veth (1448 of 1514 with timestamps).
pub(crate) const PAYLOAD: f64 = 1448.0 / 1514.0;
pub(crate) const HTTP_PORT: u16 = 8080;
const BRAID: &str = "10.0.0.1:4433";

/// The namespaces of these tests: link `i` shaped to `RATES_MBIT[i]`.
fn net() -> Net {
    net_with_rates("bdr", &RATES_MBIT)
}

/// Namespaces `PREFIX<id>-c` and `-s`, link `i` shaped to `rates[i]` Mbit/s.
pub(crate) fn net_with_rates(prefix: &str, rates: &[f64]) -> Net {
    let rates: Vec<String> = rates.iter().map(|r| format!("{r}mbit")).collect();
    let rates: Vec<&str> = rates.iter().map(String::as_str).collect();
    Net::with_rates(prefix, &rates)
}

/// The bodies served: `GET /N` answers `body(N)`.
pub(crate) type Bodies = Arc<Mutex<HashMap<usize, Arc<Vec<u8>>>>>;

pub(crate) fn body_of(bodies: &Bodies, n: usize) -> Arc<Vec<u8>> {
    bodies
        .lock()
        .unwrap()
        .entry(n)
        .or_insert_with(|| Arc::new(body(n)))
        .clone()
}

/// An HTTP server on 10.0.0.1:8080 in the server namespace, until the returned [`Stop`]
/// drops.
pub(crate) fn http(net: &Net, bodies: Bodies) -> Stop {
    let ((), stop) = spawn_in(&net.s, move |ready| async move {
        let l = tokio::net::TcpListener::bind(("10.0.0.1", HTTP_PORT))
            .await
            .unwrap();
        ready.send(()).unwrap();
        http::serve(l, move |mut s, head| {
            let data = body_of(&bodies, http::requested_len(&head));
            async move { http::respond(&mut s, &data).await }
        })
        .await;
    });
    stop
}

pub(crate) fn paths(specs: &[&str]) -> Vec<AgentPath> {
    braid_testkit::netns::agent_paths(specs)
}

/// `n` parallel curl downloads of `size` bytes through `socks`; each is checked by
/// SHA-256. Returns the wall time of the whole batch.
pub(crate) async fn batch(socks: SocketAddr, bodies: &Bodies, n: usize, size: usize) -> Duration {
    let want = sha(&body_of(bodies, size));
    let t0 = Instant::now();
    let mut all = Vec::new();
    for _ in 0..n {
        let args = vec![
            "-sS".to_string(),
            "--max-time".into(),
            "40".into(),
            "--socks5".into(),
            socks.to_string(),
            format!("http://10.0.0.1:{HTTP_PORT}/{size}"),
        ];
        all.push(tokio::spawn(curl(args)));
    }
    for d in all {
        let got = d.await.unwrap();
        assert_eq!(got.len(), size, "download length");
        assert_eq!(sha(&got), want, "download SHA-256");
    }
    t0.elapsed()
}

/// Mbit/s of `bytes` in `t`.
pub(crate) fn mbit(bytes: usize, t: Duration) -> f64 {
    bytes as f64 * 8.0 / t.as_secs_f64() / 1e6
}

/// `workers` parallel download loops through `socks`, each fetching `size` bytes again
/// and again until `dur` has passed (a browser's connection pool); every download is
/// checked. Returns the bytes and the time until the last one finished.
pub(crate) async fn pool(
    socks: SocketAddr,
    bodies: &Bodies,
    workers: usize,
    size: usize,
    dur: Duration,
) -> (usize, Duration) {
    let want = Arc::new(sha(&body_of(bodies, size)));
    let t0 = Instant::now();
    let mut all = Vec::new();
    for _ in 0..workers {
        let want = want.clone();
        all.push(tokio::spawn(async move {
            let mut n = 0;
            while t0.elapsed() < dur {
                let got = curl(vec![
                    "-sS".to_string(),
                    "--max-time".into(),
                    "40".into(),
                    "--socks5".into(),
                    socks.to_string(),
                    format!("http://10.0.0.1:{HTTP_PORT}/{size}"),
                ])
                .await;
                assert_eq!(sha(&got), *want, "download SHA-256");
                n += got.len();
            }
            n
        }));
    }
    let mut bytes = 0;
    for w in all {
        bytes += w.await.unwrap();
    }
    (bytes, t0.elapsed())
}

/// Warm up (one download per link, so that the scheduler has measured both), then 8
/// parallel downloads at once, then 8 parallel download loops for 6 s. Returns the
/// loops' aggregate as a share of the links' sum (their tbf rates), and the bytes each
/// link received.
fn aggregate(net: &Net, bodies: &Bodies, cfg: AgentConfig, label: &'static str) -> (f64, [u64; 2]) {
    const SIZE: usize = 4 << 20;
    let rx0 = [net.rx_bytes(0), net.rx_bytes(1)];
    let b = bodies.clone();
    let (once, (bytes, t)) = thread_in(&net.c, move || async move {
        let agent = Agent::start(cfg).await.unwrap();
        let socks = agent.socks.unwrap();
        batch(socks, &b, 2, SIZE).await;
        let once = batch(socks, &b, 8, SIZE).await;
        let pool = pool(socks, &b, 8, 2 << 20, Duration::from_secs(6)).await;
        drop(agent);
        (once, pool)
    })
    .join()
    .unwrap();
    let rx = [net.rx_bytes(0) - rx0[0], net.rx_bytes(1) - rx0[1]];
    let sum: f64 = RATES_MBIT.iter().sum();
    let ceiling = sum * PAYLOAD;
    let agg1 = mbit(8 * SIZE, once);
    eprintln!(
        "{label}: 8 x {} MB at once in {:.2} s: {agg1:.1} Mbit/s = {:.3} of the links' sum ({sum} Mbit/s), {:.3} of their TCP payload ceiling ({ceiling:.1})",
        SIZE >> 20,
        once.as_secs_f64(),
        agg1 / sum,
        agg1 / ceiling,
    );
    let agg = mbit(bytes, t);
    eprintln!(
        "{label}: 8 download loops, {} MB in {:.2} s: {agg:.1} Mbit/s = {:.3} of the links' sum, {:.3} of the payload ceiling; p0 {} MB, p1 {} MB in all",
        bytes >> 20,
        t.as_secs_f64(),
        agg / sum,
        agg / ceiling,
        rx[0] >> 20,
        rx[1] >> 20
    );
    (agg / sum, rx)
}

pub(crate) fn log() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("BRAID_TEST_LOG"))
        .with_test_writer()
        .try_init();
}

/// No server: 8 parallel download loops spread over both links add up to at least 0.85
/// of what the links carry (8 downloads started at once cannot: whole connections of one
/// size split 5:3 or 6:2, 8/9 of the sum at best; measured and printed, not asserted); with `--scheduler operetta --alpha 0` every connection goes on
/// the link with the least energy per bit (p1: 0.5 W for 20 Mbit/s against 3 W for 40);
/// at alpha 1 the aggregate is again at least 0.85.
#[test]
fn direct_mode_adds_up_links_and_operetta_alpha_0_uses_the_cheapest() {
    if skip() {
        return;
    }
    log();
    let net = net();
    let bodies: Bodies = Arc::default();
    let _web = http(&net, bodies.clone());
    let direct = |specs: &[&str], policy: ConnPolicy| {
        let mut cfg = AgentConfig::direct_only(paths(specs)).unwrap();
        cfg.socks = Some("127.0.0.1:0".parse().unwrap());
        cfg.direct.policy = policy;
        cfg
    };
    // Default: expected throughputs add up.
    let cfg = direct(&["a=p0", "b=p1"], ConnPolicy::Throughput);
    let (share, rx) = aggregate(&net, &bodies, cfg, "throughput");
    assert!(
        share >= 0.85,
        "aggregate {share:.3} of the links' payload ceiling"
    );
    assert!(
        rx[0] > 4 << 20 && rx[1] > 4 << 20,
        "both links carry: {rx:?}"
    );

    // OPERETTA alpha 0: p1 has the least energy per bit.
    let specs = ["a=p0,power=3", "b=p1,power=0.5"];
    let cfg = direct(&specs, ConnPolicy::Operetta { alpha: 0.0 });
    let b = bodies.clone();
    let rx0 = [net.rx_bytes(0), net.rx_bytes(1)];
    let board = thread_in(&net.c, move || async move {
        let agent = Agent::start(cfg).await.unwrap();
        let socks = agent.socks.unwrap();
        let status = agent.status();
        let watch = tokio::spawn(async move {
            // Every open connection's path, as `braid status` shows it.
            let mut seen = Vec::new();
            for _ in 0..40 {
                for s in status.snapshot().streams {
                    seen.push(s.path.unwrap_or_default());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            seen
        });
        batch(socks, &b, 8, 1 << 20).await;
        let seen = watch.await.unwrap();
        drop(agent);
        seen
    })
    .join()
    .unwrap();
    let rx = [net.rx_bytes(0) - rx0[0], net.rx_bytes(1) - rx0[1]];
    eprintln!(
        "operetta alpha 0: p0 {} KB, p1 {} KB; paths seen {:?}",
        rx[0] >> 10,
        rx[1] >> 10,
        {
            let mut s = board.clone();
            s.sort();
            s.dedup();
            s
        }
    );
    assert!(
        rx[0] < 200 << 10,
        "alpha 0 used the expensive link p0: {rx:?}"
    );
    assert!(rx[1] >= 8 << 20, "{rx:?}");
    assert!(
        !board.is_empty() && board.iter().all(|p| p == "b"),
        "{board:?}"
    );

    // OPERETTA alpha 1: the throughput target of both links.
    let cfg = direct(&specs, ConnPolicy::Operetta { alpha: 1.0 });
    let (share, rx) = aggregate(&net, &bodies, cfg, "operetta alpha 1");
    assert!(
        share >= 0.85,
        "aggregate {share:.3} of the links' payload ceiling"
    );
    assert!(
        rx[0] > 4 << 20 && rx[1] > 4 << 20,
        "both links carry: {rx:?}"
    );
}

/// An agent configured with a server that is not there runs in direct mode (once its
/// start-up wait, `START_WAIT`, is over: issue 38); when the
/// server appears it is picked up within 5 s: new connections go through the session
/// (status shows `session`, the session's paths count bytes), and a download that started
/// direct finishes direct.
#[test]
fn a_server_that_appears_later_is_used_by_new_connections_within_5_s() {
    if skip() {
        return;
    }
    log();
    let net = net();
    let bodies: Bodies = Arc::default();
    let _web = http(&net, bodies.clone());
    const OLD: usize = 16 << 20;
    const NEW: usize = 2 << 20;
    let want_old = sha(&body_of(&bodies, OLD));
    let want_new = sha(&body_of(&bodies, NEW));
    let agent_key = Arc::new(StaticKeypair::generate().unwrap());
    let server_key = StaticKeypair::generate().unwrap();
    let mut cfg = AgentConfig::new(
        BRAID.parse().unwrap(),
        server_key.public(),
        agent_key.clone(),
        paths(&["a=p0", "b=p1"]),
    );
    cfg.socks = Some("127.0.0.1:0".parse().unwrap());
    cfg.direct.mode = DirectMode::Fallback;
    // The server starts when the client side says so.
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let agent_pub = agent_key.public();
    let server = thread_in(&net.s, move || async move {
        let _ = tokio::task::spawn_blocking(move || go_rx.recv()).await;
        let mut cfg = ServerConfig::new(BRAID.parse().unwrap(), server_key, vec![agent_pub]);
        // The web server is on the server's own address (refused by default).
        braid_testkit::loopback::allow_targets(&mut cfg, &["10.0.0.1"]);
        let server = Server::bind(cfg).await.unwrap();
        tokio::select! {
            _ = server.run() => {}
            _ = stop_rx => {}
        }
    });
    thread_in(&net.c, move || async move {
        let agent = Agent::start(cfg).await.unwrap();
        let socks = agent.socks.unwrap();
        let status = agent.status();
        tokio::time::sleep(START_WAIT + Duration::from_millis(300)).await;
        assert_eq!(status.snapshot().mode.as_deref(), Some("direct"));
        // A long download starts direct.
        let old = tokio::spawn(curl(vec![
            "-sS".into(),
            "--max-time".into(),
            "40".into(),
            "--socks5".into(),
            socks.to_string(),
            format!("http://10.0.0.1:{HTTP_PORT}/{OLD}"),
        ]));
        let t0 = Instant::now();
        let old_path = loop {
            let s = status.snapshot();
            if let Some(p) = s.streams.first().and_then(|s| s.path.clone()) {
                break p;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "the download did not start"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(old_path == "a" || old_path == "b", "{old_path}");
        go_tx.send(()).unwrap();
        let t0 = Instant::now();
        while status.snapshot().mode.as_deref() != Some("session") {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "the server was not picked up within 5 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        eprintln!("server picked up after {:.2} s", t0.elapsed().as_secs_f64());
        // A new connection goes through the session.
        let fresh = tokio::spawn(curl(vec![
            "-sS".into(),
            "--max-time".into(),
            "40".into(),
            "--socks5".into(),
            socks.to_string(),
            format!("http://10.0.0.1:{HTTP_PORT}/{NEW}"),
        ]));
        let mut saw_session = false;
        let mut old_stayed = true;
        while !fresh.is_finished() {
            for s in status.snapshot().streams {
                match s.path.as_deref() {
                    Some("session") => saw_session = true,
                    Some(p)
                        if s.destination.ends_with(&format!("{HTTP_PORT}"))
                            && p != old_path
                            && p != "session" =>
                    {
                        old_stayed = false
                    }
                    _ => {}
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let got = fresh.await.unwrap();
        assert_eq!(sha(&got), want_new, "the new download");
        // The board's path counters are refreshed every 200 ms.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let snap = status.snapshot();
        let carried: u64 = snap.paths.iter().map(|p| p.bytes_received).sum();
        eprintln!("the session's paths received {} KB", carried >> 10);
        assert!(saw_session, "the new connection did not use the session");
        assert!(carried >= NEW as u64, "the session carried {carried} bytes");
        let got = old.await.unwrap();
        assert_eq!(sha(&got), want_old, "the download that started direct");
        assert!(old_stayed);
        drop(agent);
    })
    .join()
    .unwrap();
    let _ = stop_tx.send(());
    server.join().unwrap();
}
