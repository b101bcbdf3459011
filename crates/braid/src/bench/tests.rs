//! A tiny run of the whole benchmark: the report's shape, and that every byte and enough
//! datagrams arrived (speed is never asserted here).
use super::*;

#[test]
fn a_tiny_bench_has_every_row_and_moves_every_byte() {
    let o = Options {
        size: 4 << 20,
        agents: 2,
        streams: 2,
        paths: 2,
        threads: 1,
        ciphers: Ciphers::auto(),
        udp: Some(3000),
        udp_rate: 300_000,
        idle_sessions: Some(20),
        handshakes: None,
        progress: false,
        aead_time: Duration::from_millis(20),
        ccs: vec![],
    };
    let r = run(&o).unwrap();
    let names: Vec<&str> = r.rows.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(names, ["tcp", "braid", "mptcp"]);
    for x in &r.rows {
        if x.skipped.is_some() {
            assert_eq!(x.name, "mptcp", "only MPTCP may be skipped");
            continue;
        }
        // 4 MiB over 4 streams: every byte counted (the sinks fail on a short stream).
        assert_eq!(x.bytes, 4 << 20, "{}", x.name);
        assert!(x.gbit_per_s > 0.0 && x.cpu_s_per_gb >= 0.0, "{x:?}");
    }
    let b = &r.rows[1];
    let (all, server) = (
        b.braid_cpu_s_per_gb.unwrap(),
        b.server_cpu_s_per_gb.unwrap(),
    );
    // A tiny run is shorter than the per-thread clock tick (10 ms): only the order holds.
    assert!(
        server >= 0.0 && server <= all && all <= b.cpu_s_per_gb + 5.0,
        "{b:?}"
    );
    assert!(
        b.server_cores_busy.unwrap() >= 0.0 && b.cores_busy > 0.0,
        "{b:?}"
    );
    assert!(r.cores >= 1);
    assert!(r.goodput_ratio > 0.0 && r.cpu_ratio > 0.0);
    let ciphers: Vec<&str> = r.aead.iter().map(|a| a.cipher.as_str()).collect();
    assert_eq!(ciphers, ["chacha20-poly1305", "aes-256-gcm"]);
    assert!(r
        .aead
        .iter()
        .all(|a| a.seal_gbit_per_s > 0.0 && a.open_gbit_per_s > 0.0));
    let u = r.udp.as_ref().unwrap();
    assert_eq!(u.sent, 3000);
    assert!(u.delivered > 0 && u.delivered <= u.sent, "{u:?}");
    let i = r.idle.as_ref().unwrap();
    assert_eq!((i.sessions, i.established), (20, 20), "{i:?}");
    assert!(i.rss_after_kib > 0);
    // The JSON keeps the fields scripts read.
    let j = serde_json::to_value(&r).unwrap();
    for k in ["goodput_ratio", "cpu_ratio", "rows", "udp", "idle"] {
        assert!(j.get(k).is_some(), "{k} missing");
    }
    for k in ["name", "gbit_per_s", "cpu_s_per_gb", "bytes"] {
        assert!(j["rows"][1].get(k).is_some(), "rows[].{k} missing");
    }
}

#[test]
fn bad_options_are_refused_with_the_flag_named() {
    let o = Options {
        size: 3,
        agents: 2,
        streams: 2,
        paths: 1,
        threads: 1,
        ciphers: Ciphers::auto(),
        udp: None,
        udp_rate: 300_000,
        idle_sessions: None,
        handshakes: None,
        progress: false,
        aead_time: Duration::from_millis(20),
        ccs: vec![],
    };
    let e = run(&o).unwrap_err().to_string();
    assert!(e.contains("--size"), "{e}");
    let e = run(&Options { paths: 9, ..o }).unwrap_err().to_string();
    assert!(e.contains("--paths"), "{e}");
}

/// End to end through braid-net: the agent's offer and the server's list decide whether a
/// session starts (AES-256-GCM only against ChaCha20-Poly1305 only: none).
#[test]
fn an_agent_and_a_server_without_a_common_cipher_get_no_session() {
    use braid_crypto::{Cipher, StaticKeypair};
    let only = Ciphers::only;
    for (agent, server, ok) in [
        (
            only(Cipher::Aes256Gcm),
            only(Cipher::ChaCha20Poly1305),
            false,
        ),
        (only(Cipher::Aes256Gcm), Ciphers::for_cpu(false), true),
        (only(Cipher::ChaCha20Poly1305), Ciphers::for_cpu(true), true),
    ] {
        let (skey, akey) = (
            StaticKeypair::generate().unwrap(),
            StaticKeypair::generate().unwrap(),
        );
        let spub = skey.public();
        let scfg = rig::server_config(skey, vec![akey.public()], 1, 1, server).unwrap();
        let addr = rig::start_server(scfg).unwrap();
        let acfg = rig::agent_config(addr, spub, akey, 1, false, agent).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let up = rt.block_on(async {
            let mut a = braid_net::agent::Agent::start(acfg).await.unwrap();
            a.wait_established(Duration::from_millis(1500)).await
        });
        assert_eq!(up, ok);
    }
}

/// The handshake figure with two server workers: every handshake completes (message 2
/// checked), the server's CPU is found and the X25519 speed measured (speed is never
/// asserted); the run whose handshakes each send a first packet starts a session for each.
#[test]
fn a_handshake_bench_completes_every_handshake_on_two_workers() {
    let r = handshakes::measure(300, 2, false).unwrap();
    assert_eq!((r.count, r.lost, r.threads), (300, 0, 2), "{r:?}");
    assert!(r.per_s > 0.0 && r.x25519_ops_per_s > 0.0, "{r:?}");
    assert!(r.server_cpu_s >= 0.0 && r.five_x25519_us > 0.0, "{r:?}");
    let j = serde_json::to_value(&r).unwrap();
    for k in ["count", "per_s", "server_cpu_s", "x25519_ops_per_s"] {
        assert!(j.get(k).is_some(), "handshakes.{k} missing");
    }
    // A handshake alone makes no session; one followed by its first packet does.
    assert_eq!(r.sessions, 0, "{r:?}");
    let s = &r.started;
    assert_eq!((s.count, s.lost, s.sessions), (300, 0, 300), "{r:?}");
}
