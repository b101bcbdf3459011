//! `braid check-config FILE [--role agent|server]`: loads an agent or server TOML file the
//! way `braid agent --config` / `braid server --config` would (unknown keys, paths, keys
//! files, addresses, limits), starts nothing, and says what it found.
//!
//! Owns: telling the role from the file, the summary. Must not touch: the rules themselves
//! (`net::agent_settings`, `net::server_settings`).

use crate::net::{agent_settings, server_settings, AgentArgs, ServerArgs};
use anyhow::{bail, Context, Result};
use std::path::Path;

/// Check `file`; `role` is `agent` or `server` (else told from the keys it has).
pub fn run(file: &Path, role: Option<&str>) -> Result<()> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("reading the config file {}", file.display()))?;
    let table: toml::Table = toml::from_str(&text)
        .map_err(|e| anyhow::anyhow!("config file {}: {e}", file.display()))?;
    let role = match role {
        Some(r @ ("agent" | "server")) => r,
        Some(r) => bail!("--role {r:?}: expected agent or server"),
        None if table.contains_key("listen") => "server",
        None if table.contains_key("server") || table.contains_key("path") => "agent",
        None => bail!(
            "{}: cannot tell an agent from a server configuration (no `listen`, `server` or `path` key); give --role agent or --role server",
            file.display()
        ),
    };
    let config = Some(file.to_path_buf());
    if role == "server" {
        let s = server_settings(ServerArgs {
            config,
            ..Default::default()
        })
        .with_context(|| format!("{}: not a valid server configuration", file.display()))?;
        println!(
            "{}: a valid server configuration: listen {}, {} authorized key(s) from {}, state {}, at most {} sessions, {} streams per session, {} bytes buffered per session, control {}, metrics {}, dashboard {}",
            file.display(),
            s.cfg.listen,
            s.cfg.authorized.len(),
            s.authorized.display(),
            s.cfg.state_file.as_ref().map_or("-".into(), |p| p.display().to_string()),
            s.cfg.max_sessions,
            s.cfg.max_streams,
            s.cfg.max_buffered,
            s.control.as_ref().map_or("(default)".into(), |p| p.display().to_string()),
            s.metrics.map_or("off".into(), |m| m.to_string()),
            dashboard(s.dashboard.as_ref()),
        );
    } else {
        let s = agent_settings(AgentArgs {
            config,
            ..Default::default()
        })
        .with_context(|| format!("{}: not a valid agent configuration", file.display()))?;
        let paths: Vec<String> = s
            .cfg
            .paths
            .iter()
            .map(|p| format!("{} ({:?})", p.name, p.bind))
            .collect();
        println!(
            "{}: a valid agent configuration: servers {:?}, paths {}, SOCKS5 {}, HTTP {}, scheduler {}, cc {}, control {}, metrics {}, dashboard {}",
            file.display(),
            s.cfg.servers,
            paths.join(", "),
            s.cfg.socks.map_or("off".into(), |a| a.to_string()),
            s.cfg.http.map_or("off".into(), |a| a.to_string()),
            s.cfg.transport.scheduler,
            s.cfg.transport.cc,
            s.control.as_ref().map_or("(default)".into(), |p| p.display().to_string()),
            s.metrics.map_or("off".into(), |m| m.to_string()),
            dashboard(s.dashboard.as_ref()),
        );
    }
    Ok(())
}

/// How `check-config` describes the dashboard setting.
fn dashboard(d: Option<&braid_ops::dashboard::DashboardConfig>) -> String {
    match d {
        None => "off".into(),
        Some(d) if d.has_token() => format!("{} (token required)", d.addr),
        Some(d) => format!("{} (no token)", d.addr),
    }
}
