//! What the agent and the server share without either owning it: the session's idle
//! timeout, the CLOSE code of an orderly end, and opening a TCP connection to a proxied
//! target (the server for the agent's streams, the agent for connections to its inbound
//! ports).
//!
//! Owns: those constants and [`connect`] (in two steps, [`resolve`] and [`connect_any`],
//! for the server's egress check between them). Must not touch: sessions, listeners, handshakes;
//! it imports neither `agent` nor `server`, so both can import it.

use braid_proxy::{ReplyCode, TargetAddr};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpStream;

/// Idle timeout: long enough that one lost keepalive (and its answer) does not end the
/// session.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The CLOSE code of a session ended on purpose (NO_ERROR).
pub const CLOSE_ORDERLY: u64 = 0;

/// Resolve (names where this runs, as SOCKS5 with remote resolution expects) and connect,
/// trying each address in turn within `timeout` each; the reply code of the last failure.
pub async fn connect(target: &TargetAddr, timeout: Duration) -> Result<TcpStream, ReplyCode> {
    connect_any(&resolve(target, timeout).await?, timeout).await
}

/// The addresses of `target`: its own, or its name's (looked up here within `timeout`).
pub async fn resolve(target: &TargetAddr, timeout: Duration) -> Result<Vec<SocketAddr>, ReplyCode> {
    match target {
        TargetAddr::Ip(a) => Ok(vec![*a]),
        TargetAddr::Domain(name, port) => {
            match tokio::time::timeout(timeout, tokio::net::lookup_host((name.as_str(), *port)))
                .await
            {
                Ok(Ok(a)) => Ok(a.collect()),
                Ok(Err(_)) => Err(ReplyCode::HostUnreachable),
                Err(_) => Err(ReplyCode::TtlExpired),
            }
        }
    }
}

/// Connect to the first of `addrs` that answers, within `timeout` each; the reply code of
/// the last failure.
pub async fn connect_any(addrs: &[SocketAddr], timeout: Duration) -> Result<TcpStream, ReplyCode> {
    let mut last = ReplyCode::HostUnreachable;
    for &a in addrs {
        match tokio::time::timeout(timeout, TcpStream::connect(a)).await {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) => last = ReplyCode::from_io_error(&e),
            Err(_) => last = ReplyCode::TtlExpired,
        }
    }
    Err(last)
}
