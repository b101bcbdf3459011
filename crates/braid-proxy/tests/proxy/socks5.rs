//! SOCKS5 handshake tests over in-memory duplex streams.

use std::time::Duration;

use braid_proxy::socks5::{self, accept_with_timeout, AuthPolicy, SocksError, SocksRequest};
use braid_proxy::{ReplyCode, TargetAddr};
use tokio::io::{duplex, AsyncReadExt, AsyncWriteExt, DuplexStream};

const T: Duration = Duration::from_secs(2);

/// Writes `input` (then EOF when `eof`), runs the handshake, and returns its result, what the
/// server wrote, and the server end.
async fn run(
    input: &[u8],
    auth: &AuthPolicy,
    eof: bool,
) -> (Result<SocksRequest, SocksError>, Vec<u8>, DuplexStream) {
    let (mut client, mut server) = duplex(64 * 1024);
    client.write_all(input).await.unwrap();
    if eof {
        client.shutdown().await.unwrap();
    }
    let res = accept_with_timeout(&mut server, auth, T).await;
    // Read what the server sent so far.
    let mut out = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_millis(50), client.read(&mut out))
        .await
        .unwrap_or(Ok(0))
        .unwrap();
    out.truncate(n);
    (res, out, server)
}

fn user_pass() -> AuthPolicy {
    AuthPolicy::user_pass("alice", "s3cret").unwrap()
}

fn auth_msg(user: &[u8], pass: &[u8]) -> Vec<u8> {
    let mut v = vec![1, user.len() as u8];
    v.extend_from_slice(user);
    v.push(pass.len() as u8);
    v.extend_from_slice(pass);
    v
}

#[tokio::test]
async fn connect_ipv4_no_auth() {
    let input = [5, 1, 0, 5, 1, 0, 1, 192, 0, 2, 1, 0, 80];
    let (res, out, _) = run(&input, &AuthPolicy::NoAuth, false).await;
    assert_eq!(
        res.unwrap(),
        SocksRequest::Connect(TargetAddr::Ip("192.0.2.1:80".parse().unwrap()))
    );
    assert_eq!(out, [5, 0]);
}

#[tokio::test]
async fn reply_encoding() {
    let (mut client, mut server) = duplex(1024);
    socks5::reply(
        &mut server,
        ReplyCode::ConnectionRefused,
        "192.0.2.9:1080".parse().unwrap(),
    )
    .await
    .unwrap();
    socks5::reply(
        &mut server,
        ReplyCode::Succeeded,
        "[::1]:7".parse().unwrap(),
    )
    .await
    .unwrap();
    drop(server);
    let mut out = Vec::new();
    client.read_to_end(&mut out).await.unwrap();
    let mut want = vec![5, 5, 0, 1, 192, 0, 2, 9, 0x04, 0x38];
    want.extend_from_slice(&[5, 0, 0, 4]);
    want.extend_from_slice(&[0; 15]);
    want.extend_from_slice(&[1, 0, 7]);
    assert_eq!(out, want);
}

#[tokio::test]
async fn connect_ipv6_no_auth() {
    let mut input = vec![5, 2, 2, 0, 5, 1, 0, 4];
    let ip: std::net::Ipv6Addr = "2001:db8::42".parse().unwrap();
    input.extend_from_slice(&ip.octets());
    input.extend_from_slice(&443u16.to_be_bytes());
    let (res, out, _) = run(&input, &AuthPolicy::NoAuth, false).await;
    assert_eq!(
        res.unwrap(),
        SocksRequest::Connect(TargetAddr::Ip("[2001:db8::42]:443".parse().unwrap()))
    );
    assert_eq!(out, [5, 0]);
}

#[tokio::test]
async fn connect_domain_no_auth() {
    let mut input = vec![5, 1, 0, 5, 1, 0, 3, 11];
    input.extend_from_slice(b"example.com");
    input.extend_from_slice(&8443u16.to_be_bytes());
    let (res, out, _) = run(&input, &AuthPolicy::NoAuth, false).await;
    assert_eq!(
        res.unwrap(),
        SocksRequest::Connect(TargetAddr::domain("example.com", 8443).unwrap())
    );
    assert_eq!(out, [5, 0]);
}

#[tokio::test]
async fn does_not_read_past_the_request() {
    let (mut client, mut server) = duplex(1024);
    client
        .write_all(&[5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1, 0, 22, b'h', b'i'])
        .await
        .unwrap();
    let res = accept_with_timeout(&mut server, &AuthPolicy::NoAuth, T).await;
    assert!(matches!(res, Ok(SocksRequest::Connect(_))));
    let mut rest = [0u8; 2];
    server.read_exact(&mut rest).await.unwrap();
    assert_eq!(&rest, b"hi");
}

