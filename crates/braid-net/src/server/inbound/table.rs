//! The decisions behind inbound ports, without sockets: which public ports the server's
//! configuration allows each agent key ([`ForwardPolicy`]) and which session holds each
//! open port ([`PortTable`]).
//!
//! Owns: parsing the allowed-port specs (`tcp:8080`, `udp:5000-5010`), the allow check,
//! claiming and releasing ports (a new session of the same key takes a port over from its
//! old one; another key's port is refused). Must not touch: sockets, tasks, sessions.

use braid_crypto::PublicKey;
use braid_proxy::inbound::{Proto, PublicPort};
use std::collections::HashMap;

/// A range of public ports of one protocol, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    /// TCP or UDP.
    pub proto: Proto,
    /// The first port.
    pub lo: u16,
    /// The last port.
    pub hi: u16,
}

impl PortRange {
    /// `tcp:8080`, `udp:5000-5010`.
    pub fn parse(spec: &str) -> Result<PortRange, String> {
        let bad = |why: &str| {
            format!("{spec:?}: {why}; expected tcp:PORT, udp:PORT or a range like udp:5000-5010")
        };
        let (proto, ports) = spec.trim().split_once(':').ok_or_else(|| bad("no ':'"))?;
        let proto = match proto {
            "tcp" => Proto::Tcp,
            "udp" => Proto::Udp,
            _ => return Err(bad("the protocol is neither tcp nor udp")),
        };
        let (lo, hi) = ports.split_once('-').unwrap_or((ports, ports));
        let num = |s: &str| match s.parse::<u16>() {
            Ok(0) | Err(_) => Err(bad("a port is 1 to 65535")),
            Ok(p) => Ok(p),
        };
        let (lo, hi) = (num(lo)?, num(hi)?);
        if lo > hi {
            return Err(bad("the range ends before it starts"));
        }
        Ok(PortRange { proto, lo, hi })
    }

    /// Whether `p` is in the range.
    pub fn contains(&self, p: PublicPort) -> bool {
        p.proto == self.proto && (self.lo..=self.hi).contains(&p.port)
    }
}

impl std::fmt::Display for PortRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.lo == self.hi {
            write!(f, "{}:{}", self.proto.name(), self.lo)
        } else {
            write!(f, "{}:{}-{}", self.proto.name(), self.lo, self.hi)
        }
    }
}

/// The public ports each agent key may have opened (the server's `[forward]` table).
#[derive(Debug, Clone, Default)]
pub struct ForwardPolicy {
    allowed: HashMap<PublicKey, Vec<PortRange>>,
}

impl ForwardPolicy {
    /// Allow `key` the ports of `range` (in addition to what it had).
    pub fn allow(&mut self, key: PublicKey, range: PortRange) {
        self.allowed.entry(key).or_default().push(range);
    }

    /// Whether `key` may have `port` opened.
    pub fn allows(&self, key: &PublicKey, port: PublicPort) -> bool {
        self.allowed
            .get(key)
            .is_some_and(|r| r.iter().any(|r| r.contains(port)))
    }

    /// What to write in the server's config file to allow `key` the refused `port`: a new
    /// line of the `[forward]` table, or, when the key has one, that line with the port
    /// added (a second line for the key is a duplicate TOML key, the file then fails).
    pub fn how_to_allow(&self, key: &PublicKey, port: PublicPort) -> String {
        let p = PortRange {
            proto: port.proto,
            lo: port.port,
            hi: port.port,
        };
        match self.allowed.get(key) {
            Some(ranges) => {
                let list: Vec<String> = (ranges.iter().chain([&p]))
                    .map(|r| format!("\"{r}\""))
                    .collect();
                format!(
                    "add it to this key's line in the [forward] table of the server's config \
                     file: \"{key}\" = [{}] (one line per key: a second one is an error)",
                    list.join(", ")
                )
            }
            None => format!(
                "add a line to the [forward] table of the server's config file (the table's \
                 header [forward] once, at the end): \"{key}\" = [\"{p}\"] (or \
                 --allow-forward {key}={p})"
            ),
        }
    }

    /// Whether no key may open any port.
    pub fn is_empty(&self) -> bool {
        self.allowed.is_empty()
    }

