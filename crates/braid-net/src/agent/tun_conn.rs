//! TUN mode's TCP connections, one task each: it opens the connection's stream (or, in
//! direct mode, a direct connection; for DNS, a stream to the server's resolver, `dns_tcp`)
//! and relays between it and the TUN task, which owns the stack (`tun`). Between the two,
//! an unbounded channel of application data (bounded by [`UP_BYTES`] queued) one way and a
//! byte credit ([`CREDIT`]) the other.
//!
//! Owns: the relay of one connection. Must not touch: the stack and the connection table
//! (`tun`).

use super::direct::{self, Relay};
use super::dns_tcp;
use super::Shared;
use crate::bridge::StreamMsg;
use crate::splice::TCP_FAILED;
use braid_proxy::TargetAddr;
use braid_tun::stack::ConnId;
use bytes::Bytes;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, Semaphore};
use tracing::info;

/// Bytes of stream data on their way to one application connection (the credit the
/// stream side may run ahead of what the stack has taken).
pub(super) const CREDIT: usize = 256 * 1024;
/// Bytes of application data queued toward one stream before the stack stops reading the
/// application (its TCP window then closes).
pub(super) const UP_BYTES: usize = 256 * 1024;
/// Application data toward a stream.
pub(super) enum Up {
    Data(Bytes),
    Fin,
    Reset,
}

/// From the per-connection tasks to the TUN task.
pub(super) enum ToTun {
    /// Stream bytes for the application (credit taken).
    Data(ConnId, Bytes),
    /// The stream finished: FIN to the application after its bytes.
    Fin(ConnId),
    /// The stream failed or never opened: reset the application's connection.
    Reset(ConnId),
    /// The connection's task took a chunk: reading the application may resume.
    Drained(ConnId),
}

/// One connection: opens its stream (as SOCKS5 CONNECT does), then relays both ways.
pub(super) async fn conn_task(
    shared: Shared,
    id: ConnId,
    dst: SocketAddr,
    (mut up, up_queued): (mpsc::UnboundedReceiver<Up>, Arc<AtomicUsize>),
    ctl: mpsc::UnboundedSender<ToTun>,
    credit: Arc<Semaphore>,
) {
    // A stream of the session, or in direct mode (no session up) a connection on a path;
    // DNS over TCP to the server's resolver, as UDP queries go.
    let dns = dst.port() == dns_tcp::PORT;
    let opened = if dns {
        dns_tcp::open(&shared, Some(dst)).await
    } else {
        direct::open_tcp(&shared, &TargetAddr::Ip(dst)).await
    };
    let (mut reader, writer, early) = match opened {
        Ok(Relay::Session(r, w, early)) => (r, w, early),
        Ok(relay @ Relay::Direct(_)) => {
            let conn = shared
                .board
                .open("tun", String::new(), dst.to_string(), None);
            let (app, relay_end) = tokio::io::duplex(CREDIT);
            let idle = shared.cfg.proxy_limits.idle_timeout;
            tokio::join!(
                pump(app, id, (up, up_queued), &ctl, &credit),
                relay.run_stream(relay_end, &conn, idle)
            );
            return;
        }
        Err(code) => {
            info!(%dst, "TUN: cannot open a stream: {code}; the connection is reset");
            let _ = ctl.send(ToTun::Reset(id));
            return;
        }
    };
    let to_stream = async {
        while let Some(m) = up.recv().await {
            match m {
                Up::Data(b) => {
                    let n = b.len();
                    if writer.write(b).await.is_err() {
                        return;
                    }
                    let before = up_queued.fetch_sub(n, Ordering::AcqRel);
                    if before >= UP_BYTES && before - n < UP_BYTES {
                        let _ = ctl.send(ToTun::Drained(id));
                    }
                }
                Up::Fin => {
                    writer.finish();
                    return;
                }
                Up::Reset => break,
            }
        }
        // The application reset the connection, or it is gone.
        writer.reset(TCP_FAILED);
    };
    let to_app = async {
        let give = |b: Bytes| give_app(id, b, &ctl, &credit);
        // DNS answers teach domain rules their addresses.
        let mut answers = dns.then(dns_tcp::Answers::default);
        let mut learn = |b: &Bytes| {
            if let Some(a) = answers.as_mut() {
                a.feed(b, |m| shared.learn(m));
            }
        };
        learn(&early);
        if !early.is_empty() && !give(early).await {
            return;
        }
        loop {
            match reader.read().await {
                Some(StreamMsg::Data(b)) => {
                    learn(&b);
                    if !give(b).await {
                        return;
                    }
                }
                Some(StreamMsg::Fin) => {
                    let _ = ctl.send(ToTun::Fin(id));
                    return;
                }
                Some(StreamMsg::Reset(_)) | None => {
                    let _ = ctl.send(ToTun::Reset(id));
                    return;
                }
            }
        }
    };
    tokio::join!(to_stream, to_app);
}

/// Hands `credit`-limited chunks of `b` to the TUN task for connection `id`; false when the
/// connection is gone.
async fn give_app(
    id: ConnId,
    mut b: Bytes,
    ctl: &mpsc::UnboundedSender<ToTun>,
    credit: &Semaphore,
) -> bool {
    while !b.is_empty() {
        let chunk = b.split_to(b.len().min(CREDIT));
        let Ok(p) = credit.acquire_many(chunk.len() as u32).await else {
            return false;
        };
        p.forget();
        if ctl.send(ToTun::Data(id, chunk)).is_err() {
            return false;
        }
    }
    true
}

/// Direct mode: relays between the application's connection in the stack and `app`, one
/// end of an in-memory pipe whose other end the direct connection relays.
async fn pump(
    app: tokio::io::DuplexStream,
    id: ConnId,
    (mut up, up_queued): (mpsc::UnboundedReceiver<Up>, Arc<AtomicUsize>),
    ctl: &mpsc::UnboundedSender<ToTun>,
    credit: &Semaphore,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut rd, mut wr) = tokio::io::split(app);
    let to_dest = async {
        while let Some(m) = up.recv().await {
            match m {
                Up::Data(b) => {
                    let n = b.len();
                    if wr.write_all(&b).await.is_err() {
                        break;
                    }
                    let before = up_queued.fetch_sub(n, Ordering::AcqRel);
                    if before >= UP_BYTES && before - n < UP_BYTES {
                        let _ = ctl.send(ToTun::Drained(id));
                    }
                }
                Up::Fin => break,
                Up::Reset => break,
            }
        }
        // FIN, reset or gone: the direct connection's sending side ends.
        let _ = wr.shutdown().await;
    };
    let to_app = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) => {
                    let _ = ctl.send(ToTun::Fin(id));
                    return;
                }
                Ok(n) => {
                    if !give_app(id, Bytes::copy_from_slice(&buf[..n]), ctl, credit).await {
                        return;
                    }
                }
                Err(_) => {
                    let _ = ctl.send(ToTun::Reset(id));
                    return;
                }
            }
        }
    };
    tokio::join!(to_dest, to_app);
}
