//! Memory of the server per session and per stream (issue 14, figures for issue 13): a
//! `braid server` process on loopback, many agents in this process (one key and one
//! loopback source address each), the server's RSS and descriptors read from /proc.
//!
//! The suite runs small numbers (seconds); `scripts/soak memory` runs the 1000
//! sessions and 100 agents x 50 streams (`BRAID_SOAK_SESSIONS`, `BRAID_SOAK_AGENTS`,
//! `BRAID_SOAK_STREAMS`).

use crate::soakrig;

use soakrig::*;
use std::time::Duration;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// N idle sessions on a server whose limit is N; then N/5 more agents, which the server
/// refuses: its memory grows with the sessions it holds and not with those it refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_memory_per_idle_session_and_bounded_at_the_session_limit() {
    log_init();
    raise_nofile();
    let n = env("BRAID_SOAK_SESSIONS", 60);
    let extra = (n / 5).max(5);
    let keys = keys(n + extra);
    let pubs: Vec<_> = keys.iter().map(|k| k.public()).collect();
    let server = ServerProc::start(&pubs, n);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (rss0, fd0) = (server.rss_kb(), server.fds());
    let cfgs = (0..n)
        .map(|i| agent_cfg(&server, keys[i].clone(), vec![(source(i), None)], false))
        .collect();
    let t = std::time::Instant::now();
    let agents = start_agents(cfgs, Duration::from_secs(30 + n as u64 / 10)).await;
    let took = t.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rss1, fd1) = (server.rss_kb(), server.fds());
    let per_session = (rss1.saturating_sub(rss0)) * 1024 / n as u64;
    eprintln!(
        "{n} sessions up in {:.1} s; server RSS {:.1} MB -> {:.1} MB: {:.1} KB per idle session; \
         descriptors {fd0} -> {fd1}",
        took.as_secs_f64(),
        mb(rss0),
        mb(rss1),
        per_session as f64 / 1024.0
    );
    // The refused ones.
    let mut refused = Vec::new();
    for (i, key) in keys.iter().enumerate().skip(n) {
        let cfg = agent_cfg(&server, key.clone(), vec![(source(i), None)], false);
        refused.push(braid_net::agent::Agent::start(cfg).await.unwrap());
    }
    for a in refused.iter_mut() {
        assert!(
            !a.wait_established(Duration::from_millis(200)).await,
            "a session beyond the limit"
        );
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss2 = server.rss_kb();
    eprintln!(
        "{extra} agents over the limit, refused for 3 s: server RSS {:.1} MB -> {:.1} MB",
        mb(rss1),
        mb(rss2)
    );
    // Issue 13 asks <= 64 KB per idle session; allocator pages make small runs noisy, so
    // the suite's bound is twice that.
    assert!(
        per_session <= 128 * 1024,
        "{per_session} bytes per idle session"
    );
    assert!(
        rss2 <= rss1 + 2048 + rss1 / 20,
        "refused agents grew the server: {rss1} KB -> {rss2} KB"
    );
    assert!(
        fd1 <= fd0 + 8,
        "descriptors grow with sessions: {fd0} -> {fd1}"
    );
    drop(agents);
}

/// A agents x S streams, each stream an echoed 1 KB then idle: the server's memory and
/// descriptors per stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_memory_per_stream() {
    log_init();
    raise_nofile();
    let (na, ns) = (env("BRAID_SOAK_AGENTS", 10), env("BRAID_SOAK_STREAMS", 10));
    let keys = keys(na);
    let pubs: Vec<_> = keys.iter().map(|k| k.public()).collect();
    let server = ServerProc::start(&pubs, na + 10);
    let cfgs = (0..na)
        .map(|i| agent_cfg(&server, keys[i].clone(), vec![(source(i), None)], true))
        .collect();
    let agents = start_agents(cfgs, Duration::from_secs(30 + na as u64 / 10)).await;
    let echo = echo_server().await;
    // One stream per agent first, so that what each session allocates on its first stream
    // is not counted per stream.
    let mut conns = Vec::new();
    for a in &agents {
        let mut s = socks_connect(a.socks.unwrap(), echo).await.unwrap();
        echo_round(&mut s, 1024).await.unwrap();
        conns.push(s);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (rss0, fd0) = (server.rss_kb(), server.fds());
    let t = std::time::Instant::now();
    for a in &agents {
        let socks = a.socks.unwrap();
        let opens = (1..ns).map(|_| async move {
            let mut s = socks_connect(socks, echo).await?;
            echo_round(&mut s, 1024).await?;
            Ok::<_, std::io::Error>(s)
        });
        for r in futures_join(opens).await {
            conns.push(r.expect("a stream"));
        }
    }
    let took = t.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rss1, fd1) = (server.rss_kb(), server.fds());
    let streams = (na * (ns - 1)) as u64;
    let per_stream = rss1.saturating_sub(rss0) * 1024 / streams.max(1);
    eprintln!(
        "{na} agents x {ns} streams ({} open, {streams} measured, opened in {:.1} s): server \
         RSS {:.1} MB -> {:.1} MB, {:.1} KB per stream; descriptors {fd0} -> {fd1} ({:.2} per \
         stream)",
        conns.len(),
        took.as_secs_f64(),
        mb(rss0),
        mb(rss1),
        per_stream as f64 / 1024.0,
        (fd1 - fd0) as f64 / streams as f64
    );
    // Every stream still answers.
    for s in conns.iter_mut().step_by(7) {
        echo_round(s, 100).await.unwrap();
    }
    assert!(per_stream <= 256 * 1024, "{per_stream} bytes per stream");
    drop(conns);
    drop(agents);
}

/// Run the futures at once (a few hundred; no extra dependency).
async fn futures_join<F: std::future::Future + Send + 'static>(
    fs: impl Iterator<Item = F>,
) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = fs.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}
