//! Why an HTTP proxy request was refused, and the status it is answered with: shared by the
//! request parser (`http`), the plain-HTTP rewriter (`forward`) and the replies
//! (`http_reply`), so that none of them imports another for it.
//!
//! Owns: `HttpError`. Must not touch: parsing, replies, sockets.

use std::io;
use std::time::Duration;

/// Why a proxy request was refused. [`HttpError::status`] gives the HTTP status that
/// `http::accept` already sent for it.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The head did not arrive within the limit (answered 408).
    #[error("HTTP request head not received within {0:?}; the client stalled or is too slow")]
    Timeout(Duration),
    /// The client closed the connection before the head was complete.
    #[error("client closed the connection before finishing the HTTP request head")]
    Closed,
    /// Reading or writing the client stream failed (nothing sent).
    #[error("I/O error while reading the HTTP request: {0}")]
    Io(#[from] io::Error),
    /// No blank line within the size limit (answered 400).
    #[error("HTTP request head exceeds {limit} bytes without ending in a blank line; send a shorter head")]
    HeadTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// Too many header lines (answered 400).
    #[error("HTTP request has more than {limit} header lines; send fewer headers")]
    TooManyHeaders {
        /// The limit.
        limit: usize,
    },
    /// The bytes are not an HTTP/1.x request head (answered 400).
    #[error("malformed HTTP request: {0}")]
    Malformed(&'static str),
    /// The HTTP version is not 1.0 or 1.1 (answered 400).
    #[error("HTTP version is not HTTP/1.1 or HTTP/1.0; this proxy speaks HTTP/1.x CONNECT only")]
    UnsupportedVersion,
    /// The method is not CONNECT and the target is not an absolute `http://` URL (answered
    /// 405).
    #[error("HTTP method {0:?} is not supported here; this proxy serves CONNECT host:port and requests for absolute http:// URLs (GET http://host/path)")]
    MethodNotAllowed(String),
    /// An absolute URL with a scheme other than `http` (answered 400).
    #[error("only http:// URLs are forwarded; for https:// the client must use CONNECT (set the proxy as the HTTPS proxy too)")]
    NotHttpUrl,
    /// The CONNECT target has no port (answered 400).
    #[error("CONNECT target has no port; use CONNECT host:port HTTP/1.1")]
    MissingPort,
    /// The port is not a number in 1..=65535 (answered 400).
    #[error("CONNECT target port is not a number from 1 to 65535")]
    BadPort,
    /// The host part is not a name, an IPv4 address or a bracketed IPv6 address (answered 400).
    #[error("CONNECT target host is invalid: {0}")]
    BadHost(&'static str),
    /// Credentials are required and none were sent (answered 407).
    #[error("proxy authentication required; send Proxy-Authorization: Basic credentials")]
    ProxyAuthRequired,
    /// The credentials sent are wrong (answered 407).
    #[error("wrong proxy credentials in Proxy-Authorization; check the client's proxy username and password")]
    ProxyAuthFailed,
}

impl HttpError {
    /// The HTTP status this error is answered with, or `None` when nothing can be sent.
    pub fn status(&self) -> Option<u16> {
        match self {
            HttpError::Io(_) => None,
            HttpError::Timeout(_) => Some(408),
            HttpError::MethodNotAllowed(_) => Some(405),
            HttpError::ProxyAuthRequired | HttpError::ProxyAuthFailed => Some(407),
            _ => Some(400),
        }
    }
}
