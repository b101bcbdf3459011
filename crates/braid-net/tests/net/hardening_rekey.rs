//! Key rotation over real UDP sockets on loopback (docs/protocol.md section 16a): keys are
//! replaced during transfers over lossy, reordering emulated paths without a packet failing
//! to open; an agent whose key leaves the authorized file loses its session within one key
//! lifetime; a rotation attempted by another authorized agent for a session it does not own
//! changes nothing.

use crate::common;

use braid_crypto::{ClientHandshake, RekeyPolicy, StaticKeypair};
use braid_emu::Emulator;
use braid_net::agent::{Agent, AgentConfig, AgentPath};
use braid_net::protect::KeyStats;
use braid_net::server::{HandshakeCounters, Server, ServerConfig};
use braid_net::udp::PathBind;
use common::{body, curl, http_server, sha, socks_args};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const LINKS: &str = r#"
name = "rekey"
[[path]]
name = "a"
rate = "40Mbit"
delay = "5ms"
jitter = "4ms"
loss = 0.01
queue = "200KB"
[[path]]
name = "b"
rate = "40Mbit"
delay = "8ms"
jitter = "4ms"
loss = 0.01
queue = "200KB"
[workload]
size = "1MB"
[[variant]]
name = "v"
"#;

fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

struct Setup {
    agent: Agent,
    emus: Vec<Emulator>,
    counters: Arc<HandshakeCounters>,
    server_keys: Arc<KeyStats>,
    agent_keys: Arc<KeyStats>,
    agent_key: Arc<StaticKeypair>,
    server_pub: braid_crypto::PublicKey,
    _server: tokio::task::JoinHandle<()>,
}

/// A server (with `server_rekey`, and `authorized_file` holding the agent's key when given)
/// and an agent (with `agent_rekey`) over the emulated paths of `links`, or straight over
/// loopback when `links` is `None`.
async fn setup(
    server_rekey: RekeyPolicy,
    agent_rekey: RekeyPolicy,
    links: Option<&str>,
    authorized_file: Option<&Path>,
    extra_keys: &[braid_crypto::PublicKey],
) -> Setup {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("BRAID_TEST_LOG"))
        .with_test_writer()
        .try_init();
    let server_key = StaticKeypair::generate().unwrap();
    let agent_key = Arc::new(StaticKeypair::generate().unwrap());
    let server_pub = server_key.public();
    let mut keys = vec![agent_key.public()];
    keys.extend_from_slice(extra_keys);
    if let Some(f) = authorized_file {
        let text: String = keys
            .iter()
            .map(|k| format!("{}\n", k.to_base64()))
            .collect();
        std::fs::write(f, text).unwrap();
    }
    let mut scfg = ServerConfig::new("127.0.0.1:0".parse().unwrap(), server_key, keys);
    scfg.rekey = server_rekey;
    braid_testkit::loopback::allow_targets(&mut scfg, &[]);
    scfg.authorized_file = authorized_file.map(Path::to_path_buf);
    let server = Server::bind(scfg).await.unwrap();
    let server_addr = server.local_addr().unwrap();
    let counters = server.counters();
    let server_keys = server.key_stats();
    let task = tokio::spawn(async move {
        let _ = server.run().await;
    });
    let mut emus = Vec::new();
    let mut paths = Vec::new();
    match links {
        Some(links) => {
            let scn = braid_sim::Scenario::from_toml_str(links, Path::new("<rekey>")).unwrap();
            for (i, spec) in scn.paths.iter().enumerate() {
                let emu = Emulator::start(
                    spec,
                    i as u64 + 7,
                    "127.0.0.1:0".parse().unwrap(),
                    "127.0.0.1:0".parse().unwrap(),
                    server_addr,
                )
                .unwrap();
                paths.push(AgentPath {
                    via: Some(emu.agent_side),
                    ..AgentPath::new(
                        spec.name.clone(),
                        PathBind::Address(format!("127.0.0.{}", i + 2).parse().unwrap()),
                    )
                });
                emus.push(emu);
            }
        }
        None => paths.push(AgentPath::new(
            "lo",
            PathBind::Address("127.0.0.1".parse().unwrap()),
        )),
    }
    let acfg = AgentConfig {
        socks: Some("127.0.0.1:0".parse().unwrap()),
        rekey: agent_rekey,
        ..AgentConfig::new(server_addr, server_pub, agent_key.clone(), paths)
    };
    let mut agent = Agent::start(acfg).await.unwrap();
    assert!(
        agent.wait_established(Duration::from_secs(10)).await,
        "no session"
    );
    let agent_keys = agent.key_stats();
    Setup {
        agent,
        emus,
        counters,
        server_keys,
        agent_keys,
        agent_key,
        server_pub,
        _server: task,
    }
}

