//! Copying bytes between a TCP connection and a session stream, both directions at once,
//! with half-close: a FIN on one side becomes a FIN on the other.
//!
//! Owns: the byte relay of one proxied connection. Must not touch: the proxy handshakes
//! (SOCKS5, HTTP, the stream-open header) that come before it.

use crate::bridge::{StreamMsg, StreamReader, StreamWriter};
use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Application error code for a stream aborted because its TCP side failed.
pub const TCP_FAILED: u64 = 0x10;

/// Relay until both directions are finished. `early` are stream bytes that arrived with
/// the open reply and belong to the TCP side first.
pub async fn splice(tcp: TcpStream, mut reader: StreamReader, writer: StreamWriter, early: Bytes) {
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
                Ok(_) => {
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
        loop {
            match reader.read().await {
                Some(StreamMsg::Data(b)) => {
                    if wr.write_all(&b).await.is_err() {
                        return;
                    }
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
