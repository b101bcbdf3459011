//! The HTTP/1.1 proxy front end: read and check a `CONNECT host:port HTTP/1.1` request head
//! or a plain-HTTP request in absolute form (`GET http://host:port/path HTTP/1.1`), then
//! answer it.
//!
//! Owns: the request-head parser ([`parse_head`], a pure function on bytes), the async
//! [`accept`] that reads a head from a client stream, and the responses ([`respond_ok`], [`respond_error`],
//! [`respond_http_error`]). Must not touch: listening sockets, the session, connecting to
//! targets. The rewriting of an absolute-form request for the origin is in `forward`, the
//! response bytes in `http_reply`. A
//! request in origin form (`GET /path`) is not a proxy request: it gets 405.
//!
//! Limits ([`HttpLimits`]): the head may be at most `max_head_bytes` (8 KiB) including the
//! blank line, with at most `max_headers` (100) header lines, and must arrive within
//! `timeout` (10 s). Lines end in CRLF or a bare LF; obsolete line folding is refused.
//!
//! [`accept`] never reads past the blank line that ends the head (it reads at most
//! two bytes at a time near the end), so bytes the client sends right after the head — a TLS
//! ClientHello, say — stay in the stream for the relay.
//!
//! No-panic contract: [`parse_head`] accepts any byte slice and returns `Ok(None)` (need more
//! bytes), `Ok(Some(..))` or `Err(HttpError)`; [`accept`] never panics on any input.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

use crate::addr::{TargetAddr, MAX_DOMAIN_LEN};
use crate::auth::Credentials;
pub use crate::http_error::HttpError;
pub use crate::http_reply::{error_response, respond_error, respond_http_error, respond_ok};

/// Limits and policy for [`accept`].
#[derive(Debug, Clone)]
pub struct HttpLimits {
    /// The largest request head, in bytes, including the terminating blank line.
    pub max_head_bytes: usize,
    /// The most header lines (after the request line).
    pub max_headers: usize,
    /// How long the client has to send the whole head.
    pub timeout: Duration,
    /// When set, a `Proxy-Authorization: Basic` header with these credentials is required.
    pub auth: Option<Credentials>,
}

impl Default for HttpLimits {
    /// 8 KiB, 100 headers, 10 s, no authentication.
    fn default() -> Self {
        HttpLimits {
            max_head_bytes: 8 * 1024,
            max_headers: 100,
            timeout: Duration::from_secs(10),
            auth: None,
        }
    }
}

/// A parsed proxy request head, borrowing the raw `Proxy-Authorization` value from the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectHead<'a> {
    /// Where to connect.
    pub target: TargetAddr,
    /// The `Proxy-Authorization` header value, if present (leading/trailing blanks trimmed).
    pub proxy_authorization: Option<&'a [u8]>,
    /// For a plain-HTTP request in absolute form: the head to send the origin (origin form,
    /// proxy headers dropped, see `forward`). `None` for CONNECT.
    pub forward: Option<Vec<u8>>,
}

/// What [`accept`] read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyRequest {
    /// `CONNECT host:port`: open the target, answer [`respond_ok`], then relay.
    Connect(TargetAddr),
    /// A plain-HTTP request in absolute form: open `target`, send it `head`, then relay
    /// (the request body, if any, follows in the client's stream). Nothing is answered to
    /// the client on success: the origin's response is.
    Forward {
        /// Where to connect (port 80 when the URL gives none).
        target: TargetAddr,
        /// The rewritten request head for the origin.
        head: Vec<u8>,
    },
}

/// Skips leading empty lines (RFC 9112 §2.2 lets a server ignore them).
fn leading_blank_len(buf: &[u8]) -> usize {
    buf.iter()
        .take_while(|&&b| b == b'\r' || b == b'\n')
        .count()
}

/// The end (exclusive) of the head — just after the blank line — if it is in `buf`.
fn find_head_end(buf: &[u8], start: usize) -> Option<usize> {
    let mut i = start;
    while i < buf.len() {
        if buf.get(i) == Some(&b'\n') {
            match (buf.get(i + 1), buf.get(i + 2)) {
                (Some(b'\n'), _) => return Some(i + 2),
                (Some(b'\r'), Some(b'\n')) => return Some(i + 3),
                _ => {}
            }
        }
        i += 1;
    }
    None
}