fn fast_rotation(interval_ms: u64) -> RekeyPolicy {
    RekeyPolicy {
        interval: Duration::from_millis(interval_ms),
        lifetime: Duration::from_secs(5),
        // Longer than any reordering of these paths (4 ms jitter, 200 KB queues), shorter
        // than the rotation interval: old keys are really wiped between rotations.
        overlap: Duration::from_millis(150),
        ..RekeyPolicy::default()
    }
}

fn temp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("braid-rekey-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Keys rotate every 250 ms while 3 MB go up and 3 MB come down over two paths that lose
/// 1 % and reorder (4 ms jitter): both ends reach epoch 5 or more, not one authentic packet
/// fails to open at either end (the old epoch's key opens what was in flight at the
/// switch), and the bytes arrive intact. Fails with rotation off (epoch 0) and when old
/// keys are wiped at the switch (packets fail to open).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_rotate_during_transfers_over_lossy_reordering_paths_without_losing_a_packet() {
    let s = setup(
        fast_rotation(250),
        fast_rotation(250),
        Some(LINKS),
        None,
        &[],
    )
    .await;
    let data = Arc::new(body(3 << 20));
    let web = http_server(data.clone()).await;
    let socks = s.agent.socks.unwrap().to_string();
    let dir = temp("up");
    let file = dir.join("up.bin");
    std::fs::write(&file, data.as_slice()).unwrap();
    let t0 = Instant::now();
    let mut rounds = 0;
    // At least 1.5 s of transfers (6 rotations), in both directions, and on until both
    // ends reached epoch 5 (a busy host can delay a rotation; the test judges that keys
    // rotate without losing a packet, not how punctually): at most 15 s.
    let epochs = |s: &Setup| get(&s.agent_keys.max_epoch).min(get(&s.server_keys.max_epoch));
    while (t0.elapsed() < Duration::from_millis(1500) || rounds < 1 || epochs(&s) < 5)
        && t0.elapsed() < Duration::from_secs(15)
    {
        let got = curl(socks_args(
            socks.clone(),
            30,
            vec![format!("http://{web}/file")],
        ))
        .await;
        assert_eq!(sha(&got), sha(&data), "download intact");
        let up = curl(socks_args(
            socks.clone(),
            30,
            vec![
                "-T".into(),
                file.display().to_string(),
                format!("http://{web}/upload"),
            ],
        ))
        .await;
        assert_eq!(String::from_utf8_lossy(&up), sha(&data), "upload intact");
        rounds += 1;
    }
    let _ = std::fs::remove_dir_all(&dir);
    let (sk, ak) = (&s.server_keys, &s.agent_keys);
    eprintln!(
        "{rounds} rounds in {:.1} s; server: epoch {} rotations {} unopened {}; agent: epoch {} \
         rotations {} unopened {}; rotation handshakes accepted {}",
        t0.elapsed().as_secs_f64(),
        get(&sk.max_epoch),
        get(&sk.rotations),
        get(&sk.unopened),
        get(&ak.max_epoch),
        get(&ak.rotations),
        get(&ak.unopened),
        get(&s.counters.rotations),
    );
    assert!(get(&ak.max_epoch) >= 5, "the agent rotated its keys");
    assert!(get(&sk.max_epoch) >= 5, "the server uses the new keys");
    assert_eq!(get(&sk.unopened), 0, "every packet opened at the server");
    assert_eq!(get(&ak.unopened), 0, "every packet opened at the agent");
    let reordered: u64 = s
        .emus
        .iter()
        .map(|e| get(&e.stats().down_out) + get(&e.stats().up_out))
        .sum();
    assert!(reordered > 1000, "traffic went through the emulated paths");
}

/// After the agent's key is removed from the authorized file, its next rotation is refused
/// and the session ends when the keys' lifetime (1.5 s) runs out at both ends: no key
/// outlives a rotation. A connection through the agent then fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_removed_from_the_authorized_file_loses_its_session_within_one_key_lifetime() {
    let policy = RekeyPolicy {
        interval: Duration::from_millis(300),
        lifetime: Duration::from_millis(1500),
        ..fast_rotation(300)
    };
    let dir = temp("auth");
    let file = dir.join("authorized");
    let s = setup(policy, policy, None, Some(&file), &[]).await;
    let data = Arc::new(body(100_000));
    let web = http_server(data.clone()).await;
    let socks = s.agent.socks.unwrap().to_string();
    let url = vec![format!("http://{web}/file")];
    // Rotations happen and the session lives past several lifetimes.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let got = curl(socks_args(socks.clone(), 10, url.clone())).await;
    assert_eq!(sha(&got), sha(&data));
    assert!(get(&s.counters.rotations) >= 3, "keys rotated");
    assert_eq!(get(&s.server_keys.expired), 0);
    // Remove the key (the server looks at the file at most once a second).
    std::fs::write(&file, "# the agent's key was removed\n").unwrap();
    let removed = Instant::now();
    let deadline = removed + Duration::from_secs(4);
    while get(&s.server_keys.expired) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = removed.elapsed();
    eprintln!(
        "session ended {:.2} s after the key was removed (rotations refused: {})",
        took.as_secs_f64(),
        get(&s.counters.rotations_refused)
    );
    assert_eq!(
        get(&s.server_keys.expired),
        1,
        "the server ended the session"
    );
    // Re-read within 1 s, then at most one lifetime (1.5 s) of the last keys, plus slack.
    assert!(took < Duration::from_millis(3200), "{took:?}");
    assert!(get(&s.counters.rotations_refused) >= 1);
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl")
            .args(socks_args(socks, 5, url))
            .output()
    })
    .await
    .unwrap()
    .unwrap();
    assert!(!out.status.success(), "no session for a removed key");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Another authorized agent that knows a session's id (it travels in the clear) sends a
