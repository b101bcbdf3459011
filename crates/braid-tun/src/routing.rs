//! What sends the device's traffic into the TUN device, and keeps braid's own off it: policy
//! routing as WireGuard's tools do it. The carried prefixes are routes in a table of their
//! own (excluded prefixes are `throw` routes there); one rule sends every packet that does
//! not carry braid's firewall mark to that table, and one before it lets the main table's
//! specific routes (the local networks) win over the tunnel's default. braid's path sockets
//! carry the mark (SO_MARK), so they never loop into the tunnel. With `dns`, two rules before
//! both send every unmarked DNS query (UDP or TCP to port 53) to the table, so a resolver on
//! a local network is not asked around the tunnel (the agent has the server resolve it).
//!
//! `Routing` removes what it installed when dropped, and `install` first removes what a
//! killed agent left (rules at braid's three preferences, routes in braid's table), so a
//! restart never stacks rules.
//!
//! Owns: the rules at `priority - 1` (DNS), `priority` and `priority + 1` and the routes of
//! `table`. Must not
//! touch: any other rule or table, the device itself.

use crate::netlink::{Mode, Netlink};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleFlags, RuleMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use std::fmt;
use std::io;
use std::net::IpAddr;
use std::str::FromStr;

/// An address prefix, `ADDR/LEN` (a bare address is a host prefix).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub len: u8,
}

impl Cidr {
    pub fn is_ipv4(&self) -> bool {
        self.addr.is_ipv4()
    }
    fn max_len(&self) -> u8 {
        if self.is_ipv4() {
            32
        } else {
            128
        }
    }
    /// Every IPv4 address, every IPv6 address.
    pub fn defaults() -> Vec<Cidr> {
        vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()]
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Cidr, String> {
        let bad =
            || format!("{s:?} is not an address prefix (write it as 10.0.0.0/8 or 2001:db8::/32)");
        let (a, l) = s.split_once('/').unwrap_or((s, ""));
        let addr: IpAddr = a.trim().parse().map_err(|_| bad())?;
        let mut c = Cidr { addr, len: 0 };
        c.len = if l.is_empty() {
            c.max_len()
        } else {
            l.trim().parse().map_err(|_| bad())?
        };
        if c.len > c.max_len() {
            return Err(bad());
        }
        Ok(c)
    }
}

/// What to route through the tunnel.
#[derive(Debug, Clone)]
pub struct RoutingConfig {
    /// The routing table holding the tunnel's routes.
    pub table: u32,
    /// The firewall mark on braid's own sockets.
    pub fwmark: u32,
    /// Preference of the first of braid's two rules.
    pub priority: u32,
    /// Prefixes carried (by default everything, IPv4 and IPv6).
    pub include: Vec<Cidr>,
    /// Prefixes left out (they go where they would without braid).
    pub exclude: Vec<Cidr>,
    /// Send every DNS query (UDP and TCP, port 53) into the tunnel too, also to a resolver on a
    /// local network that the main table would reach directly: the agent has the server
    /// resolve it, so no name leaks through a local link.
    pub dns: bool,
}

/// braid's table and mark (0xb1d), and rule preferences below the main table's (32766): the
/// DNS rule at `PRIORITY - 1`, the main table's specific routes at `PRIORITY`, the tunnel at
/// `PRIORITY + 1`.
pub const TABLE: u32 = 0xb1d;
pub const FWMARK: u32 = 0xb1d;
pub const PRIORITY: u32 = 31_000;

impl Default for RoutingConfig {
    fn default() -> Self {
        RoutingConfig {
            table: TABLE,
            fwmark: FWMARK,
            priority: PRIORITY,
            include: Cidr::defaults(),
            exclude: Vec::new(),
            dns: true,
        }
    }
}

/// Why routing could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum RoutingError {
    #[error("cannot change routing ({what}): {source}; braid agent --tun needs CAP_NET_ADMIN")]
    Netlink { what: String, source: io::Error },
}

