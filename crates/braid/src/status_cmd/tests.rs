//! Tests of the `braid status` tables (the JSON is the snapshot's own serialization).

use super::*;
use braid_net::status::ShownState;

#[test]
fn the_agent_table_lists_every_path_with_its_state_and_bytes() {
    let a = AgentStatus {
        paths: vec![
            PathReport {
                name: "wifi".into(),
                state: Some(ShownState::Active),
                bytes_received: 2_500_000,
                srtt_ms: Some(21.04),
                ..Default::default()
            },
            PathReport {
                name: "lte".into(),
                state: Some(ShownState::Down),
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let t = render(&Status::Agent(a));
    let wifi = t.lines().find(|l| l.starts_with("wifi")).unwrap();
    assert!(
        wifi.contains("active") && wifi.contains("2.5 MB") && wifi.contains("21.0"),
        "{t}"
    );
    assert!(
        t.lines()
            .any(|l| l.starts_with("lte") && l.contains("down")),
        "{t}"
    );
    assert!(t.contains("no session"), "{t}");
}

/// Issue 24: the server's sessions in the formats of its logs (`session=` 16 hex
/// digits, `agent=SHA256:...`, `key=` base64), and a half-open session marked so.
#[test]
fn server_sessions_show_id_fingerprint_and_key_as_the_logs_and_half_open_ones() {
    let sess = |id: &str, established| braid_net::status::ServerSession {
        id: id.into(),
        agent_key_fingerprint: "SHA256:abc".into(),
        agent_key: "a2V5".into(),
        established,
        ..Default::default()
    };
    let s = braid_net::status::ServerStatus {
        sessions: vec![
            sess("00000000000000ff", true),
            sess("0000000000000100", false),
        ],
        ..Default::default()
    };
    let t = render(&Status::Server(s));
    let line = |id: &str| {
        t.lines()
            .find(|l| l.starts_with(&format!("session {id} ")))
            .unwrap_or_else(|| panic!("no session {id} in {t}"))
            .to_string()
    };
    let up = line("00000000000000ff");
    assert!(up.contains("agent SHA256:abc (key a2V5) for"), "{t}");
    assert!(line("0000000000000100").contains("half-open"), "{t}");
    assert!(!up.contains("half-open"), "{t}");
}

/// The cell of column `head` in the row of path `name` of table `t`.
fn cell(t: &str, head: &str, name: &str) -> String {
    let header = t.lines().find(|l| l.starts_with("PATH ")).unwrap();
    let at = header
        .find(head)
        .unwrap_or_else(|| panic!("no {head} in {t}"));
    let row = t.lines().find(|l| l.starts_with(name)).unwrap();
    let rest = row.get(at..).unwrap_or("");
    rest.split("  ").next().unwrap_or("").trim().to_string()
}

/// Regression (issue 38 item 11): on an agent downloading over 20 and 10 Mbit/s links
/// the table showed DELIVERY 49.1 and 0.3 Mbit/s (the latest delivery-rate samples of
/// the agent's acknowledgements) beside RATE IN 19.3 and 9.7. The column is now the
/// path's capacity estimate; RATE IN/OUT are what it carries now.
#[test]
fn the_capacity_column_shows_the_capacity_estimate_not_a_delivery_sample() {
    let path = |name: &str, delivery, capacity, settled, rx| PathReport {
        name: name.into(),
        state: Some(ShownState::Active),
        pacing_rate_bps: 141_000_000,
        delivery_rate_bps: Some(delivery),
        capacity_bps: Some(capacity),
        capacity_settled: Some(settled),
        receive_rate_bps: Some(rx),
        send_rate_bps: Some(300_000),
        ..Default::default()
    };
    let a = AgentStatus {
        paths: vec![
            path("r1", 49_100_000, 19_600_000, true, 19_300_000),
            path("r2", 300_000, 9_800_000, false, 9_700_000),
        ],
        ..Default::default()
    };
    let t = render(&Status::Agent(a));
    assert_eq!(cell(&t, "CAPACITY", "r1"), "19.6 Mbit/s", "{t}");
    assert_eq!(cell(&t, "CAPACITY", "r2"), "9.8 Mbit/s+", "{t}");
    assert_eq!(cell(&t, "RATE IN", "r1"), "19.3 Mbit/s", "{t}");
    assert_eq!(cell(&t, "RATE OUT", "r2"), "0.3 Mbit/s", "{t}");
    assert!(!t.contains("49.1"), "no delivery sample shown: {t}");
}

/// Regression (issue 38 item 6): with `path = ["auto"]` and two uplinks the table
/// showed six more rows `auto3`-`auto8`, all `down`, IFACE `-`. The slots that took an
/// interface show it; the others are one line.
#[test]
fn auto_slots_show_their_interface_and_unused_ones_are_one_line() {
    let slot = |i: usize| PathReport {
        name: format!("auto{i}"),
        auto: true,
        interface: (i <= 2).then(|| format!("r{i}")),
        local_address: (i <= 2).then(|| format!("10.0.{i}.2:4000{i}")),
        state: Some(if i <= 2 {
            ShownState::Active
        } else {
            ShownState::Down
        }),
        ..Default::default()
    };
    let a = AgentStatus {
        paths: (1..=8).map(slot).collect(),
        ..Default::default()
    };
    let t = render(&Status::Agent(a.clone()));
    assert_eq!(cell(&t, "IFACE", "auto1"), "r1", "{t}");
    assert_eq!(cell(&t, "LOCAL", "auto2"), "10.0.2.2:40002", "{t}");
    assert!(!t.lines().any(|l| l.starts_with("auto3")), "{t}");
    assert!(
        t.contains("unused auto slots: auto3-auto8 (each takes the next interface"),
        "{t}"
    );
    let json = serde_json::to_value(Status::Agent(a)).unwrap();
    let p = &json["paths"];
    assert_eq!(
        (&p[0]["auto"], &p[0]["interface"]),
        (&true.into(), &"r1".into())
    );
    assert_eq!(
        (&p[7]["auto"], &p[7]["interface"]),
        (&true.into(), &serde_json::Value::Null)
    );
}

/// Issue 38 item 10: the server's status counts the authorized agent keys and names
/// their file.
#[test]
fn server_status_counts_the_authorized_keys() {
    let s = braid_net::status::ServerStatus {
        authorized_keys: Some(2),
        authorized_file: Some("/etc/braid/agents.txt".into()),
        ..Default::default()
    };
    let t = render(&Status::Server(s.clone()));
    assert!(
        t.contains("authorized agent keys: 2 (from /etc/braid/agents.txt)"),
        "{t}"
    );
    let json = serde_json::to_value(Status::Server(s)).unwrap();
    assert_eq!(json["authorized_keys"], 2, "{json}");
    assert_eq!(json["authorized_file"], "/etc/braid/agents.txt", "{json}");
}

/// Issue 37: the egress refusals per agent, in the agents' log format.
#[test]
fn server_status_counts_egress_refusals_per_agent() {
    let s = braid_net::status::ServerStatus {
        egress: braid_net::status::EgressReport {
            deny_private: true,
            rules: 2,
            refused_connections: 3,
            refused_datagrams: 5,
            agents: vec![braid_net::status::EgressAgent {
                agent_key_fingerprint: "SHA256:abc".into(),
                refused_connections: 3,
                refused_datagrams: 5,
            }],
        },
        ..Default::default()
    };
    let t = render(&Status::Server(s));
    assert!(
        t.contains("egress: 2 rules, private ranges denied; refused 3 connections, 5 datagrams"),
        "{t}"
    );
    assert!(
        t.contains("  agent SHA256:abc: refused 3 connections, 5 datagrams"),
        "{t}"
    );
}

/// Issue 24: `braid status` shows which rule each connection and flow took, and how
/// many each rule opened.
#[test]
fn the_agent_view_shows_each_flows_rule_and_the_counts() {
    let a = AgentStatus {
        streams: vec![braid_net::status::StreamReport {
            proxy: "socks5".into(),
            destination: "bank.example:443".into(),
            path: Some("dsl".into()),
            rule: Some("pin dsl".into()),
            ..Default::default()
        }],
        flows: vec![braid_net::status::FlowReport {
            flow: 3,
            destination: "10.1.2.3:53".into(),
            rule: Some("bypass".into()),
            ..Default::default()
        }],
        rules: [("bypass".to_string(), 4), ("session".to_string(), 9)].into(),
        ..Default::default()
    };
    let t = render(&Status::Agent(a));
    assert!(t.contains("opened by rule: bypass 4, session 9"), "{t}");
    let row = t.lines().find(|l| l.contains("bank.example")).unwrap();
    assert!(
        row.contains("via dsl") && row.trim_end().ends_with("pin dsl"),
        "{t}"
    );
    let row = t.lines().find(|l| l.contains("10.1.2.3")).unwrap();
    assert!(row.trim_end().ends_with("bypass"), "{t}");
}

#[test]
fn a_captive_path_shows_captive_and_where_to_log_in() {
    let a = AgentStatus {
        paths: vec![PathReport {
            name: "wifi".into(),
            state: Some(ShownState::Captive),
            portal_url: Some("http://portal.example/login".into()),
            ..Default::default()
        }],
        ..Default::default()
    };
    let t = render(&Status::Agent(a.clone()));
    let wifi = t.lines().find(|l| l.starts_with("wifi ")).unwrap();
    assert!(wifi.contains("captive"), "{t}");
    assert!(
        t.contains("wifi: captive portal at http://portal.example/login: log in there"),
        "{t}"
    );
    let json = serde_json::to_value(&a).unwrap();
    assert_eq!(json["paths"][0]["state"], "captive");
    assert_eq!(
        json["paths"][0]["portal_url"],
        "http://portal.example/login"
    );
}

/// Issue 37: each agent's share: its bytes, limit, cap and quotas, and a used-up quota.
#[test]
fn server_status_shows_each_agents_share() {
    let s = braid_net::status::ServerStatus {
        shares: braid_net::status::SharesReport {
            capacity_bytes_per_sec: 0,
            agents: vec![braid_net::status::AgentShare {
                agent_key_fingerprint: "SHA256:abc".into(),
                rate_limit_bytes_per_sec: Some(1_250_000),
                fair_cap_bytes_per_sec: Some(2_500_000),
                day_quota_bytes: Some(5_000_000_000),
                quota_reached: Some("month".into()),
                ..Default::default()
            }],
        },
        ..Default::default()
    };
    let t = render(&Status::Server(s));
    let line = t
        .lines()
        .find(|l| l.starts_with("share SHA256:abc"))
        .unwrap_or_else(|| panic!("{t}"));
    assert!(
        line.contains("limit 10.0 Mbit/s, fair-share cap 20.0 Mbit/s"),
        "{line}"
    );
    assert!(line.contains("day 0 B of "), "{line}");
    assert!(line.contains("month's quota is used up"), "{line}");
}
