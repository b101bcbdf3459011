//! Plain-HTTP forwarding: a request in absolute form (`GET http://host:port/path HTTP/1.1`,
//! what `curl -x` and most applications send a proxy for plain `http://` URLs) is served by
//! opening a stream to `host:port` (port 80 when none is given), as CONNECT does, and sending
//! the request there rewritten to origin form.
//!
//! Owns: splitting an absolute `http://` URL into authority and path ([`split_http_url`]) and
//! rewriting the request head ([`rewrite_head`]): the request line gets the path only; the
//! hop-by-hop and proxy headers (`Proxy-Connection`, `Proxy-Authorization`, `Connection`,
//! `Keep-Alive`) and the client's `Host` are dropped; `Host` is set to the URL's authority
//! (RFC 9112 §3.2.2) and `Connection: close` is added, so one client connection carries one
//! request (the origin closes after answering, and the client opens a new connection for
//! the next one, possibly to another host). The request body, if any, follows the head
//! unchanged in the relayed stream. Must not touch: reading the head from the client
//! (`http`), sockets, the session.
//!
//! No-panic contract: both functions accept any byte slices.

use crate::http_error::HttpError;

/// Headers the proxy consumes or that are hop-by-hop: never sent on to the origin.
const DROPPED: [&[u8]; 5] = [
    b"proxy-connection",
    b"proxy-authorization",
    b"connection",
    b"keep-alive",
    b"host",
];

/// An absolute URL's authority (`host[:port]`) and path (with query; may be empty).
pub(crate) type UrlParts<'a> = (&'a [u8], &'a [u8]);

/// The authority and the path (with query; `/` when the URL has none) of an absolute
/// `http://` URL; `Ok(None)` when `target` is not an absolute URL at all (origin form such
/// as `/index.html`). Other schemes and user information are refused: `https://` is sent
/// to a proxy with CONNECT, and credentials in the URL are not forwarded.
pub(crate) fn split_http_url(target: &[u8]) -> Result<Option<UrlParts<'_>>, HttpError> {
    let Some(colon) = target.windows(3).position(|w| w == b"://") else {
        return Ok(None);
    };
    let (scheme, rest) = target.split_at(colon);
    if !scheme.eq_ignore_ascii_case(b"http") {
        return Err(HttpError::NotHttpUrl);
    }
    let rest = rest.get(3..).unwrap_or_default();
    let end = rest
        .iter()
        .position(|&b| b == b'/' || b == b'?' || b == b'#')
        .unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.contains(&b'@') {
        return Err(HttpError::BadHost(
            "user information (user@host) in a proxied URL is not forwarded",
        ));
    }
    // A fragment is never sent to the origin.
    let path = match path.iter().position(|&b| b == b'#') {
        Some(hash) => path.get(..hash).unwrap_or_default(),
        None => path,
    };
    Ok(Some((authority, path)))
}

/// The request head to send the origin: `method path version`, the kept `headers` (raw
/// lines without their line ends), `Host: authority`, `Connection: close`, a blank line.
pub(crate) fn rewrite_head(
    method: &[u8],
    path: &[u8],
    version: &[u8],
    authority: &[u8],
    headers: &[&[u8]],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(method);
    out.push(b' ');
    if !path.starts_with(b"/") {
        out.push(b'/'); // no path, or only a query
    }
    out.extend_from_slice(path);
    out.push(b' ');
    out.extend_from_slice(version);
    out.extend_from_slice(b"\r\nHost: ");
    out.extend_from_slice(authority);
    out.extend_from_slice(b"\r\n");
    for line in headers {
        let name = line.split(|&b| b == b':').next().unwrap_or_default();
        if DROPPED.iter().any(|d| name.eq_ignore_ascii_case(d)) {
            continue;
        }
        out.extend_from_slice(line);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_authority_and_path() {
        let s = |u: &str| {
            split_http_url(u.as_bytes()).map(|o| {
                o.map(|(a, p)| {
                    (
                        String::from_utf8_lossy(a).into_owned(),
                        String::from_utf8_lossy(p).into_owned(),
                    )
                })
            })
        };
        let ok = |a: &str, p: &str| Some((a.to_string(), p.to_string()));
        assert_eq!(
            s("http://a.b:8080/x/y?q=1").unwrap(),
            ok("a.b:8080", "/x/y?q=1")
        );
        assert_eq!(s("HTTP://a.b").unwrap(), ok("a.b", ""));
        assert_eq!(s("http://[::1]:81?q").unwrap(), ok("[::1]:81", "?q"));
        assert_eq!(s("http://a/p#frag").unwrap(), ok("a", "/p"));
        assert_eq!(s("/index.html").unwrap(), None);
        assert!(matches!(s("https://a/"), Err(HttpError::NotHttpUrl)));
        assert!(matches!(s("http://u:p@a/"), Err(HttpError::BadHost(_))));
    }

    #[test]
    fn the_head_is_rewritten_to_origin_form_without_proxy_headers() {
        let headers: [&[u8]; 5] = [
            b"Host: wrong.example",
            b"User-Agent: curl/8",
            b"Proxy-Connection: Keep-Alive",
            b"proxy-authorization: Basic dTpw",
            b"Accept: */*",
        ];
        let h = rewrite_head(b"GET", b"/p?q", b"HTTP/1.1", b"a.b:8080", &headers);
        assert_eq!(
            String::from_utf8(h).unwrap(),
            "GET /p?q HTTP/1.1\r\nHost: a.b:8080\r\nUser-Agent: curl/8\r\nAccept: */*\r\n\
             Connection: close\r\n\r\n"
        );
        let h = rewrite_head(b"HEAD", b"", b"HTTP/1.0", b"a", &[]);
        assert_eq!(
            h,
            b"HEAD / HTTP/1.0\r\nHost: a\r\nConnection: close\r\n\r\n"
        );
        let h = rewrite_head(b"GET", b"?q", b"HTTP/1.1", b"a", &[]);
        assert!(h.starts_with(b"GET /?q HTTP/1.1\r\n"));
    }
}