    /// Allow `key` (an agent's public key, base64 as in the authorized file) the ports of
    /// `specs` (`tcp:8080`, `udp:5000-5010`).
    pub fn allow_specs<S: AsRef<str>>(&mut self, key: &str, specs: &[S]) -> Result<(), String> {
        let k = braid_crypto::parse_public_key(key.trim())
            .map_err(|e| format!("forward: the key {key:?} is not an agent public key: {e}"))?;
        if specs.is_empty() {
            return Err(format!("forward: no port given for the key {key}"));
        }
        for spec in specs {
            let r = PortRange::parse(spec.as_ref()).map_err(|e| format!("forward: {e}"))?;
            self.allow(k, r);
        }
        Ok(())
    }
}

/// Who holds an open port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// The agent's key.
    pub key: PublicKey,
    /// Its session.
    pub session: u64,
}

/// The answer to a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// The port is the session's; `replaces` is the same key's older session that had it
    /// (the agent reconnected): its listener moves over.
    Granted {
        /// The session that held it before.
        replaces: Option<u64>,
    },
    /// The configuration does not allow it for this key.
    NotAllowed,
    /// Another key's session holds it.
    InUse(Owner),
}

/// Which session holds each open public port.
#[derive(Debug, Default)]
pub struct PortTable {
    owners: HashMap<PublicPort, Owner>,
}

impl PortTable {
    /// Session `session` of agent `key` asks for `port`.
    pub fn claim(
        &mut self,
        policy: &ForwardPolicy,
        key: PublicKey,
        session: u64,
        port: PublicPort,
    ) -> Claim {
        if !policy.allows(&key, port) {
            return Claim::NotAllowed;
        }
        let new = Owner { key, session };
        match self.owners.get(&port).copied() {
            Some(o) if o.key != key => Claim::InUse(o),
            Some(o) => {
                self.owners.insert(port, new);
                Claim::Granted {
                    replaces: (o.session != session).then_some(o.session),
                }
            }
            None => {
                self.owners.insert(port, new);
                Claim::Granted { replaces: None }
            }
        }
    }

    /// Give `port` up if `session` holds it (its bind failed).
    pub fn release(&mut self, port: PublicPort, session: u64) {
        if self.owners.get(&port).is_some_and(|o| o.session == session) {
            self.owners.remove(&port);
        }
    }

    /// Session `session` ended: the ports it held, now free.
    pub fn release_session(&mut self, session: u64) -> Vec<PublicPort> {
        let mine: Vec<PublicPort> = self
            .owners
            .iter()
            .filter(|(_, o)| o.session == session)
            .map(|(p, _)| *p)
            .collect();
        for p in &mine {
            self.owners.remove(p);
        }
        mine
    }

    /// Who holds `port`.
    pub fn owner(&self, port: PublicPort) -> Option<Owner> {
        self.owners.get(&port).copied()
    }

