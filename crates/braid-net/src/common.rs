//! What the agent and the server share without either owning it: the session's idle
//! timeout, the CLOSE code of an orderly end, and opening a TCP connection to a proxied
//! target (the server for the agent's streams, the agent for connections to its inbound
//! ports).
//!
//! Owns: those constants and [`connect`]. Must not touch: sessions, listeners, handshakes;
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
    let addrs: Vec<SocketAddr> = match target {
        TargetAddr::Ip(a) => vec![*a],
        TargetAddr::Domain(name, port) => {
            match tokio::time::timeout(timeout, tokio::net::lookup_host((name.as_str(), *port)))
                .await
            {
                Ok(Ok(a)) => a.collect(),
                Ok(Err(_)) => return Err(ReplyCode::HostUnreachable),
                Err(_) => return Err(ReplyCode::TtlExpired),
            }
        }
    };
    let mut last = ReplyCode::HostUnreachable;
    for a in addrs {
        match tokio::time::timeout(timeout, TcpStream::connect(a)).await {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) => last = ReplyCode::from_io_error(&e),
            Err(_) => last = ReplyCode::TtlExpired,
        }
    }
    Err(last)
}