#[tokio::test]
async fn user_pass_accepted() {
    let mut input = vec![5, 2, 0, 2];
    input.extend(auth_msg(b"alice", b"s3cret"));
    input.extend_from_slice(&[5, 1, 0, 1, 198, 51, 100, 7, 1, 187]);
    let (res, out, _) = run(&input, &user_pass(), false).await;
    assert_eq!(
        res.unwrap(),
        SocksRequest::Connect(TargetAddr::Ip("198.51.100.7:443".parse().unwrap()))
    );
    assert_eq!(out, [5, 2, 1, 0]);
}

#[tokio::test]
async fn wrong_password_refused() {
    let mut input = vec![5, 1, 2];
    input.extend(auth_msg(b"alice", b"s3creT"));
    input.extend_from_slice(&[5, 1, 0, 1, 198, 51, 100, 7, 1, 187]);
    let (res, out, _) = run(&input, &user_pass(), false).await;
    assert!(matches!(res, Err(SocksError::AuthFailed)), "{res:?}");
    assert_eq!(out, [5, 2, 1, 1]);
}

#[tokio::test]
async fn wrong_user_refused() {
    let mut input = vec![5, 1, 2];
    input.extend(auth_msg(b"alicE", b"s3cret"));
    let (res, out, _) = run(&input, &user_pass(), true).await;
    assert!(matches!(res, Err(SocksError::AuthFailed)), "{res:?}");
    assert_eq!(out, [5, 2, 1, 1]);
}

#[tokio::test]
async fn bad_auth_version_refused() {
    let mut input = vec![5, 1, 2];
    let mut msg = auth_msg(b"alice", b"s3cret");
    msg[0] = 5;
    input.extend(msg);
    let (res, out, _) = run(&input, &user_pass(), true).await;
    assert!(matches!(res, Err(SocksError::BadAuthVersion(5))), "{res:?}");
    assert_eq!(out, [5, 2, 1, 1]);
}

#[tokio::test]
async fn no_acceptable_method() {
    // The port wants a password; the client offers only "no auth".
    let (res, out, _) = run(&[5, 1, 0], &user_pass(), true).await;
    assert!(
        matches!(&res, Err(SocksError::NoAcceptableMethod { offered, required: 2 }) if offered == &[0]),
        "{res:?}"
    );
    assert_eq!(out, [5, 0xFF]);
    // The port wants no auth; the client offers only a password.
    let (res, out, _) = run(&[5, 1, 2], &AuthPolicy::NoAuth, true).await;
    assert!(matches!(res, Err(SocksError::NoAcceptableMethod { .. })));
    assert_eq!(out, [5, 0xFF]);
}

#[tokio::test]
async fn udp_associate() {
    let input = [5, 1, 0, 5, 3, 0, 1, 0, 0, 0, 0, 0, 0];
    let (res, out, _) = run(&input, &AuthPolicy::NoAuth, false).await;
    assert_eq!(
        res.unwrap(),
        SocksRequest::UdpAssociate(TargetAddr::Ip("0.0.0.0:0".parse().unwrap()))
    );
    assert_eq!(out, [5, 0]);
}

#[tokio::test]
async fn bind_refused_with_7() {
    let input = [5, 1, 0, 5, 2, 0, 1, 192, 0, 2, 1, 0, 80];
    let (res, out, _) = run(&input, &AuthPolicy::NoAuth, false).await;
    assert!(
        matches!(res, Err(SocksError::UnsupportedCommand(2))),
        "{res:?}"
    );
    assert_eq!(out, [5, 0, 5, 7, 0, 1, 0, 0, 0, 0, 0, 0]);
}

#[tokio::test]
async fn unknown_command_refused_with_7() {
    let input = [5, 1, 0, 5, 9, 0, 1, 192, 0, 2, 1, 0, 80];
    let (res, out, _) = run(&input, &AuthPolicy::NoAuth, false).await;
    assert!(matches!(res, Err(SocksError::UnsupportedCommand(9))));
    assert_eq!(out[3], 7);
}

#[tokio::test]
async fn unknown_atyp_refused_with_8() {
    let input = [5, 1, 0, 5, 1, 0, 2, 1, 2, 3, 4, 0, 80];
    let (res, out, _) = run(&input, &AuthPolicy::NoAuth, false).await;
    assert!(
        matches!(res, Err(SocksError::UnsupportedAddressType(2))),
        "{res:?}"
    );
    assert_eq!(out, [5, 0, 5, 8, 0, 1, 0, 0, 0, 0, 0, 0]);
}

#[tokio::test]
async fn bad_domain_refused_with_1() {
    let mut input = vec![5, 1, 0, 5, 1, 0, 3, 5];
    input.extend_from_slice(b"a\0b c");
    input.extend_from_slice(&[0, 80]);
    let (res, out, _) = run(&input, &AuthPolicy::NoAuth, false).await;
    assert!(matches!(res, Err(SocksError::BadDomain(_))), "{res:?}");
    assert_eq!(out[..4], [5, 0, 5, 1]);
    // Zero-length name.
    let (res, _, _) = run(&[5, 1, 0, 5, 1, 0, 3, 0, 0, 80], &AuthPolicy::NoAuth, false).await;
    assert!(matches!(res, Err(SocksError::BadDomain(_))), "{res:?}");
}

