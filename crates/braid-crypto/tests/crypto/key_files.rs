//! Key files on disk: modes, refusal to overwrite, permission checks and the authorized
//! file format. Touches only files inside a temporary directory.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use braid_crypto::{
    parse_public_key, read_authorized, read_private_key, read_public_key, write_keypair, KeyError,
    StaticKeypair,
};

fn mode(path: &std::path::Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn keygen_writes_0600_private_key_and_matching_public_key() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("server");
    let (key, public) = write_keypair(&prefix).unwrap();
    assert_eq!(key, dir.path().join("server.key"));
    assert_eq!(public, dir.path().join("server.pub"));
    assert_eq!(mode(&key), 0o600);
    for p in [&key, &public] {
        let text = fs::read_to_string(p).unwrap();
        assert!(
            text.ends_with('\n') && text.lines().count() == 1,
            "{text:?}"
        );
        assert_eq!(text.split(' ').next().unwrap().len(), 44, "{text:?}");
    }
    let mark = |p: &std::path::Path| fs::read_to_string(p).unwrap();
    assert!(mark(&key).ends_with(" # braid private key\n"));
    assert!(mark(&public).ends_with(" # braid public key\n"));
    let kp = read_private_key(&key).unwrap();
    assert_eq!(read_public_key(&public).unwrap(), kp.public());
    // No temporary files left behind.
    let mut names: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["server.key", "server.pub"]);
}

#[test]
fn each_keygen_makes_a_distinct_0600_private_key() {
    // Two key pairs never share a private key, and each key file is 0600.
    let dir = tempfile::tempdir().unwrap();
    let (k1, _) = write_keypair(dir.path().join("a")).unwrap();
    let (k2, _) = write_keypair(dir.path().join("b")).unwrap();
    assert_eq!(mode(&k1), 0o600);
    assert_eq!(mode(&k2), 0o600);
    assert_ne!(fs::read(&k1).unwrap(), fs::read(&k2).unwrap());
}

#[test]
fn keygen_refuses_to_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("client");
    let (key, _) = write_keypair(&prefix).unwrap();
    let before = fs::read(&key).unwrap();
    let e = write_keypair(&prefix).unwrap_err();
    assert!(matches!(e, KeyError::AlreadyExists { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("client.key") && msg.contains("refusing to overwrite"),
        "{msg}"
    );
    assert_eq!(fs::read(&key).unwrap(), before, "existing key untouched");

    // Only the .pub exists: still refused, and no .key is created.
    let other = dir.path().join("other");
    fs::write(dir.path().join("other.pub"), "x\n").unwrap();
    let e = write_keypair(&other).unwrap_err();
    assert!(e.to_string().contains("other.pub"), "{e}");
    assert!(!dir.path().join("other.key").exists());
}

#[test]
fn keygen_into_missing_directory_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let e = write_keypair(dir.path().join("nope/server")).unwrap_err();
    assert!(matches!(e, KeyError::Io { .. }), "{e:?}");
    assert!(e.to_string().contains("nope"), "{e}");
}

#[test]
fn private_key_readable_by_others_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (key, _) = write_keypair(dir.path().join("k")).unwrap();
    for bad in [0o640, 0o604, 0o644, 0o660] {
        fs::set_permissions(&key, fs::Permissions::from_mode(bad)).unwrap();
        let e = read_private_key(&key).unwrap_err();
        assert!(
            matches!(e, KeyError::InsecurePermissions { mode, .. } if mode == bad),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(msg.contains("chmod 600") && msg.contains("k.key"), "{msg}");
    }
    fs::set_permissions(&key, fs::Permissions::from_mode(0o400)).unwrap();
    read_private_key(&key).unwrap();
}

/// Issue 24: a public key given as a private `key` passed (after advice to `chmod 600` it),
/// and a private key given as `server_pub` passed too.
#[test]
fn a_key_file_of_the_wrong_kind_is_refused_saying_which_file_to_give() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = write_keypair(dir.path().join("agent")).unwrap();
    for mode in [0o644, 0o600] {
        fs::set_permissions(&public, fs::Permissions::from_mode(mode)).unwrap();
        let e = read_private_key(&public).unwrap_err();
        assert!(matches!(e, KeyError::WrongKind { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(
            msg.contains("agent.pub: this is a public key file")
                && msg.contains("private key belongs here")
                && msg.contains(&key.display().to_string())
                && !msg.contains("chmod"),
            "{msg}"
        );
    }
    let e = read_public_key(&key).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("agent.key: this is a private key file")
            && msg.contains("public key belongs here")
            && msg.contains(&public.display().to_string()),
        "{msg}"
    );
    // The right kinds still load.
    assert_eq!(
        read_private_key(&key).unwrap().public(),
        read_public_key(&public).unwrap()
    );
}

#[test]
fn malformed_key_files_are_refused_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, content: &[u8]| {
        let p = dir.path().join(name);
        fs::write(&p, content).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
        p
    };
    let p = write("empty.key", b"");
    assert!(matches!(read_private_key(&p), Err(KeyError::Empty { .. })));
    let p = write("short.key", b"AAAA\n");
    let e = read_private_key(&p).unwrap_err();
    assert!(e.to_string().contains("short.key: line 1"), "{e}");
    let good = StaticKeypair::generate().unwrap().public().to_base64();
    let p = write("two.pub", format!("{good}\n{good}\n").as_bytes());
    let e = read_public_key(&p).unwrap_err();
    assert!(e.to_string().contains("line 2"), "{e}");
    let p = write("binary.key", &[0xff, 0xfe, 0, 1, b'\n']);
    let e = read_private_key(&p).unwrap_err();
    assert!(e.to_string().contains("not UTF-8"), "{e}");
    let e = read_public_key(dir.path().join("missing.pub")).unwrap_err();
    assert!(e.to_string().contains("missing.pub"), "{e}");
}

