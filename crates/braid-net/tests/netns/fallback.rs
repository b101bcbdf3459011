//! A path that fell back to TCP comes back to UDP, and the server names paths as the agent
//! does (issue 24, items 6 and 7; root, namespaces, nftables: the rig of `blocked.rs`,
//! namespaces `fb*`). Without root, namespaces or nftables each test prints why it skips.

use crate::nsrig;

use braid_net::agent::{Agent, PathStatus};
use braid_net::pathmgr::Recheck;
use braid_net::status::{PathReport, ShownState};
use nsrig::{agent_cfg, check, download, nft_del, nft_drop, nft_dropped, setup_in, skip, wait};
use std::time::{Duration, Instant};

fn no_nft() -> bool {
    if braid_testbed::cmd::run("nft", &["--version"]).is_err() {
        eprintln!("skipped: nft (nftables) is not installed");
        return true;
    }
    false
}

/// Agent path `name` as its status shows it now.
fn agent_path(agent: &Agent, name: &str) -> PathReport {
    let st = agent.status().snapshot();
    st.paths.into_iter().find(|p| p.name == name).unwrap()
}

/// On UDP: validated, and its socket is a UDP one (a TCP path shows no local address).
fn on_udp(p: &PathReport) -> bool {
    p.local_address.is_some() && p.state == Some(ShownState::Active)
}

/// UDP dropped on p1: path b falls back to TCP. An unanswered UDP probe of the idle session
/// (0.5 s, then every 1 s here; 30 s doubling to 8 min by default) does not make the agent
/// suspect its server (no new handshake). With the rule removed during a download, b's next
/// probe is answered and b moves back to UDP; the download goes on and is exact.
#[test]
fn a_path_that_fell_back_to_tcp_returns_to_udp_once_udp_is_unblocked() {
    if skip() || no_nft() {
        return;
    }
    let s = setup_in(nsrig::Net::with_prefix("fb"), 40 << 20);
    let net = s.net.clone();
    let rule = nft_drop(&net.c, "output", "oifname \"p1\" meta l4proto udp");
    let mut cfg = agent_cfg(&["a=p0", "b=p1"], s.key.clone(), s.server_pub);
    cfg.paths[1].policy.udp_recheck = Some(Recheck {
        first: Duration::from_millis(500),
        max: Duration::from_secs(1),
    });
    let (web, n2, board) = (s.web, net.clone(), s.board.clone());
    let (o, tcp_at, probes, back, after, names) = net.client(move || async move {
        let t = Instant::now();
        let mut agent = Agent::start(cfg).await.unwrap();
        assert!(agent.wait_established(Duration::from_secs(3)).await);
        wait(&mut agent, "b", PathStatus::Up, 6000).await;
        let tcp_at = t.elapsed();
        assert!(!on_udp(&agent_path(&agent, "b")), "b is not over TCP");
        // A probe goes out and is dropped while UDP is still blocked.
        let d0 = nft_dropped(&n2.c, &rule);
        let t1 = Instant::now();
        while nft_dropped(&n2.c, &rule) == d0 {
            assert!(t1.elapsed() < Duration::from_secs(3), "no UDP probe");
            nsrig::sleep(20).await;
        }
        let probes = nft_dropped(&n2.c, &rule) - d0;
        let dl = tokio::spawn(download(agent.socks.unwrap(), web));
        nsrig::sleep(300).await;
        nft_del(&n2.c, &rule);
        let t2 = Instant::now();
        while !on_udp(&agent_path(&agent, "b")) {
            assert!(
                t2.elapsed() < Duration::from_secs(6),
                "b not back on UDP: {:?}",
                agent_path(&agent, "b")
            );
            nsrig::sleep(20).await;
        }
        let back = t2.elapsed();
        let b0 = n2.rx_bytes(1);
        let o = dl.await.unwrap();
        let st = board.snapshot().await;
        assert_eq!(
            st.handshakes_accepted, 1,
            "the agent shook hands again: an unanswered UDP probe made it suspect the server"
        );
        let names: Vec<(String, Option<u8>)> = st.sessions[0]
            .paths
            .iter()
            .map(|p| (p.name.clone(), p.id))
            .collect();
        (o, tcp_at, probes, back, n2.rx_bytes(1) - b0, names)
    });
    eprintln!(
        "b over TCP {} ms after the start ({probes} UDP packets of a probe dropped); UDP \
         unblocked during the download: b back on UDP after {} ms, then carried {after} bytes; \
         server's paths {names:?}",
        tcp_at.as_millis(),
        back.as_millis()
    );
    check("back to UDP", &o, &s.data, Duration::from_millis(1000));
    assert!(after > 1_000_000, "b carried {after} bytes back on UDP");
    assert!(
        names.iter().any(|n| n == &("b".to_string(), Some(9))),
        "the server does not show b's UDP path (id 9) by name: {names:?}"
    );
}

/// The server's status names a session's paths as the agent does (PATH_NAME).
#[test]
fn the_server_status_shows_the_agent_path_names() {
    if skip() {
        return;
    }
    let s = setup_in(nsrig::Net::with_prefix("fb"), 1 << 10);
    let cfg = agent_cfg(&["lte=p0", "wifi=p1"], s.key.clone(), s.server_pub);
    let board = s.board.clone();
    let json = s.net.client(move || async move {
        let mut agent = Agent::start(cfg).await.unwrap();
        assert!(agent.wait_established(Duration::from_secs(3)).await);
        wait(&mut agent, "lte", PathStatus::Up, 3000).await;
        wait(&mut agent, "wifi", PathStatus::Up, 3000).await;
        // The names travel in the first packets after validation.
        let t = Instant::now();
        loop {
            let st = board.snapshot().await;
            let json = serde_json::to_value(&st).unwrap();
            let names: Vec<&str> = json["sessions"][0]["paths"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|p| p["name"].as_str())
                .collect();
            if names == ["lte", "wifi"] || t.elapsed() > Duration::from_secs(2) {
                break json;
            }
            nsrig::sleep(20).await;
        }
    });
    let paths = &json["sessions"][0]["paths"];
    eprintln!("server status paths: {paths}");
    assert_eq!(paths[0]["name"], "lte", "{paths}");
    assert_eq!(paths[0]["id"], 0, "{paths}");
    assert_eq!(paths[1]["name"], "wifi", "{paths}");
    assert_eq!(paths[1]["id"], 1, "{paths}");
}
