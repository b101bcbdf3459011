//! Agent and server on this machine, three paths through link emulators with different
//! rates, delays and losses, and real clients: curl through SOCKS5 and HTTP CONNECT, and a
//! SOCKS5 UDP ASSOCIATE client. Every transfer is checked with SHA-256.

use crate::common;

use common::{body, curl, http_server, rig, sha, socks_args};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UdpSocket;

#[tokio::test]
async fn download_through_socks5_over_three_impaired_paths() {
    let rig = rig().await;
    let data = Arc::new(body(100 << 20));
    let web = http_server(data.clone()).await;
    let socks = rig.agent.socks.unwrap();
    let t0 = std::time::Instant::now();
    let got = curl(socks_args(
        socks.to_string(),
        120,
        vec![format!("http://{web}/file")],
    ))
    .await;
    let secs = t0.elapsed().as_secs_f64();
    // For docs/results.md: the three emulated paths sum to 350 Mbit/s.
    eprintln!(
        "100 MB over three emulated paths: {secs:.2} s, {:.1} Mbit/s (links sum to 350 Mbit/s)",
        data.len() as f64 * 8.0 / secs / 1e6
    );
    if std::env::var_os("BRAID_TEST_STATS").is_some() {
        for e in &rig.emus {
            eprintln!("{:?}", e.stats());
        }
    }
    assert_eq!(got.len(), data.len());
    assert_eq!(sha(&got), sha(&data));
    // Every path carried traffic.
    for e in &rig.emus {
        assert!(
            e.stats()
                .down_out
                .load(std::sync::atomic::Ordering::Relaxed)
                > 100,
            "{:?}",
            e.stats()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn download_survives_a_path_cut_mid_transfer() {
    let rig = rig().await;
    let data = Arc::new(body(100 << 20));
    let web = http_server(data.clone()).await;
    let socks = rig.agent.socks.unwrap();
    let args = socks_args(socks.to_string(), 120, vec![format!("http://{web}/file")]);
    let dl = tokio::spawn(curl(args));
    tokio::time::sleep(Duration::from_millis(300)).await;
    rig.emus[0].set_cut(true);
    let got = dl.await.unwrap();
    assert_eq!(sha(&got), sha(&data));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_through_http_connect() {
    let rig = rig().await;
    let web = http_server(Arc::new(Vec::new())).await;
    let http = rig.agent.http.unwrap();
    let data = body(10 << 20);
    let file = std::env::temp_dir().join(format!("braid-upload-{}", std::process::id()));
    std::fs::write(&file, &data).unwrap();
    let got = curl(vec![
        "-sS".into(),
        "--max-time".into(),
        "120".into(),
        "-p".into(),
        "-x".into(),
        format!("http://{http}"),
        "-T".into(),
        file.display().to_string(),
        format!("http://{web}/upload"),
    ])
    .await;
    let _ = std::fs::remove_file(&file);
    assert_eq!(String::from_utf8_lossy(&got), sha(&data));
}

/// Issue 24: a plain `http://` request through the HTTP proxy (absolute form, what
/// `curl -x` sends without `-p`) was answered 405. Now it is carried over the session:
/// a download and an upload arrive intact, and the origin sees the request in origin form
/// without the proxy's headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_through_the_http_proxy_was_405_and_is_now_forwarded() {
    let rig = rig().await;
    let http = rig.agent.http.unwrap();
    let data = body(1 << 20);
    let web = http_server(Arc::new(data.clone())).await;
    let proxy = |tail: Vec<String>| {
        let mut a: Vec<String> = vec!["-sS", "--max-time", "60", "-x"]
            .into_iter()
            .map(String::from)
            .collect();
        a.push(format!("http://{http}"));
        a.extend(tail);
        a
    };
    let got = curl(proxy(vec![format!("http://{web}/file")])).await;
    assert_eq!(sha(&got), sha(&data));
    let file = std::env::temp_dir().join(format!("braid-plain-put-{}", std::process::id()));
    std::fs::write(&file, &data).unwrap();
    let got = curl(proxy(vec![
        "-T".into(),
        file.display().to_string(),
        format!("http://{web}/upload"),
    ]))
    .await;
    let _ = std::fs::remove_file(&file);
    assert_eq!(String::from_utf8_lossy(&got), sha(&data));

    // What the origin receives.
    let origin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = origin.local_addr().unwrap();
    let seen = tokio::spawn(async move {
        let (mut s, _) = origin.accept().await.unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut b).await.unwrap();
            head.push(b[0]);
        }
        s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .await
            .unwrap();
        String::from_utf8(head).unwrap()
    });
    let got = curl(proxy(vec![format!("http://{at}/p?q=1")])).await;
    assert_eq!(got, b"ok");
    let head = seen.await.unwrap();
    assert!(head.starts_with("GET /p?q=1 HTTP/1.1\r\n"), "{head}");
    assert!(head.contains(&format!("Host: {at}\r\n")), "{head}");
    assert!(!head.to_ascii_lowercase().contains("proxy-"), "{head}");
}

/// The same in direct mode (no server): the rewritten head goes down the direct connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_through_the_http_proxy_in_direct_mode() {
    use braid_net::agent::{Agent, AgentConfig, AgentPath};
    let mut cfg = AgentConfig::direct_only(vec![AgentPath::new(
        "lo",
        braid_net::udp::PathBind::Address("127.0.0.1".parse().unwrap()),
    )])
    .unwrap();
    cfg.http = Some("127.0.0.1:0".parse().unwrap());
    let agent = Agent::start(cfg).await.unwrap();
    let data = body(256 << 10);
    let web = http_server(Arc::new(data.clone())).await;
    let got = curl(vec![
        "-sS".into(),
        "--max-time".into(),
        "20".into(),
        "-x".into(),
        format!("http://{}", agent.http.unwrap()),
        format!("http://{web}/file"),
    ])
    .await;
    assert_eq!(sha(&got), sha(&data));
    let s = agent.status().snapshot();
    assert_eq!(s.mode.as_deref(), Some("direct"), "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_associate_echoes_every_datagram_intact() {
    let rig = rig().await;
    let echo = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let echo_addr = echo.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok((n, from)) = echo.recv_from(&mut buf).await {
            let _ = echo.send_to(&buf[..n], from).await;
        }
    });
    // SOCKS5 UDP ASSOCIATE by hand.
    let (_ctl, client, relay) = braid_testkit::socks5::associate(rig.agent.socks.unwrap()).await;
    let mut received = 0;
    let mut buf = vec![0u8; 4096];
    for i in 0..200u32 {
        let payload: Vec<u8> = (0..(50 + i as usize * 5))
            .map(|k| (k as u32 ^ i) as u8)
            .collect();
        let pkt = braid_testkit::socks5::udp_packet(echo_addr.into(), &payload);
        client.send_to(&pkt, relay).await.unwrap();
        if let Ok(Ok((n, _))) =
            tokio::time::timeout(Duration::from_millis(500), client.recv_from(&mut buf)).await
        {
            // RSV RSV FRAG ATYP(1) IP(4) PORT(2) then the echo.
            assert_eq!(&buf[..4], &[0, 0, 0, 1]);
            assert_eq!(&buf[10..n], &payload[..], "datagram {i} corrupted");
            received += 1;
        }
    }
    // The paths lose up to 0.5 % each way; nearly all come back, none corrupted.
    assert!(received >= 190, "only {received} of 200 echoes");
}

