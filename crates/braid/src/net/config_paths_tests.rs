//! Paths in a config file resolve against the file's folder, not the working directory
//! (issue 24: under systemd the working directory is `/`, so `key = "server.key"` in
//! /etc/braid/server.toml was looked for as /server.key).

use super::*;

/// A folder holding a server and an agent key pair and `agents.txt`; the working directory
/// of the test process is elsewhere (the crate's folder), where none of them exist.
fn folder() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    braid_crypto::write_keypair(dir.path().join("server")).unwrap();
    braid_crypto::write_keypair(dir.path().join("agent")).unwrap();
    let agent_pub = std::fs::read_to_string(dir.path().join("agent.pub")).unwrap();
    std::fs::write(dir.path().join("agents.txt"), agent_pub).unwrap();
    assert!(!Path::new("server.key").exists());
    dir
}

#[test]
fn relative_paths_in_a_server_config_resolve_against_its_folder() {
    let dir = folder();
    let file = dir.path().join("server.toml");
    std::fs::write(
        &file,
        "listen = \"127.0.0.1:0\"\nkey = \"server.key\"\nauthorized = \"agents.txt\"\n\
         control = \"run/server.sock\"\n",
    )
    .unwrap();
    let s = server_settings(ServerArgs {
        config: Some(file),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(s.authorized, dir.path().join("agents.txt"));
    assert_eq!(s.cfg.authorized.len(), 1);
    // The default state file follows the authorized file, so it is beside it too.
    assert_eq!(
        s.cfg.state_file.as_deref(),
        Some(dir.path().join("agents.txt.state").as_path())
    );
    assert_eq!(s.control, Some(dir.path().join("run/server.sock")));
}

#[test]
fn relative_paths_in_an_agent_config_resolve_against_its_folder() {
    let dir = folder();
    let file = dir.path().join("agent.toml");
    std::fs::write(
        &file,
        "server = \"127.0.0.1:4433\"\nserver_pub = \"server.pub\"\nkey = \"agent.key\"\n\
         path = [\"a=lo\"]\nsocks = \"127.0.0.1:0\"\nstate_file = \"caps.state\"\n",
    )
    .unwrap();
    let s = agent_settings(AgentArgs {
        config: Some(file),
        ..Default::default()
    })
    .unwrap();
    let server_pub = braid_crypto::read_public_key(dir.path().join("server.pub")).unwrap();
    assert_eq!(s.cfg.server_pub, server_pub);
    assert_eq!(s.cfg.state_file, Some(dir.path().join("caps.state")));
}

#[test]
fn absolute_paths_and_flags_stay_as_given() {
    let dir = folder();
    let sub = dir.path().join("conf");
    std::fs::create_dir(&sub).unwrap();
    let file = sub.join("server.toml");
    let abs = dir.path().join("agents.txt");
    std::fs::write(
        &file,
        format!(
            "listen = \"127.0.0.1:0\"\nkey = \"../server.key\"\nauthorized = {:?}\n",
            abs.display().to_string()
        ),
    )
    .unwrap();
    let s = server_settings(ServerArgs {
        config: Some(file),
        state: Some(PathBuf::from("flag.state")),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(s.authorized, abs);
    // A flag is the command line's: relative to the working directory, as always.
    assert_eq!(s.cfg.state_file.as_deref(), Some(Path::new("flag.state")));
}

#[test]
fn server_pub_may_be_the_key_itself() {
    let dir = folder();
    let key = std::fs::read_to_string(dir.path().join("server.pub")).unwrap();
    let file = dir.path().join("agent.toml");
    std::fs::write(
        &file,
        format!(
            "server = \"127.0.0.1:4433\"\nserver_pub = {:?}\nkey = \"agent.key\"\n\
             path = [\"a=lo\"]\nsocks = \"127.0.0.1:0\"\n",
            key.trim()
        ),
    )
    .unwrap();
    let s = agent_settings(AgentArgs {
        config: Some(file),
        ..Default::default()
    })
    .unwrap();
    // The whole line of server.pub, its `# braid public key` mark included.
    assert!(key.contains('#'), "{key}");
    assert_eq!(s.cfg.server_pub.to_base64(), key.split(' ').next().unwrap());
    // Not a key and no such file: the error names the file, as before.
    let e = agent_settings(AgentArgs {
        config: Some(dir.path().join("agent.toml")),
        server_pub: Some(dir.path().join("nothing.pub")),
        ..Default::default()
    })
    .err()
    .unwrap();
    assert!(format!("{e:#}").contains("nothing.pub"), "{e:#}");
}
