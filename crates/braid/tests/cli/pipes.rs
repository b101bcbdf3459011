//! Issue 38, item 8: `braid status | head` panicked ("failed printing to stdout: Broken
//! pipe", exit 101). Every command that prints, run with its stdout a pipe whose reader is
//! already gone, ends quietly: exit status 0, nothing on stderr.

use crate::signals::{keygen, p, server, BRAID};
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Stdio};

/// The write end of a pipe whose read end is closed.
fn reader_gone() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: pipe(2) into an array of two descriptors, both ours from here on.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the descriptors were just made and are owned by nothing else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    Stdio::from(write)
}

/// Run `braid args` into a pipe nobody reads: (exit code, stderr).
fn into_gone_reader(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(BRAID)
        .args(args)
        .stdout(reader_gone())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn every_command_that_prints_exits_quietly_when_its_reader_is_gone() {
    let s = server();
    let d = s.dir.path();
    let sock = s.server_sock.to_str().unwrap();
    let conf = d.join("server.toml");
    let text = format!(
        "listen = \"127.0.0.1:0\"\nkey = \"{}\"\nauthorized = \"{}\"\n",
        p(d, "s.key"),
        p(d, "authorized")
    );
    std::fs::write(&conf, text).unwrap();
    keygen(d, "k");
    let k = p(d, "k2");
    let conf = conf.to_str().unwrap();
    let cases: [&[&str]; 5] = [
        &["status", "--control", sock],
        &["status", "--json", "--control", sock],
        &["check-config", conf],
        &["keygen", "--out", &k],
        &["demo", "--json"],
    ];
    for args in cases {
        let (code, err) = into_gone_reader(args);
        assert_eq!(code, Some(0), "braid {args:?}: exit status; stderr: {err}");
        assert!(err.is_empty(), "braid {args:?} wrote to stderr: {err}");
    }
}
