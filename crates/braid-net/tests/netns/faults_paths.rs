//! Faults on the paths under a running download, each test named after its fault: a path
//! that corrupts 1 % of its datagrams, a path that duplicates and reorders heavily, NAT
//! rebinding every few seconds (issue 14), and every link down for 10 s.
//!
//! The first three are faults *inside* a path, which braid-emu applies to real UDP datagrams
//! on loopback (no root needed): two emulated paths between an agent and a server in this
//! process. The last one takes both interfaces of the namespace rig (`nsrig`) down, so it
//! needs root and skips with the reason otherwise. Each download is checked byte for byte
//! (length and SHA-256), and the session must be the same one at the end: the faults heal
//! without a new handshake.

use crate::common;
use crate::nsrig;

use braid_emu::Emulator;
use braid_net::agent::{Agent, AgentConfig, AgentPath, PathStatus};
use braid_net::server::{HandshakeCounters, Server};
use braid_net::udp::PathBind;
use common::{body, http_server};
use nsrig::{agent_cfg, check, download, setup, skip, sleep, start, wait};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A server and an agent joined by one emulated path per `paths` entry (TOML lines of a
/// braid-sim `[[path]]`), an HTTP server serving `size` bytes.
struct Rig {
    agent: Agent,
    emus: Vec<Emulator>,
    counters: Arc<HandshakeCounters>,
    server_keys: Arc<braid_net::protect::KeyStats>,
    data: Arc<Vec<u8>>,
    web: SocketAddr,
    _server: tokio::task::JoinHandle<()>,
}

async fn rig(paths: &[&str], size: usize) -> Rig {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("BRAID_TEST_LOG"))
        .with_test_writer()
        .try_init();
    let (cfg, server_pub, agent_key) = braid_testkit::loopback::loopback_server();
    let server = Server::bind(cfg).await.unwrap();
    let addr = server.local_addr().unwrap();
    let (counters, server_keys) = (server.counters(), server.key_stats());
    let task = tokio::spawn(async move {
        let _ = server.run().await;
    });
    let mut text = String::from("name = \"f\"\n");
    for (i, p) in paths.iter().enumerate() {
        text += &format!("[[path]]\nname = \"p{i}\"\n{p}\n");
    }
    text += "[workload]\nsize = \"1MB\"\n[[variant]]\nname = \"v\"\n";
    let scn = braid_sim::Scenario::from_toml_str(&text, std::path::Path::new("<faults>")).unwrap();
    let (mut emus, mut apaths) = (Vec::new(), Vec::new());
    for (i, spec) in scn.paths.iter().enumerate() {
        let emu = Emulator::start(
            spec,
            i as u64 + 11,
            "127.0.0.1:0".parse().unwrap(),
            "127.0.0.1:0".parse().unwrap(),
            addr,
        )
        .unwrap();
        apaths.push(AgentPath {
            via: Some(emu.agent_side),
            ..AgentPath::new(
                spec.name.clone(),
                PathBind::Address(format!("127.0.0.{}", i + 2).parse().unwrap()),
            )
        });
        emus.push(emu);
    }
    let acfg = AgentConfig {
        socks: Some("127.0.0.1:0".parse().unwrap()),
        ..AgentConfig::new(addr, server_pub, agent_key, apaths)
    };
    let mut agent = Agent::start(acfg).await.unwrap();
    assert!(
        agent.wait_established(Duration::from_secs(10)).await,
        "no session"
    );
    for i in 0..paths.len() {
        let name = format!("p{i}");
        assert!(
            agent
                .wait_path(&name, PathStatus::Up, Duration::from_secs(5))
                .await,
            "path {name} never came up: {:?}",
            agent.paths()
        );
    }
    let data = Arc::new(body(size));
    let web = http_server(data.clone()).await;
    Rig {
        agent,
        emus,
        counters,
        server_keys,
        data,
        web,
        _server: task,
    }
}

fn get(c: &std::sync::atomic::AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

/// One path alters one byte in 1 % of its datagrams, both ways: the AEAD refuses them (or
/// the header no longer names the session), braid resends, and not one corrupted byte
/// reaches the application.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_corrupting_one_percent_of_datagrams_delivers_every_byte_intact() {
    let r = rig(
        &[
            "rate = \"40Mbit\"\ndelay = \"3ms\"\nqueue = \"150KB\"",
            "rate = \"40Mbit\"\ndelay = \"6ms\"\nqueue = \"150KB\"",
        ],
        16 << 20,
    )
    .await;
    r.emus[0].set_corrupt(0.01);
    let sid = get(&r.agent.key_stats().session_id);
    let o = download(r.agent.socks.unwrap(), r.web).await;
    check("1 % corruption", &o, &r.data, Duration::from_secs(2));
    let corrupted = get(&r.emus[0].stats().corrupted);
    let refused = get(&r.agent.key_stats().unopened) + get(&r.server_keys.unopened);
    eprintln!(
        "{corrupted} datagrams corrupted in flight of {} carried; {refused} refused by the \
         AEAD; {} unknown-session hints",
        get(&r.emus[0].stats().up_out) + get(&r.emus[0].stats().down_out),
        get(&r.counters.hints)
    );
    assert!(corrupted >= 20, "the path corrupted only {corrupted}");
    assert!(refused >= 1, "no corrupted datagram reached the AEAD");
    assert_eq!(
        get(&r.agent.key_stats().session_id),
        sid,
        "the same session"
    );
    assert_eq!(get(&r.counters.accepted), 1, "no new handshake");
}

