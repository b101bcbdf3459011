//! Inbound ports in the settings: the agent's `--forward` (flag or `forward` in its file),
//! the server's `[forward]` table and `--allow-forward`.

use super::*;
use braid_proxy::inbound::{Proto, PublicPort};

#[test]
fn agent_forwards_come_from_the_flag_or_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agent.toml");
    std::fs::write(&file, "forward = [\"udp:5000=127.0.0.1:53\"]\n").unwrap();
    let args = |forward: Vec<String>| AgentArgs {
        config: Some(file.clone()),
        paths: vec!["a=lo".into()],
        forward,
        ..Default::default()
    };
    let s = agent_settings(args(vec![])).unwrap();
    assert_eq!(
        s.cfg.forwards.iter().map(|f| f.port).collect::<Vec<_>>(),
        vec![PublicPort {
            proto: Proto::Udp,
            port: 5000
        }]
    );
    let s = agent_settings(args(vec!["tcp:8080=127.0.0.1:80".into()])).unwrap();
    assert_eq!(s.cfg.forwards.len(), 1, "the flag wins over the file");
    assert_eq!(s.cfg.forwards[0].port.proto, Proto::Tcp);
    let e = agent_settings(args(vec!["tcp:8080".into()])).err().unwrap();
    assert!(e.to_string().contains("expected tcp:PORT=HOST:PORT"), "{e}");
}

#[test]
fn server_forward_table_and_flag_allow_ports_per_key() {
    let dir = tempfile::tempdir().unwrap();
    let (key, _) = braid_crypto::write_keypair(dir.path().join("server")).unwrap();
    let (_, a_pub) = braid_crypto::write_keypair(dir.path().join("a")).unwrap();
    let (_, b_pub) = braid_crypto::write_keypair(dir.path().join("b")).unwrap();
    let (a, b) = (
        braid_crypto::read_public_key(&a_pub).unwrap(),
        braid_crypto::read_public_key(&b_pub).unwrap(),
    );
    let authorized = dir.path().join("authorized");
    std::fs::write(&authorized, format!("{a}\n{b}\n")).unwrap();
    let file = dir.path().join("server.toml");
    std::fs::write(
        &file,
        format!("[forward]\n\"{a}\" = [\"tcp:8080\", \"udp:5000-5010\"]\n"),
    )
    .unwrap();
    let args = |allow: Vec<String>| ServerArgs {
        config: Some(file.clone()),
        listen: Some("127.0.0.1:0".into()),
        key: Some(key.clone()),
        authorized: Some(authorized.clone()),
        allow_forward: allow,
        ..Default::default()
    };
    let port = |proto, port| PublicPort { proto, port };
    let s = server_settings(args(vec![format!("{b}=tcp:2222,udp:7")])).unwrap();
    let p = &s.cfg.forward;
    assert!(p.allows(&a, port(Proto::Tcp, 8080)));
    assert!(p.allows(&a, port(Proto::Udp, 5010)));
    assert!(!p.allows(&a, port(Proto::Tcp, 2222)));
    assert!(p.allows(&b, port(Proto::Tcp, 2222)));
    assert!(p.allows(&b, port(Proto::Udp, 7)));
    assert!(!p.allows(&b, port(Proto::Tcp, 8080)));
    let e = server_settings(args(vec![format!("{b}=tcp:x")]))
        .err()
        .unwrap();
    assert!(e.to_string().contains("expected tcp:PORT"), "{e}");
    let e = server_settings(args(vec!["tcp:1".into()])).err().unwrap();
    assert!(e.to_string().contains("expected KEY=PORTS"), "{e}");
}
