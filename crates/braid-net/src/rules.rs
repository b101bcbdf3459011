//! Per-destination rules of the agent: `--bypass DEST` (straight to the destination on one
//! path, never through the server) and `--pin DEST=PATH` (straight to the destination on
//! that path only). DEST is a CIDR prefix (`10.0.0.0/8`), an address (`192.0.2.7`, a /32 or
//! /128) or a domain suffix (`example.com`: the name and every name under it).
//!
//! Matching: a destination given by name is matched against the domain rules (the longest
//! suffix wins); one given by address against the CIDR rules (the longest prefix wins), and,
//! when the agent learned a name for that address from a DNS answer it carried (TUN mode),
//! first against the domain rules with that name. A destination no rule matches goes the
//! agent's usual way (the session, or direct mode while none is up).
//!
//! Owns: the rule syntax, its errors (what was wrong and what to write instead), matching,
//! and the table of names learned from DNS answers. Must not touch: sockets, paths or
//! sessions (the agent applies a [`Route`]).

use simple_dns::rdata::RData;
use std::collections::HashMap;
use std::net::IpAddr;

/// What a rule does with a matching destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Straight to the destination over one path the connection scheduler picks.
    Bypass,
    /// Straight to the destination over this path (by name) only.
    Pin(String),
}

/// Which destinations a rule matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dest {
    /// Addresses in this prefix (host bits zero).
    Cidr(IpAddr, u8),
    /// This name and every name under it (lower case, no trailing dot).
    Domain(String),
}

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub dest: Dest,
    pub action: Action,
}

/// The way a connection or flow goes, as `braid status` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// No rule: the agent's usual way.
    Default,
    /// `--bypass`.
    Bypass,
    /// `--pin ...=PATH`.
    Pin(String),
}

impl Route {
    /// `bypass`, `pin PATH`; `None` for [`Route::Default`].
    pub fn label(&self) -> Option<String> {
        match self {
            Route::Default => None,
            Route::Bypass => Some("bypass".into()),
            Route::Pin(p) => Some(format!("pin {p}")),
        }
    }
}

/// Why a rule was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("{flag} {given:?}: {why}")]
    Bad {
        flag: &'static str,
        given: String,
        why: String,
    },
}

/// The agent's rules, checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    rules: Vec<Rule>,
}

const PIN_FORM: &str = "write DEST=PATH, like sip.example.com=dsl or 192.0.2.0/24=dsl";

/// Parse one DEST (shared by `--bypass` and `--pin`).
pub fn parse_dest(s: &str) -> Result<Dest, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err(
            "empty; write a CIDR (10.0.0.0/8), an address (192.0.2.7) or a domain (example.com)"
                .into(),
        );
    }
    if let Some(rest) = t.split_once("://").map(|x| x.1) {
        let host = rest.split(['/', ':']).next().unwrap_or_default();
        return Err(format!("a URL; write the host name only, like {host}"));
    }
    if let Some((ip, len)) = t.split_once('/') {
        let ip: IpAddr = ip.parse().map_err(|_| {
            format!("{ip:?} is not an IP address; write a CIDR like 10.0.0.0/8 or 2001:db8::/32")
        })?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let len: u8 = len
            .parse()
            .ok()
            .filter(|l| *l <= max)
            .ok_or_else(|| format!("prefix length {len:?} is not 0 to {max}"))?;
        let net = mask(ip, len);
        if net != ip {
            return Err(format!("{ip}/{len} has host bits set; write {net}/{len}"));
        }
        return Ok(Dest::Cidr(ip, len));
    }
    if let Ok(ip) = t
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
    {
        return Ok(Dest::Cidr(ip, if ip.is_ipv4() { 32 } else { 128 }));
    }
    if let Some((host, port)) = t.rsplit_once(':') {
        if port.parse::<u16>().is_ok() {
            return Err(format!(
                "rules match a name or an address, not a port; write {host}"
            ));
        }
    }
    let name = t.trim_end_matches('.').to_ascii_lowercase();
    if let Some(rest) = name.strip_prefix("*.").or(name.strip_prefix('.')) {
        return Err(format!(
            "write {rest}: a domain rule matches the name and every name under it"
        ));
    }
    if name.len() > 253 {
        return Err("a domain name is at most 253 characters".into());
    }
    for label in name.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !ok {
            return Err(format!(
                "{label:?} is not a DNS label (letters, digits, '-' and '_', 1 to 63 each, \
                 separated by single dots); write a CIDR (10.0.0.0/8), an address \
                 (192.0.2.7) or a domain (example.com)"
            ));
        }
    }
    Ok(Dest::Domain(name))
}

/// `ip` with the bits after the first `len` cleared.
fn mask(ip: IpAddr, len: u8) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let m = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            IpAddr::V4((u32::from(a) & m).into())
        }
        IpAddr::V6(a) => {
            let m = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            IpAddr::V6((u128::from(a) & m).into())
        }
    }
}

