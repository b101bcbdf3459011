//! `braid status [--control PATH] [--json] [--watch]`: asks a running agent or server on
//! its control socket and prints the snapshot as tables (or its JSON, docs/status.md).
//!
//! Owns: choosing the socket, the human-readable rendering, the refresh loop. Must not
//! touch: the snapshot's contents (braid-net) or the socket protocol (braid-ops).

use anyhow::{bail, Result};
use braid_net::status::{
    AgentStatus, DatagramReport, PathReport, ServerStatus, ShownState, Status,
};
use braid_ops::control::{default_path, query, ControlError};
use clap::Args;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

/// `braid status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The control socket [default: the agent's, else the server's, under /run/braid-agent
    /// or /run/braid-server as root, else $XDG_RUNTIME_DIR/braid].
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
    /// Print the JSON snapshot (one line) instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Refresh every --interval seconds until Ctrl-C.
    #[arg(long)]
    pub watch: bool,
    /// Seconds between refreshes with --watch.
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
}

const TIMEOUT: Duration = Duration::from_secs(3);

/// Query the chosen socket, or the default agent then server socket.
fn fetch(control: &Option<PathBuf>) -> Result<String> {
    if let Some(p) = control {
        return Ok(query(p, TIMEOUT)?);
    }
    let (a, s) = (default_path("agent"), default_path("server"));
    match query(&a, TIMEOUT) {
        Ok(t) => Ok(t),
        Err(ControlError::Connect { .. }) => match query(&s, TIMEOUT) {
            Ok(t) => Ok(t),
            Err(ControlError::Connect { .. }) => bail!(
                "no braid agent or server answers on {} or {}; start one, or give its socket with --control PATH",
                a.display(),
                s.display()
            ),
            Err(e) => Err(e.into()),
        },
        Err(e) => Err(e.into()),
    }
}

/// `braid status`.
pub fn run(a: StatusArgs) -> Result<()> {
    if !(a.interval.is_finite() && a.interval >= 0.1) {
        bail!("--interval {}: give at least 0.1 seconds", a.interval);
    }
    loop {
        let text = fetch(&a.control)?;
        let out = if a.json {
            text
        } else {
            let s: Status = serde_json::from_str(&text).map_err(|e| {
                anyhow::anyhow!("the control socket answered JSON this braid cannot read ({e}); is it a different version? Try --json")
            })?;
            render(&s)
        };
        if a.watch && !a.json {
            // Clear the screen and go home, then the new snapshot.
            out!("\x1b[H\x1b[2J{out}");
        } else {
            outln!("{out}");
        }
        if !a.watch {
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs_f64(a.interval));
    }
}

/// The snapshot as tables.
pub fn render(s: &Status) -> String {
    match s {
        Status::Agent(a) => render_agent(a),
        Status::Server(s) => render_server(s),
    }
}

fn bytes(n: u64) -> String {
    let n = n as f64;
    if n >= 1e9 {
        format!("{:.2} GB", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.1} MB", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.1} kB", n / 1e3)
    } else {
        format!("{n} B")
    }
}

fn rate(bps: u64) -> String {
    format!("{:.1} Mbit/s", bps as f64 / 1e6)
}

fn opt_ms(v: Option<f64>) -> String {
    v.map_or("-".into(), |x| format!("{x:.1}"))
}

fn state(p: &PathReport) -> String {
    p.state
        .map(|s| {
            serde_json::to_value(s)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        })
        .unwrap_or_else(|| "-".into())
}

/// The path's capacity estimate (docs/status.md, `capacity_bps`), `+` after it while it is
/// a lower bound still growing.
fn capacity(p: &PathReport) -> String {
    match (p.capacity_bps, p.capacity_settled) {
        (None, _) => "-".into(),
        (Some(c), Some(false)) => format!("{}+", rate(c)),
        (Some(c), _) => rate(c),
    }
}

/// The IP packet the path's datagrams make now, with the drops its MTU black holes caused.
fn packet_size(p: &PathReport) -> String {
    match (p.packet_bytes, p.datagram_drops) {
        (None, _) => "-".into(),
        (Some(b), 0) => b.to_string(),
        (Some(b), n) => format!("{b} ({n} drop{})", if n == 1 { "" } else { "s" }),
    }
}

