//! `braid check-config FILE [--role agent|server]`: loads an agent or server TOML file the
//! way `braid agent --config` / `braid server --config` would (unknown keys, paths, keys
//! files, addresses, limits), starts nothing, and says what it found.
//!
//! Owns: telling the role from the file, the summary. Must not touch: the rules themselves
//! (`net::agent_settings`, `net::server_settings`).

use crate::net::{agent_settings, server_settings, AgentArgs, ServerArgs};
use anyhow::{bail, Context, Result};
use braid_net::udp::PathBind;
use std::path::Path;

/// Check `file`; `role` is `agent` or `server` (else told from the keys it has).
pub fn run(file: &Path, role: Option<&str>) -> Result<()> {
    outln!("{}", summary(file, role)?);
    Ok(())
}

/// What `run` prints.
fn summary(file: &Path, role: Option<&str>) -> Result<String> {
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
        Ok(format!(
            "{}: a valid server configuration: listen {}, {} authorized key(s) from {}, {}, \
             state {} (unless the command gives --state: braid-server.service gives \
             /var/lib/braid/authorized.state), at most {} sessions, {} streams per session, {} bytes buffered per session, control {}, metrics {}, dashboard {}",
            file.display(),
            s.cfg.listen,
            s.cfg.authorized.len(),
            s.authorized.display(),
            forwards(&table),
            s.cfg.state_file.as_ref().map_or("-".into(), |p| p.display().to_string()),
            s.cfg.max_sessions,
            s.cfg.max_streams,
            s.cfg.max_buffered,
            s.control.as_ref().map_or("(default)".into(), |p| p.display().to_string()),
            s.metrics.map_or("off".into(), |m| m.to_string()),
            dashboard(s.dashboard.as_ref()),
        ))
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
            .map(|p| match &p.bind {
                PathBind::Interface(i) => format!("{} (interface {i})", p.name),
                PathBind::Address(a) => format!("{} (address {a})", p.name),
                PathBind::Auto => "auto (every interface that is up with a default route)".into(),
            })
            .collect();
        let servers: Vec<String> = s.cfg.servers.iter().map(ToString::to_string).collect();
        let mut out = format!(
            "{}: a valid agent configuration: servers {}, paths {}, SOCKS5 {}, HTTP {}, scheduler {}, cc {}, control {}, metrics {}, dashboard {}",
            file.display(),
            if servers.is_empty() { "none (direct mode)".into() } else { servers.join(", ") },
            paths.join(", "),
            s.cfg.socks.map_or("off".into(), |a| a.to_string()),
            s.cfg.http.map_or("off".into(), |a| a.to_string()),
            s.cfg.transport.scheduler,
            s.cfg.transport.cc,
            s.control.as_ref().map_or("(default)".into(), |p| p.display().to_string()),
            s.metrics.map_or("off".into(), |m| m.to_string()),
            dashboard(s.dashboard.as_ref()),
        );
        let rules: Vec<String> = s
            .cfg
            .rules
            .rules()
            .iter()
            .map(braid_net::rules::describe)
            .collect();
        if !rules.is_empty() {
            out.push_str(&format!(
                "\nrules (straight to the destination, never through the server): {}",
                rules.join(", ")
            ));
        }
        Ok(out)
    }
}

/// The server's `[forward]` table as `check-config` says it: which agent keys may have
/// public ports opened, and which.
fn forwards(table: &toml::Table) -> String {
    let Some(toml::Value::Table(f)) = table.get("forward") else {
        return "[forward]: none (no agent may have a public port opened)".into();
    };
    let each: Vec<String> = f
        .iter()
        .map(|(key, ports)| {
            let short: String = key.chars().take(8).collect();
            let list: Vec<&str> = (ports.as_array().into_iter().flatten())
                .filter_map(toml::Value::as_str)
                .collect();
            format!("{short}... {}", list.join(" "))
        })
        .collect();
    format!("[forward]: {} agent key(s): {}", f.len(), each.join("; "))
}

/// How `check-config` describes the dashboard setting.
fn dashboard(d: Option<&braid_ops::dashboard::DashboardConfig>) -> String {
    match d {
        None => "off".into(),
        Some(d) if d.has_token() => format!("{} (token required)", d.addr),
        Some(d) => format!("{} (no token)", d.addr),
    }
}

#[cfg(test)]
mod tests {
    use super::{run, summary};
    use std::path::Path;

