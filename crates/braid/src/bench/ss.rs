//! The `shadowsocks` row of `braid bench`: shadowsocks-libev's ss-server and ss-local
//! (cipher aes-256-gcm, TCP only, no fast open) as child processes on 127.0.0.1, the same
//! transfer as the other rows through ss-local's SOCKS5 port, and the two processes' CPU
//! from /proc/PID/stat.
//!
//! Owns: finding the two programs on PATH, their ports and password, starting them,
//! waiting until they accept connections, killing them (a guard per child, also on error)
//! and reading their CPU time. Must not touch: braid, the traffic itself ([`super::traffic`]).

use super::traffic::Via;
use anyhow::{bail, Context, Result};
use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Why the row is skipped when ss-server or ss-local is not on PATH.
pub const NOT_INSTALLED: &str =
    "shadowsocks-libev is not installed (apt-get install shadowsocks-libev)";

/// The cipher of both processes.
pub const CIPHER: &str = "aes-256-gcm";

/// How long each process may take to accept connections.
pub const UP_WITHIN: Duration = Duration::from_secs(10);

/// Attempts at starting the pair when a process exits at once (another program took the
/// free port picked for it in between).
const ATTEMPTS: usize = 3;

/// `name` in a directory of PATH, if it is an executable file there.
pub fn on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// ss-server and ss-local, or None if either is not on PATH.
pub fn programs() -> Option<(PathBuf, PathBuf)> {
    Some((on_path("ss-server")?, on_path("ss-local")?))
}

/// The shadowsocks row: skipped when shadowsocks-libev is not installed, else `per_conn`
/// bytes from `to.source` on each of `conns` connections through ss-local (and the probe
/// through it too), with the CPU of
/// ss-local and ss-server in `proxy_cpu_s_per_gb`. Both processes end with the row.
pub fn measure_row(
    to: super::Targets,
    conns: usize,
    per_conn: u64,
    total: u64,
    progress: bool,
) -> Result<super::Row> {
    let Some((server, local)) = programs() else {
        return Ok(super::Row {
            skipped: Some(NOT_INSTALLED.into()),
            ..super::row("shadowsocks", 0, 1.0, 0.0)
        });
    };
    let pair = Pair::start(&server, &local, UP_WITHIN)?;
    let before = pair.stats()?;
    let via = Via::Socks(vec![pair.socks]);
    let mut x = super::measure_row("shadowsocks", via, to, conns, per_conn, total, progress)
        .with_context(|| format!("the transfer through ss-local at {}", pair.socks))?;
    let after = pair.stats()?;
    let cpu = cpu_between(&before, &after, clock_ticks())?;
    x.proxy_cpu_s_per_gb = Some(cpu / (total as f64 / 1e9));
    Ok(x)
}

/// Clock ticks per second of /proc's CPU times (sysconf(_SC_CLK_TCK)).
pub fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64
}

/// utime + stime (clock ticks) of a /proc/PID/stat line.
pub fn stat_ticks(stat: &str) -> Option<u64> {
    // "pid (comm) state ...": comm may hold spaces and ')', so split at the last ')'.
    let close = stat.rfind(')')?;
    let f: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    // After the comm: state is field 3, utime 14 and stime 15 (1-based, whole line).
    let tick = |i: usize| f.get(i - 3)?.parse::<u64>().ok();
    Some(tick(14)? + tick(15)?)
}

/// CPU seconds the processes of two /proc/PID/stat snapshots spent in between (`before[i]`
/// and `after[i]` are the same process), with `hz` clock ticks a second.
pub fn cpu_between(before: &[String], after: &[String], hz: f64) -> Result<f64> {
    if before.len() != after.len() {
        bail!(
            "{} /proc stat snapshots before, {} after",
            before.len(),
            after.len()
        );
    }
    let mut ticks = 0u64;
    for (b, a) in before.iter().zip(after) {
        let parse = |s: &str| {
            stat_ticks(s).with_context(|| format!("no utime and stime in /proc stat {s:?}"))
        };
        let (b, a) = (parse(b)?, parse(a)?);
        if a < b {
            bail!("CPU time went back from {b} to {a} ticks: not the same process");
        }
        ticks += a - b;
    }
    Ok(ticks as f64 / hz)
}

/// A child process that is killed and waited on when dropped; its stdout and stderr go
/// to an unlinked file.
struct Proc {
    name: &'static str,
    child: Child,
    output: File,
    port: u16,
}

impl Proc {
    fn spawn(name: &'static str, program: &Path, args: &[String], port: u16) -> Result<Proc> {
        let output = output_file(name)?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(output.try_clone()?)
            .stderr(output.try_clone()?)
            .spawn()
            .with_context(|| format!("starting {name} ({})", program.display()))?;
        Ok(Proc {
            name,
            child,
            output,
            port,
        })
    }

