use super::*;
use crate::splice::Meter;
use braid_crypto::StaticKeypair;

fn key() -> PublicKey {
    StaticKeypair::generate().unwrap().public()
}

/// A quota is counted over stream bytes both ways, refuses once used up (the stream is
/// reset with QUOTA_REACHED), is written to the usage file and read back by the next run.
#[test]
fn a_used_up_quota_refuses_and_survives_a_restart() {
    let dir = std::env::temp_dir().join(format!("braid-usage-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = Shares::usage_file_of(&dir.join("agents.state"));
    let _ = std::fs::remove_file(&file);
    let (a, b) = (key(), key());
    let mut policy = SharesPolicy::default();
    let quota = QuotaLimits {
        day: Some(10_000),
        month: None,
    };
    policy.agents.insert(a, AgentLimits { rate: None, quota });
    let shares = Shares::new(policy.clone(), Some(file.clone()));
    let sa = shares.agent(a);
    assert_eq!(sa.to_stream(6000, false), Ok(()));
    assert_eq!(sa.to_tcp(3999), Ok(()));
    assert_eq!(sa.quota_reached(), None);
    assert_eq!(sa.to_stream(1, false), Err(QUOTA_REACHED));
    assert_eq!(sa.quota_reached(), Some("day"));
    // Another agent has no quota.
    assert_eq!(shares.agent(b).to_stream(50_000, false), Ok(()));
    shares.save();
    let again = Shares::new(policy, Some(file.clone()));
    assert_eq!(again.agent(a).quota_reached(), Some("day"), "read back");
    let r = again.report();
    let ra = r
        .agents
        .iter()
        .find(|x| x.agent_key_fingerprint == fingerprint(&a))
        .unwrap();
    assert_eq!((ra.day_bytes, ra.day_quota_bytes), (10_000, Some(10_000)));
    assert_eq!(ra.quota_reached.as_deref(), Some("day"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The gate holds a session's sending to its agent's limit: after the burst, a send is
/// held until the bucket has paid for it.
#[test]
fn the_gate_holds_sending_to_the_agent_limit() {
    let a = key();
    let mut policy = SharesPolicy::default();
    let limits = AgentLimits {
        rate: Some(1_000_000),
        quota: QuotaLimits::default(),
    };
    policy.agents.insert(a, limits);
    let shares = Shares::new(policy, None);
    let mut gate = shares.agent(a).gate();
    assert!(gate.wait_until().is_none());
    gate.sent(64 * 1024 + 100_000);
    let held = gate.wait_until().expect("held after the burst");
    let wait = held - tokio::time::Instant::now();
    assert!(wait > std::time::Duration::from_millis(80), "{wait:?}");
    // An agent without limits is never held.
    let mut free = shares.agent(key()).gate();
    free.sent(100 << 20);
    assert!(free.wait_until().is_none());
}

/// Two agents that want more: the controller caps the one above an equal share, and its
/// gate then holds it.
#[test]
fn the_tick_caps_the_agent_above_an_equal_share() {
    let shares = Shares::new(SharesPolicy::default(), None);
    let (a, b) = (key(), key());
    let (sa, sb) = (shares.agent(a), shares.agent(b));
    let mut ga = sa.gate();
    let mut gb = sb.gate();
    ga.sent(700_000);
    gb.sent(300_000);
    sa.to_stream(1, true).unwrap();
    sb.to_stream(1, true).unwrap();
    let t0 = Instant::now();
    shares.tick(t0, TICK);
    let r = shares.report();
    let caps: Vec<_> = r.agents.iter().map(|x| x.fair_cap_bytes_per_sec).collect();
    let half = (2_500_000.0 * (1.0 + HEADROOM)) as u64;
    let capped = |k: &PublicKey| {
        r.agents
            .iter()
            .find(|x| x.agent_key_fingerprint == fingerprint(k))
            .unwrap()
            .fair_cap_bytes_per_sec
    };
    assert_eq!((capped(&a), capped(&b)), (Some(half), None));
    let _ = caps;
    ga.sent(600_000);
    assert!(ga.wait_until().is_some(), "capped");
    // Fair shares off: nobody is capped.
    let off = SharesPolicy {
        fair: false,
        ..Default::default()
    };
    let shares = Shares::new(off, None);
    let (sa, sb) = (shares.agent(a), shares.agent(b));
    sa.gate().sent(700_000);
    sb.gate().sent(300_000);
    sa.to_stream(1, true).unwrap();
    sb.to_stream(1, true).unwrap();
    shares.tick(t0, TICK);
    assert!(shares
        .report()
        .agents
        .iter()
        .all(|x| x.fair_cap_bytes_per_sec.is_none()));
}
