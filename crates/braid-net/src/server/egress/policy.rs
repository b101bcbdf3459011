//! The egress decision, without sockets: may this agent's connection or datagram go to
//! this address and port? Built-in rules refuse the server's own addresses and loopback,
//! link-local (the cloud metadata service at 169.254.169.254 among them), unspecified,
//! multicast and broadcast addresses, and with `deny_private` the private and unique-local
//! ranges; the operator's rules, global and per agent key, allow or deny more.
//!
//! Which rule decides: of all the rules that match the destination, the most specific one:
//! the longest prefix, then a rule with ports over one without, then an agent's own rule
//! over a global one over a built-in one, then deny over allow. No rule matching: allowed.
//! So `allow 127.0.0.0/8` opens loopback (it ties with the built-in rule and wins it),
//! while `allow 0.0.0.0/0:443` does not (the built-in 127.0.0.0/8 is more specific).
//!
//! Owns: [`EgressPolicy`], [`Decision`], the built-in rules. Must not touch: sockets,
//! reading the server's addresses (the caller passes [`HostAddrs`]), counting and logging
//! refusals.

use super::rule::{canonical, Cidr, Rule};
use braid_crypto::PublicKey;
use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::LazyLock;

/// Allow or deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Let it through.
    Allow,
    /// Refuse it.
    Deny,
}

/// Why a built-in rule exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builtin {
    /// 127.0.0.0/8, ::1.
    Loopback,
    /// An address on one of the server's interfaces.
    ThisServer,
    /// 169.254.0.0/16, fe80::/10 (the cloud metadata service).
    LinkLocal,
    /// 0.0.0.0/8, :: (a connection to 0.0.0.0 reaches this machine).
    Unspecified,
    /// 224.0.0.0/4, ff00::/8.
    Multicast,
    /// 255.255.255.255 and the broadcast addresses of the server's networks.
    Broadcast,
    /// 10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7 (only with `deny_private`).
    Private,
}

impl Builtin {
    fn name(self) -> &'static str {
        match self {
            Builtin::Loopback => "loopback",
            Builtin::ThisServer => "this server's address",
            Builtin::LinkLocal => "link-local",
            Builtin::Unspecified => "unspecified",
            Builtin::Multicast => "multicast",
            Builtin::Broadcast => "broadcast",
            Builtin::Private => "private (deny_private)",
        }
    }
}

/// Where a rule comes from; a later variant wins a tie.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// Built in (the defaults, `deny_private`).
    Builtin,
    /// The operator's global rules (`[egress]`, `--egress-allow`, `--egress-deny`).
    Global,
    /// The operator's rules for one agent key (`[egress.agent."KEY"]`).
    Agent,
}

/// The rule that decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Matched {
    /// A built-in rule.
    Builtin(Builtin, Cidr),
    /// One of the operator's rules.
    Rule(Source, Action, Rule),
    /// None matched: allowed.
    None,
}

/// A decision and the rule behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Whether the destination may be reached.
    pub allowed: bool,
    /// The rule that decided.
    pub rule: Matched,
}

impl fmt::Display for Matched {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Matched::Builtin(b, net) => write!(f, "deny {net} (default: {})", b.name()),
            Matched::Rule(src, act, rule) => {
                let act = if *act == Action::Allow {
                    "allow"
                } else {
                    "deny"
                };
                let src = if *src == Source::Agent {
                    "this agent's rule"
                } else {
                    "global rule"
                };
                write!(f, "{act} {rule} ({src})")
            }
            Matched::None => write!(f, "no rule (allowed)"),
        }
    }
}

/// The server's own addresses, read by the caller (`egress::host`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostAddrs {
    /// Addresses on its interfaces.
    pub own: Vec<IpAddr>,
    /// Broadcast addresses of its IPv4 networks.
    pub broadcast: Vec<IpAddr>,
}

/// The server's egress rules (`ServerConfig::egress`); the defaults are safe (module doc).
#[derive(Debug, Clone, Default)]
pub struct EgressPolicy {
    /// Also refuse the private and unique-local ranges (recommended on a shared server).
    pub deny_private: bool,
    global: Vec<(Action, Rule)>,
    agents: HashMap<PublicKey, Vec<(Action, Rule)>>,
}

