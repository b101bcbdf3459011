//! The live dashboard in a real headless browser (Debian's chromium), during a download
//! over two emulated paths (the rig of tests/ops/status.rs): after a few seconds the page's DOM
//! holds one chart series per path, and the series change while the transfer runs; the
//! server's page lists the session's paths, the session and the limits.
//!
//! Skips with a printed reason when chromium is absent and this is not root (as root,
//! `scripts/test` installs it; a missing chromium then fails the test).
//! `BRAID_DASHBOARD_SCREENSHOT=docs/dashboard.png` also saves a screenshot of the page after
//! 30 s of transfer (how docs/dashboard.png was made).

use crate::browser;
use crate::rig;

use braid_ops::dashboard::{serve, DashboardConfig};
use braid_ops::Source;
use browser::{attr, chart_series, chromium, Browser};
use rig::{download, rig, source};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "dash-test-token-0123";

/// The status line of `GET path` (no token).
async fn status_line(at: SocketAddr, path: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(at).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut head = vec![0u8; 64];
    let n = s.read(&mut head).await.unwrap();
    String::from_utf8_lossy(&head[..n])
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// The received-throughput series of paths a and b: (points, d, last value).
fn rx_series(dom: &str) -> Option<[(usize, String, f64); 2]> {
    let series = chart_series(dom, "rx");
    let one = |name: &str| {
        let s = series.iter().find(|t| attr(t, "data-path") == Some(name))?;
        Some((
            attr(s, "data-points")?.parse().ok()?,
            attr(s, "d")?.to_string(),
            attr(s, "data-last")?.parse().unwrap_or(0.0),
        ))
    };
    Some([one("a")?, one("b")?])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_draws_a_live_series_per_path_in_a_headless_browser() {
    let Some(exe) = chromium() else {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            panic!("chromium is missing: run scripts/test (it installs it) or apt-get install chromium");
        }
        eprintln!(
            "skipped: chromium is not installed and this is not root (apt-get install chromium)"
        );
        return;
    };
    let rig = rig().await;
    let cfg =
        DashboardConfig::new("127.0.0.1:0".parse().unwrap(), Some(TOKEN.into()), false).unwrap();
    let (at, _dash) = serve(cfg, Source::Agent(rig.agent.status())).await.unwrap();
    let server_cfg = DashboardConfig::new("127.0.0.1:0".parse().unwrap(), None, false).unwrap();
    let (server_at, _server_dash) = serve(server_cfg, Source::Server(rig.server_board.clone()))
        .await
        .unwrap();
    assert!(
        status_line(at, "/").await.contains("401"),
        "no token, no page"
    );
    assert!(status_line(at, "/events").await.contains("401"));
    assert!(status_line(at, &format!("/?token={TOKEN}"))
        .await
        .contains("200"));

    let src = source().await;
    let got = Arc::new(AtomicU64::new(0));
    let dl = tokio::spawn(download(rig.agent.socks.unwrap(), src, got.clone()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        got.load(Ordering::Relaxed) > 1 << 20,
        "the download does not run"
    );

    let url = format!("http://{at}/?token={TOKEN}");
    let server_url = format!("http://{server_at}/");
    let shot = std::env::var_os("BRAID_DASHBOARD_SCREENSHOT");
    let exe = exe.to_string();
    let (first, second, png, server) = tokio::task::spawn_blocking(move || {
        let mut b = Browser::launch(&exe);
        b.open(&url);
        // The page is up when both series have points (the history and a tick arrived).
        let t = Instant::now();
        let first = loop {
            let dom = b.dom();
            if rx_series(&dom).is_some_and(|s| s.iter().all(|x| x.0 >= 2)) {
                break dom;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "no chart series for paths a and b after 30 s; the DOM:\n{dom}"
            );
            std::thread::sleep(Duration::from_millis(250));
        };
        std::thread::sleep(Duration::from_secs(3));
        let second = b.dom();
        let png = shot.map(|_| {
            std::thread::sleep(Duration::from_secs(27));
            b.screenshot()
        });
        // The server's page: its session's two paths, the sessions and limits tables.
        b.open(&server_url);
        let t = Instant::now();
        let server = loop {
            let dom = b.dom();
            if chart_series(&dom, "rx").len() >= 2 && dom.contains("UDP flows per session") {
                break dom;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "no server series after 30 s; the DOM:\n{dom}"
            );
            std::thread::sleep(Duration::from_millis(250));
        };
        (first, second, png, server)
    })
    .await
    .unwrap();
    dl.abort();

    let (one, two) = (rx_series(&first).unwrap(), rx_series(&second).unwrap());
    for (i, name) in ["a", "b"].into_iter().enumerate() {
        let ((n1, d1, _), (n2, d2, last)) = (&one[i], &two[i]);
        eprintln!("path {name}: {n1} then {n2} points, now {last} Mbit/s received");
        assert!(
            n2 > n1,
            "path {name}: the series did not grow in 3 s ({n1} then {n2} points): no live updates"
        );
        assert_ne!(d1, d2, "path {name}: the series did not change in 3 s");
        assert!(
            *last > 0.5,
            "path {name}: {last} Mbit/s received during a download"
        );
    }
    for chart in ["tx", "rtt", "loss"] {
        let s = chart_series(&second, chart);
        for name in ["a", "b"] {
            assert!(
                s.iter().any(|t| attr(t, "data-path") == Some(name)),
                "no {chart} series for path {name}"
            );
        }
    }
    assert_eq!(
        second.matches("class=\"state state-active\"").count(),
        2,
        "both paths shown active"
    );
    let series = chart_series(&server, "rx");
    let names: Vec<&str> = series.iter().filter_map(|t| attr(t, "data-path")).collect();
    assert!(
        names.len() == 2 && names.iter().all(|n| n.ends_with("/a") || n.ends_with("/b")),
        "the server's series are SESSION/PATH, named as the agent names its paths: {names:?}"
    );
    assert!(
        server.contains(&braid_net::server::fingerprint(&rig.agent_key)),
        "the sessions table names the agent's key"
    );
    if let (Some(png), Some(to)) = (png, std::env::var_os("BRAID_DASHBOARD_SCREENSHOT")) {
        std::fs::write(&to, png).unwrap();
        eprintln!("screenshot written to {}", to.to_string_lossy());
    }
}
