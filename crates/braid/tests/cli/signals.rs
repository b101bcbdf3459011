//! `braid server` and `braid agent` as processes on loopback, and what SIGTERM and SIGHUP
//! do to them, seen through their control sockets (`braid status --json`).

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) const BRAID: &str = env!("CARGO_BIN_EXE_braid");

/// A child process, killed if the test ends before it exits.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(self.0.id() as libc::pid_t, sig) }, 0);
    }

    /// Wait for the exit; its status code.
    fn exit_within(&mut self, d: Duration) -> Option<i32> {
        let t = Instant::now();
        while t.elapsed() < d {
            if let Some(st) = self.0.try_wait().unwrap() {
                return st.code();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }
}

pub(crate) fn keygen(dir: &Path, name: &str) {
    let out = Command::new(BRAID)
        .args(["keygen", "--out"])
        .arg(dir.join(name))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

fn spawn(args: &[&str]) -> Proc {
    Proc(
        Command::new(BRAID)
            .args(args)
            .env("BRAID_LOG", "braid=error,braid_net=error")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    )
}

/// The snapshot at `sock`, or `None` while nothing answers.
fn status(sock: &Path) -> Option<Value> {
    let out = Command::new(BRAID)
        .args(["status", "--json", "--control"])
        .arg(sock)
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).unwrap())
}

