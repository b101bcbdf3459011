//! Captive portals (issue 35, item 3): the agent's wifi path (p0) is behind a hotel-style
//! portal: nftables in the agent's namespace drops its UDP and every TCP connection but
//! port 80's, which goes to the portal (a 302 to its login page). The agent shows `captive`
//! with the login URL within 5 s of its start; the portal sees only the agent's checks;
//! once the portal's rules are removed (the user logged in), the path carries data within
//! 5 s. Root and nftables (namespaces `cap*`); the test says why it skips otherwise.

use crate::blocked::no_nft;
use crate::nsrig;

use braid_net::agent::Agent;
use braid_net::pathmgr::captive::CheckUrl;
use braid_net::status::{PathReport, ShownState};
use braid_testbed::cmd::exec_ns;
use nsrig::{agent_cfg, download, setup_in, sh, skip, spawn_in};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const LOGIN: &str = "http://portal.example/login?from=braid";

/// A tiny HTTP server: answers every request with `answer`, keeps each request's first
/// line and User-Agent.
async fn responder(l: TcpListener, answer: &'static str, seen: Arc<Mutex<Vec<String>>>) {
    while let Ok((mut s, _)) = l.accept().await {
        let seen = seen.clone();
        tokio::spawn(async move {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 1024];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 8192 {
                match s.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let text = String::from_utf8_lossy(&buf).to_string();
            let ua = (text.lines())
                .find(|l| l.to_ascii_lowercase().starts_with("user-agent:"))
                .unwrap_or("");
            let first = text.lines().next().unwrap_or("").to_string();
            seen.lock().unwrap().push(format!("{first} | {ua}"));
            let _ = s.write_all(answer.as_bytes()).await;
        });
    }
}

fn nft(ns: &str, args: &[&str]) {
    sh(exec_ns(ns, "nft", args));
}

/// The portal in front of p0: UDP dropped, TCP dropped but port 80, which goes to the
/// portal's server (10.0.0.1:8080).
fn portal_up(ns: &str) {
    nft(ns, &["add", "table", "inet", "braidcap"]);
    let chain = |name: &str, spec: &str| {
        nft(ns, &["add", "chain", "inet", "braidcap", name, spec]);
    };
    chain("nat", "{ type nat hook output priority -100 ; }");
    chain("out", "{ type filter hook output priority 0 ; }");
    let rule = |chain: &str, r: &str| {
        let mut args = vec!["add", "rule", "inet", "braidcap", chain];
        args.extend(r.split_whitespace());
        nft(ns, &args);
    };
    rule(
        "nat",
        "oifname \"p0\" tcp dport 80 dnat ip to 10.0.0.1:8080",
    );
    rule("out", "oifname \"p0\" meta l4proto udp drop");
    rule("out", "oifname \"p0\" tcp dport != 8080 drop");
}

fn wifi(agent: &Agent) -> PathReport {
    let st = agent.status().snapshot();
    st.paths.into_iter().find(|p| p.name == "wifi").unwrap()
}

#[test]
fn a_path_behind_a_captive_portal_shows_captive_with_its_url_and_is_used_once_it_lets_go() {
    if skip() || no_nft() {
        return;
    }
    let s = setup_in(nsrig::Net::with_prefix("cap"), 4 << 20);
    let net = s.net.clone();
    let portal_seen = Arc::new(Mutex::new(Vec::new()));
    let check_seen = Arc::new(Mutex::new(Vec::new()));
    let (ps, cs) = (portal_seen.clone(), check_seen.clone());
    let ((), _portal) = spawn_in(&net.s, move |ready| async move {
        let redirect: &'static str = Box::leak(
            format!("HTTP/1.1 302 Found\r\nLocation: {LOGIN}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                .into_boxed_str(),
        );
        let bind = |a: &str| TcpListener::bind(a.parse::<SocketAddr>().unwrap());
        let (portal, check) = (bind("10.0.0.1:8080").await, bind("10.0.0.1:80").await);
        tokio::spawn(responder(portal.unwrap(), redirect, ps));
        let no_content = "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n";
        tokio::spawn(responder(check.unwrap(), no_content, cs));
        ready.send(()).unwrap();
        std::future::pending::<()>().await;
    });
    portal_up(&net.c);
    let mut cfg = agent_cfg(&["wifi=p0", "lte=p1"], s.key.clone(), s.server_pub);
    cfg.captive_check = Some(CheckUrl::parse("http://10.0.0.1/generate_204").unwrap());
    let (web, n2) = (s.web, net.clone());
    let (captive_at, shown, carrying_at, o) = net.client(move || async move {
        let t0 = Instant::now();
        let agent = Agent::start(cfg).await.unwrap();
        let shown = loop {
            let w = wifi(&agent);
            if w.state == Some(ShownState::Captive) && w.portal_url.is_some() {
                break w;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "not captive within 5 s: {w:?}"
            );
            nsrig::sleep(50).await;
        };
        let captive_at = t0.elapsed();
        // A download meanwhile goes on lte only; then the user logs in.
        let o = download(agent.socks.unwrap(), web).await;
        let rx0 = n2.rx_bytes(0);
        sh(exec_ns(
            &n2.c,
            "nft",
            &["delete", "table", "inet", "braidcap"],
        ));
        let t1 = Instant::now();
        let dl2 = tokio::spawn(download(agent.socks.unwrap(), web));
        while n2.rx_bytes(0) < rx0 + 200_000 {
            assert!(
                t1.elapsed() < Duration::from_secs(5),
                "wifi carries no data 5 s after the portal let go: {:?}",
                wifi(&agent)
            );
            nsrig::sleep(20).await;
        }
        let carrying_at = t1.elapsed();
        let _ = dl2.await;
        (captive_at, shown, carrying_at, o)
    });
    let portal = portal_seen.lock().unwrap().clone();
    eprintln!(
        "captive shown {captive_at:?} after the start ({:?}); wifi carried data {carrying_at:?} \
         after the portal let go; the portal saw {portal:?}; the check URL saw {} requests",
        shown.portal_url,
        check_seen.lock().unwrap().len()
    );
    assert_eq!(shown.portal_url.as_deref(), Some(LOGIN));
    assert_eq!(
        o.bytes.len(),
        s.data.len(),
        "the download during the portal"
    );
    assert!(
        o.bytes == *s.data,
        "the download during the portal is not exact"
    );
    assert!(!portal.is_empty());
    assert!(
        portal.iter().all(
            |r| r.starts_with("GET /generate_204 ") && r.contains("braid captive portal check")
        ),
        "something but the checks went to the portal: {portal:?}"
    );
}