#[tokio::test]
async fn bad_request_version_refused_with_1() {
    let input = [5, 1, 0, 4, 1, 0, 1, 192, 0, 2, 1, 0, 80];
    let (res, out, _) = run(&input, &AuthPolicy::NoAuth, false).await;
    assert!(matches!(res, Err(SocksError::BadVersion(4))));
    assert_eq!(out[..4], [5, 0, 5, 1]);
}

#[tokio::test]
async fn socks4_and_http_refused_silently() {
    let (res, out, _) = run(&[4, 1, 0, 80, 1, 2, 3, 4, 0], &AuthPolicy::NoAuth, true).await;
    assert!(matches!(res, Err(SocksError::BadVersion(4))));
    assert!(out.is_empty());
    let (res, _, _) = run(b"CONNECT a:1 HTTP/1.1\r\n\r\n", &AuthPolicy::NoAuth, true).await;
    let msg = res.unwrap_err().to_string();
    assert!(msg.contains("SOCKS5 only"), "{msg}");
}

#[tokio::test]
async fn truncated_greeting() {
    for input in [&[][..], &[5], &[5, 3, 0]] {
        let (res, out, _) = run(input, &AuthPolicy::NoAuth, true).await;
        assert!(matches!(res, Err(SocksError::Closed)), "{res:?}");
        assert!(out.is_empty());
    }
}

#[tokio::test]
async fn truncated_request() {
    let (res, out, _) = run(&[5, 1, 0, 5, 1, 0, 3, 20, b'a'], &AuthPolicy::NoAuth, true).await;
    assert!(matches!(res, Err(SocksError::Closed)), "{res:?}");
    assert_eq!(out, [5, 0]);
}

#[tokio::test]
async fn zero_methods() {
    let (res, out, _) = run(&[5, 0], &AuthPolicy::NoAuth, true).await;
    assert!(
        matches!(&res, Err(SocksError::NoAcceptableMethod { offered, .. }) if offered.is_empty()),
        "{res:?}"
    );
    assert_eq!(out, [5, 0xFF]);
}

#[tokio::test]
async fn oversized_username() {
    // The longest username the protocol can carry: refused, not a crash.
    let mut input = vec![5, 1, 2];
    input.extend(auth_msg(&[b'u'; 255], &[b'p'; 255]));
    let (res, out, _) = run(&input, &user_pass(), true).await;
    assert!(matches!(res, Err(SocksError::AuthFailed)), "{res:?}");
    assert_eq!(out, [5, 2, 1, 1]);
    // A length byte promising more than is sent.
    let mut input = vec![5, 1, 2, 1, 255];
    input.extend_from_slice(&[b'u'; 10]);
    let (res, _, _) = run(&input, &user_pass(), true).await;
    assert!(matches!(res, Err(SocksError::Closed)), "{res:?}");
    // A configured username too long for SOCKS5 is refused up front.
    assert!(AuthPolicy::user_pass("u".repeat(256), "p").is_err());
    assert!(AuthPolicy::user_pass("u", "").is_err());
    assert!(AuthPolicy::user_pass("u:v", "p").is_ok());
}

#[tokio::test]
async fn slowloris_times_out() {
    let (mut client, mut server) = duplex(1024);
    client.write_all(&[5]).await.unwrap();
    let timeout = Duration::from_millis(150);
    let started = std::time::Instant::now();
    let res = accept_with_timeout(&mut server, &AuthPolicy::NoAuth, timeout).await;
    assert!(
        matches!(res, Err(SocksError::Timeout(t)) if t == timeout),
        "{res:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    drop(client);
}

#[tokio::test]
async fn dripping_client_hits_the_whole_handshake_deadline() {
    let (mut client, mut server) = duplex(1024);
    let drip = tokio::spawn(async move {
        let bytes = [5u8, 1, 0, 5, 1, 0, 3, 200];
        for b in bytes {
            if client.write_all(&[b]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        // Then one name byte every 30 ms, far slower than the deadline allows.
        for _ in 0..200 {
            if client.write_all(b"a").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    });
    let res =
        accept_with_timeout(&mut server, &AuthPolicy::NoAuth, Duration::from_millis(400)).await;
    assert!(matches!(res, Err(SocksError::Timeout(_))), "{res:?}");
    drop(server);
    drip.await.unwrap();
}

#[test]
fn errors_say_what_to_do() {
    let e = SocksError::NoAcceptableMethod {
        offered: vec![0],
        required: 2,
    };
    let msg = e.to_string();
    assert!(msg.contains("configure the client"), "{msg}");
    assert!(!format!("{:?}", user_pass()).contains("s3cret"));
}