/// Poll `sock` until `f` holds (returns the snapshot), or panic after `d`.
fn until(sock: &Path, d: Duration, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    let t = Instant::now();
    loop {
        if let Some(v) = status(sock) {
            if f(&v) {
                return v;
            }
            assert!(t.elapsed() < d, "{what}: not within {d:?}; last {v}");
        }
        assert!(
            t.elapsed() < d,
            "{what}: {} does not answer",
            sock.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(crate) struct Setup {
    pub(crate) dir: tempfile::TempDir,
    server: Proc,
    pub(crate) server_sock: PathBuf,
    addr: String,
}

pub(crate) fn p(dir: &Path, f: &str) -> String {
    dir.join(f).to_str().unwrap().to_string()
}

/// A server on loopback with agent keys `a` and `b` authorized.
pub(crate) fn server() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for k in ["s", "a", "b"] {
        keygen(d, k);
    }
    let auth = [
        std::fs::read_to_string(d.join("a.pub")).unwrap(),
        std::fs::read_to_string(d.join("b.pub")).unwrap(),
    ]
    .concat();
    std::fs::write(d.join("authorized"), auth).unwrap();
    let server_sock = d.join("server.sock");
    let server = spawn(&[
        "server",
        "--listen",
        "127.0.0.1:0",
        "--key",
        &p(d, "s.key"),
        "--authorized",
        &p(d, "authorized"),
        "--control",
        &p(d, "server.sock"),
        "--egress-allow",
        "127.0.0.0/8",
    ]);
    let v = until(&server_sock, Duration::from_secs(5), "server up", |_| true);
    let addr = v["listen"].as_str().unwrap().to_string();
    Setup {
        dir,
        server,
        server_sock,
        addr,
    }
}

/// An agent with key `key` (a or b), one loopback path; waits for its session.
fn agent(s: &Setup, key: &str) -> (Proc, PathBuf) {
    let d = s.dir.path();
    let sock = d.join(format!("agent-{key}.sock"));
    let a = spawn(&[
        "agent",
        "--server",
        &s.addr,
        "--server-pub",
        &p(d, "s.pub"),
        "--key",
        &p(d, &format!("{key}.key")),
        "--path",
        "lo=127.0.0.1",
        "--socks",
        "127.0.0.1:0",
        "--control",
        sock.to_str().unwrap(),
    ]);
    until(&sock, Duration::from_secs(5), "agent session", |v| {
        v["session"].is_object() && v["paths"][0]["state"] == "active"
    });
    (a, sock)
}

#[test]
fn sigterm_makes_the_server_close_every_agent_session_at_once_and_exit() {
    let mut s = server();
    let (_a, asock) = agent(&s, "a");
    s.server.signal(libc::SIGTERM);
    let t = Instant::now();
    assert_eq!(
        s.server.exit_within(Duration::from_secs(3)),
        Some(0),
        "server exit status"
    );
    assert!(
        !s.server_sock.exists(),
        "the server's control socket is left behind"
    );
    // The agent heard the CLOSE: its session is gone at once (an idle agent would
    // otherwise keep it until it sends something and hears nothing back).
    until(
        &asock,
        Duration::from_secs(1),
        "agent notices the server closed",
        |v| v["session"].is_null(),
    );
    eprintln!(
        "server exited and agent without session {:?} after SIGTERM",
        t.elapsed()
    );
}

#[test]
fn sigterm_makes_the_agent_close_its_session_and_proxy_and_exit() {
    let s = server();
    let (mut a, asock) = agent(&s, "a");
    let v = status(&s.server_sock).unwrap();
    assert_eq!(v["sessions"].as_array().unwrap().len(), 1, "{v}");
    a.signal(libc::SIGTERM);
    assert_eq!(
        a.exit_within(Duration::from_secs(3)),
        Some(0),
        "agent exit status"
    );
    assert!(!asock.exists(), "the agent's control socket is left behind");
    // The server got the CLOSE: the session is gone now, not at the 60 s idle timeout.
    until(
        &s.server_sock,
        Duration::from_secs(1),
        "server drops the session",
        |v| v["sessions"].as_array().unwrap().is_empty(),
    );
}

#[test]
fn sighup_reloads_authorized_keys_keeping_listed_sessions_and_ending_removed_ones() {
    let s = server();
    let (_a, asock) = agent(&s, "a");
    let (_b, bsock) = agent(&s, "b");
    let a_session = status(&asock).unwrap()["session"]["id"].clone();
    let v = status(&s.server_sock).unwrap();
    assert_eq!(v["sessions"].as_array().unwrap().len(), 2, "{v}");
    // Only a stays authorized.
    let d = s.dir.path();
    std::fs::copy(d.join("a.pub"), d.join("authorized")).unwrap();
    s.server.signal(libc::SIGHUP);
    let v = until(
        &s.server_sock,
        Duration::from_secs(1),
        "b's session ends",
        |v| v["sessions"].as_array().unwrap().len() == 1,
    );
    let a_fp = v["sessions"][0]["agent_key_fingerprint"].clone();
    until(&bsock, Duration::from_secs(1), "b loses its session", |v| {
        v["session"].is_null()
    });
    // a kept the very same session; b cannot come back.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(status(&asock).unwrap()["session"]["id"], a_session);
    assert!(
        status(&bsock).unwrap()["session"].is_null(),
        "b got back in"
    );
    // Only a's session is established. On a busy host a's agent may have probed with a new
    // handshake after a second of silence (its silence watch): the server then also lists that
    // probe's session, not established, until the agent stays with its first one. b has no
    // session of any kind.
    let v = status(&s.server_sock).unwrap();
    let sessions = v["sessions"].as_array().unwrap();
    let established: Vec<_> = sessions
        .iter()
        .filter(|x| x["established"] == true)
        .collect();
    assert_eq!(established.len(), 1, "{v}");
    assert_eq!(established[0]["id"], a_session, "{v}");
    assert!(
        sessions.iter().all(|x| x["agent_key_fingerprint"] == a_fp),
        "b has a session: {v}"
    );
    assert!(v["handshakes_refused"].as_u64().unwrap() >= 1, "{v}");
}

/// Issue 24: a clean stop logged a WARN "session ended (...); reconnecting" and then
/// "mode: direct", and the log carried ANSI colour codes into files and the journal. Here
/// stderr is a pipe, as under systemd: no colour codes, and SIGTERM ends with neither line.
#[test]
fn sigterm_logs_no_reconnecting_and_no_direct_mode_and_no_colour_codes_into_a_pipe() {
    let s = server();
    let d = s.dir.path();
    let sock = d.join("agent-log.sock");
    let mut a = Proc(
        Command::new(BRAID)
            .args([
                "agent",
                "--server",
                &s.addr,
                "--server-pub",
                &p(d, "s.pub"),
                "--key",
                &p(d, "a.key"),
                "--path",
                "lo=127.0.0.1",
                "--socks",
                "127.0.0.1:0",
                "--control",
                sock.to_str().unwrap(),
            ])
            .env_remove("BRAID_LOG")
            .env_remove("NO_COLOR")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    until(&sock, Duration::from_secs(5), "agent session", |v| {
        v["session"].is_object() && v["paths"][0]["state"] == "active"
    });
    a.signal(libc::SIGTERM);
    assert_eq!(
        a.exit_within(Duration::from_secs(3)),
        Some(0),
        "exit status"
    );
    let mut log = String::new();
    std::io::Read::read_to_string(&mut a.0.stderr.take().unwrap(), &mut log).unwrap();
    assert!(log.contains("mode: session"), "the log is captured: {log}");
    let (_, stop) = log
        .split_once("shutting down: closing")
        .unwrap_or_else(|| panic!("no shutdown line: {log}"));
    assert!(!log.contains('\x1b'), "colour codes in a pipe: {log:?}");
    assert!(!stop.contains("WARN"), "a clean stop warns: {stop}");
    assert!(!stop.contains("reconnecting"), "{stop}");
    assert!(!stop.contains("mode: direct"), "{stop}");
}