impl Rules {
    /// Rules from `--bypass` values and `--pin DEST=PATH` values; `paths` are the agent's
    /// path names a pin may name (not `auto`'s). A destination given twice is an error.
    pub fn parse(bypass: &[String], pins: &[String], paths: &[&str]) -> Result<Rules, RuleError> {
        let bad = |flag, given: &str, why: String| RuleError::Bad {
            flag,
            given: given.to_string(),
            why,
        };
        let mut rules: Vec<Rule> = Vec::new();
        for b in bypass {
            let dest = parse_dest(b).map_err(|w| bad("--bypass", b, w))?;
            rules.push(Rule {
                dest,
                action: Action::Bypass,
            });
        }
        for p in pins {
            let (d, path) = p
                .rsplit_once('=')
                .ok_or_else(|| bad("--pin", p, format!("no path named; {PIN_FORM}")))?;
            let dest = parse_dest(d).map_err(|w| bad("--pin", p, w))?;
            let path = path.trim();
            if !paths.contains(&path) {
                return Err(bad(
                    "--pin",
                    p,
                    format!(
                        "no path is named {path:?}; name one of the --path names: {} (`auto` paths cannot be pinned)",
                        paths.join(", ")
                    ),
                ));
            }
            rules.push(Rule {
                dest,
                action: Action::Pin(path.to_string()),
            });
        }
        for (i, r) in rules.iter().enumerate() {
            if let Some(o) = rules[..i].iter().find(|o| o.dest == r.dest) {
                let flag = match r.action {
                    Action::Bypass => "--bypass",
                    Action::Pin(_) => "--pin",
                };
                return Err(bad(
                    flag,
                    &show(&r.dest),
                    format!(
                        "this destination already has a rule ({}); give each destination one rule",
                        describe(o)
                    ),
                ));
            }
        }
        Ok(Rules { rules })
    }

    /// No rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rules, in the order given.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The route of a destination given by name (an address written as a name counts as
    /// the address).
    pub fn route_name(&self, name: &str) -> Route {
        if let Ok(ip) = name.parse::<IpAddr>() {
            return self.route_ip(ip);
        }
        let name = name.trim_end_matches('.');
        self.rules
            .iter()
            .filter_map(|r| match &r.dest {
                Dest::Domain(d) if suffix_of(d, name) => Some((d.len(), r)),
                _ => None,
            })
            .max_by_key(|(n, _)| *n)
            .map_or(Route::Default, |(_, r)| route_of(r))
    }

    /// The route of a destination given by address.
    pub fn route_ip(&self, ip: IpAddr) -> Route {
        let ip = canonical(ip);
        self.rules
            .iter()
            .filter_map(|r| match r.dest {
                Dest::Cidr(net, len) if net.is_ipv4() == ip.is_ipv4() && mask(ip, len) == net => {
                    Some((len, r))
                }
                _ => None,
            })
            .max_by_key(|(n, _)| *n)
            .map_or(Route::Default, |(_, r)| route_of(r))
    }

    /// Whether any domain rule matches `name` (the names worth remembering from DNS).
    pub fn has_domain_match(&self, name: &str) -> bool {
        !matches!(self.route_name(name), Route::Default) && name.parse::<IpAddr>().is_err()
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it stands for.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// `name` is `suffix` or a name under it (case-insensitive).
fn suffix_of(suffix: &str, name: &str) -> bool {
    let (n, s) = (name.len(), suffix.len());
    n >= s
        && name[n - s..].eq_ignore_ascii_case(suffix)
        && (n == s || name.as_bytes()[n - s - 1] == b'.')
}

fn route_of(r: &Rule) -> Route {
    match &r.action {
        Action::Bypass => Route::Bypass,
        Action::Pin(p) => Route::Pin(p.clone()),
    }
}

fn show(d: &Dest) -> String {
    match d {
        Dest::Cidr(ip, len) => format!("{ip}/{len}"),
        Dest::Domain(n) => n.clone(),
    }
}

/// A rule as `check-config` and the errors say it: `bypass 10.0.0.0/8`, `pin example.com=dsl`.
pub fn describe(r: &Rule) -> String {
    match &r.action {
        Action::Bypass => format!("bypass {}", show(&r.dest)),
        Action::Pin(p) => format!("pin {}={p}", show(&r.dest)),
    }
}

/// Names the agent learned for addresses from the DNS answers it carried (TUN mode), kept
/// only for names a domain rule matches. Bounded: when full, it starts over.
#[derive(Debug, Default)]
pub struct LearnedNames {
    by_ip: HashMap<IpAddr, String>,
}

/// Addresses remembered at most.
const LEARNED_MAX: usize = 4096;

impl LearnedNames {
    /// Remember the addresses answer `dns` (a DNS message) gives for names `rules` match.
    /// Anything that does not parse is ignored.
    pub fn learn(&mut self, rules: &Rules, dns: &[u8]) {
        let Ok(p) = simple_dns::Packet::parse(dns) else {
            return;
        };
        let asked: Vec<String> = p.questions.iter().map(|q| q.qname.to_string()).collect();
        for a in &p.answers {
            let ip: IpAddr = match &a.rdata {
                RData::A(x) => std::net::Ipv4Addr::from(x.address).into(),
                RData::AAAA(x) => std::net::Ipv6Addr::from(x.address).into(),
                _ => continue,
            };
            // The name asked (a CNAME chain's end has another name), then the record's.
            let owner = a.name.to_string();
            let name = asked
                .iter()
                .chain(std::iter::once(&owner))
                .find(|n| rules.has_domain_match(n));
            if let Some(n) = name {
                if self.by_ip.len() >= LEARNED_MAX {
                    self.by_ip.clear();
                }
                self.by_ip.insert(ip, n.clone());
            }
        }
    }

    /// The name learned for `ip`.
    pub fn name_of(&self, ip: IpAddr) -> Option<&str> {
        self.by_ip.get(&canonical(ip)).map(String::as_str)
    }
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