/// One path duplicates 20 % of its datagrams and delays each by 0-15 ms at random (reordering
/// most of a burst), both ways; the other is clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_duplicating_and_reordering_heavily_delivers_every_byte_once() {
    let r = rig(
        &[
            "rate = \"40Mbit\"\ndelay = \"3ms\"\njitter = \"15ms\"\nduplicate = 0.2\n\
             queue = \"150KB\"",
            "rate = \"40Mbit\"\ndelay = \"6ms\"\nqueue = \"150KB\"",
        ],
        16 << 20,
    )
    .await;
    let sid = get(&r.agent.key_stats().session_id);
    let o = download(r.agent.socks.unwrap(), r.web).await;
    check(
        "duplication + reordering",
        &o,
        &r.data,
        Duration::from_secs(2),
    );
    let st = r.emus[0].stats();
    let (din, dout) = (get(&st.down_in), get(&st.down_out));
    eprintln!(
        "the faulty path took {din} datagrams towards the agent and delivered {dout} \
         (duplicates included)"
    );
    assert!(dout * 10 >= din * 11, "too few duplicates: {din} -> {dout}");
    assert_eq!(
        get(&r.agent.key_stats().session_id),
        sid,
        "the same session"
    );
    assert_eq!(get(&r.counters.accepted), 1, "no new handshake");
}

/// The NAT in front of each path gives it a new public port every 3 s (the two paths 1.5 s
/// apart) during a ~12 s download at 10 Mbit/s. The issue names 30 s; 3 s keeps the test short and is
/// harsher: 7-8 rebindings instead of one, some while the previous one is still being
/// validated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nat_rebinding_every_3_s_during_a_transfer_loses_nothing() {
    let r = rig(
        &[
            "rate = \"6Mbit\"\ndelay = \"3ms\"\nqueue = \"40KB\"",
            "rate = \"4Mbit\"\ndelay = \"8ms\"\nqueue = \"40KB\"",
        ],
        14 << 20,
    )
    .await;
    let sid = get(&r.agent.key_stats().session_id);
    let dl = tokio::spawn(download(r.agent.socks.unwrap(), r.web));
    let t0 = Instant::now();
    let mut rebinds = 0;
    let mut k = 1u32;
    while !dl.is_finished() {
        let at = Duration::from_millis(1500) * k;
        while t0.elapsed() < at && !dl.is_finished() {
            sleep(20).await;
        }
        if dl.is_finished() {
            break;
        }
        r.emus[(k % 2) as usize].rebind();
        rebinds += 1;
        k += 1;
    }
    let o = dl.await.unwrap();
    check("NAT rebinding", &o, &r.data, Duration::from_secs(2));
    eprintln!("{rebinds} rebindings during the transfer");
    assert!(
        rebinds >= 4,
        "the download ended too soon to test anything ({rebinds} rebindings)"
    );
    assert_eq!(
        get(&r.agent.key_stats().session_id),
        sid,
        "the same session"
    );
    assert_eq!(get(&r.counters.accepted), 1, "no new handshake");
}

/// Both links go down (carrier lost on both veth pairs) for 10 s in the middle of a
/// download, then come back: the session outlives the outage without a new handshake, the
/// paths validate again and the download completes exactly.
#[test]
fn all_paths_down_for_10_s_then_back_resumes_the_session_and_the_download() {
    if skip() {
        return;
    }
    let s = setup(24 << 20);
    let cfg = agent_cfg(&["a=p0", "b=p1"], s.key.clone(), s.server_pub);
    let (net, web) = (s.net.clone(), s.web);
    let (o, same) = s.net.client(move || async move {
        let (mut agent, dl) = start(cfg, web).await;
        let sid = agent.key_stats().session_id.load(Ordering::Relaxed);
        wait(&mut agent, "b", PathStatus::Up, 3000).await;
        sleep(800).await;
        assert!(!dl.is_finished(), "the download ended before the outage");
        net.ip_s(&["link", "set", "s0", "down"]);
        net.ip_s(&["link", "set", "s1", "down"]);
        let t = Instant::now();
        wait(&mut agent, "a", PathStatus::Down, 3000).await;
        wait(&mut agent, "b", PathStatus::Down, 3000).await;
        eprintln!("both paths down after {} ms", t.elapsed().as_millis());
        while t.elapsed() < Duration::from_secs(10) {
            sleep(100).await;
        }
        net.ip_s(&["link", "set", "s0", "up"]);
        net.ip_s(&["link", "set", "s1", "up"]);
        let t = Instant::now();
        wait(&mut agent, "a", PathStatus::Up, 5000).await;
        eprintln!("links back: a path up after {} ms", t.elapsed().as_millis());
        let o = dl.await.unwrap();
        (
            o,
            agent.key_stats().session_id.load(Ordering::Relaxed) == sid,
        )
    });
    check("all paths down 10 s", &o, &s.data, Duration::from_secs(14));
    assert!(
        o.stall >= Duration::from_secs(9),
        "the outage did not stop the download ({:?})",
        o.stall
    );
    assert!(
        same,
        "a new session replaced the one that lived through the outage"
    );
}
