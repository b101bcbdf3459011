//! Relaying what [`open_tcp`](super::open_tcp) opened: a stream of the session
//! ([`Relay::Session`], spliced as the session's streams are) or a direct connection
//! ([`DirectConn::run`]: both directions copied, bytes counted for the status board and the
//! scheduler, closed after `idle` without traffic).
//!
//! Owns: the relay of one connection. Must not touch: choosing and connecting the path
//! (`direct`), the session.

use super::DirectConn;
use crate::agent::report::ConnGuard;
use crate::bridge::{StreamReader, StreamWriter};
use bytes::Bytes;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tracing::info;

/// What [`open_tcp`] opened: a stream of the session, or a direct connection.
pub(crate) enum Relay {
    /// A stream of the session, with any bytes that came after the server's answer.
    Session(StreamReader, StreamWriter, Bytes),
    /// A direct connection on one path.
    Direct(DirectConn),
}

impl Relay {
    /// Relay between the application's connection and this until both ends close (or
    /// nothing moves for `idle`), counting bytes on `conn` (shown as `session` or the
    /// path's name in `braid status`).
    pub async fn run(self, app: TcpStream, conn: &ConnGuard, idle: Duration) {
        match self {
            Relay::Session(reader, writer, early) => {
                conn.set_path("session".into());
                conn.set_rule("session".into());
                let c = conn.counters();
                crate::splice::splice_counted(app, reader, writer, early, idle, &c.up, &c.down)
                    .await;
            }
            Relay::Direct(d) => d.run(app, conn, idle).await,
        }
    }

    /// Sends `data` to the target ahead of the relay (the HTTP proxy's rewritten request
    /// head for a plain-HTTP request).
    pub async fn send(&mut self, data: &[u8]) -> Result<(), String> {
        match self {
            Relay::Session(_, writer, _) => writer
                .write(Bytes::copy_from_slice(data))
                .await
                .map_err(|_| "the session ended".to_string()),
            Relay::Direct(d) => d.stream.write_all(data).await.map_err(|e| e.to_string()),
        }
    }

    /// [`Relay::run`] for an application side that is a byte stream other than a socket
    /// (TUN mode's connections); only a direct connection is relayed this way.
    pub async fn run_stream<S: AsyncRead + AsyncWrite + Send>(
        self,
        app: S,
        conn: &ConnGuard,
        idle: Duration,
    ) {
        if let Relay::Direct(d) = self {
            d.run(app, conn, idle).await;
        }
    }
}

impl DirectConn {
    /// The path's name.
    pub fn path_name(&self) -> &str {
        self._guard.0.name(self.path)
    }

    /// Relay between `app` (any byte stream: a proxied connection, a TUN stack's stream)
    /// and the destination until both ends close (or nothing moves for `idle`), counting
    /// bytes on `conn` (which shows the path's name).
    pub async fn run<S: AsyncRead + AsyncWrite + Send>(
        self,
        app: S,
        conn: &ConnGuard,
        idle: Duration,
    ) {
        let direct = self._guard.0.clone();
        let name = self.path_name().to_string();
        conn.set_path(name.clone());
        conn.set_rule(self.rule.clone());
        let counters = conn.shared_counters();
        direct.watch(self._guard.1, counters.clone());
        let (ar, aw) = tokio::io::split(app);
        let (rr, rw) = self.stream.into_split();
        let last = AtomicU64::new(0);
        let t0 = Instant::now();
        let both = async {
            tokio::join!(
                pipe(ar, rw, &counters.up, &last, t0),
                pipe(rr, aw, &counters.down, &last, t0)
            )
        };
        let watchdog = async {
            loop {
                tokio::time::sleep(idle / 4).await;
                let since =
                    (t0.elapsed().as_millis() as u64).saturating_sub(last.load(Ordering::Relaxed));
                if Duration::from_millis(since) >= idle {
                    return;
                }
            }
        };
        tokio::select! {
            _ = both => {}
            _ = watchdog => info!(path = %name, "direct connection idle for {idle:?}: closed"),
        }
    }
}

/// Copy `r` to `w` until `r` ends (then half-close `w`), counting bytes.
async fn pipe<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    mut r: R,
    mut w: W,
    count: &AtomicU64,
    last: &AtomicU64,
    t0: Instant,
) -> io::Result<()> {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            return w.shutdown().await;
        }
        w.write_all(&buf[..n]).await?;
        count.fetch_add(n as u64, Ordering::Relaxed);
        last.store(t0.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}