/// Parses a CONNECT or absolute-form request head at the start of `buf`.
///
/// Returns `Ok(None)` when the head is not complete yet and still within
/// `limits.max_head_bytes`, `Ok(Some((head, consumed)))` with the bytes through the blank
/// line, or the error to answer with. Authentication is not checked here (see
/// [`Credentials::matches_basic`]); `limits.timeout` is not used.
///
/// No-panic contract: accepts any byte slice.
pub fn parse_head<'a>(
    buf: &'a [u8],
    limits: &HttpLimits,
) -> Result<Option<(ConnectHead<'a>, usize)>, HttpError> {
    let start = leading_blank_len(buf);
    let max = limits.max_head_bytes;
    let end = match find_head_end(buf, start) {
        Some(end) if end <= max => end,
        Some(_) => return Err(HttpError::HeadTooLarge { limit: max }),
        None if buf.len() >= max => return Err(HttpError::HeadTooLarge { limit: max }),
        None => return Ok(None),
    };
    let head = buf.get(start..end).unwrap_or_default();
    let mut lines = head.split(|&b| b == b'\n').map(|l| match l {
        [rest @ .., b'\r'] => rest,
        l => l,
    });

    let request_line = lines.next().unwrap_or_default();
    let line = parse_request_line(request_line)?;

    let mut proxy_authorization = None;
    let mut kept: Vec<&[u8]> = Vec::new();
    let mut count = 0usize;
    for header_line in lines {
        if header_line.is_empty() {
            break; // the blank line ending the head
        }
        count += 1;
        if count > limits.max_headers {
            return Err(HttpError::TooManyHeaders {
                limit: limits.max_headers,
            });
        }
        let (name, value) = parse_header(header_line)?;
        if name.eq_ignore_ascii_case(b"proxy-authorization") {
            if proxy_authorization.is_some() {
                return Err(HttpError::Malformed(
                    "more than one Proxy-Authorization header",
                ));
            }
            proxy_authorization = Some(value);
        }
        if line.url.is_some() {
            kept.push(header_line);
        }
    }
    let forward = line.url.map(|(authority, path)| {
        crate::forward::rewrite_head(line.method, path, line.version, authority, &kept)
    });
    Ok(Some((
        ConnectHead {
            target: line.target,
            proxy_authorization,
            forward,
        },
        end,
    )))
}

/// A checked request line: CONNECT with its authority, or another method with an absolute
/// `http://` URL (`url` holds its authority and path).
struct RequestLine<'a> {
    method: &'a [u8],
    version: &'a [u8],
    target: TargetAddr,
    url: Option<(&'a [u8], &'a [u8])>,
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn parse_request_line(line: &[u8]) -> Result<RequestLine<'_>, HttpError> {
    if line.contains(&b'\r') {
        return Err(HttpError::Malformed(
            "stray carriage return in the request line",
        ));
    }
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HttpError::Malformed(
            "request line is not 'METHOD target HTTP/1.1'",
        ));
    };
    if method.is_empty() || method.len() > 32 || !method.iter().all(|&b| is_tchar(b)) {
        return Err(HttpError::Malformed("request method is not a valid token"));
    }
    if target.is_empty() || !target.iter().all(|b| b.is_ascii_graphic()) {
        return Err(HttpError::Malformed(
            "request target is empty or holds non-printable bytes",
        ));
    }
    if !version.starts_with(b"HTTP/") {
        return Err(HttpError::Malformed(
            "request line does not end in HTTP/1.1",
        ));
    }
    let url = if method == b"CONNECT" {
        None
    } else {
        match crate::forward::split_http_url(target)? {
            Some(url) => Some(url),
            // Token characters are ASCII, so this is lossless.
            None => {
                return Err(HttpError::MethodNotAllowed(
                    String::from_utf8_lossy(method).into_owned(),
                ))
            }
        }
    };
    if version != b"HTTP/1.1" && version != b"HTTP/1.0" {
        return Err(HttpError::UnsupportedVersion);
    }
    let target = match url {
        None => parse_authority(target, None)?,
        Some((authority, _)) => parse_authority(authority, Some(80))?,
    };
    Ok(RequestLine {
        method,
        version,
        target,
        url,
    })
}