/// Installed routing; removed on drop.
pub struct Routing {
    cfg: RoutingConfig,
    removed: bool,
}

fn family(v4: bool) -> AddressFamily {
    if v4 {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    }
}

fn route(cfg: &RoutingConfig, c: &Cidr, oif: Option<u32>) -> RouteMessage {
    let mut m = RouteMessage::default();
    m.header.address_family = family(c.is_ipv4());
    m.header.destination_prefix_length = c.len;
    m.header.table = 252; // RT_TABLE_COMPAT: the real table is the attribute
    m.header.protocol = RouteProtocol::Static;
    m.header.scope = RouteScope::Universe;
    m.header.kind = if oif.is_some() {
        RouteType::Unicast
    } else {
        RouteType::Throw
    };
    if c.len > 0 {
        m.attributes
            .push(RouteAttribute::Destination(RouteAddress::from(c.addr)));
    }
    if let Some(i) = oif {
        m.attributes.push(RouteAttribute::Oif(i));
    }
    m.attributes.push(RouteAttribute::Table(cfg.table));
    m
}

/// Unmarked DNS (UDP, or TCP if `tcp`, to port 53) goes to braid's table, before the main
/// table's local routes.
fn dns_rule(cfg: &RoutingConfig, v4: bool, tcp: bool) -> RuleMessage {
    use netlink_packet_route::rule::RulePortRange;
    use netlink_packet_route::IpProtocol;
    let mut dns = RuleMessage::default();
    dns.header.family = family(v4);
    dns.header.table = 252;
    dns.header.action = RuleAction::ToTable;
    dns.attributes
        .push(RuleAttribute::Priority(cfg.priority - 1));
    // Mark 0 under braid's mask: braid's own sockets (a server on port 53) never match.
    dns.attributes.push(RuleAttribute::FwMark(0));
    dns.attributes.push(RuleAttribute::FwMask(cfg.fwmark));
    let proto = if tcp {
        IpProtocol::Tcp
    } else {
        IpProtocol::Udp
    };
    dns.attributes.push(RuleAttribute::IpProtocol(proto));
    dns.attributes
        .push(RuleAttribute::DestinationPortRange(RulePortRange {
            start: 53,
            end: 53,
        }));
    dns.attributes.push(RuleAttribute::Table(cfg.table));
    dns
}

fn rules(cfg: &RoutingConfig, v4: bool) -> [RuleMessage; 2] {
    let mut main = RuleMessage::default();
    main.header.family = family(v4);
    main.header.table = 254;
    main.header.action = RuleAction::ToTable;
    main.attributes.push(RuleAttribute::Priority(cfg.priority));
    main.attributes.push(RuleAttribute::Table(254));
    main.attributes.push(RuleAttribute::SuppressPrefixLen(0));
    let mut tunnel = RuleMessage::default();
    tunnel.header.family = family(v4);
    tunnel.header.table = 252;
    tunnel.header.action = RuleAction::ToTable;
    tunnel.header.flags = RuleFlags::Invert;
    tunnel
        .attributes
        .push(RuleAttribute::Priority(cfg.priority + 1));
    tunnel.attributes.push(RuleAttribute::FwMark(cfg.fwmark));
    tunnel.attributes.push(RuleAttribute::FwMask(u32::MAX));
    tunnel.attributes.push(RuleAttribute::Table(cfg.table));
    [main, tunnel]
}

