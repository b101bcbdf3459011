//! HTTP proxy handshake tests (CONNECT and absolute-form requests) over in-memory duplex
//! streams.

use std::time::Duration;

use braid_proxy::http::{accept, respond_error, respond_ok, HttpError, HttpLimits, ProxyRequest};
use braid_proxy::{Credentials, ReplyCode, TargetAddr};
use tokio::io::{duplex, AsyncReadExt, AsyncWriteExt, DuplexStream};

fn limits() -> HttpLimits {
    HttpLimits {
        timeout: Duration::from_secs(2),
        ..HttpLimits::default()
    }
}

/// [`accept`] for a CONNECT: its target.
async fn accept_connect(
    server: &mut DuplexStream,
    limits: &HttpLimits,
) -> Result<TargetAddr, HttpError> {
    accept(server, limits).await.map(|r| match r {
        ProxyRequest::Connect(t) => t,
        other => panic!("not a CONNECT: {other:?}"),
    })
}

/// Writes `input` (then EOF when `eof`), runs `accept` for a CONNECT, returns its result,
/// what the server sent within 50 ms, and both ends.
async fn run(
    input: &[u8],
    limits: &HttpLimits,
    eof: bool,
) -> (
    Result<TargetAddr, HttpError>,
    String,
    DuplexStream,
    DuplexStream,
) {
    let (mut client, mut server) = duplex(64 * 1024);
    client.write_all(input).await.unwrap();
    if eof {
        client.shutdown().await.unwrap();
    }
    let res = accept_connect(&mut server, limits).await;
    let out = read_some(&mut client).await;
    (res, out, client, server)
}

async fn read_some(client: &mut DuplexStream) -> String {
    let mut out = vec![0u8; 16 * 1024];
    let n = tokio::time::timeout(Duration::from_millis(50), client.read(&mut out))
        .await
        .unwrap_or(Ok(0))
        .unwrap();
    String::from_utf8_lossy(&out[..n]).into_owned()
}

#[tokio::test]
async fn connect_name_port_then_ok() {
    let req = b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nUser-Agent: t\r\n\r\n";
    let (res, out, mut client, mut server) = run(req, &limits(), false).await;
    assert_eq!(
        res.unwrap(),
        TargetAddr::domain("example.com", 443).unwrap()
    );
    assert!(out.is_empty(), "nothing is sent before respond_ok: {out:?}");
    respond_ok(&mut server).await.unwrap();
    assert_eq!(
        read_some(&mut client).await,
        "HTTP/1.1 200 Connection established\r\n\r\n"
    );
}

#[tokio::test]
async fn connect_ipv6_literal() {
    let req = b"CONNECT [2001:db8::7]:8443 HTTP/1.1\r\nHost: [2001:db8::7]:8443\r\n\r\n";
    let (res, _, _, _) = run(req, &limits(), false).await;
    assert_eq!(
        res.unwrap(),
        TargetAddr::Ip("[2001:db8::7]:8443".parse().unwrap())
    );
}

#[tokio::test]
async fn connect_ipv4_and_bare_lf() {
    let (res, _, _, _) = run(b"CONNECT 192.0.2.3:22 HTTP/1.0\n\n", &limits(), false).await;
    assert_eq!(
        res.unwrap(),
        TargetAddr::Ip("192.0.2.3:22".parse().unwrap())
    );
}

#[tokio::test]
async fn bytes_after_the_head_stay_in_the_stream() {
    let req = b"CONNECT example.com:443 HTTP/1.1\r\n\r\n\x16\x03\x01hello";
    let (res, _, _client, mut server) = run(req, &limits(), true).await;
    assert!(res.is_ok());
    let mut rest = Vec::new();
    server.read_to_end(&mut rest).await.unwrap();
    assert_eq!(rest, b"\x16\x03\x01hello");
}

#[tokio::test]
async fn origin_form_get_is_405() {
    let req = b"GET /index.html HTTP/1.1\r\nHost: example.com\r\n\r\n";
    let (res, out, _, _) = run(req, &limits(), false).await;
    assert!(
        matches!(res, Err(HttpError::MethodNotAllowed(ref m)) if m == "GET"),
        "{res:?}"
    );
    assert!(
        out.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"),
        "{out}"
    );
    assert!(out.contains("Allow: CONNECT\r\n"), "{out}");
    let body = out.split("\r\n\r\n").nth(1).unwrap();
    assert!(
        body.starts_with("only CONNECT and requests for absolute http://"),
        "{body}"
    );
    assert_eq!(body.lines().count(), 1);
}

