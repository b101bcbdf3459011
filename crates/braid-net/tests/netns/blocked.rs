//! Networks that get in the way (root; network namespaces; nftables): UDP blocked on one
//! link, and an asymmetric black hole on one path. The rig of `live_paths.rs` (two veth
//! links, 40 Mbit/s each towards the agent); downloads through the agent's SOCKS5 port,
//! checked by SHA-256, with the longest stall measured. Without root, namespaces or
//! nftables each test prints why it skips.

use crate::nsrig;

use braid_net::agent::{Agent, PathStatus};
use nsrig::{agent_cfg, check, download, nft_drop, nft_dropped, setup, skip, wait};
use std::time::{Duration, Instant};

/// True (with the reason printed) when nftables is missing.
pub(crate) fn no_nft() -> bool {
    if braid_testbed::cmd::run("nft", &["--version"]).is_err() {
        eprintln!("skipped: nft (nftables) is not installed");
        return true;
    }
    false
}

/// UDP is dropped on p1 (a hotel network): path b gets no answer over UDP, falls back to
/// braid over TCP to the server's port, and the download uses both links.
#[test]
fn a_path_on_a_network_that_blocks_udp_carries_data_over_tcp() {
    if skip() || no_nft() {
        return;
    }
    let s = setup(24 << 20);
    let net = s.net.clone();
    let rule = nft_drop(&net.c, "output", "oifname \"p1\" meta l4proto udp");
    let cfg = agent_cfg(&["a=p0", "b=p1"], s.key.clone(), s.server_pub);
    let (web, n2) = (s.web, net.clone());
    let (o, fell_back, a_bytes, b_bytes) = net.client(move || async move {
        let t = Instant::now();
        let mut agent = Agent::start(cfg).await.unwrap();
        assert!(agent.wait_established(Duration::from_secs(3)).await);
        wait(&mut agent, "b", PathStatus::Up, 6000).await;
        let fell_back = t.elapsed();
        let (a0, b0) = (n2.rx_bytes(0), n2.rx_bytes(1));
        let o = download(agent.socks.unwrap(), web).await;
        (o, fell_back, n2.rx_bytes(0) - a0, n2.rx_bytes(1) - b0)
    });
    let dropped = nft_dropped(&net.c, &rule);
    let share = b_bytes as f64 / (a_bytes + b_bytes) as f64;
    eprintln!(
        "UDP blocked on p1 ({dropped} UDP packets dropped): path b up over TCP {} ms after the \
         agent started; it carried {:.1} % of the download's bytes ({b_bytes} of {})",
        fell_back.as_millis(),
        share * 100.0,
        a_bytes + b_bytes
    );
    check("UDP blocked", &o, &s.data, Duration::from_millis(1000));
    assert!(dropped > 0, "nothing was blocked");
    assert!(share >= 0.25, "the TCP path carried {:.1} %", share * 100.0);
    assert!(
        a_bytes as f64 / (a_bytes + b_bytes) as f64 >= 0.25,
        "the UDP path carried too little"
    );
}

/// An asymmetric black hole on p0: everything the server sends on that link is dropped
/// (nftables in the server's namespace) for 1.5 s while the agent's packets still arrive.
/// The download stalls at most 1 s and p0 carries data again after the hole closes.
#[test]
fn an_asymmetric_black_hole_stalls_at_most_1_s_and_the_path_comes_back() {
    if skip() || no_nft() {
        return;
    }
    let s = setup(40 << 20);
    let cfg = agent_cfg(&["a=p0", "b=p1"], s.key.clone(), s.server_pub);
    let (net, web) = (s.net.clone(), s.web);
    let (o, back, during) = s.net.client(move || async move {
        let mut agent = Agent::start(cfg).await.unwrap();
        assert!(agent.wait_established(Duration::from_secs(3)).await);
        wait(&mut agent, "a", PathStatus::Up, 2000).await;
        wait(&mut agent, "b", PathStatus::Up, 2000).await;
        let dl = tokio::spawn(download(agent.socks.unwrap(), web));
        nsrig::sleep(800).await;
        let rule = nft_drop(&net.s, "output", "oifname \"s0\" meta l4proto udp");
        let a0 = net.rx_bytes(0);
        nsrig::sleep(1500).await;
        let during = net.rx_bytes(0) - a0;
        let dropped = nft_dropped(&net.s, &rule);
        nsrig::nft_del(&net.s, &rule);
        eprintln!("black hole on p0 for 1.5 s: {dropped} packets of the server dropped");
        assert!(dropped > 0, "the black hole caught nothing");
        // Back: p0 carries at least 1 MB again.
        let (t, a1) = (Instant::now(), net.rx_bytes(0));
        let mut back = None;
        while t.elapsed() < Duration::from_secs(5) && !dl.is_finished() {
            if net.rx_bytes(0) > a1 + 1_000_000 {
                back = Some(t.elapsed());
                break;
            }
            nsrig::sleep(20).await;
        }
        (dl.await.unwrap(), back, during)
    });
    check("black hole", &o, &s.data, Duration::from_millis(1000));
    let back = back.expect("p0 carried no data after the black hole was removed");
    eprintln!(
        "black hole: p0 received {during} bytes while it lasted; carried 1 MB again {} ms after it was removed",
        back.as_millis()
    );
    assert!(
        during < 200_000,
        "the black hole let {during} bytes through"
    );
}

/// UDP dropped on both links: the handshake is answered over TCP only, the session starts
/// there, the other path follows over TCP, and the download is exact.
#[test]
fn with_udp_blocked_on_every_link_the_session_starts_over_tcp() {
    if skip() || no_nft() {
        return;
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("BRAID_TEST_LOG"))
        .with_test_writer()
        .try_init();
    let s = setup(8 << 20);
    let net = s.net.clone();
    nft_drop(&net.c, "output", "meta l4proto udp");
    let cfg = agent_cfg(&["a=p0", "b=p1"], s.key.clone(), s.server_pub);
    let (web, n2) = (s.web, net.clone());
    let (o, est, both, a_bytes, b_bytes) = net.client(move || async move {
        let t = Instant::now();
        let mut agent = Agent::start(cfg).await.unwrap();
        assert!(
            agent.wait_established(Duration::from_secs(5)).await,
            "no session over TCP"
        );
        let est = t.elapsed();
        wait(&mut agent, "a", PathStatus::Up, 6000).await;
        wait(&mut agent, "b", PathStatus::Up, 6000).await;
        let both = t.elapsed();
        let (a0, b0) = (n2.rx_bytes(0), n2.rx_bytes(1));
        let o = download(agent.socks.unwrap(), web).await;
        (o, est, both, n2.rx_bytes(0) - a0, n2.rx_bytes(1) - b0)
    });
    eprintln!(
        "UDP blocked everywhere: session over TCP after {} ms, both paths up after {} ms; \
         p0 received {a_bytes} bytes, p1 {b_bytes}",
        est.as_millis(),
        both.as_millis()
    );
    check(
        "UDP blocked everywhere",
        &o,
        &s.data,
        Duration::from_millis(1000),
    );
    assert!(a_bytes > 1_000_000 && b_bytes > 1_000_000);
}
