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
    assert_eq!(names, ["tcp", "braid", "shadowsocks", "mptcp"]);
    for x in &r.rows {
        if let Some(why) = &x.skipped {
            match x.name.as_str() {
                "mptcp" => {}
                // Only when shadowsocks-libev is not installed.
                "shadowsocks" => {
                    assert_eq!(why, ss::NOT_INSTALLED);
                    assert!(ss::programs().is_none(), "skipped although installed");
                }
                _ => panic!("only MPTCP and shadowsocks may be skipped: {x:?}"),
            }
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
    // The shadowsocks row: the CPU of ss-local and ss-server, and the comparison, exactly
    // when it ran.
    let s = &r.rows[2];
    assert_eq!(r.vs_shadowsocks.is_some(), s.skipped.is_none(), "{s:?}");
    assert_eq!(s.proxy_cpu_s_per_gb.is_some(), s.skipped.is_none(), "{s:?}");
    assert!(s.braid_cpu_s_per_gb.is_none() && s.cc.is_none(), "{s:?}");
    if let Some(v) = &r.vs_shadowsocks {
        assert!(s.proxy_cpu_s_per_gb.unwrap() >= 0.0, "{s:?}");
        // A tiny run may take under a clock tick (10 ms) of either side's CPU: the CPU
        // ratio may then be infinite or NaN (0 / 0), never negative.
        assert!(
            v.goodput_ratio > 0.0 && (v.cpu_ratio.is_nan() || v.cpu_ratio >= 0.0),
            "{v:?}"
        );
    }
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
    if r.vs_shadowsocks.is_some() {
        assert!(j["vs_shadowsocks"].get("goodput_ratio").is_some());
        assert!(j["rows"][2].get("proxy_cpu_s_per_gb").is_some());
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

/// Two /proc/PID/stat snapshots of each of two processes: utime + stime (fields 14 and 15)
/// after less before, over the clock ticks per second, summed; a comm with spaces and ')'
/// does not shift the fields.
#[test]
fn cpu_seconds_come_from_two_proc_stat_snapshots() {
    let stat = |comm: &str, utime: u64, stime: u64| {
        format!(
            "4242 ({comm}) S 1 4242 4242 0 -1 4194304 120 0 0 0 {utime} {stime} 0 0 20 0 1 0 \
             987 12345678 321 18446744073709551615 1 1 0 0 0 0 0 4096 16384 0 0 0 17 1 0 0 0 0 0"
        )
    };
    assert_eq!(ss::stat_ticks(&stat("ss-local", 7, 5)), Some(12));
    assert_eq!(ss::stat_ticks(&stat("a b) c", 7, 5)), Some(12));
    assert_eq!(ss::stat_ticks("4242 (x) S 1 2"), None);
    let before = [stat("ss-local", 100, 50), stat("ss server) x", 10, 0)];
    let after = [stat("ss-local", 180, 70), stat("ss server) x", 40, 10)];
    let s = ss::cpu_between(&before, &after, 100.0).unwrap();
    assert!((s - 1.4).abs() < 1e-9, "{s}");
    assert_eq!(ss::cpu_between(&after, &after, 100.0).unwrap(), 0.0);
    // Another process (its times went back), a missing snapshot, a line that is not stat.
    assert!(ss::cpu_between(&after, &before, 100.0).is_err());
    assert!(ss::cpu_between(&before, &after[..1], 100.0).is_err());
    assert!(ss::cpu_between(&["garbage".into()], &["garbage".into()], 100.0).is_err());
    // Live: this process's own stat parses and its CPU time does not go back.
    let own = || std::fs::read_to_string("/proc/self/stat").unwrap();
    let (a, b) = (own(), own());
    assert!(ss::cpu_between(&[a], &[b], ss::clock_ticks()).unwrap() >= 0.0);
}

/// A process that does not come up: the error names it, its port and its output, and no
/// child outlives the attempt (the guard kills it).
#[test]
fn a_shadowsocks_process_that_does_not_come_up_is_named_with_its_output() {
    let dir = tempfile::tempdir().unwrap();
    let script = |name: &str, body: &str| {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.path().join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    };
    let fails = script("fails", "echo \"bind: port $4 taken\" >&2; exit 1");
    let hangs = script("hangs", "echo listening never >&2; exec sleep 30");
    let within = Duration::from_millis(300);
    let e = format!(
        "{:#}",
        ss::Pair::start(&fails, &hangs, within).err().unwrap()
    );
    assert!(e.contains("ss-server") && e.contains("exited"), "{e}");
    assert!(e.contains("bind: port") && e.contains("taken"), "{e}");
    let port = e
        .split("bind: port ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap();
    assert!(e.contains(&format!("on port {port}")), "{e}");
    // ss-server comes up (a real one when installed), ss-local never listens.
    let Some((server, _)) = ss::programs() else {
        return;
    };
    // (Two seconds for each: the real ss-server must come up in them on a busy machine.)
    let (t, within) = (std::time::Instant::now(), Duration::from_secs(2));
    let e = format!(
        "{:#}",
        ss::Pair::start(&server, &hangs, within).err().unwrap()
    );
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(
        e.contains("ss-local") && e.contains("did not accept connections on port"),
        "{e}"
    );
    assert!(e.contains("listening never"), "{e}");
    // The real pair comes up, and its processes end with it.
    let p = ss::Pair::start(&server, &ss::programs().unwrap().1, ss::UP_WITHIN).unwrap();
    let pids = p.pids();
    assert_eq!(p.stats().unwrap().len(), 2);
    drop(p);
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "{pid} lives on"
        );
    }
}