const ALWAYS: &[(&str, Builtin)] = &[
    ("127.0.0.0/8", Builtin::Loopback),
    ("::1/128", Builtin::Loopback),
    ("0.0.0.0/8", Builtin::Unspecified),
    ("::/128", Builtin::Unspecified),
    ("169.254.0.0/16", Builtin::LinkLocal),
    ("fe80::/10", Builtin::LinkLocal),
    ("224.0.0.0/4", Builtin::Multicast),
    ("ff00::/8", Builtin::Multicast),
    ("255.255.255.255/32", Builtin::Broadcast),
];

const PRIVATE: &[(&str, Builtin)] = &[
    ("10.0.0.0/8", Builtin::Private),
    ("172.16.0.0/12", Builtin::Private),
    ("192.168.0.0/16", Builtin::Private),
    ("100.64.0.0/10", Builtin::Private),
    ("fc00::/7", Builtin::Private),
];

/// [`ALWAYS`] and [`PRIVATE`] parsed once.
static BUILTIN: LazyLock<[Vec<(Cidr, Builtin)>; 2]> = LazyLock::new(|| {
    let parse = |v: &[(&str, Builtin)]| {
        v.iter()
            .filter_map(|(s, b)| Some((s.parse().ok()?, *b)))
            .collect()
    };
    [parse(ALWAYS), parse(PRIVATE)]
});

/// How a matching rule ranks (the largest decides; module doc).
type Rank = (u8, bool, Source, bool);

fn rank(net: &Cidr, ports: bool, src: Source, act: Action) -> Rank {
    (net.prefix_len(), ports, src, act == Action::Deny)
}

impl EgressPolicy {
    /// Add a global rule.
    pub fn add(&mut self, action: Action, rule: Rule) {
        self.global.push((action, rule));
    }

    /// Add a rule for one agent key.
    pub fn add_for(&mut self, key: PublicKey, action: Action, rule: Rule) {
        self.agents.entry(key).or_default().push((action, rule));
    }

    /// Allow `rule` globally (e.g. `127.0.0.0/8` for tests and `braid bench`, whose
    /// targets listen on loopback).
    pub fn allow(&mut self, rule: Rule) {
        self.add(Action::Allow, rule);
    }

    /// The operator's rules: global ones and those of every agent key.
    pub fn rule_count(&self) -> usize {
        self.global.len() + self.agents.values().map(Vec::len).sum::<usize>()
    }

    /// May `agent` reach `dest`, with the server at `host`?
    pub fn decide(&self, agent: &PublicKey, dest: SocketAddr, host: &HostAddrs) -> Decision {
        let dest = SocketAddr::new(canonical(dest.ip()), dest.port());
        let [always, private] = &*BUILTIN;
        let private = if self.deny_private { &private[..] } else { &[] };
        // An own address in a built-in block (127.0.0.1, a link-local one) is refused as
        // that block is: an allow of the block opens it.
        let covered = |a: &&IpAddr| always.iter().any(|(net, _)| net.contains(**a));
        let own = host.own.iter().filter(|a| !covered(a));
        let broadcast = host.broadcast.iter();
        let hosts = (own.map(|a| (Cidr::host(*a), Builtin::ThisServer)))
            .chain(broadcast.map(|a| (Cidr::host(*a), Builtin::Broadcast)));
        let builtin = (always.iter().chain(private).copied())
            .chain(hosts)
            .filter(|(net, _)| net.contains(dest.ip()))
            .map(|(net, b)| {
                (
                    rank(&net, false, Source::Builtin, Action::Deny),
                    Cand::B(b, net),
                )
            });
        let own = self.agents.get(agent).into_iter().flatten();
        let rules = (self.global.iter().map(|r| (Source::Global, r)))
            .chain(own.map(|r| (Source::Agent, r)))
            .filter(|(_, (_, r))| r.matches(dest))
            .map(|(src, (act, r))| {
                let rk = rank(&r.net, r.ports.is_some(), src, *act);
                (rk, Cand::R(src, *act, r))
            });
        match builtin.chain(rules).max_by_key(|(rk, _)| *rk) {
            Some((rk, Cand::B(b, net))) => Decision {
                allowed: !rk.3,
                rule: Matched::Builtin(b, net),
            },
            Some((rk, Cand::R(src, act, r))) => Decision {
                allowed: !rk.3,
                rule: Matched::Rule(src, act, r.clone()),
            },
            None => Decision {
                allowed: true,
                rule: Matched::None,
            },
        }
    }
}

/// A matching rule, before the winner is copied out.
enum Cand<'a> {
    B(Builtin, Cidr),
    R(Source, Action, &'a Rule),
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
