//! IPv6 end to end in TUN mode (issue 24, item 2): `braid agent --tun` whose two paths
//! reach the braid server over IPv6, one over an IPv6-only link and one over a dual-stack
//! link (kernel-shaped, 16 and 8 Mbit/s down), downloading from an IPv6 destination that
//! only the server namespace has. Root and namespaces are needed; elsewhere the test prints
//! why it skips. It takes the testbed's run lock, like the other TUN tests.
//!
//! `BRAID_V6_MB` (default 40) sets the download's size.

use crate::tunrig;

use braid_testbed::lock::{RunLock, LOCK_FILE};
use std::path::Path;
use tunrig::*;

use crate::SERIAL;

/// The links: a WiFi-like 16/8 Mbit/s and an LTE-like 8/4 Mbit/s with 80 ms queues.
const LINKS: [Shaped; 2] = [HOME_WIFI, HOME_LTE];

/// Regression: braid sent 1472-byte UDP payloads on every path, 1520-byte packets over
/// IPv6, more than the links' 1500-byte MTU: IPv6 paths lost every full-size packet and a
/// download over them ran at ~3 Mbit/s. Now each path's datagrams fit its family and
/// route (`braid_net::pmtu`): 40 MB from an IPv6 destination over an IPv6-only and a
/// dual-stack path arrive exact at 0.85 of the links' sum or more, with both paths
/// carrying and both going to the server's IPv6 address.
#[test]
fn tun_downloads_over_an_ipv6_only_and_a_dual_stack_path_at_the_links_sum() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let name = "tun_downloads_over_an_ipv6_only_and_a_dual_stack_path_at_the_links_sum";
    if let Some(why) = braid_testbed::unavailable_reason() {
        println!("skipping {name}: {why}");
        return;
    }
    if braid_testbed::cmd::which("curl").is_none() {
        println!("skipping {name}: curl is not installed (scripts/test installs it)");
        return;
    }
    let _lock = RunLock::acquire(Path::new(LOCK_FILE)).expect("run lock");
    let mut rig = Rig::new_shaped_v6("v6t", &LINKS);
    rig.start_agent_v6(&[]);
    let c = rig.topo.client.clone();
    let mb: f64 = std::env::var("BRAID_V6_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40.0);
    let n = (mb * 1e6) as u64;
    let url = format!("http://[{DEST6}]:{HTTP_PORT}/{n}");
    let d = curl(&c, &url, 120).unwrap_or_else(|e| panic!("{e}\n{}", rig.agent_log()));
    assert_eq!(d.bytes, n, "every byte arrives");
    assert_eq!(d.sha, body_sha(n), "SHA-256 of the body");
    let ratio = d.bps() / rig.sum_bps();
    println!(
        "IPv6 download over an IPv6-only and a dual-stack path: {} MB in {:.2} s = {:.2} Mbit/s, \
         {ratio:.3} of the links' sum ({:.0} Mbit/s)",
        n / 1_000_000,
        d.secs,
        d.bps() / 1e6,
        rig.sum_bps() / 1e6
    );
    let st = rig.status("agent");
    let paths = st["paths"].as_array().expect("paths").clone();
    for p in &paths {
        let remote = p["remote_address"].as_str().unwrap_or_default();
        assert!(
            remote.contains(&SERVER6.to_string()),
            "path {} goes to the server's IPv6 address, not {remote:?}",
            p["name"]
        );
        let got = p["bytes_received"].as_u64().unwrap_or(0);
        assert!(
            got > n / 10,
            "path {} carried {got} bytes of {n}: both paths carry",
            p["name"]
        );
    }
    assert_eq!(paths.len(), 2, "{paths:?}");
    assert!(
        ratio >= 0.85,
        "{ratio:.3} of the links' sum (at least 0.85); agent log:\n{}",
        rig.agent_log()
    );
}
