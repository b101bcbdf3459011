//! `braid status` over the control sockets of a real agent and server, during a download
//! over two emulated paths (loopback link emulators: 40 Mbit/s, 15 ms and 20 Mbit/s,
//! 30 ms each way).

use crate::rig;

use rig::{download, path, rig, source, status, DELAY_MS};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lists_both_paths_with_bytes_and_rtts_and_a_cut_path_goes_down_within_1_s() {
    let rig = rig().await;
    let src = source().await;
    let got = Arc::new(AtomicU64::new(0));
    let dl = tokio::spawn(download(rig.agent.socks.unwrap(), src, got.clone()));
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert!(
        got.load(Ordering::Relaxed) > 1 << 20,
        "the download does not run"
    );

    let a = status(&rig.agent_sock).await;
    assert_eq!(a["role"], "agent", "{a}");
    assert_eq!(a["version"], 1);
    assert!(
        a["session"]["id"].as_str().is_some_and(|s| s.len() == 16),
        "{a}"
    );
    assert_eq!(a["streams"].as_array().unwrap().len(), 1, "{a}");
    assert!(f(&a["streams"][0]["bytes_down"]) > 1e6, "{a}");
    for (name, delay) in [("a", DELAY_MS[0]), ("b", DELAY_MS[1])] {
        let p = path(&a, name);
        assert_eq!(p["state"], "active", "{p}");
        assert!(
            f(&p["bytes_sent"]) > 0.0 && f(&p["bytes_received"]) > 0.0,
            "{p}"
        );
        assert!(f(&p["packets_received"]) > 100.0, "{p}");
        let rtt = 2.0 * delay;
        let min = f(&p["min_rtt_ms"]);
        let srtt = f(&p["srtt_ms"]);
        assert!(
            (min - rtt).abs() <= 0.2 * rtt,
            "{name}: min RTT {min} ms, emulated {rtt} ms"
        );
        // The smoothed RTT also holds queueing and the peer's ACK delay under load.
        assert!(
            srtt >= 0.8 * rtt && srtt <= 4.0 * rtt,
            "{name}: smoothed RTT {srtt} ms, emulated {rtt} ms"
        );
        assert!(f(&p["cwnd_bytes"]) > 0.0, "{p}");
        assert!(
            p["remote_address"].as_str().is_some() && p["local_address"].as_str().is_some(),
            "{p}"
        );
    }

    let s = status(&rig.server_sock).await;
    assert_eq!(s["role"], "server", "{s}");
    let sessions = s["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1, "{s}");
    assert_eq!(
        sessions[0]["agent_key_fingerprint"],
        braid_net::server::fingerprint(&rig.agent_key)
    );
    assert_eq!(sessions[0]["paths"].as_array().unwrap().len(), 2, "{s}");
    for p in sessions[0]["paths"].as_array().unwrap() {
        assert!(
            f(&p["bytes_sent"]) > 100_000.0,
            "the server sends on both paths: {p}"
        );
    }
    assert_eq!(s["limits"]["sessions"]["used"], 1);
    assert_eq!(s["limits"]["streams_per_session"]["used"], 1);

    // Cut path a: it shows as down within 1 s; b carries on.
    rig.emus[0].set_cut(true);
    let t = Instant::now();
    loop {
        let a = status(&rig.agent_sock).await;
        if path(&a, "a")["state"] == "down" {
            assert_eq!(path(&a, "b")["state"], "active", "{a}");
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "path a still {} after 1 s",
            path(&a, "a")["state"]
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("cut path shown down after {:?}", t.elapsed());
    dl.abort();
}

/// Regression: `limits.udp_flows_per_session.used` was always 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_limits_count_the_open_udp_flows() {
    use tokio::net::UdpSocket;
    let rig = rig().await;
    let s = status(&rig.server_sock).await;
    assert_eq!(s["limits"]["udp_flows_per_session"]["used"], 0, "{s}");
    let echo = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let echo_addr = echo.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 2048];
        while let Ok((n, from)) = echo.recv_from(&mut buf).await {
            let _ = echo.send_to(&buf[..n], from).await;
        }
    });
    // SOCKS5 UDP ASSOCIATE by hand.
    let (ctl, client, relay) = braid_testkit::socks5::associate(rig.agent.socks.unwrap()).await;
    let pkt = braid_testkit::socks5::udp_packet(echo_addr.into(), b"hello");
    let mut buf = [0u8; 64];
    let mut echoed = false;
    for _ in 0..20 {
        client.send_to(&pkt, relay).await.unwrap();
        if let Ok(Ok(_)) =
            tokio::time::timeout(Duration::from_millis(300), client.recv_from(&mut buf)).await
        {
            echoed = true;
            break;
        }
    }
    assert!(echoed, "no echo through the UDP association");
    let s = status(&rig.server_sock).await;
    assert_eq!(s["limits"]["udp_flows_per_session"]["used"], 1, "{s}");
    assert_eq!(s["limits"]["udp_flows_per_session"]["max"], 256, "{s}");
    let a = status(&rig.agent_sock).await;
    assert_eq!(a["flows"].as_array().unwrap().len(), 1, "{a}");
    drop(ctl);
}