/// rotation for it through that session's own path (so it comes from the session's
/// address): it is refused, nothing is answered, and the session goes on with its keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_by_another_agent_key_is_refused_and_changes_nothing() {
    let intruder = StaticKeypair::generate().unwrap();
    let links = LINKS.replace("loss = 0.01", "loss = 0.0");
    let slow = RekeyPolicy {
        interval: Duration::from_secs(600),
        ..RekeyPolicy::default()
    };
    let s = setup(slow, slow, Some(&links), None, &[intruder.public()]).await;
    let data = Arc::new(body(200_000));
    let web = http_server(data.clone()).await;
    let socks = s.agent.socks.unwrap().to_string();
    let url = vec![format!("http://{web}/file")];
    let got = curl(socks_args(socks.clone(), 10, url.clone())).await;
    assert_eq!(sha(&got), sha(&data));
    // The session id, as an eavesdropper on the path reads it: ask the agent's session.
    let sid = get(&s.agent_keys.session_id);
    assert_ne!(sid, 0);
    let attacker = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let (_, msg1) = ClientHandshake::new(&intruder, &s.server_pub, sid, 0, now_ms).unwrap();
    attacker.send_to(&msg1, s.emus[0].agent_side).await.unwrap();
    // The emulator now sends the path's traffic to the intruder until the agent speaks
    // again: transport packets may come, but no handshake answer.
    let mut buf = [0u8; 2048];
    let until = tokio::time::Instant::now() + Duration::from_millis(500);
    while let Ok(Ok((n, _))) = tokio::time::timeout_at(until, attacker.recv_from(&mut buf)).await {
        let h = braid_crypto::parse_header(&buf[..n]).unwrap();
        assert_eq!(
            h.ptype,
            braid_crypto::PacketType::Transport,
            "no answer to the intruder"
        );
    }
    assert_eq!(get(&s.counters.rotations_refused), 1, "refused");
    assert_eq!(get(&s.counters.rotations), 0);
    let got = curl(socks_args(socks, 10, url)).await;
    assert_eq!(sha(&got), sha(&data), "the session goes on");
    assert_eq!(get(&s.server_keys.max_epoch), 0);
    assert_eq!(get(&s.server_keys.unopened), 0);
    let _ = s.agent_key;
}

/// Regression (issue 38 item 10): a key appended to the authorized file was taken, and
/// logged, only at the next handshake, and the status did not count keys. Now the server
/// re-reads the file within about a second with no handshake at all, and its status says
/// how many keys it accepts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_appended_to_the_authorized_file_is_counted_without_a_handshake() {
    let dir = temp("count");
    let file = dir.join("agents.txt");
    let a = StaticKeypair::generate().unwrap().public();
    std::fs::write(&file, format!("{}\n", a.to_base64())).unwrap();
    let mut scfg = ServerConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        StaticKeypair::generate().unwrap(),
        vec![a],
    );
    scfg.authorized_file = Some(file.clone());
    let server = Server::bind(scfg).await.unwrap();
    let board = server.status();
    let task = tokio::spawn(async move {
        let _ = server.run().await;
    });
    let count = || async { board.snapshot().await.authorized_keys };
    assert_eq!(count().await, Some(1));
    let st = board.snapshot().await;
    assert_eq!(st.authorized_file.as_deref(), file.to_str());
    let b = StaticKeypair::generate().unwrap().public();
    let text = format!("{}\n{}\n", a.to_base64(), b.to_base64());
    std::fs::write(&file, text).unwrap();
    // A modification time a little ahead, so that a write within the same clock tick as
    // the first one still counts as a change.
    let later = std::time::SystemTime::now() + Duration::from_secs(2);
    let f = std::fs::File::options().write(true).open(&file).unwrap();
    f.set_modified(later).unwrap();
    let written = Instant::now();
    while count().await != Some(2) && written.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = written.elapsed();
    eprintln!(
        "the appended key counted {} ms after the write",
        took.as_millis()
    );
    assert_eq!(count().await, Some(2), "not re-read after {took:?}");
    assert!(took < Duration::from_millis(1500), "re-read after {took:?}");
    task.abort();
    let _ = std::fs::remove_dir_all(&dir);
}
