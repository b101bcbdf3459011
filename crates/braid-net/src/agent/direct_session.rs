//! Opening a stream of the current session to a target (the stream-open exchange): the
//! session side of [`open_tcp`](super::open_tcp), and DNS over TCP's way to the server's
//! resolver (`dns_tcp`). With no session it waits a bounded time for one
//! (`session_wait`); a session that ends before the server answers is tried once more on
//! the next session.
//!
//! Owns: the OPEN command to the session task, the target request and the server's reply
//! on the new stream, the open timeout. Must not touch: which way a connection goes
//! (`open_tcp`, `direct_ruled`), accepting or relaying (`front`, the callers).

use super::Shared;
use crate::bridge::{Cmd, StreamMsg, StreamReader, StreamWriter};
use braid_proxy::target::{self, ReplyCode};
use braid_proxy::TargetAddr;
use bytes::{Bytes, BytesMut};
use tokio::sync::{mpsc, oneshot};
use tracing::{info, warn};

/// The current session's command channel; with no session, wait for one up to the
/// configured bound, then give up with "network unreachable" (SOCKS5 reply 3, HTTP 502).
async fn session_or_wait(shared: &Shared) -> Result<mpsc::UnboundedSender<Cmd>, ReplyCode> {
    let mut rx = shared.session.clone();
    let wait = shared.cfg.session_wait;
    let got = tokio::time::timeout(wait, rx.wait_for(|s| s.is_some()))
        .await
        .ok()
        .and_then(|r| r.ok().and_then(|s| s.clone()));
    match got {
        Some(s) => Ok(s),
        None => {
            warn!("no session to the server after waiting {wait:?}: the connection is refused (network unreachable)");
            Err(ReplyCode::NetworkUnreachable)
        }
    }
}

/// Why opening a stream failed.
enum OpenError {
    /// The answer (or the lack of one) to give the client.
    Code(ReplyCode),
    /// The session ended before the server answered: worth trying on the next session.
    SessionGone,
}

/// Open a stream to `target` through the server; returns the stream and any bytes that
/// came after the server's answer. If the session ends before the server answers (it
/// stopped answering and the agent moved to a new session), the open is tried once more on
/// the next session.
pub(in crate::agent) async fn open_stream(
    shared: &Shared,
    target: &TargetAddr,
) -> Result<(StreamReader, StreamWriter, Bytes), ReplyCode> {
    let cmd = session_or_wait(shared).await?;
    match open_on(shared, target, &cmd).await {
        Ok(x) => Ok(x),
        Err(OpenError::Code(c)) => Err(c),
        Err(OpenError::SessionGone) => {
            info!("the session ended while opening a stream to {target}; trying the next session");
            let mut rx = shared.session.clone();
            let wait = shared.cfg.session_wait;
            let next = tokio::time::timeout(
                wait,
                rx.wait_for(|s| s.as_ref().is_some_and(|s| !s.same_channel(&cmd))),
            )
            .await
            .ok()
            .and_then(|r| r.ok().and_then(|s| s.clone()))
            .ok_or(ReplyCode::NetworkUnreachable)?;
            match open_on(shared, target, &next).await {
                Ok(x) => Ok(x),
                Err(OpenError::Code(c)) => Err(c),
                Err(OpenError::SessionGone) => Err(ReplyCode::NetworkUnreachable),
            }
        }
    }
}

async fn open_on(
    shared: &Shared,
    target: &TargetAddr,
    cmd: &mpsc::UnboundedSender<Cmd>,
) -> Result<(StreamReader, StreamWriter, Bytes), OpenError> {
    let (tx, rx) = oneshot::channel();
    cmd.send(Cmd::Open(tx))
        .map_err(|_| OpenError::SessionGone)?;
    let h = rx.await.map_err(|_| OpenError::SessionGone)?.map_err(|e| {
        warn!(
            "cannot open a stream to {target}: {e} (the server's limit on connections per agent)"
        );
        OpenError::Code(ReplyCode::GeneralFailure)
    })?;
    let (mut reader, writer) = (h.reader, h.writer);
    let mut req = Vec::new();
    target::emit_request(target, &mut req)
        .map_err(|_| OpenError::Code(ReplyCode::AddressTypeNotSupported))?;
    writer
        .write(Bytes::from(req))
        .await
        .map_err(|_| OpenError::SessionGone)?;
    let answer = async {
        let mut head = BytesMut::new();
        loop {
            match target::parse_reply(&head) {
                Ok((code, used)) if code.is_success() => return Ok(head.split_off(used).freeze()),
                Ok((code, _)) => return Err(OpenError::Code(code)),
                Err(braid_proxy::ParseError::Incomplete) => {}
                Err(_) => return Err(OpenError::Code(ReplyCode::GeneralFailure)),
            }
            match reader.read().await {
                Some(StreamMsg::Data(b)) => head.extend_from_slice(&b),
                // The session task ended (`u64::MAX`) or is gone.
                None | Some(StreamMsg::Reset(u64::MAX)) => return Err(OpenError::SessionGone),
                _ => return Err(OpenError::Code(ReplyCode::GeneralFailure)),
            }
        }
    };
    match tokio::time::timeout(shared.cfg.open_timeout, answer).await {
        Ok(Ok(early)) => Ok((reader, writer, early)),
        Ok(Err(e)) => {
            writer.reset(0);
            Err(e)
        }
        Err(_) => {
            writer.reset(0);
            Err(OpenError::Code(ReplyCode::TtlExpired))
        }
    }
}