/// `name: value` with optional blanks around the value; no blank before the colon.
fn parse_header(line: &[u8]) -> Result<(&[u8], &[u8]), HttpError> {
    if matches!(line.first(), Some(b' ' | b'\t')) {
        return Err(HttpError::Malformed(
            "header line starts with whitespace (obsolete line folding is not accepted)",
        ));
    }
    let Some(colon) = line.iter().position(|&b| b == b':') else {
        return Err(HttpError::Malformed("header line has no ':'"));
    };
    let (name, value) = line.split_at(colon);
    if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
        return Err(HttpError::Malformed("header name is empty or not a token"));
    }
    let value = value.get(1..).unwrap_or_default();
    if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return Err(HttpError::Malformed(
            "header value holds a control character",
        ));
    }
    let start = value
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|&b| b != b' ' && b != b'\t')
        .map_or(start, |p| p + 1);
    Ok((name, value.get(start..end).unwrap_or_default()))
}

/// `host:port`, `a.b.c.d:port` or `[v6]:port`; with a `default_port`, the port may be left
/// out (an `http://` URL's authority).
fn parse_authority(target: &[u8], default_port: Option<u16>) -> Result<TargetAddr, HttpError> {
    let (host, port) = if let Some(rest) = target.strip_prefix(b"[") {
        let Some(close) = rest.iter().position(|&b| b == b']') else {
            return Err(HttpError::BadHost("'[' without a closing ']'"));
        };
        let (inner, after) = rest.split_at(close);
        let after = after.get(1..).unwrap_or_default();
        let ip = std::str::from_utf8(inner)
            .ok()
            .and_then(|s| s.parse::<Ipv6Addr>().ok())
            .ok_or(HttpError::BadHost(
                "the text in brackets is not an IPv6 address",
            ))?;
        let port = match after {
            [] if default_port.is_some() => &[][..],
            [] => return Err(HttpError::MissingPort),
            [b':', port @ ..] => port,
            _ => return Err(HttpError::BadHost("']' must be followed by ':port'")),
        };
        (HostKind::Ip(IpAddr::V6(ip)), port)
    } else {
        if target.contains(&b'/') {
            return Err(HttpError::BadHost(
                "a CONNECT target is host:port, not a URL",
            ));
        }
        let (host, port) = match target.iter().rposition(|&b| b == b':') {
            Some(colon) => {
                let (host, port) = target.split_at(colon);
                (host, port.get(1..).unwrap_or_default())
            }
            None if default_port.is_some() => (target, &[][..]),
            None => return Err(HttpError::MissingPort),
        };
        if host.contains(&b':') {
            return Err(HttpError::BadHost(
                "an IPv6 address must be written in brackets, as [2001:db8::1]:443",
            ));
        }
        if host.is_empty() {
            return Err(HttpError::BadHost("the host is empty"));
        }
        if host.len() > MAX_DOMAIN_LEN {
            return Err(HttpError::BadHost("the host name is longer than 255 bytes"));
        }
        let valid = host
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
        if !valid {
            return Err(HttpError::BadHost(
                "the host name may hold only letters, digits, '-', '.' and '_'",
            ));
        }
        match std::str::from_utf8(host)
            .ok()
            .and_then(|s| s.parse::<Ipv4Addr>().ok())
        {
            Some(ip) => (HostKind::Ip(IpAddr::V4(ip)), port),
            None => (HostKind::Name(host), port),
        }
    };
    let port = match default_port {
        Some(p) if port.is_empty() => p,
        _ => parse_port(port)?,
    };
    match host {
        HostKind::Ip(ip) => Ok(TargetAddr::Ip(SocketAddr::new(ip, port))),
        HostKind::Name(name) => {
            let name = String::from_utf8_lossy(name).into_owned();
            TargetAddr::domain(name, port).map_err(|_| HttpError::BadHost("invalid host name"))
        }
    }
}