/// Issue 24: `curl -x` sends plain-HTTP requests in absolute form; they got 405.
#[tokio::test]
async fn absolute_form_get_was_405_and_is_now_forwarded_in_origin_form() {
    let req = b"POST http://example.com:8080/up?x=1 HTTP/1.1\r\nHost: example.com:8080\r\n\
        Proxy-Connection: Keep-Alive\r\nProxy-Authorization: Basic dTpw\r\nContent-Length: 4\r\n\
        \r\nbody";
    let (mut client, mut server) = duplex(64 * 1024);
    client.write_all(req).await.unwrap();
    client.shutdown().await.unwrap();
    let res = accept(&mut server, &limits()).await.unwrap();
    let ProxyRequest::Forward { target, head } = res else {
        panic!("not forwarded: {res:?}");
    };
    assert_eq!(target, TargetAddr::domain("example.com", 8080).unwrap());
    assert_eq!(
        String::from_utf8(head).unwrap(),
        "POST /up?x=1 HTTP/1.1\r\nHost: example.com:8080\r\nContent-Length: 4\r\n\
         Connection: close\r\n\r\n"
    );
    assert!(read_some(&mut client).await.is_empty(), "nothing answered");
    let mut rest = Vec::new();
    server.read_to_end(&mut rest).await.unwrap();
    assert_eq!(rest, b"body", "the body stays in the stream for the relay");

    // No port in the URL: 80; an IPv6 literal.
    let (mut client, mut server) = duplex(1024);
    client
        .write_all(b"GET http://[2001:db8::1] HTTP/1.0\r\n\r\n")
        .await
        .unwrap();
    let res = accept(&mut server, &limits()).await.unwrap();
    assert_eq!(
        res,
        ProxyRequest::Forward {
            target: TargetAddr::Ip("[2001:db8::1]:80".parse().unwrap()),
            head: b"GET / HTTP/1.0\r\nHost: [2001:db8::1]\r\nConnection: close\r\n\r\n".to_vec(),
        }
    );
}