fn path_table(paths: &[PathReport], agent: bool) -> String {
    let mut rows = vec![vec![
        "PATH", "STATE", "IFACE", "LOCAL", "REMOTE", "SRTT ms", "MIN ms", "CWND", "PACING",
        "CAPACITY", "RATE IN", "RATE OUT", "LOSS", "PACKET", "SENT", "RECEIVED",
    ]
    .into_iter()
    .map(String::from)
    .collect::<Vec<_>>()];
    if agent {
        rows[0].extend(["CAP".to_string(), "ENERGY".to_string()]);
    }
    for p in paths.iter().filter(|p| !unused_auto(p)) {
        let mut r = vec![
            p.name.clone(),
            state(p),
            p.interface.clone().unwrap_or_else(|| "-".into()),
            p.local_address.clone().unwrap_or_else(|| "-".into()),
            p.remote_address.clone().unwrap_or_else(|| "-".into()),
            opt_ms(p.srtt_ms),
            opt_ms(p.min_rtt_ms),
            bytes(p.cwnd_bytes),
            rate(p.pacing_rate_bps),
            capacity(p),
            p.receive_rate_bps.map_or("-".into(), rate),
            p.send_rate_bps.map_or("-".into(), rate),
            format!("{:.2} %", p.loss_rate * 100.0),
            packet_size(p),
            bytes(p.bytes_sent),
            bytes(p.bytes_received),
        ];
        if agent {
            r.push(match (p.cap_used_bytes, p.cap_bytes) {
                (Some(u), Some(c)) => format!("{} / {}", bytes(u), bytes(c)),
                _ => "-".into(),
            });
            r.push(p.energy_j.map_or("-".into(), |e| format!("{e:.1} J")));
        }
        rows.push(r);
    }
    let mut out = table(&rows);
    let unused: Vec<&str> = (paths.iter().filter(|p| unused_auto(p)))
        .map(|p| p.name.as_str())
        .collect();
    if let (Some(first), Some(last)) = (unused.first(), unused.last()) {
        let names = if first == last {
            first.to_string()
        } else {
            format!("{first}-{last}")
        };
        let _ = writeln!(
            out,
            "unused auto slots: {names} (each takes the next interface with a default route)"
        );
    }
    out
}

/// An `auto` slot that has taken no interface: counted on one line, not shown as a path.
fn unused_auto(p: &PathReport) -> bool {
    p.auto && p.interface.is_none()
}

/// A line per path behind a captive portal: where to log in.
fn captive_lines(paths: &[PathReport]) -> String {
    let mut out = String::new();
    for p in paths
        .iter()
        .filter(|p| p.state == Some(ShownState::Captive))
    {
        let _ = writeln!(
            out,
            "{}: captive portal{}: log in there; the path carries data once it lets traffic through",
            p.name,
            p.portal_url.as_ref().map_or(String::new(), |u| format!(" at {u}"))
        );
    }
    out
}

fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |x| x.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, x)| format!("{x:<w$}", w = widths[i]))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out
}

fn render_agent(a: &AgentStatus) -> String {
    let mut out = String::new();
    match &a.session {
        Some(s) => {
            let _ = writeln!(
                out,
                "agent, up {:.0} s; session {} with {} for {:.0} s ({} + {}), {} streams",
                a.uptime_s, s.id, s.server, s.age_s, s.scheduler, s.cc, s.open_streams
            );
            out.push_str(&datagram_line(&s.datagrams));
        }
        None => {
            let _ = writeln!(out, "agent, up {:.0} s; no session", a.uptime_s);
            if let Some(e) = &a.session_error {
                let _ = writeln!(out, "last handshake: {e}");
            }
        }
    }
    if let Some(m) = &a.mode {
        let note = if m == "direct" {
            " (each new connection whole on one path; a connection on a link that dies is lost)"
        } else {
            ""
        };
        let _ = writeln!(out, "mode: {m}{note}");
    }
    if !a.rules.is_empty() {
        let counts: Vec<String> = a.rules.iter().map(|(r, n)| format!("{r} {n}")).collect();
        let _ = writeln!(out, "opened by rule: {}", counts.join(", "));
    }
    let _ = writeln!(
        out,
        "total sent {}, received {}{}\n",
        bytes(a.totals.bytes_sent),
        bytes(a.totals.bytes_received),
        a.totals
            .energy_j
            .map_or(String::new(), |e| format!(", energy {e:.1} J"))
    );
    out.push_str(&path_table(&a.paths, true));
    out.push_str(&captive_lines(&a.paths));
    if !a.streams.is_empty() {
        let mut rows = vec![[
            "PROXY",
            "CLIENT",
            "DESTINATION",
            "UP",
            "DOWN",
            "AGE s",
            "RULE",
        ]
        .map(String::from)
        .to_vec()];
        for s in &a.streams {
            rows.push(vec![
                s.proxy.clone(),
                s.client.clone(),
                match &s.path {
                    Some(p) if p != "session" => format!("{} via {p}", s.destination),
                    _ => s.destination.clone(),
                },
                bytes(s.bytes_up),
                bytes(s.bytes_down),
                format!("{:.0}", s.age_s),
                s.rule.clone().unwrap_or_default(),
            ]);
        }
        out.push('\n');
        out.push_str(&table(&rows));
    }
    if !a.flows.is_empty() {
        let mut rows = vec![[
            "FLOW",
            "CLIENT",
            "DESTINATION",
            "UP",
            "DOWN",
            "AGE s",
            "RULE",
        ]
        .map(String::from)
        .to_vec()];
        for f in &a.flows {
            rows.push(vec![
                f.flow.to_string(),
                f.client.clone(),
                f.destination.clone(),
                bytes(f.bytes_up),
                bytes(f.bytes_down),
                format!("{:.0}", f.age_s),
                f.rule.clone().unwrap_or_default(),
            ]);
        }
        out.push('\n');
        out.push_str(&table(&rows));
    }
    out
}

