//! Issue 24, item 0: a braid server listening on a wildcard address (`0.0.0.0`, `[::]`)
//! answered from whatever address the kernel picked for the route back, not from the one
//! the agent asked; with the server's public address on its loopback device (a floating,
//! second or anycast address) the agent dropped every answer and fell to direct mode.
//! The rig of `live_paths.rs` (root, network namespaces) with 10.99.0.1/32 and fd99::1/128
//! on the server's lo, routed to over both veth links; each test prints why it skips.

use crate::nsrig;

use braid_net::agent::{Agent, PathStatus};
use nsrig::{agent_cfg_to, check, download, skip, wait, Net};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Addresses on the server's loopback device only: no link has them.
const ASKED_V4: &str = "10.99.0.1";
const ASKED_V6: &str = "fd99::1";

/// The rig's two links with IPv6 too, and the loopback addresses routed over both.
fn loopback_addresses(net: &Net) {
    net.ip_s(&["addr", "add", &format!("{ASKED_V4}/32"), "dev", "lo"]);
    net.ip_s(&["-6", "addr", "add", &format!("{ASKED_V6}/128"), "dev", "lo"]);
    for i in 0..2 {
        let (p, s, n, metric) = (format!("p{i}"), format!("s{i}"), i + 1, (i + 1).to_string());
        let (c6, s6) = (format!("fd0{n}::1/64"), format!("fd0{n}::2/64"));
        net.ip_c(&["-6", "addr", "add", &c6, "dev", &p, "nodad"]);
        net.ip_s(&["-6", "addr", "add", &s6, "dev", &s, "nodad"]);
        let gw6 = format!("fd0{n}::2");
        net.ip_c(&[
            "route",
            "add",
            &format!("{ASKED_V4}/32"),
            "dev",
            &p,
            "metric",
            &metric,
        ]);
        net.ip_c(&[
            "-6",
            "route",
            "add",
            &format!("{ASKED_V6}/128"),
            "via",
            &gw6,
            "dev",
            &p,
            "metric",
            &metric,
        ]);
    }
}

/// The server on `listen`, the agent's two paths (one per link) to `asked`: the session
/// comes up at once with both paths, and a download of `size` bytes through the agent's
/// SOCKS5 port is exact.
fn session_through(net: &Arc<Net>, listen: &str, asked: &str, size: usize) {
    let (listen, asked): (SocketAddr, SocketAddr) =
        (listen.parse().unwrap(), asked.parse().unwrap());
    let data = Arc::new(crate::common::body(size));
    let key = Arc::new(braid_crypto::StaticKeypair::generate().unwrap());
    let (web, server_pub, _stop) = net.serve_on(listen, data.clone(), key.public());
    let cfg = agent_cfg_to(asked, &["a=p0", "b=p1"], key, server_pub);
    let name = format!("server on {listen}, agent to {asked}");
    let n2 = name.clone();
    let (o, up) = net.client(move || async move {
        let t = Instant::now();
        let mut agent = Agent::start(cfg).await.unwrap();
        assert!(
            agent.wait_established(Duration::from_secs(3)).await,
            "{n2}: no session within 3 s (answers from another address are dropped): {:?}",
            agent.paths()
        );
        wait(&mut agent, "a", PathStatus::Up, 3000).await;
        wait(&mut agent, "b", PathStatus::Up, 3000).await;
        let up = t.elapsed();
        (download(agent.socks.unwrap(), web).await, up)
    });
    eprintln!(
        "{name}: session with both paths up after {} ms",
        up.as_millis()
    );
    check(&name, &o, &data, Duration::from_secs(2));
}

/// A server on `0.0.0.0` and on `[::]` whose address is on its loopback device: the agent's
/// handshakes are answered from the address asked (IPv4, IPv6, and IPv4 on the dual-stack
/// socket), the session comes up at once with both paths and carries a download. Failed
/// before the fix: no session (the answers came from 10.x.0.2 and fd0x::2).
#[test]
fn a_wildcard_listener_answers_from_the_loopback_address_the_agent_asked() {
    if skip() {
        return;
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("BRAID_TEST_LOG"))
        .with_test_writer()
        .try_init();
    let net = Arc::new(Net::new());
    loopback_addresses(&net);
    session_through(&net, "0.0.0.0:4433", &format!("{ASKED_V4}:4433"), 6 << 20);
    session_through(&net, "[::]:4434", &format!("[{ASKED_V6}]:4434"), 6 << 20);
    session_through(&net, "[::]:4435", &format!("{ASKED_V4}:4435"), 6 << 20);
}