#[tokio::test]
async fn https_url_in_absolute_form_is_400() {
    let (mut client, mut server) = duplex(1024);
    client
        .write_all(b"GET https://a.example/ HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let res = accept(&mut server, &limits()).await;
    assert!(matches!(res, Err(HttpError::NotHttpUrl)), "{res:?}");
    let out = read_some(&mut client).await;
    assert!(out.starts_with("HTTP/1.1 400 "), "{out}");
    assert!(out.contains("CONNECT"), "{out}");
}

#[tokio::test]
async fn garbage_is_400() {
    let (res, out, _, _) = run(b"\x16\x03\x01\x00\xa5\x01\n\n", &limits(), false).await;
    assert!(matches!(res, Err(HttpError::Malformed(_))), "{res:?}");
    assert!(out.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{out}");
    assert!(out.contains("Connection: close"));
    // A TLS ClientHello (no line breaks) closed by the client.
    let (res, out, _, _) = run(&[0x16, 0x03, 0x01, 0x00, 0xa5, 0x01], &limits(), true).await;
    assert!(matches!(res, Err(HttpError::Closed)), "{res:?}");
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
}

#[tokio::test]
async fn missing_or_bad_port_is_400() {
    for (req, want) in [
        ("CONNECT example.com HTTP/1.1\r\n\r\n", "no port"),
        (
            "CONNECT example.com:https HTTP/1.1\r\n\r\n",
            "port is not a number",
        ),
        (
            "CONNECT example.com:70000 HTTP/1.1\r\n\r\n",
            "port is not a number",
        ),
        ("CONNECT [::1] HTTP/1.1\r\n\r\n", "no port"),
    ] {
        let (res, out, _, _) = run(req.as_bytes(), &limits(), false).await;
        assert!(res.is_err(), "{req}");
        assert!(out.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{out}");
        assert!(out.contains(want), "{req}: {out}");
    }
}

#[tokio::test]
async fn missing_blank_line_times_out() {
    let limits = HttpLimits {
        timeout: Duration::from_millis(150),
        ..HttpLimits::default()
    };
    let (res, out, _, _) = run(
        b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com\r\n",
        &limits,
        false,
    )
    .await;
    assert!(matches!(res, Err(HttpError::Timeout(_))), "{res:?}");
    assert!(out.starts_with("HTTP/1.1 408 Request Timeout\r\n"), "{out}");
}

#[tokio::test]
async fn missing_blank_line_then_close_is_400() {
    let (res, out, _, _) = run(
        b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com\r\n",
        &limits(),
        true,
    )
    .await;
    assert!(matches!(res, Err(HttpError::Closed)), "{res:?}");
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
}

#[tokio::test]
async fn oversized_head_is_400() {
    let mut req = b"CONNECT example.com:443 HTTP/1.1\r\n".to_vec();
    while req.len() < 10_000 {
        req.extend_from_slice(b"X-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    let limits = HttpLimits {
        max_headers: 1000,
        ..limits()
    };
    let (res, out, _, _) = run(&req, &limits, false).await;
    assert!(
        matches!(res, Err(HttpError::HeadTooLarge { limit: 8192 })),
        "{res:?}"
    );
    assert!(out.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{out}");
    assert!(out.contains("8192 bytes"), "{out}");
}

#[tokio::test]
async fn too_many_headers_is_400() {
    let mut req = b"CONNECT example.com:443 HTTP/1.1\r\n".to_vec();
    for i in 0..101 {
        req.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
    }
    req.extend_from_slice(b"\r\n");
    let (res, out, _, _) = run(&req, &limits(), false).await;
    assert!(
        matches!(res, Err(HttpError::TooManyHeaders { limit: 100 })),
        "{res:?}"
    );
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
}

fn with_auth() -> HttpLimits {
    HttpLimits {
        auth: Some(Credentials::new("alice", "s3cret").unwrap()),
        ..limits()
    }
}

#[tokio::test]
async fn proxy_auth() {
    // base64("alice:s3cret") = YWxpY2U6czNjcmV0
    let ok =
        b"CONNECT a.example:443 HTTP/1.1\r\nProxy-Authorization: Basic YWxpY2U6czNjcmV0\r\n\r\n";
    let (res, out, _, _) = run(ok, &with_auth(), false).await;
    assert_eq!(res.unwrap(), TargetAddr::domain("a.example", 443).unwrap());
    assert!(out.is_empty());

    let missing = b"CONNECT a.example:443 HTTP/1.1\r\n\r\n";
    let (res, out, _, _) = run(missing, &with_auth(), false).await;
    assert!(matches!(res, Err(HttpError::ProxyAuthRequired)), "{res:?}");
    assert!(
        out.starts_with("HTTP/1.1 407 Proxy Authentication Required\r\n"),
        "{out}"
    );
    assert!(
        out.contains("Proxy-Authenticate: Basic realm=\"braid\"\r\n"),
        "{out}"
    );

    // base64("alice:wrong") = YWxpY2U6d3Jvbmc=
    let wrong =
        b"CONNECT a.example:443 HTTP/1.1\r\nproxy-authorization: basic YWxpY2U6d3Jvbmc=\r\n\r\n";
    let (res, out, _, _) = run(wrong, &with_auth(), false).await;
    assert!(matches!(res, Err(HttpError::ProxyAuthFailed)), "{res:?}");
    assert!(out.starts_with("HTTP/1.1 407"), "{out}");
}

#[tokio::test]
async fn respond_error_statuses() {
    for (code, status) in [
        (ReplyCode::NotAllowed, "403 Forbidden"),
        (ReplyCode::TtlExpired, "504 Gateway Timeout"),
        (ReplyCode::ConnectionRefused, "502 Bad Gateway"),
        (ReplyCode::GeneralFailure, "502 Bad Gateway"),
        (ReplyCode::HostUnreachable, "502 Bad Gateway"),
        (ReplyCode::NetworkUnreachable, "502 Bad Gateway"),
        (ReplyCode::CommandNotSupported, "405 Method Not Allowed"),
        (ReplyCode::AddressTypeNotSupported, "400 Bad Request"),
        (ReplyCode::Succeeded, "200 Connection established"),
    ] {
        let (mut client, mut server) = duplex(4096);
        respond_error(&mut server, code).await.unwrap();
        drop(server);
        let mut out = String::new();
        client.read_to_string(&mut out).await.unwrap();
        assert!(
            out.starts_with(&format!("HTTP/1.1 {status}\r\n")),
            "{code:?}: {out}"
        );
        if let Some((head, body)) = out.split_once("\r\n\r\n") {
            if let Some(len) = head
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
            {
                assert_eq!(len.parse::<usize>().unwrap(), body.len());
            }
        }
    }
}

#[tokio::test]
async fn client_that_never_reads_does_not_hang_the_error_path() {
    // A tiny pipe the client never drains: the 400 cannot be written in full.
    let (_client, mut server) = duplex(8);
    let limits = HttpLimits {
        timeout: Duration::from_millis(100),
        ..HttpLimits::default()
    };
    let started = std::time::Instant::now();
    let res = accept_connect(&mut server, &limits).await;
    assert!(matches!(res, Err(HttpError::Timeout(_))));
    assert!(started.elapsed() < Duration::from_secs(2));
}