    /// What the process wrote so far (its last 4 KiB), or "(nothing)".
    fn output(&self) -> String {
        use std::os::unix::fs::FileExt;
        let len = self.output.metadata().map_or(0, |m| m.len());
        let from = len.saturating_sub(4096);
        let mut buf = vec![0u8; (len - from) as usize];
        let n = self.output.read_at(&mut buf, from).unwrap_or(0);
        let s = String::from_utf8_lossy(&buf[..n]).trim().to_string();
        if s.is_empty() {
            "(nothing)".into()
        } else {
            s
        }
    }

    /// Wait until the process accepts connections on 127.0.0.1:`port`, at most `within`.
    fn wait_up(&mut self, within: Duration) -> Result<(), NotUp> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let t = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(NotUp::Exited(anyhow::anyhow!(
                    "{} (pid {}) exited ({status}) before it accepted connections on port {}; \
                     its output: {}",
                    self.name,
                    self.child.id(),
                    self.port,
                    self.output()
                )));
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if t.elapsed() > within {
                return Err(NotUp::Other(anyhow::anyhow!(
                    "{} (pid {}) did not accept connections on port {} within {:.1} s; \
                     its output: {}",
                    self.name,
                    self.child.id(),
                    self.port,
                    within.as_secs_f64(),
                    self.output()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The process's /proc/PID/stat line.
    fn stat(&self) -> Result<String> {
        let path = format!("/proc/{}/stat", self.child.id());
        std::fs::read_to_string(&path).with_context(|| format!("reading {path} ({})", self.name))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Why a process did not come up.
enum NotUp {
    /// It exited (perhaps its port was taken: worth another try).
    Exited(anyhow::Error),
    /// It could not be started, or runs but did not accept connections in time.
    Other(anyhow::Error),
}

/// A file for a child's output, unlinked at once (it lives as long as its handles).
fn output_file(name: &str) -> Result<File> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path =
        std::env::temp_dir().join(format!("braid-bench-{name}-{}-{n}.log", std::process::id()));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    let _ = std::fs::remove_file(&path);
    Ok(f)
}

/// Two free TCP ports of 127.0.0.1 (bound to port 0, then released).
fn free_ports() -> Result<(u16, u16)> {
    let a = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free port")?;
    let b = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free port")?;
    Ok((a.local_addr()?.port(), b.local_addr()?.port()))
}

/// A random password: 16 bytes from the kernel, in hex.
fn password() -> Result<String> {
    let mut b = [0u8; 16];
    let mut got = 0;
    while got < b.len() {
        // SAFETY: getrandom writes at most the given length into the buffer we pass.
        let n = unsafe { libc::getrandom(b[got..].as_mut_ptr().cast(), b.len() - got, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e).context("getrandom for the shadowsocks password");
            }
            continue;
        }
        got += n as usize;
    }
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// ss-server and ss-local, running and accepting connections; both are killed when
/// this is dropped (ss-local first).
pub struct Pair {
    local: Proc,
    server: Proc,
    /// ss-local's SOCKS5 address.
    pub socks: SocketAddr,
}

impl Pair {
    /// Start `server` (ss-server) and `local` (ss-local) on free ports of 127.0.0.1 and
    /// wait until each accepts connections (at most `within` each); a few attempts with
    /// new ports if one exits at once.
    pub fn start(server: &Path, local: &Path, within: Duration) -> Result<Pair> {
        let mut attempt = 1;
        loop {
            match Pair::try_start(server, local, within) {
                Ok(p) => return Ok(p),
                Err(NotUp::Exited(e)) if attempt < ATTEMPTS => {
                    tracing::debug!("shadowsocks did not start (attempt {attempt}): {e:#}");
                    attempt += 1;
                }
                Err(NotUp::Exited(e) | NotUp::Other(e)) => return Err(e),
            }
        }
    }

    fn try_start(server: &Path, local: &Path, within: Duration) -> Result<Pair, NotUp> {
        fn setup<T>(r: Result<T>) -> Result<T, NotUp> {
            r.map_err(NotUp::Other)
        }
        let (server_port, local_port) = setup(free_ports())?;
        let key = setup(password())?;
        let common = |port: u16| {
            [
                "-s",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-k",
                &key,
                "-m",
                CIPHER,
            ]
            .map(String::from)
        };
        let mut s = setup(Proc::spawn(
            "ss-server",
            server,
            &common(server_port),
            server_port,
        ))?;
        s.wait_up(within)?;
        let mut args = common(server_port).to_vec();
        args.extend(["-b", "127.0.0.1", "-l", &local_port.to_string()].map(String::from));
        let mut l = setup(Proc::spawn("ss-local", local, &args, local_port))?;
        l.wait_up(within)?;
        Ok(Pair {
            local: l,
            server: s,
            socks: SocketAddr::from((Ipv4Addr::LOCALHOST, local_port)),
        })
    }

    /// /proc/PID/stat of ss-local and ss-server, in this order.
    pub fn stats(&self) -> Result<Vec<String>> {
        Ok(vec![self.local.stat()?, self.server.stat()?])
    }

    /// The process ids of ss-local and ss-server, in this order.
    #[cfg(test)]
    pub fn pids(&self) -> [u32; 2] {
        [self.local.child.id(), self.server.child.id()]
    }
}
