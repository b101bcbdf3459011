//! The server's egress settings: the config file's `[egress]` table (global `allow`,
//! `deny`, `deny_private`; per agent key `[egress.agent."KEY"]` with `allow` and `deny`)
//! and the flags `--egress-allow`, `--egress-deny` (`[KEY=]CIDR[:PORTS]`, repeatable) and
//! `--deny-private`, turned into braid-net's `EgressPolicy`.
//!
//! Owns: that table's shape and its checks. Must not touch: the decision (braid-net's
//! `server::egress`), the server's other settings (`server.rs`).

use anyhow::{Context, Result};
use braid_net::server::egress::{Action, EgressPolicy, Rule};
use serde::Deserialize;
use std::collections::BTreeMap;

/// `[egress]` in the server's config file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressFile {
    /// Refuse the private and unique-local ranges too.
    #[serde(default)]
    pub deny_private: bool,
    /// Rules `CIDR[:PORTS]` every agent may reach.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Rules `CIDR[:PORTS]` no agent may reach.
    #[serde(default)]
    pub deny: Vec<String>,
    /// Rules of one agent key each (`[egress.agent."KEY"]`).
    #[serde(default)]
    pub agent: BTreeMap<String, EgressAgentFile>,
}

/// `[egress.agent."KEY"]`: one agent key's rules.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressAgentFile {
    /// Rules this agent may reach.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Rules this agent may not reach.
    #[serde(default)]
    pub deny: Vec<String>,
}

/// The flags' share of the policy.
pub struct EgressFlags<'a> {
    pub allow: &'a [String],
    pub deny: &'a [String],
    pub deny_private: bool,
}

/// The policy from the file's `[egress]` table and the flags (which add to it).
pub fn egress_policy(file: &EgressFile, flags: EgressFlags<'_>) -> Result<EgressPolicy> {
    let mut p = EgressPolicy::default();
    p.deny_private = file.deny_private || flags.deny_private;
    for (list, act) in [(&file.allow, Action::Allow), (&file.deny, Action::Deny)] {
        let what = format!("[egress] {}", name(act));
        for r in list {
            p.add(act, rule(&what, r)?);
        }
    }
    for (key, rules) in &file.agent {
        let k = agent_key(&format!("[egress.agent.{key:?}]"), key)?;
        for (list, act) in [(&rules.allow, Action::Allow), (&rules.deny, Action::Deny)] {
            let what = format!("[egress.agent.\"{key}\"] {}", name(act));
            for r in list {
                p.add_for(k, act, rule(&what, r)?);
            }
        }
    }
    for (list, act) in [(flags.allow, Action::Allow), (flags.deny, Action::Deny)] {
        let what = format!("--egress-{}", name(act));
        for spec in list {
            // `KEY=RULE` for one agent: a rule has no '=', a base64 key may end in one.
            match spec.rsplit_once('=') {
                Some((key, r)) => {
                    let k = agent_key(&format!("{what} {spec:?}"), key)?;
                    p.add_for(k, act, rule(&what, r)?);
                }
                None => p.add(act, rule(&what, spec)?),
            }
        }
    }
    Ok(p)
}

fn name(act: Action) -> &'static str {
    match act {
        Action::Allow => "allow",
        Action::Deny => "deny",
    }
}

fn rule(what: &str, s: &str) -> Result<Rule> {
    s.parse::<Rule>()
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("{what}: a bad rule"))
}

fn agent_key(what: &str, key: &str) -> Result<braid_crypto::PublicKey> {
    braid_crypto::parse_public_key(key.trim()).with_context(|| {
        format!("{what}: {key:?} is not an agent public key (base64, as in the authorized file)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid_crypto::PublicKey;

    fn key(b: u8) -> (PublicKey, String) {
        let k = PublicKey([b; 32]);
        (k, k.to_base64())
    }

    fn allowed(p: &EgressPolicy, k: &PublicKey, dest: &str) -> bool {
        let host = Default::default();
        p.decide(k, dest.parse().unwrap(), &host).allowed
    }

    #[test]
    fn the_egress_table_and_flags_make_one_policy() {
        let ((a, a64), (b, _)) = (key(1), key(2));
        let text = format!(
            "deny_private = true\nallow = [\"10.1.0.0/16:443\"]\ndeny = [\"0.0.0.0/0:25\"]\n\
             [agent.\"{a64}\"]\nallow = [\"10.9.0.0/24\"]\n"
        );
        let file: EgressFile = toml::from_str(&text).unwrap();
        let allow = [
            "127.0.0.0/8".to_string(),
            format!("{a64}=192.168.5.0/24:22"),
        ];
        let flags = EgressFlags {
            allow: &allow,
            deny: &["198.51.100.0/24".to_string()],
            deny_private: false,
        };
        let p = egress_policy(&file, flags).unwrap();
        assert!(p.deny_private);
        assert_eq!(p.rule_count(), 6);
        assert!(allowed(&p, &b, "10.1.2.3:443") && !allowed(&p, &b, "10.1.2.3:80"));
        assert!(!allowed(&p, &b, "8.8.8.8:25"));
        assert!(allowed(&p, &a, "10.9.0.2:80") && !allowed(&p, &b, "10.9.0.2:80"));
        assert!(allowed(&p, &b, "127.0.0.1:80"));
        assert!(allowed(&p, &a, "192.168.5.1:22") && !allowed(&p, &b, "192.168.5.1:22"));
        assert!(!allowed(&p, &a, "198.51.100.1:80"));
    }

    #[test]
    fn bad_egress_settings_say_where_and_what() {
        let bad = |text: &str, flags: &[String]| {
            let file: EgressFile = toml::from_str(text).unwrap();
            let f = EgressFlags {
                allow: flags,
                deny: &[],
                deny_private: false,
            };
            format!("{:#}", egress_policy(&file, f).unwrap_err())
        };
        let e = bad("allow = [\"10.0.0.0/33\"]", &[]);
        assert!(
            e.contains("[egress] allow") && e.contains("prefix length"),
            "{e}"
        );
        let e = bad("[agent.nokey]\nallow = [\"10.0.0.0/8\"]", &[]);
        assert!(e.contains("not an agent public key"), "{e}");
        let e = bad("", &["10.0.0.0/8:http".into()]);
        assert!(e.contains("--egress-allow") && e.contains("port"), "{e}");
        assert!(toml::from_str::<EgressFile>("alow = []").is_err());
    }
}