    fn config(dir: &Path, name: &str, text: String) -> std::path::PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    /// Issue 24: `check-config` reports a bad `--bypass`/`--pin` with what to write instead.
    #[test]
    fn check_config_reports_bad_rules() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let agent = |rules: &str| {
            format!(
                "path = [\"dsl=127.0.0.1\", \"lte=127.0.0.2\"]\nsocks = \"127.0.0.1:0\"\n{rules}\n"
            )
        };
        let ok = config(
            d,
            "ok.toml",
            agent("bypass = [\"10.0.0.0/8\", \"bank.example\"]\npin = { \"sip.example.com\" = \"dsl\" }"),
        );
        run(&ok, None).unwrap();
        let msg = |p: &Path| format!("{:#}", run(p, None).unwrap_err());
        let e = msg(&config(d, "cidr.toml", agent("bypass = [\"10.1.0.0/8\"]")));
        assert!(
            e.contains("--bypass \"10.1.0.0/8\"") && e.contains("write 10.0.0.0/8"),
            "{e}"
        );
        let e = msg(&config(
            d,
            "pin.toml",
            agent("pin = { \"sip.example.com\" = \"wifi\" }"),
        ));
        assert!(
            e.contains("no path is named \"wifi\"") && e.contains("dsl, lte"),
            "{e}"
        );
        let e = msg(&config(
            d,
            "glob.toml",
            agent("pin = [\"*.example.com=dsl\"]"),
        ));
        assert!(e.contains("write example.com"), "{e}");
    }

    /// Issue 38, item 9: for a server file `check-config` named a state file the packaged
    /// unit does not use (it gives --state) and never the `[forward]` table; for an agent
    /// it printed Rust debug text (`auto (Auto)`, `Interface("r1")`).
    #[test]
    fn check_config_says_the_units_state_the_forward_table_and_paths_in_plain_words() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (_, agent_pub) = braid_crypto::write_keypair(d.join("agent")).unwrap();
        braid_crypto::write_keypair(d.join("server")).unwrap();
        let key = std::fs::read_to_string(&agent_pub).unwrap();
        let key = key.split_whitespace().next().unwrap().to_string();
        std::fs::write(d.join("agents.txt"), &key).unwrap();
        let base =
            "listen = \"127.0.0.1:4433\"\nkey = \"server.key\"\nauthorized = \"agents.txt\"\n";
        let plain = summary(&config(d, "s.toml", base.into()), None).unwrap();
        assert!(plain.contains("[forward]: none"), "{plain}");
        assert!(plain.contains("/var/lib/braid/authorized.state"), "{plain}");
        let fwd = format!("{base}[forward]\n\"{key}\" = [\"tcp:8080\", \"udp:5000-5010\"]\n");
        let text = summary(&config(d, "f.toml", fwd), None).unwrap();
        assert!(
            text.contains("[forward]: 1 agent key(s)") && text.contains("tcp:8080 udp:5000-5010"),
            "{text}"
        );
        let agent = "path = [\"auto\", \"r1=eth1\", \"r2=10.0.0.2\"]\nsocks = \"127.0.0.1:0\"\n";
        let text = summary(&config(d, "a.toml", agent.into()), None).unwrap();
        for debug in ["Auto)", "Interface(", "Address(", "[]"] {
            assert!(!text.contains(debug), "{debug} in {text}");
        }
        assert!(
            text.contains("r1 (interface eth1)") && text.contains("r2 (address 10.0.0.2)"),
            "{text}"
        );
        assert!(text.contains("servers none (direct mode)"), "{text}");
    }

    /// Issue 24: `check-config` passed a public key given as `key` (after advising
    /// `chmod 600` on it) and a private key given as `server_pub`.
    #[test]
    fn check_config_refuses_key_files_of_the_wrong_kind() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for k in ["s", "a"] {
            braid_crypto::write_keypair(d.join(k)).unwrap();
        }
        let f = |n: &str| d.join(n).display().to_string();
        let agent = |pub_file: &str, key_file: &str| {
            format!(
                "server = \"127.0.0.1:4433\"\nserver_pub = \"{}\"\nkey = \"{}\"\npath = [\"lo=127.0.0.1\"]\nsocks = \"127.0.0.1:0\"\n",
                f(pub_file),
                f(key_file)
            )
        };
        let ok = config(d, "ok.toml", agent("s.pub", "a.key"));
        run(&ok, None).unwrap();
        let msg = |p: &Path| format!("{:#}", run(p, None).unwrap_err());
        let e = msg(&config(d, "pub-as-key.toml", agent("s.pub", "a.pub")));
        assert!(
            e.contains("a.pub: this is a public key file") && e.contains(&f("a.key")),
            "{e}"
        );
        let e = msg(&config(d, "key-as-pub.toml", agent("s.key", "a.key")));
        assert!(
            e.contains("s.key: this is a private key file") && e.contains(&f("s.pub")),
            "{e}"
        );
        let server = format!(
            "listen = \"127.0.0.1:4433\"\nkey = \"{}\"\nauthorized = \"{}\"\n",
            f("s.pub"),
            f("a.pub")
        );
        let e = msg(&config(d, "server.toml", server));
        assert!(e.contains("s.pub: this is a public key file"), "{e}");
    }
}
