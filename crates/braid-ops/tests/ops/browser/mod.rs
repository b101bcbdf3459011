//! A real headless browser for the dashboard test: Debian's `chromium`, driven over the
//! DevTools protocol on a pipe (`--remote-debugging-pipe`: commands on fd 3, answers on
//! fd 4, each message JSON ended by a NUL byte), so the test can let time pass between two
//! reads of the live DOM (`--dump-dom` reads it once, at the load event, before any
//! server-sent event has arrived).
#![allow(dead_code)]

use serde_json::{json, Value};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long one DevTools call may take (chromium starts slowly on a loaded 2-core box).
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Browser {
    child: Child,
    to: File,
    from: mpsc::Receiver<Value>,
    next: u64,
    session: Option<String>,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where chromium is, if installed.
pub fn chromium() -> Option<&'static str> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
}

/// A pipe whose two ends are numbered 10 or above (so moving them to 3 and 4 in the child
/// cannot overwrite one with the other), close-on-exec.
fn pipe() -> (RawFd, RawFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two ints; the new descriptors are ours.
    unsafe {
        assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC), 0, "pipe2");
        let hi = |fd| {
            let h = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10);
            assert!(h >= 10, "fcntl F_DUPFD_CLOEXEC");
            libc::close(fd);
            h
        };
        (hi(fds[0]), hi(fds[1]))
    }
}

impl Browser {
    /// Start headless chromium with a fresh profile and a 1280×900 window.
    pub fn launch(exe: &str) -> Browser {
        let (cmd_r, cmd_w) = pipe();
        let (ans_r, ans_w) = pipe();
        let profile = tempfile::tempdir().unwrap();
        let mut c = Command::new(exe);
        c.args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=1280,900",
            "--remote-debugging-pipe",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        // SAFETY: only async-signal-safe calls (dup2) between fork and exec.
        unsafe {
            c.pre_exec(move || {
                if libc::dup2(cmd_r, 3) < 0 || libc::dup2(ans_w, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = c.spawn().expect("starting chromium");
        // SAFETY: the descriptors are ours and each is wrapped once.
        let (to, from) = unsafe {
            libc::close(cmd_r);
            libc::close(ans_w);
            (File::from_raw_fd(cmd_w), File::from_raw_fd(ans_r))
        };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(from);
            let mut buf = Vec::new();
            while r.read_until(0, &mut buf).is_ok_and(|n| n > 0) {
                buf.pop();
                if let Ok(v) = serde_json::from_slice::<Value>(&buf) {
                    if tx.send(v).is_err() {
                        return;
                    }
                }
                buf.clear();
            }
        });
        Browser {
            child,
            to,
            from: rx,
            next: 1,
            session: None,
            _profile: profile,
        }
    }

    /// One DevTools call (on the page's session once [`open`](Self::open) attached it).
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = &self.session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.to.write_all(&bytes).expect("writing to chromium");
        loop {
            let v = self
                .from
                .recv_timeout(CALL_TIMEOUT)
                .unwrap_or_else(|e| panic!("chromium did not answer {method}: {e}"));
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    /// Open `url` in a new 1280×900 tab and attach to it.
    pub fn open(&mut self, url: &str) {
        self.session = None;
        let t = self.call("Target.createTarget", json!({"url": url}));
        let target = t["targetId"].as_str().unwrap().to_string();
        let a = self.call(
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
        );
        self.session = Some(a["sessionId"].as_str().unwrap().to_string());
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": false}),
        );
    }

    /// The page's live DOM, serialised.
    pub fn dom(&mut self) -> String {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": "document.documentElement.outerHTML", "returnByValue": true}),
        );
        r["result"]["value"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// A PNG of the viewport.
    pub fn screenshot(&mut self) -> Vec<u8> {
        use base64::Engine as _;
        let r = self.call("Page.captureScreenshot", json!({"format": "png"}));
        base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().unwrap())
            .unwrap()
    }
}

/// The attributes of every `<path ...>` in the SVG with `id="chart-ID"` of `dom`.
pub fn chart_series(dom: &str, id: &str) -> Vec<Vec<(String, String)>> {
    let Some(start) = dom.find(&format!("id=\"chart-{id}\"")) else {
        return Vec::new();
    };
    let svg = &dom[start..];
    let svg = &svg[..svg.find("</svg>").unwrap_or(svg.len())];
    svg.split("<path ")
        .skip(1)
        .map(|tag| {
            let tag = &tag[..tag.find('>').unwrap_or(tag.len())];
            let mut attrs = Vec::new();
            let mut rest = tag;
            while let Some(eq) = rest.find("=\"") {
                let name = rest[..eq].trim().to_string();
                let after = &rest[eq + 2..];
                let end = after.find('"').unwrap_or(after.len());
                attrs.push((name, after[..end].to_string()));
                rest = &after[(end + 1).min(after.len())..];
            }
            attrs
        })
        .collect()
}

/// Attribute `name` of a parsed tag.
pub fn attr<'a>(tag: &'a [(String, String)], name: &str) -> Option<&'a str> {
    tag.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}
