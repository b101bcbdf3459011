//! IPv6 paths for the TUN rig (issue 24, item 2): the shaped rig with IPv6 on both links,
//! link 0 IPv6-only (its IPv4 address removed) and link 1 dual-stack, and the braid server
//! listening on `[::]` with [`SERVER6`] on its loopback, routed to over both links. The
//! agent's paths go to [`SERVER6`]: over IPv6 on both links.

use super::*;

/// The braid server's IPv6 address (on the server namespace's loopback).
pub const SERVER6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x60, 0, 0, 0, 0, 0, 1);

/// Link `i`'s IPv6 addresses: the client's and the server's (`fd60:N::1`, `fd60:N::2`).
pub fn link6(i: usize) -> (Ipv6Addr, Ipv6Addr) {
    let n = i as u16 + 1;
    (
        Ipv6Addr::new(0xfd60, n, 0, 0, 0, 0, 0, 1),
        Ipv6Addr::new(0xfd60, n, 0, 0, 0, 0, 0, 2),
    )
}

impl Rig {
    /// [`Rig::new_shaped`] with IPv6 links: link 0 IPv6-only, the others dual-stack, and the
    /// braid server on `[::]:4433` (dual-stack) instead of `0.0.0.0:4433`.
    pub fn new_shaped_v6(tag: &str, shaped: &[Shaped]) -> Rig {
        let mut rig = Rig::new_shaped(tag, shaped);
        let (c, s) = (rig.topo.client.clone(), rig.topo.server.clone());
        must(
            ip_ns(
                &s,
                &["-6", "addr", "add", &format!("{SERVER6}/128"), "dev", "lo"],
            ),
            "server v6",
        );
        for (i, p) in rig.topo.paths.iter().enumerate() {
            let (c6, s6) = link6(i);
            for (ns, dev) in [(&c, &p.client_if), (&s, &p.server_if)] {
                let key = format!("net.ipv6.conf.{dev}.disable_ipv6");
                must(sysctl_ns(ns, &key, "0"), "sysctl ipv6");
            }
            let add = |ns: &str, a: Ipv6Addr, dev: &str| {
                let a = format!("{a}/64");
                must(
                    ip_ns(ns, &["-6", "addr", "add", &a, "dev", dev, "nodad"]),
                    "v6 addr",
                );
            };
            add(&c, c6, &p.client_if);
            add(&s, s6, &p.server_if);
            // Each path's source address leaves on its own link (as the IPv4 rules do),
            // and the main table reaches the server over every link (interface binds).
            let (table, gw) = ((100 + i).to_string(), s6.to_string());
            let src = c6.to_string();
            must(
                ip_ns(&c, &["-6", "rule", "add", "from", &src, "table", &table]),
                "v6 rule",
            );
            must(
                ip_ns(
                    &c,
                    &[
                        "-6",
                        "route",
                        "add",
                        "default",
                        "via",
                        &gw,
                        "dev",
                        &p.client_if,
                        "table",
                        &table,
                    ],
                ),
                "v6 route",
            );
            let metric = (i + 1).to_string();
            let to = format!("{SERVER6}/128");
            must(
                ip_ns(
                    &c,
                    &[
                        "-6",
                        "route",
                        "add",
                        &to,
                        "via",
                        &gw,
                        "dev",
                        &p.client_if,
                        "metric",
                        &metric,
                    ],
                ),
                "v6 server route",
            );
        }
        // Link 0 carries IPv6 alone.
        let p0 = &rig.topo.paths[0];
        let v4 = format!("{}/24", p0.client_ip);
        must(
            ip_ns(&c, &["addr", "del", &v4, "dev", &p0.client_if]),
            "v4 off link 0",
        );
        rig.relisten(&format!("[::]:{BRAID_PORT}"));
        rig
    }

    /// Restarts the braid server listening on `listen`.
    fn relisten(&mut self, listen: &str) {
        self.server.stop();
        self.server = spawn_server(&self.topo.server, &self.bin, self.dir.path(), listen);
    }

    /// `braid agent --tun` with path `l0` bound to link 0's IPv6 address (an IPv6-only
    /// link), `l1` to link 1's interface (dual-stack), both to `[SERVER6]:4433`; waits until
    /// a small download through the tunnel works.
    pub fn start_agent_v6(&mut self, extra: &[&str]) {
        let (c0, _) = link6(0);
        let mut args: Vec<String> = [
            "agent",
            "--tun",
            TUN,
            "--control",
            &self.path("agent.sock"),
            "--log-level",
            "info",
            "--server",
            &format!("[{SERVER6}]:{BRAID_PORT}"),
            "--server-pub",
            &self.path("server.pub"),
            "--key",
            &self.path("agent.key"),
            "--path",
            &format!("l0={c0}"),
            "--path",
            &format!("l1={}", self.topo.paths[1].client_if),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let log = self.dir.path().join("agent.log");
        let a = must(
            Helper::spawn("braid agent", &self.topo.client, &self.bin, &args, &log),
            "braid agent",
        );
        self.agent = Some(a);
        let c = self.topo.client.clone();
        self.wait_download(&c);
    }
}