#[test]
fn authorized_file_with_comments_and_blank_lines() {
    let dir = tempfile::tempdir().unwrap();
    let a = StaticKeypair::generate().unwrap().public();
    let b = StaticKeypair::generate().unwrap().public();
    let text = format!(
        "# braid authorized clients\n\n   {a}   \n# laptop\n{b} # phone\n\n   # indented comment\n"
    );
    let p = dir.path().join("authorized");
    fs::write(&p, text).unwrap();
    assert_eq!(read_authorized(&p).unwrap(), vec![a, b]);

    let empty = dir.path().join("empty");
    fs::write(&empty, "# nobody yet\n").unwrap();
    assert_eq!(read_authorized(&empty).unwrap(), vec![]);
}

#[test]
fn authorized_file_bad_line_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let a = StaticKeypair::generate().unwrap().public();
    let p = dir.path().join("authorized");
    fs::write(&p, format!("# ok\n{a}\n\nnot-a-key!!\n{a}\n")).unwrap();
    let e = read_authorized(&p).unwrap_err();
    match &e {
        KeyError::BadKeyLine { path, line, .. } => {
            assert_eq!(path, &p);
            assert_eq!(*line, 4);
        }
        other => panic!("expected BadKeyLine, got {other:?}"),
    }
    let msg = e.to_string();
    assert!(
        msg.contains("authorized: line 4") && msg.contains("base64"),
        "{msg}"
    );

    fs::write(&p, format!("{a} extra\n")).unwrap();
    let e = read_authorized(&p).unwrap_err();
    assert!(
        e.to_string().contains("line 1") && e.to_string().contains("more than one word"),
        "{e}"
    );
}

#[test]
fn public_key_text_round_trip() {
    let k = StaticKeypair::generate().unwrap().public();
    assert_eq!(parse_public_key(&k.to_string()).unwrap(), k);
    assert!(parse_public_key("").is_err());
}

/// Issue 24: a public key given where the private one belongs got the advice to `chmod 600`
/// it, and a private key given as the server's public key passed. The kind is now read from
/// the comment `braid keygen` writes, whatever the file is called.
#[test]
fn a_key_of_the_wrong_kind_is_refused_whatever_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = write_keypair(dir.path().join("srv")).unwrap();
    // The public key copied to a file named like a private one, even with mode 0644.
    let as_key = dir.path().join("copy.key");
    fs::copy(&public, &as_key).unwrap();
    fs::set_permissions(&as_key, fs::Permissions::from_mode(0o644)).unwrap();
    let e = read_private_key(&as_key).unwrap_err();
    assert!(matches!(e, KeyError::WrongKind { .. }), "{e}");
    assert!(e.to_string().contains("public key file"), "{e}");
    // The private key copied to a file named like a public one.
    let as_pub = dir.path().join("copy.pub");
    fs::copy(&key, &as_pub).unwrap();
    let e = read_public_key(&as_pub).unwrap_err();
    assert!(matches!(e, KeyError::WrongKind { .. }), "{e}");
    assert!(!e
        .to_string()
        .contains(&fs::read_to_string(&key).unwrap()[..44]));
    // A marked private key under any name is one.
    let renamed = dir.path().join("srv.secret");
    fs::copy(&key, &renamed).unwrap();
    assert_eq!(
        read_private_key(&renamed).unwrap().public(),
        read_public_key(&public).unwrap()
    );
    // And no private key goes into an authorized file.
    let auth = dir.path().join("agents.txt");
    fs::copy(&key, &auth).unwrap();
    let e = read_authorized(&auth).unwrap_err();
    assert!(e.to_string().contains("private key"), "{e}");
}

#[test]
fn key_files_without_the_marks_are_still_read_and_told_apart_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let private = [7u8; 32];
    let kp = StaticKeypair::from_private(private).unwrap();
    let b64 = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(private)
    };
    let (key, public) = (dir.path().join("old.key"), dir.path().join("old.pub"));
    fs::write(&key, format!("{b64}\n")).unwrap();
    fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).unwrap();
    fs::write(&public, format!("{}\n", kp.public())).unwrap();
    assert_eq!(read_private_key(&key).unwrap().public(), kp.public());
    assert_eq!(read_public_key(&public).unwrap(), kp.public());
    assert!(matches!(
        read_private_key(&public),
        Err(KeyError::WrongKind { .. })
    ));
    assert!(matches!(
        read_public_key(&key),
        Err(KeyError::WrongKind { .. })
    ));
}
