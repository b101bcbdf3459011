//! `/metrics` of a real agent and server during a download over two emulated paths,
//! parsed by a Prometheus text-format parser (the prometheus-parse crate).

use crate::rig;

use braid_ops::http::serve_metrics;
use braid_ops::Source;
use rig::{download, rig, source};
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// GET /metrics, parsed.
async fn scrape(at: SocketAddr) -> prometheus_parse::Scrape {
    let mut s = tokio::net::TcpStream::connect(at).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).await.unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("application/openmetrics-text"), "{head}");
    let lines = body.lines().map(|l| Ok(l.to_string()));
    prometheus_parse::Scrape::parse(lines).expect("the exposition parses")
}

/// The value of `name` with label `path` (and `direction`, if given).
fn value(s: &prometheus_parse::Scrape, name: &str, path: &str, dir: Option<&str>) -> f64 {
    let found = s.samples.iter().find(|x| {
        x.metric == name
            && x.labels.get("path") == Some(path)
            && dir.is_none_or(|d| x.labels.get("direction") == Some(d))
    });
    match found
        .unwrap_or_else(|| panic!("no {name}{{path={path}}}"))
        .value
    {
        prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v) => v,
        ref other => panic!("{name}: unexpected {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_parse_and_their_counters_move_during_a_download() {
    let rig = rig().await;
    let (agent_at, _a) = serve_metrics(
        "127.0.0.1:0".parse().unwrap(),
        Source::Agent(rig.agent.status()),
    )
    .await
    .unwrap();
    let (server_at, _s) = serve_metrics(
        "127.0.0.1:0".parse().unwrap(),
        Source::Server(rig.server_board.clone()),
    )
    .await
    .unwrap();
    let src = source().await;
    let got = Arc::new(AtomicU64::new(0));
    let dl = tokio::spawn(download(rig.agent.socks.unwrap(), src, got));
    tokio::time::sleep(Duration::from_millis(800)).await;
    let first = scrape(agent_at).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let second = scrape(agent_at).await;
    for p in ["a", "b"] {
        let (x, y) = (
            value(&first, "braid_path_bytes_total", p, Some("received")),
            value(&second, "braid_path_bytes_total", p, Some("received")),
        );
        assert!(y > x && x > 0.0, "path {p}: received bytes {x} then {y}");
        let rtt = value(&second, "braid_path_rtt_seconds", p, None);
        assert!(rtt > 0.02 && rtt < 0.5, "path {p}: RTT {rtt} s");
    }
    let active = second.samples.iter().filter(|x| {
        x.metric == "braid_path_state"
            && x.labels.get("state") == Some("active")
            && matches!(x.value, prometheus_parse::Value::Gauge(v) if v == 1.0)
    });
    assert_eq!(active.count(), 2, "both paths active");

    let s1 = scrape(server_at).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let s2 = scrape(server_at).await;
    let sessions = s2
        .samples
        .iter()
        .find(|x| x.metric == "braid_sessions")
        .unwrap();
    assert!(matches!(sessions.value, prometheus_parse::Value::Gauge(v) if v == 1.0));
    // The server labels a session's paths with the agent's names (PATH_NAME).
    for p in ["a", "b"] {
        let (x, y) = (
            value(&s1, "braid_path_bytes_total", p, Some("sent")),
            value(&s2, "braid_path_bytes_total", p, Some("sent")),
        );
        assert!(y > x && x > 0.0, "server path {p}: sent {x} then {y}");
    }
    dl.abort();
}
