//! A NAT64 path for the TUN rig (issue 35, item 4): the shaped rig with link 0 IPv6-only
//! (its IPv4 addresses removed, IPv6 on both ends) and a userspace NAT64, `tayga`, in the
//! server namespace translating [`NAT64_PREFIX`] to IPv4. The braid server keeps listening
//! on `0.0.0.0:4433` (an IPv4 socket: nothing of it is reachable over IPv6 but through
//! tayga) at [`braid_testbed::netns::SERVICE_IP`]; link 1 stays IPv4.

use super::*;

/// The NAT64 prefix tayga translates: a network-specific one, as RFC 6052 (section 3.1)
/// forbids the well-known 64:ff9b::/96 for private IPv4 addresses like the rig's, and
/// tayga refuses to translate those under it (ICMPv6 unreachable).
pub const NAT64_PREFIX: &str = "fd64:64::/96";

/// The IPv4 pool tayga maps IPv6 clients into, and its own IPv6 address.
const POOL4: &str = "192.168.255.0/24";
const TAYGA4: &str = "192.168.255.1";
const TAYGA6: &str = "fd64::1";

impl Rig {
    /// [`Rig::new_shaped`] with link 0 IPv6-only and tayga in the server namespace; returns
    /// the rig and tayga (it stops when dropped).
    pub fn new_shaped_nat64(tag: &str, shaped: &[Shaped]) -> (Rig, Helper) {
        let rig = Rig::new_shaped(tag, shaped);
        let (c, s) = (rig.topo.client.clone(), rig.topo.server.clone());
        let p0 = rig.topo.paths[0].clone();
        let (c6, s6) = link6(0);
        for (ns, dev, a) in [(&c, &p0.client_if, c6), (&s, &p0.server_if, s6)] {
            let key = format!("net.ipv6.conf.{dev}.disable_ipv6");
            must(sysctl_ns(ns, &key, "0"), "sysctl ipv6");
            let a = format!("{a}/64");
            must(
                ip_ns(ns, &["-6", "addr", "add", &a, "dev", dev, "nodad"]),
                "v6 addr",
            );
        }
        // Link 0 carries IPv6 alone: the client's IPv4 address goes, and the only way to
        // the server over it is the prefix, through tayga.
        let v4 = format!("{}/24", p0.client_ip);
        must(
            ip_ns(&c, &["addr", "del", &v4, "dev", &p0.client_if]),
            "v4 off link 0",
        );
        let gw = s6.to_string();
        let r = ["-6", "route", "add", NAT64_PREFIX, "via", &gw, "dev"];
        let mut args = r.to_vec();
        args.push(&p0.client_if);
        must(ip_ns(&c, &args), "route to the NAT64 prefix");
        let tayga = start_tayga(&s, rig.dir.path());
        (rig, tayga)
    }

    /// `braid agent --tun` with path `l0` bound to link 0's IPv6 address and `l1` to link
    /// 1's IPv4 address, to the server's IPv4 address, with `extra` (`--nat64-prefix`);
    /// waits until a small download through the tunnel works.
    pub fn start_agent_nat64(&mut self, extra: &[&str]) {
        let (c0, _) = link6(0);
        let l0 = format!("l0={c0}");
        let l1 = format!("l1={}", self.topo.paths[1].client_ip);
        let mut args = vec!["--tun", TUN, "--path", &l0, "--path", &l1];
        args.extend_from_slice(extra);
        self.launch_agent_paths(&args, false);
        let c = self.topo.client.clone();
        self.wait_download(&c);
    }
}

/// tayga in namespace `ns`: its TUN device `nat64` made (`tayga --mktun`), up, routed to
/// for the prefix and the pool, forwarding on; then tayga itself in the foreground.
fn start_tayga(ns: &str, dir: &Path) -> Helper {
    let conf = dir.join("tayga.conf");
    let data = dir.join("tayga");
    std::fs::create_dir_all(&data).expect("tayga data dir");
    let text = format!(
        "tun-device nat64\nipv4-addr {TAYGA4}\nipv6-addr {TAYGA6}\nprefix {NAT64_PREFIX}\n\
         dynamic-pool {POOL4}\ndata-dir {}\n",
        data.display()
    );
    std::fs::write(&conf, text).expect("tayga.conf");
    let conf_s = conf.display().to_string();
    must(
        exec_ns(ns, "tayga", &["--mktun", "-c", &conf_s]),
        "tayga --mktun",
    );
    must(
        sysctl_ns(ns, "net.ipv6.conf.nat64.disable_ipv6", "0"),
        "sysctl ipv6",
    );
    for args in [
        &["link", "set", "nat64", "up"][..],
        // An IPv4 packet grows by 20 bytes into IPv6: 1480 on the IPv4 side fills link
        // 0's 1500-byte MTU (at 1500, full-size packets towards the client were lost).
        &["link", "set", "nat64", "mtu", "1480"],
        &["route", "add", POOL4, "dev", "nat64"],
        &["-6", "route", "add", NAT64_PREFIX, "dev", "nat64"],
    ] {
        must(ip_ns(ns, args), "tayga's device");
    }
    for key in ["net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding"] {
        must(sysctl_ns(ns, key, "1"), "forwarding");
    }
    let tayga = braid_testbed::cmd::which("tayga").expect("tayga");
    let args = ["-d".to_string(), "-c".to_string(), conf_s];
    must(
        Helper::spawn("tayga", ns, &tayga, &args, &dir.join("tayga.log")),
        "tayga",
    )
}
