//! NAT64 end to end (issue 35, item 4): `braid agent --tun --nat64-prefix fd64:64::/96`
//! with one path over an IPv6-only link through a real userspace NAT64 (`tayga`) and one
//! over an IPv4 link, to a braid server listening on IPv4 alone (kernel-shaped links, 40
//! and 20 Mbit/s down). Root, namespaces and tayga are needed; elsewhere the test prints
//! why it skips. It takes the testbed's run lock, like the other TUN tests.

use crate::tunrig;

use braid_testbed::lock::{RunLock, LOCK_FILE};
use std::path::Path;
use tunrig::*;

use crate::SERIAL;

/// The links: 40/20 Mbit/s (the IPv6-only one, through tayga) and 20/10 Mbit/s (IPv4).
const LINKS: [Shaped; 2] = [
    Shaped {
        down_mbit: 40.0,
        up_mbit: 20.0,
        queue_ms: 40,
    },
    Shaped {
        down_mbit: 20.0,
        up_mbit: 10.0,
        queue_ms: 40,
    },
];

/// 20 MB from an IPv4 destination over an IPv6-only path through tayga and an IPv4 path
/// arrive exact at 0.85 of the links' sum or more, in one session whose two paths both
/// carry, the IPv6-only one to the server's address synthesized from the prefix. Without
/// `--nat64-prefix` (`BRAID_NAT64_BREAK=1`) the IPv6-only path has no server address and
/// the test fails.
#[test]
#[ignore = "a miss (issue 35 item 4): the IPv6 path carries 1-1.5 MB of 20 in most runs, \
            0.34-0.75 of the sum (bar 0.85); run with --ignored"]
fn tun_downloads_over_an_ipv6_only_path_through_tayga_nat64_and_an_ipv4_path() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let name = "tun_downloads_over_an_ipv6_only_path_through_tayga_nat64_and_an_ipv4_path";
    if let Some(why) = braid_testbed::unavailable_reason() {
        println!("skipping {name}: {why}");
        return;
    }
    for tool in ["curl", "tayga"] {
        if braid_testbed::cmd::which(tool).is_none() {
            println!("skipping {name}: {tool} is not installed (scripts/test installs it)");
            return;
        }
    }
    let _lock = RunLock::acquire(Path::new(LOCK_FILE)).expect("run lock");
    let (mut rig, _tayga) = Rig::new_shaped_nat64("n64", &LINKS);
    let broken = std::env::var_os("BRAID_NAT64_BREAK").is_some();
    rig.start_agent_nat64(if broken {
        &[]
    } else {
        &["--nat64-prefix", NAT64_PREFIX]
    });
    let n = 20_000_000u64;
    let url = format!("http://{DEST4}:{HTTP_PORT}/{n}");
    let c = rig.topo.client.clone();
    let d = curl(&c, &url, 60).unwrap_or_else(|e| panic!("{e}\n{}", rig.agent_log()));
    assert_eq!(d.bytes, n, "every byte arrives");
    assert_eq!(d.sha, body_sha(n), "SHA-256 of the body");
    let ratio = d.bps() / rig.sum_bps();
    println!(
        "IPv4 download over an IPv6-only path through tayga and an IPv4 path: {} MB in \
         {:.2} s = {:.2} Mbit/s, {ratio:.3} of the links' sum ({:.0} Mbit/s)",
        n / 1_000_000,
        d.secs,
        d.bps() / 1e6,
        rig.sum_bps() / 1e6
    );
    let st = rig.status("agent");
    let paths = st["paths"].as_array().expect("paths").clone();
    let synthesized = "fd64:64::a00:1";
    for p in &paths {
        let remote = p["remote_address"].as_str().unwrap_or_default();
        let want = if p["name"] == "l0" {
            synthesized
        } else {
            "10.0.0.1"
        };
        assert!(
            remote.contains(want),
            "path {} goes to {want}, not {remote:?}; agent log:\n{}",
            p["name"],
            rig.agent_log()
        );
        let got = p["bytes_received"].as_u64().unwrap_or(0);
        assert!(
            got > n / 10,
            "path {} carried {got} bytes of {n}: both paths carry; agent log:\n{}",
            p["name"],
            rig.agent_log()
        );
    }
    assert_eq!(paths.len(), 2, "{paths:?}");
    let server = rig.status("server");
    let sessions = server["sessions"].as_array().expect("sessions");
    assert_eq!(sessions.len(), 1, "one session: {server}");
    let spaths = sessions[0]["paths"].as_array().expect("session paths");
    assert_eq!(spaths.len(), 2, "the session has both paths: {server}");
    assert!(
        ratio >= 0.85,
        "{ratio:.3} of the links' sum (at least 0.85); agent log:\n{}",
        rig.agent_log()
    );
}
