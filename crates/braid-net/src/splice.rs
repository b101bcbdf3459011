//! Copying bytes between a TCP connection and a session stream, both directions at once,
//! with half-close: a FIN on one side becomes a FIN on the other.
//!
//! Owns: the byte relay of one proxied connection. Must not touch: the proxy handshakes
//! (SOCKS5, HTTP, the stream-open header) that come before it.

use crate::bridge::{StreamMsg, StreamReader, StreamWriter};
use bytes::{Bytes, BytesMut};
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Application error code for a stream aborted because its TCP side failed.
pub const TCP_FAILED: u64 = 0x10;

/// Relay until both directions are finished. `early` are stream bytes that arrived with
/// the open reply and belong to the TCP side first.
pub async fn splice(tcp: TcpStream, reader: StreamReader, writer: StreamWriter, early: Bytes) {
    let (up, down) = (AtomicU64::new(0), AtomicU64::new(0));
    splice_counted(tcp, reader, writer, early, &up, &down).await;
}

/// [`splice`], adding the bytes read from the TCP side to `up` and the bytes written to it
/// to `down` as they go (for status displays).
pub async fn splice_counted(
    tcp: TcpStream,
    mut reader: StreamReader,
    writer: StreamWriter,
    early: Bytes,
    up: &AtomicU64,
    down: &AtomicU64,
) {
    let _ = tcp.set_nodelay(true);
    let (mut rd, mut wr) = tcp.into_split();
    let to_stream = async {
        let mut buf = BytesMut::with_capacity(64 * 1024);
        loop {
            if buf.capacity() - buf.len() < 16 * 1024 {
                buf.reserve(64 * 1024);
            }
            match rd.read_buf(&mut buf).await {
                Ok(0) => {
                    writer.finish();
                    return;
                }
                Ok(n) => {
                    up.fetch_add(n as u64, Ordering::Relaxed);
                    if writer.write(buf.split().freeze()).await.is_err() {
                        return;
                    }
                }
                Err(_) => {
                    writer.reset(TCP_FAILED);
                    return;
                }
            }
        }
    };
    let to_tcp = async {
        if !early.is_empty() && wr.write_all(&early).await.is_err() {
            return;
        }
        down.fetch_add(early.len() as u64, Ordering::Relaxed);
        loop {
            match reader.read().await {
                Some(StreamMsg::Data(b)) => {
                    if wr.write_all(&b).await.is_err() {
                        return;
                    }
                    down.fetch_add(b.len() as u64, Ordering::Relaxed);
                }
                Some(StreamMsg::Fin) => {
                    let _ = wr.shutdown().await;
                    return;
                }
                Some(StreamMsg::Reset(_)) | None => return,
            }
        }
    };
    tokio::join!(to_stream, to_tcp);
}