fn render_server(s: &ServerStatus) -> String {
    let mut out = String::new();
    let l = &s.limits;
    let _ = writeln!(
        out,
        "server on {}, up {:.0} s; sessions {}/{}{}, busiest session {}/{} streams; handshakes accepted {}, refused {}",
        s.listen,
        s.uptime_s,
        l.sessions.used,
        l.sessions.max,
        match s.handshakes_waiting {
            0 => String::new(),
            n => format!(" ({n} waiting for the agent's first packet)"),
        },
        l.streams_per_session.used,
        l.streams_per_session.max,
        s.handshakes_accepted,
        s.handshakes_refused
    );
    let _ = writeln!(
        out,
        "total sent {}, received {}",
        bytes(s.totals.bytes_sent),
        bytes(s.totals.bytes_received)
    );
    if let Some(n) = s.authorized_keys {
        let from = (s.authorized_file.as_ref()).map_or(String::new(), |f| format!(" (from {f})"));
        let _ = writeln!(out, "authorized agent keys: {n}{from}");
    }
    out.push_str(&egress_lines(&s.egress));
    out.push_str(&share_lines(&s.shares));
    for sess in &s.sessions {
        let _ = writeln!(
            out,
            "\nsession {} agent {} (key {}){} for {:.0} s, {} streams, sent {}, received {}",
            sess.id,
            sess.agent_key_fingerprint,
            sess.agent_key,
            if sess.established { "" } else { " half-open" },
            sess.age_s,
            sess.open_streams,
            bytes(sess.totals.bytes_sent),
            bytes(sess.totals.bytes_received)
        );
        out.push_str(&datagram_line(&sess.datagrams));
        if !sess.inbound_ports.is_empty() {
            let _ = writeln!(out, "inbound ports: {}", sess.inbound_ports.join(", "));
        }
        out.push_str(&path_table(&sess.paths, false));
    }
    out
}

/// Each agent's share: its bytes, and its limit, fair-share cap and quotas where set.
fn share_lines(s: &braid_net::status::SharesReport) -> String {
    let mut out = String::new();
    let mbit = |b: u64| format!("{:.1} Mbit/s", b as f64 * 8.0 / 1e6);
    for a in &s.agents {
        let _ = write!(
            out,
            "share {}: sent {}, received {}",
            a.agent_key_fingerprint,
            bytes(a.sent_bytes),
            bytes(a.received_bytes)
        );
        if let Some(l) = a.rate_limit_bytes_per_sec {
            let _ = write!(out, ", limit {}", mbit(l));
        }
        if let Some(c) = a.fair_cap_bytes_per_sec {
            let _ = write!(out, ", fair-share cap {}", mbit(c));
        }
        for (name, used, quota) in [
            ("day", a.day_bytes, a.day_quota_bytes),
            ("month", a.month_bytes, a.month_quota_bytes),
        ] {
            if let Some(q) = quota {
                let _ = write!(out, ", {name} {} of {}", bytes(used), bytes(q));
            }
        }
        if let Some(p) = &a.quota_reached {
            let _ = write!(out, " (the {p}'s quota is used up: connections refused)");
        }
        out.push('\n');
    }
    out
}

/// The egress policy in one line, and each agent's refusals when there were any.
fn egress_lines(e: &braid_net::status::EgressReport) -> String {
    let mut out = format!(
        "egress: {} rules{}; refused {} connections, {} datagrams\n",
        e.rules,
        if e.deny_private {
            ", private ranges denied"
        } else {
            ""
        },
        e.refused_connections,
        e.refused_datagrams
    );
    for a in &e.agents {
        let _ = writeln!(
            out,
            "  agent {}: refused {} connections, {} datagrams",
            a.agent_key_fingerprint, a.refused_connections, a.refused_datagrams
        );
    }
    out
}

/// Real-time datagrams and their copies, when the session sent or received any.
fn datagram_line(d: &DatagramReport) -> String {
    if *d == DatagramReport::default() {
        return String::new();
    }
    format!(
        "datagrams: {} real-time sent, {} copies ({}), {} copies refused by the budget, \
         {} duplicates dropped on arrival, {} dropped\n",
        d.realtime_sent,
        d.duplicates_sent,
        bytes(d.duplicate_bytes),
        d.duplicates_refused,
        d.duplicates_received,
        d.dropped
    )
}

#[cfg(test)]
mod tests;