#[tokio::test]
async fn upload_through_socks5() {
    let rig = rig().await;
    let web = http_server(Arc::new(Vec::new())).await;
    let data = body(100 << 20);
    let file = std::env::temp_dir().join(format!("braid-upload-socks-{}", std::process::id()));
    std::fs::write(&file, &data).unwrap();
    let got = curl(socks_args(
        rig.agent.socks.unwrap().to_string(),
        120,
        vec![
            "-T".into(),
            file.display().to_string(),
            format!("http://{web}/upload"),
        ],
    ))
    .await;
    let _ = std::fs::remove_file(&file);
    assert_eq!(String::from_utf8_lossy(&got), sha(&data));
}

/// NAT rebinding: a path's packets suddenly reach the server from a new source port. The
/// server validates the new address before sending data there, and the transfer goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn download_survives_nat_rebinding_of_every_path() {
    let rig = rig().await;
    let data = Arc::new(body(60 << 20));
    let web = http_server(data.clone()).await;
    let args = socks_args(
        rig.agent.socks.unwrap().to_string(),
        120,
        vec![format!("http://{web}/file")],
    );
    let dl = tokio::spawn(curl(args));
    for e in &rig.emus {
        tokio::time::sleep(Duration::from_millis(200)).await;
        e.rebind();
    }
    let got = dl.await.unwrap();
    assert_eq!(sha(&got), sha(&data));
}

/// Regression: a target that closes without sending anything left the proxied connection
/// hanging (the stream's lone FIN raised no readable signal at the agent).
#[tokio::test]
async fn a_target_that_sends_nothing_closes_the_client_connection() {
    let rig = rig().await;
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = silent.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = silent.accept().await {
            drop(s);
        }
    });
    let mut c = braid_testkit::socks5::open(rig.agent.socks.unwrap(), target).await;
    let mut rest = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut rest))
        .await
        .expect("the end of the stream arrives")
        .unwrap();
    assert_eq!(n, 0);
}
