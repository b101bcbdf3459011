//! Unit tests of the metrics exposition.
use super::*;

#[test]
fn paths_are_labelled_and_units_are_seconds_and_bytes() {
    let a = AgentStatus {
        paths: vec![PathReport {
            name: "wifi".into(),
            state: Some(ShownState::Active),
            srtt_ms: Some(25.0),
            bytes_sent: 1000,
            bytes_received: 2000,
            pacing_rate_bps: 8000,
            ..Default::default()
        }],
        ..Default::default()
    };
    let t = render(&Status::Agent(a));
    assert!(
        t.contains(r#"braid_path_rtt_seconds{agent="",path="wifi"} 0.025"#),
        "{t}"
    );
    assert!(
        t.contains(r#"braid_path_bytes_total{agent="",path="wifi",direction="received"} 2000"#),
        "{t}"
    );
    assert!(
        t.contains(r#"braid_path_state{agent="",path="wifi",state="active"} 1"#),
        "{t}"
    );
    assert!(
        t.contains(r#"braid_path_pacing_rate_bytes_per_second{agent="",path="wifi"} 1000"#),
        "{t}"
    );
    assert!(t.trim_end().ends_with("# EOF"), "{t}");
}

#[test]
fn datagram_counters_of_the_session_are_exported() {
    let a = AgentStatus {
        session: Some(braid_net::status::SessionReport {
            datagrams: DatagramReport {
                realtime_sent: 500,
                duplicate_bytes: 80_000,
                ..Default::default()
            },
            ..Default::default()
        }),
        ..Default::default()
    };
    let t = render(&Status::Agent(a));
    assert!(
        t.contains(r#"braid_datagrams_realtime_total{agent=""} 500"#),
        "{t}"
    );
    assert!(
        t.contains(r#"braid_datagrams_duplicate_bytes_total{agent=""} 80000"#),
        "{t}"
    );
}

#[test]
fn egress_refusals_are_counted_per_agent() {
    let s = ServerStatus {
        egress: braid_net::status::EgressReport {
            agents: vec![braid_net::status::EgressAgent {
                agent_key_fingerprint: "SHA256:abc".into(),
                refused_connections: 2,
                refused_datagrams: 7,
            }],
            ..Default::default()
        },
        ..Default::default()
    };
    let t = render(&Status::Server(s));
    for want in [
        r#"braid_server_egress_refused_total{agent="SHA256:abc",kind="connection"} 2"#,
        r#"braid_server_egress_refused_total{agent="SHA256:abc",kind="datagram"} 7"#,
    ] {
        assert!(t.contains(want), "{want} in {t}");
    }
}

#[test]
fn agent_shares_show_bytes_limits_and_quotas() {
    let s = ServerStatus {
        shares: braid_net::status::SharesReport {
            capacity_bytes_per_sec: 0,
            agents: vec![braid_net::status::AgentShare {
                agent_key_fingerprint: "SHA256:abc".into(),
                sent_bytes: 9000,
                rate_limit_bytes_per_sec: Some(1_250_000),
                day_bytes: 12,
                day_quota_bytes: Some(5_000),
                ..Default::default()
            }],
        },
        ..Default::default()
    };
    let t = render(&Status::Server(s));
    for want in [
        r#"braid_server_agent_bytes_total{agent="SHA256:abc",kind="sent"} 9000"#,
        r#"braid_server_agent_rate_bytes_per_second{agent="SHA256:abc",kind="limit"} 1250000"#,
        r#"braid_server_agent_quota_bytes{agent="SHA256:abc",kind="day_used"} 12"#,
        r#"braid_server_agent_quota_bytes{agent="SHA256:abc",kind="day_limit"} 5000"#,
    ] {
        assert!(t.contains(want), "{want} in {t}");
    }
    assert!(!t.contains("fair_cap"), "no cap, no line: {t}");
}