enum HostKind<'a> {
    Ip(IpAddr),
    Name(&'a [u8]),
}

fn parse_port(port: &[u8]) -> Result<u16, HttpError> {
    if port.is_empty() {
        return Err(HttpError::MissingPort);
    }
    if port.len() > 5 || !port.iter().all(u8::is_ascii_digit) {
        return Err(HttpError::BadPort);
    }
    let n = port
        .iter()
        .fold(0u32, |acc, &d| acc * 10 + u32::from(d - b'0'));
    match u16::try_from(n) {
        Ok(p) if p != 0 => Ok(p),
        _ => Err(HttpError::BadPort),
    }
}

/// How many bytes can be read without possibly reading past the blank line.
fn safe_read_len(buf: &[u8]) -> usize {
    match buf {
        [.., b'\n'] | [.., b'\n', b'\r'] => 1,
        _ => 2,
    }
}

/// True when `buf` ends in a line break that follows an empty line.
fn ends_with_blank_line(buf: &[u8]) -> bool {
    matches!(buf, [.., b'\n', b'\n'] | [.., b'\n', b'\r', b'\n'])
}

/// Reads a proxy request head from `stream`: `CONNECT host:port`, or a plain-HTTP request
/// in absolute form (`GET http://host/path HTTP/1.1`).
///
/// Checks `Proxy-Authorization: Basic` when `limits.auth` is set. On any refusal it sends
/// the matching response (400 malformed/oversized/missing or bad port or an `https://` URL,
/// 405 for a request in origin form such as `GET /path`, 407 for missing or wrong
/// credentials, 408 on timeout) and returns the error; the caller should then close the
/// stream. On success nothing has been sent: open the target, then for
/// [`ProxyRequest::Connect`] call [`respond_ok`], for [`ProxyRequest::Forward`] send the head
/// to the target and relay (the origin answers the client); on failure to open, call
/// [`respond_error`]. Never reads past the head (a request body stays in the stream) and
/// never panics on any input.
pub async fn accept<S>(stream: &mut S, limits: &HttpLimits) -> Result<ProxyRequest, HttpError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let result = tokio::time::timeout(limits.timeout, read_head(stream, limits)).await;
    refuse_on_error(stream, limits, result).await
}

/// Sends the response for a refused head (best effort, bounded: a client that does not read
/// must not hold us) and passes the result on.
async fn refuse_on_error<S, T>(
    stream: &mut S,
    limits: &HttpLimits,
    result: Result<Result<T, HttpError>, tokio::time::error::Elapsed>,
) -> Result<T, HttpError>
where
    S: AsyncWrite + Unpin,
{
    let result = result.unwrap_or(Err(HttpError::Timeout(limits.timeout)));
    if let Err(e) = &result {
        if e.status().is_some() {
            let grace = limits.timeout.min(Duration::from_secs(2));
            let _ = tokio::time::timeout(grace, respond_http_error(stream, e)).await;
        }
    }
    result
}

async fn read_head<S>(stream: &mut S, limits: &HttpLimits) -> Result<ProxyRequest, HttpError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf: Vec<u8> = Vec::with_capacity(256);
    loop {
        if ends_with_blank_line(&buf) || buf.len() >= limits.max_head_bytes {
            if let Some((head, _used)) = parse_head(&buf, limits)? {
                if let Some(creds) = &limits.auth {
                    match head.proxy_authorization {
                        None => return Err(HttpError::ProxyAuthRequired),
                        Some(v) if !creds.matches_basic(v) => {
                            return Err(HttpError::ProxyAuthFailed)
                        }
                        Some(_) => {}
                    }
                }
                return Ok(match head.forward {
                    None => ProxyRequest::Connect(head.target),
                    Some(head_bytes) => ProxyRequest::Forward {
                        target: head.target,
                        head: head_bytes,
                    },
                });
            }
        }
        let mut chunk = [0u8; 2];
        let want = safe_read_len(&buf).min(limits.max_head_bytes.saturating_sub(buf.len()).max(1));
        let n = stream.read(&mut chunk[..want]).await?;
        if n == 0 {
            return Err(HttpError::Closed);
        }
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
    }
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