impl Routing {
    /// Routes `cfg.include` (less `cfg.exclude`) into device `oif`, after removing what an
    /// earlier run left.
    pub fn install(oif: u32, cfg: RoutingConfig) -> Result<Routing, RoutingError> {
        let err = |what: String| move |source| RoutingError::Netlink { what, source };
        let mut nl = Netlink::open().map_err(err("netlink".into()))?;
        remove_from(&mut nl, &cfg).map_err(err("removing an earlier run's rules".into()))?;
        // From here on, a failure removes what was installed (the drop of `r`).
        let r = Routing {
            cfg: cfg.clone(),
            removed: false,
        };
        for c in &cfg.include {
            nl.request(
                RouteNetlinkMessage::NewRoute(route(&cfg, c, Some(oif))),
                Mode::Create,
            )
            .map_err(err(format!("route {c} into the tunnel")))?;
        }
        for c in &cfg.exclude {
            nl.request(
                RouteNetlinkMessage::NewRoute(route(&cfg, c, None)),
                Mode::Create,
            )
            .map_err(err(format!("leaving {c} out of the tunnel")))?;
        }
        for v4 in [true, false] {
            if !cfg.include.iter().any(|c| c.is_ipv4() == v4) {
                continue;
            }
            for rule in rules(&cfg, v4) {
                nl.request(RouteNetlinkMessage::NewRule(rule), Mode::Create)
                    .map_err(err("a policy rule".into()))?;
            }
            for tcp in [false, true].into_iter().filter(|_| cfg.dns) {
                nl.request(
                    RouteNetlinkMessage::NewRule(dns_rule(&cfg, v4, tcp)),
                    Mode::Create,
                )
                .map_err(err("a policy rule for DNS".into()))?;
            }
        }
        Ok(r)
    }

    /// Removes the rules and routes now (also done on drop).
    pub fn remove(&mut self) -> io::Result<()> {
        self.removed = true;
        let mut nl = Netlink::open()?;
        remove_from(&mut nl, &self.cfg)
    }
}

impl Drop for Routing {
    fn drop(&mut self) {
        if !self.removed {
            if let Err(e) = self.remove() {
                tracing::warn!("could not remove braid's routing rules: {e}");
            }
        }
    }
}

/// Deletes every rule at braid's three preferences and every route in braid's table.
pub fn remove_from(nl: &mut Netlink, cfg: &RoutingConfig) -> io::Result<()> {
    // Rules first: with them gone nothing is sent into the table while its routes go.
    let (rules, routes) = ours(nl, cfg)?;
    for r in rules {
        gone(nl.request(RouteNetlinkMessage::DelRule(r), Mode::Change))?;
    }
    for r in routes {
        gone(nl.request(RouteNetlinkMessage::DelRoute(r), Mode::Change))?;
    }
    Ok(())
}

/// Deleting what is already gone is success.
fn gone(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESRCH)) => Ok(()),
        r => r,
    }
}

/// braid's rules and routes as the kernel lists them now, both families.
fn ours(
    nl: &mut Netlink,
    cfg: &RoutingConfig,
) -> io::Result<(Vec<RuleMessage>, Vec<RouteMessage>)> {
    let (mut rules, mut routes) = (Vec::new(), Vec::new());
    for v4 in [true, false] {
        let mut q = RuleMessage::default();
        q.header.family = family(v4);
        for m in nl.dump(RouteNetlinkMessage::GetRule(q))? {
            let RouteNetlinkMessage::NewRule(rule) = m else {
                continue;
            };
            let at = |a: &RuleAttribute| matches!(a, RuleAttribute::Priority(p) if (cfg.priority - 1..=cfg.priority + 1).contains(p));
            if rule.attributes.iter().any(at) {
                rules.push(rule);
            }
        }
        let mut q = RouteMessage::default();
        q.header.address_family = family(v4);
        for m in nl.dump(RouteNetlinkMessage::GetRoute(q))? {
            let RouteNetlinkMessage::NewRoute(r) = m else {
                continue;
            };
            let table =
                |a: &RouteAttribute| matches!(a, RouteAttribute::Table(t) if *t == cfg.table);
            if r.attributes.iter().any(table) {
                routes.push(r);
            }
        }
    }
    Ok((rules, routes))
}

/// How many rules and routes of braid's are installed now (for tests and status).
pub fn installed(cfg: &RoutingConfig) -> io::Result<(usize, usize)> {
    let (rules, routes) = ours(&mut Netlink::open()?, cfg)?;
    Ok((rules.len(), routes.len()))
}
