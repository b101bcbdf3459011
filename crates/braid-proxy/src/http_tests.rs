//! Unit tests of `http`'s pure parser.

use super::*;

fn parse(s: &str) -> Result<Option<TargetAddr>, HttpError> {
    parse_head(s.as_bytes(), &HttpLimits::default()).map(|o| o.map(|(h, _)| h.target))
}

#[test]
fn targets() {
    assert_eq!(
        parse("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
            .unwrap()
            .unwrap(),
        TargetAddr::domain("example.com", 443).unwrap()
    );
    assert_eq!(
        parse("CONNECT [2001:db8::1]:8443 HTTP/1.1\r\n\r\n")
            .unwrap()
            .unwrap(),
        TargetAddr::Ip("[2001:db8::1]:8443".parse().unwrap())
    );
    assert_eq!(
        parse("\r\nCONNECT 192.0.2.1:80 HTTP/1.0\n\n")
            .unwrap()
            .unwrap(),
        TargetAddr::Ip("192.0.2.1:80".parse().unwrap())
    );
    assert_eq!(
        parse("GET http://a/ HTTP/1.1\r\n\r\n").unwrap().unwrap(),
        TargetAddr::domain("a", 80).unwrap()
    );
    assert!(parse("CONNECT a:1 HTTP/1.1\r\nHost: a\r\n")
        .unwrap()
        .is_none());
}

#[test]
fn refusals() {
    let e = |s: &str| parse(s).unwrap_err();
    assert!(matches!(
        e("CONNECT example.com HTTP/1.1\r\n\r\n"),
        HttpError::MissingPort
    ));
    assert!(matches!(
        e("CONNECT example.com: HTTP/1.1\r\n\r\n"),
        HttpError::MissingPort
    ));
    assert!(matches!(
        e("CONNECT [::1] HTTP/1.1\r\n\r\n"),
        HttpError::MissingPort
    ));
    assert!(matches!(
        e("CONNECT a:0 HTTP/1.1\r\n\r\n"),
        HttpError::BadPort
    ));
    assert!(matches!(
        e("CONNECT a:65536 HTTP/1.1\r\n\r\n"),
        HttpError::BadPort
    ));
    assert!(matches!(
        e("CONNECT a:8x HTTP/1.1\r\n\r\n"),
        HttpError::BadPort
    ));
    assert!(matches!(
        e("CONNECT ::1:80 HTTP/1.1\r\n\r\n"),
        HttpError::BadHost(_)
    ));
    assert!(matches!(
        e("CONNECT [zz]:80 HTTP/1.1\r\n\r\n"),
        HttpError::BadHost(_)
    ));
    assert!(matches!(
        e("CONNECT u@h:80 HTTP/1.1\r\n\r\n"),
        HttpError::BadHost(_)
    ));
    assert!(matches!(
        e("GET /a HTTP/1.1\r\n\r\n"),
        HttpError::MethodNotAllowed(_)
    ));
    assert!(matches!(
        e("GET ftp://a/ HTTP/1.1\r\n\r\n"),
        HttpError::NotHttpUrl
    ));
    assert!(matches!(
        e("CONNECT a:1 HTTP/2.0\r\n\r\n"),
        HttpError::UnsupportedVersion
    ));
    assert!(matches!(e("\x16\x03\x01\x02\n\n"), HttpError::Malformed(_)));
    assert!(matches!(
        e("CONNECT a:1 HTTP/1.1\r\n folded\r\n\r\n"),
        HttpError::Malformed(_)
    ));
    assert!(matches!(
        e("CONNECT a:1 HTTP/1.1\r\nNo colon\r\n\r\n"),
        HttpError::Malformed(_)
    ));
    let many = format!("CONNECT a:1 HTTP/1.1\r\n{}\r\n", "X: y\r\n".repeat(101));
    assert!(matches!(e(&many), HttpError::TooManyHeaders { limit: 100 }));
    let big = format!("CONNECT a:1 HTTP/1.1\r\nX: {}\r\n\r\n", "y".repeat(9000));
    assert!(matches!(e(&big), HttpError::HeadTooLarge { .. }));
}

#[test]
fn safe_reads_never_pass_the_blank_line() {
    let head = b"CONNECT a:1 HTTP/1.1\r\nX: y\r\n\r\nTAIL";
    let mut buf = Vec::new();
    let mut at = 0;
    while !ends_with_blank_line(&buf) {
        let n = safe_read_len(&buf);
        buf.extend_from_slice(&head[at..at + n]);
        at += n;
    }
    assert_eq!(&head[at..], b"TAIL");
}
