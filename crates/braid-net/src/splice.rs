//! Copying bytes between a TCP connection and a session stream, both directions at once,
//! with half-close: a FIN on one side becomes a FIN on the other. A stream reset by the peer
//! or ended with its session (bytes were lost) closes the TCP connection at once with a RST,
//! so the application sees an error, never a connection left open or a clean but truncated
//! end.
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
    let mut to_stream = Box::pin(async {
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
    });
    // True when the stream ended in a reset (or its session ended): abort the TCP side.
    let mut to_tcp = Box::pin(async {
        if !early.is_empty() && wr.write_all(&early).await.is_err() {
            return false;
        }
        loop {
            match reader.read().await {
                Some(StreamMsg::Data(b)) => {
                    if wr.write_all(&b).await.is_err() {
                        return false;
                    }
                }
                Some(StreamMsg::Fin) => {
                    let _ = wr.shutdown().await;
                    return false;
                }
                Some(StreamMsg::Reset(_)) | None => return true,
            }
        }
    });
    let (mut up_done, mut down_done, mut aborted) = (false, false, false);
    while !(up_done && down_done) {
        tokio::select! {
            _ = &mut to_stream, if !up_done => up_done = true,
            reset = &mut to_tcp, if !down_done => {
                down_done = true;
                if reset {
                    aborted = true;
                    // Stop reading the application (its bytes have nowhere to go) and
                    // close with a RST: linger 0, then drop both halves.
                    writer.reset(TCP_FAILED);
                    break;
                }
            }
        }
    }
    drop(to_stream);
    drop(to_tcp);
    if aborted {
        // One socket again (dropping the write half alone would send a FIN first), then
        // closed with linger 0: a RST.
        if let Ok(tcp) = rd.reunite(wr) {
            let _ = socket2::SockRef::from(&tcp).set_linger(Some(std::time::Duration::ZERO));
        }
    }
}
