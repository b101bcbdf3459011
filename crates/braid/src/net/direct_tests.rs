//! `braid agent` without a server: direct mode settings.

use super::*;
use braid_net::agent::{ConnPolicy, DirectMode};

fn args(extra: impl FnOnce(&mut AgentArgs)) -> AgentArgs {
    let mut a = AgentArgs {
        paths: vec!["a=lo".into(), "b=127.0.0.2,power=0.5".into()],
        socks: Some("127.0.0.1:0".parse().unwrap()),
        ..Default::default()
    };
    extra(&mut a);
    a
}

/// Issue 38, item 5: the shipped `path = ["auto"]` refused `--bypass` ("auto paths cannot
/// take direct connections yet"); a bypass takes auto slots as direct mode does. A pin
/// still needs a named path.
#[test]
fn the_default_auto_path_takes_a_bypass_rule() {
    let auto = |a: &mut AgentArgs| {
        a.paths = vec!["auto".into()];
        a.bypass = vec!["10.0.0.0/8".into()];
    };
    let s = agent_settings(args(auto)).unwrap();
    assert_eq!(s.cfg.rules.rules().len(), 1);
    let e = agent_settings(args(|a| {
        auto(a);
        a.pin = vec!["192.0.2.1=auto1".into()];
    }))
    .err()
    .unwrap();
    assert!(format!("{e:#}").contains("cannot be pinned"), "{e:#}");
}

#[test]
fn no_server_means_direct_mode_without_key_files() {
    let s = agent_settings(args(|_| {})).unwrap();
    assert!(s.cfg.servers.is_empty());
    assert_eq!(s.cfg.direct.mode, DirectMode::Fallback);
    assert_eq!(s.cfg.direct.policy, ConnPolicy::Throughput);
}

#[test]
fn operetta_alpha_applies_to_direct_connections() {
    let s = agent_settings(args(|a| {
        a.scheduler = Some("operetta".into());
        a.alpha = Some(0.0);
    }))
    .unwrap();
    assert_eq!(s.cfg.direct.policy, ConnPolicy::Operetta { alpha: 0.0 });
}

#[test]
fn direct_off_needs_a_server_and_bad_values_say_what_is_expected() {
    let e = agent_settings(args(|a| a.direct = Some("off".into())))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("needs a --server"), "{e}");
    let e = agent_settings(args(|a| a.direct = Some("sometimes".into())))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("expected fallback or off"), "{e}");
    // A server without keys is still an error.
    let e = agent_settings(args(|a| a.servers = vec!["127.0.0.1:4433".into()]))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("--server-pub"), "{e}");
}
