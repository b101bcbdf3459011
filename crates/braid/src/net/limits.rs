//! The server's sharing settings: the config file's `[limits]` table (`fair_share`, and
//! `rate_mbit`, `day_gb`, `month_gb` for every agent key, or per key in
//! `[limits.agent."KEY"]`), turned into braid-net's `SharesPolicy`.
//!
//! Owns: that table's shape and its checks. Must not touch: the limits at work
//! (braid-net's `server::shares`), the server's other settings (`server.rs`).

use anyhow::{bail, Context, Result};
use braid_net::server::shares::{AgentLimits, QuotaLimits, SharesPolicy};
use serde::Deserialize;
use std::collections::BTreeMap;

/// `[limits]` in the server's config file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsFile {
    /// Cap an agent that takes more than an equal share while others want more (default
    /// true).
    pub fair_share: Option<bool>,
    /// Every agent key without its own `[limits.agent."KEY"]`: what the server sends
    /// it, Mbit/s.
    pub rate_mbit: Option<f64>,
    /// ... its stream bytes both ways per UTC day, GB.
    pub day_gb: Option<f64>,
    /// ... and per UTC month, GB.
    pub month_gb: Option<f64>,
    /// Limits of one agent key each.
    #[serde(default)]
    pub agent: BTreeMap<String, AgentLimitsFile>,
}

/// One agent's limits (or every agent's).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentLimitsFile {
    /// What the server sends it, Mbit/s (all its sessions and paths together).
    pub rate_mbit: Option<f64>,
    /// Stream bytes both ways per UTC day, GB (10^9 bytes).
    pub day_gb: Option<f64>,
    /// Stream bytes both ways per UTC month, GB.
    pub month_gb: Option<f64>,
}

/// The policy from the file's `[limits]` table.
pub fn shares_policy(file: &LimitsFile) -> Result<SharesPolicy> {
    let mut p = SharesPolicy {
        fair: file.fair_share.unwrap_or(true),
        default: agent_limits(
            "[limits]",
            &AgentLimitsFile {
                rate_mbit: file.rate_mbit,
                day_gb: file.day_gb,
                month_gb: file.month_gb,
            },
        )?,
        ..Default::default()
    };
    for (key, l) in &file.agent {
        let what = format!("[limits.agent.{key:?}]");
        let k = braid_crypto::parse_public_key(key.trim()).with_context(|| {
            format!(
                "{what}: {key:?} is not an agent public key (base64, as in the authorized file)"
            )
        })?;
        p.agents.insert(k, agent_limits(&what, l)?);
    }
    Ok(p)
}

fn agent_limits(what: &str, l: &AgentLimitsFile) -> Result<AgentLimits> {
    let positive = |name: &str, v: Option<f64>, unit: f64| -> Result<Option<u64>> {
        match v {
            None => Ok(None),
            Some(x) if x.is_finite() && x > 0.0 => Ok(Some((x * unit) as u64)),
            Some(x) => {
                bail!("{what} {name} = {x}: give a number above 0, or leave it out for no limit")
            }
        }
    };
    Ok(AgentLimits {
        rate: positive("rate_mbit", l.rate_mbit, 1e6 / 8.0)?,
        quota: QuotaLimits {
            day: positive("day_gb", l.day_gb, 1e9)?,
            month: positive("month_gb", l.month_gb, 1e9)?,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid_crypto::PublicKey;

    fn parse(toml: &str) -> Result<SharesPolicy> {
        #[derive(Deserialize)]
        struct F {
            limits: LimitsFile,
        }
        let f: F = toml::from_str(toml).context("toml")?;
        shares_policy(&f.limits)
    }

    #[test]
    fn the_limits_table_gives_every_agent_and_each_key_its_limits() {
        let k = PublicKey([7; 32]);
        let text = format!(
            "[limits]\nrate_mbit = 50\n[limits.agent.\"{}\"]\nrate_mbit = 10\nday_gb = 2\nmonth_gb = 0.5\n",
            k.to_base64()
        );
        let p = parse(&text).unwrap();
        assert!(p.fair);
        assert_eq!(p.default.rate, Some(6_250_000));
        let a = p.limits(&k);
        assert_eq!(a.rate, Some(1_250_000));
        assert_eq!(a.quota.day, Some(2_000_000_000));
        assert_eq!(a.quota.month, Some(500_000_000));
        assert_eq!(p.limits(&PublicKey([8; 32])).quota.day, None);
        assert!(!parse("[limits]\nfair_share = false\n").unwrap().fair);
    }

    #[test]
    fn bad_limits_say_where_and_what() {
        let e = format!("{:#}", parse("[limits]\nrate_mbit = 0\n").unwrap_err());
        assert!(
            e.contains("[limits] rate_mbit = 0") && e.contains("above 0"),
            "{e}"
        );
        let e = format!(
            "{:#}",
            parse("[limits.agent.\"nope\"]\nday_gb = 1\n").unwrap_err()
        );
        assert!(e.contains("not an agent public key"), "{e}");
        let e = format!("{:#}", parse("[limits]\nrate = 1\n").unwrap_err());
        assert!(e.contains("rate"), "{e}");
    }
}
