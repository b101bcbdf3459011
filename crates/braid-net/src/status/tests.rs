//! Unit tests of the status rules and snapshot types.

use super::*;
use braid_core::{Config, Session};

fn view(validated: bool, frozen: bool, abandoned: bool, state: PathState) -> CorePath {
    let s = Session::connect(Config::default(), braid_core::Instant(0), 1, 0);
    let mut c = core_paths(&s, braid_core::Instant(0)).remove(0);
    c.cond = PathCondition {
        validated,
        abandoned,
        frozen,
        last_received: braid_core::Instant(0),
    };
    c.info.state = state;
    c
}

#[test]
fn states_follow_the_core_and_the_cap() {
    assert_eq!(display_state(None, false), ShownState::Down);
    let v = view(false, false, false, PathState::Active);
    assert_eq!(display_state(Some(&v), false), ShownState::Validating);
    let a = view(true, false, false, PathState::Active);
    assert_eq!(display_state(Some(&a), false), ShownState::Active);
    assert_eq!(display_state(Some(&a), true), ShownState::Capped);
    let b = view(true, false, false, PathState::Standby);
    assert_eq!(display_state(Some(&b), false), ShownState::Backup);
    let gone = view(true, false, true, PathState::Active);
    assert_eq!(display_state(Some(&gone), false), ShownState::Down);
}

#[test]
fn a_frozen_path_is_down_once_silent_long_enough() {
    let mut f = view(true, true, false, PathState::Active);
    f.silent = DOWN_AFTER - Duration::from_millis(1);
    assert_eq!(display_state(Some(&f), false), ShownState::Frozen);
    f.silent = DOWN_AFTER;
    assert_eq!(display_state(Some(&f), false), ShownState::Down);
}

#[test]
fn core_paths_measure_the_silence_since_the_last_arrival() {
    let s = Session::connect(Config::default(), braid_core::Instant(0), 1, 0);
    let c = core_paths(&s, braid_core::Instant(700_000_000)).remove(0);
    assert_eq!(c.silent, Duration::from_millis(700));
}

#[test]
fn energy_is_charged_only_while_the_path_carries_packets() {
    let t0 = Instant::now();
    let mut m = PathMeter::new();
    let model = PowerModel::new(Some(2.0), Some(500.0));
    m.update(t0, 0, model);
    m.update(t0 + Duration::from_secs(1), 1_000_000, model);
    // 2 W for 1 s + 500 nJ × 1 MB.
    assert!((m.energy_j() - 2.5).abs() < 1e-9, "{}", m.energy_j());
    // Idle for a second: nothing charged.
    m.update(t0 + Duration::from_secs(2), 1_000_000, model);
    assert!((m.energy_j() - 2.5).abs() < 1e-9);
    assert_eq!(PowerModel::new(None, None), None);
}

#[test]
fn the_json_names_are_the_documented_ones() {
    let s = AgentStatus {
        version: STATUS_VERSION,
        paths: vec![PathReport {
            name: "wifi".into(),
            state: Some(ShownState::Active),
            ..Default::default()
        }],
        ..Default::default()
    };
    let v = serde_json::to_value(Status::Agent(s.clone())).unwrap();
    assert_eq!(v["role"], "agent");
    for k in [
        "name",
        "state",
        "srtt_ms",
        "min_rtt_ms",
        "cwnd_bytes",
        "pacing_rate_bps",
        "delivery_rate_bps",
        "capacity_bps",
        "capacity_settled",
        "loss_rate",
        "bytes_sent",
        "bytes_received",
        "packets_sent",
        "packets_received",
        "cap_used_bytes",
        "energy_j",
        "interface",
        "local_address",
        "remote_address",
        "datagram_bytes",
        "packet_bytes",
        "datagram_drops",
    ] {
        assert!(v["paths"][0].get(k).is_some(), "paths[].{k} missing");
    }
    assert_eq!(v["paths"][0]["state"], "active");
    let back: Status = serde_json::from_value(v).unwrap();
    assert_eq!(back, Status::Agent(s));
}
