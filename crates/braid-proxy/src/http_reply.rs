//! The HTTP proxy's responses: `200 Connection established` for a CONNECT, and the error
//! responses (a status line, `Connection: close`, a one-line plain-text body) for a refused
//! head ([`respond_http_error`]) or a target that could not be opened ([`respond_error`]).
//!
//! Owns: the response bytes. Must not touch: parsing requests (`http`), sockets, the
//! session. Re-exported from `http`, where callers find them.

use std::io;

use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::http_error::HttpError;
use crate::reply::ReplyCode;

/// Sends `HTTP/1.1 200 Connection established` and an empty line; the tunnel starts after.
pub async fn respond_ok<S: AsyncWrite + Unpin>(stream: &mut S) -> io::Result<()> {
    stream
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await?;
    stream.flush().await
}

/// Answers a CONNECT whose target could not be opened: 403 for not allowed, 504 for TTL
/// expired / timed out, 405 for command not supported, 400 for address type not supported,
/// 502 for refused, unreachable and general failure. [`ReplyCode::Succeeded`] sends the same
/// as [`respond_ok`]. Not time-limited: wrap it in a timeout if needed.
pub async fn respond_error<S: AsyncWrite + Unpin>(
    stream: &mut S,
    code: ReplyCode,
) -> io::Result<()> {
    let (status, body): (u16, &str) = match code {
        ReplyCode::Succeeded => return respond_ok(stream).await,
        ReplyCode::NotAllowed => (
            403,
            "connection to this target is not allowed by the proxy's rules",
        ),
        ReplyCode::TtlExpired => (504, "timed out connecting to the target"),
        ReplyCode::CommandNotSupported => (405, "only CONNECT is supported"),
        ReplyCode::AddressTypeNotSupported => (400, "this kind of target address is not supported"),
        ReplyCode::ConnectionRefused => (502, "the target refused the connection"),
        ReplyCode::HostUnreachable => (
            502,
            "the target host is unreachable or its name did not resolve",
        ),
        ReplyCode::NetworkUnreachable => (502, "the target network is unreachable"),
        ReplyCode::GeneralFailure => (502, "could not connect to the target"),
    };
    write_response(stream, status, body).await
}

/// Sends the response for `err` (see [`HttpError::status`]); sends nothing for I/O errors.
pub async fn respond_http_error<S: AsyncWrite + Unpin>(
    stream: &mut S,
    err: &HttpError,
) -> io::Result<()> {
    let Some(status) = err.status() else {
        return Ok(());
    };
    let body = match err {
        HttpError::MethodNotAllowed(_) => {
            "only CONNECT and requests for absolute http:// URLs are supported".to_owned()
        }
        other => other.to_string(),
    };
    write_response(stream, status, &body).await
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "Connection established",
        400 => "Bad Request",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        502 => "Bad Gateway",
        504 => "Gateway Timeout",
        _ => "Error",
    }
}

/// The bytes of an error response with a one-line plain-text body.
pub fn error_response(status: u16, body: &str) -> Vec<u8> {
    let body = format!("{}\n", body.replace(['\r', '\n'], " "));
    let extra = match status {
        405 => "Allow: CONNECT\r\n",
        407 => "Proxy-Authenticate: Basic realm=\"braid\"\r\n",
        _ => "",
    };
    format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n{body}",
        reason(status),
        body.len()
    )
    .into_bytes()
}

async fn write_response<S: AsyncWrite + Unpin>(
    stream: &mut S,
    status: u16,
    body: &str,
) -> io::Result<()> {
    stream.write_all(&error_response(status, body)).await?;
    stream.flush().await
}