    /// The ports `session` holds, sorted.
    pub fn ports_of(&self, session: u64) -> Vec<PublicPort> {
        let mut v: Vec<PublicPort> = self
            .owners
            .iter()
            .filter(|(_, o)| o.session == session)
            .map(|(p, _)| *p)
            .collect();
        v.sort();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(proto: Proto, port: u16) -> PublicPort {
        PublicPort { proto, port }
    }

    /// Issue 38, item 7: the advice for a refused port was always a new `"KEY" = [...]`
    /// line, which, for a key that has a line, makes a duplicate TOML key (`check-config`
    /// then refuses the file). The advice now extends the key's line.
    #[test]
    fn the_advice_for_a_refused_port_extends_the_keys_line_when_it_has_one() {
        let key = braid_crypto::StaticKeypair::generate().unwrap().public();
        let mut policy = ForwardPolicy::default();
        let new = policy.how_to_allow(&key, port(Proto::Tcp, 8080));
        assert!(
            new.contains(&format!("\"{key}\" = [\"tcp:8080\"]")),
            "{new}"
        );
        policy
            .allow_specs(&key.to_string(), &["udp:5000-5010"])
            .unwrap();
        let more = policy.how_to_allow(&key, port(Proto::Tcp, 8080));
        let line = format!("\"{key}\" = [\"udp:5000-5010\", \"tcp:8080\"]");
        assert!(more.contains(&line), "{more}");
        // The line, as the advice gives it, is one the policy reads back whole.
        let quoted: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
        let mut read = ForwardPolicy::default();
        read.allow_specs(quoted[0], &quoted[1..]).unwrap();
        assert!(read.allows(&key, port(Proto::Tcp, 8080)));
        assert!(read.allows(&key, port(Proto::Udp, 5003)));
    }

    #[test]
    fn specs_parse_and_bad_ones_say_what_is_expected() {
        let r = PortRange::parse("udp:5000-5010").unwrap();
        assert!(r.contains(port(Proto::Udp, 5000)));
        assert!(r.contains(port(Proto::Udp, 5010)));
        assert!(!r.contains(port(Proto::Udp, 5011)));
        assert!(!r.contains(port(Proto::Tcp, 5005)));
        assert_eq!(r.to_string(), "udp:5000-5010");
        assert_eq!(
            PortRange::parse("tcp:8080").unwrap().to_string(),
            "tcp:8080"
        );
        for bad in [
            "8080",
            "sctp:1",
            "tcp:0",
            "tcp:70000",
            "udp:10-5",
            "tcp:",
            "tcp:a-b",
        ] {
            let e = PortRange::parse(bad).unwrap_err();
            assert!(e.contains("expected tcp:PORT"), "{bad}: {e}");
        }
    }

    #[test]
    fn allow_specs_takes_a_base64_key_and_port_specs() {
        let key = PublicKey([7; 32]);
        let mut policy = ForwardPolicy::default();
        policy
            .allow_specs(&key.to_base64(), &["tcp:8080", "udp:5000-5010"])
            .unwrap();
        assert!(policy.allows(&key, port(Proto::Udp, 5005)));
        assert!(!policy.allows(&key, port(Proto::Tcp, 8081)));
        let e = policy.allow_specs("not-a-key", &["tcp:1"]).unwrap_err();
        assert!(e.contains("not an agent public key"), "{e}");
        let e = policy
            .allow_specs(&key.to_base64(), &["tcp:x"])
            .unwrap_err();
        assert!(e.contains("expected tcp:PORT"), "{e}");
        let none: [&str; 0] = [];
        assert!(policy.allow_specs(&key.to_base64(), &none).is_err());
    }

    #[test]
    fn only_allowed_ports_of_the_key_are_granted() {
        let (a, b) = (PublicKey([1; 32]), PublicKey([2; 32]));
        let mut policy = ForwardPolicy::default();
        policy.allow(a, PortRange::parse("tcp:8080").unwrap());
        policy.allow(a, PortRange::parse("udp:5000-5010").unwrap());
        let mut t = PortTable::default();
        assert_eq!(
            t.claim(&policy, a, 1, port(Proto::Tcp, 8080)),
            Claim::Granted { replaces: None }
        );
        assert_eq!(
            t.claim(&policy, a, 1, port(Proto::Udp, 5003)),
            Claim::Granted { replaces: None }
        );
        assert_eq!(
            t.claim(&policy, a, 1, port(Proto::Tcp, 8081)),
            Claim::NotAllowed
        );
        assert_eq!(
            t.claim(&policy, a, 1, port(Proto::Udp, 8080)),
            Claim::NotAllowed
        );
        assert_eq!(
            t.claim(&policy, b, 2, port(Proto::Tcp, 8080)),
            Claim::NotAllowed,
            "key b is allowed nothing"
        );
        assert_eq!(
            t.ports_of(1),
            vec![port(Proto::Tcp, 8080), port(Proto::Udp, 5003)]
        );
    }

    #[test]
    fn a_reconnecting_agent_takes_its_ports_over_another_key_does_not() {
        let (a, b) = (PublicKey([1; 32]), PublicKey([2; 32]));
        let mut policy = ForwardPolicy::default();
        let r = PortRange::parse("tcp:8080").unwrap();
        policy.allow(a, r);
        policy.allow(b, r);
        let mut t = PortTable::default();
        let p = port(Proto::Tcp, 8080);
        assert_eq!(t.claim(&policy, a, 1, p), Claim::Granted { replaces: None });
        assert_eq!(
            t.claim(&policy, a, 1, p),
            Claim::Granted { replaces: None },
            "asking again changes nothing"
        );
        assert_eq!(
            t.claim(&policy, b, 3, p),
            Claim::InUse(Owner { key: a, session: 1 })
        );
        assert_eq!(
            t.claim(&policy, a, 2, p),
            Claim::Granted { replaces: Some(1) }
        );
        // The old session's end frees nothing of the new one's.
        assert_eq!(t.release_session(1), vec![]);
        assert_eq!(t.owner(p), Some(Owner { key: a, session: 2 }));
        assert_eq!(t.release_session(2), vec![p]);
        assert_eq!(t.claim(&policy, b, 3, p), Claim::Granted { replaces: None });
        t.release(p, 9);
        assert!(t.owner(p).is_some(), "only the holder releases");
        t.release(p, 3);
        assert_eq!(t.owner(p), None);
    }
}
