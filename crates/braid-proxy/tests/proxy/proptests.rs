//! Property tests: every parser accepts random bytes without panicking, and emit/parse round
//! trip for arbitrary addresses.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use braid_proxy::http::{parse_head, HttpLimits};
use braid_proxy::socks5::{accept_with_timeout, parse_udp, AuthPolicy};
use braid_proxy::{datagram, target, wire, Credentials, TargetAddr};
use proptest::prelude::*;

fn target_addr() -> impl Strategy<Value = TargetAddr> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>())
            .prop_map(|(ip, p)| TargetAddr::Ip(SocketAddr::new(IpAddr::from(ip), p))),
        (any::<[u8; 16]>(), any::<u16>())
            .prop_map(|(ip, p)| TargetAddr::Ip(SocketAddr::new(IpAddr::from(ip), p))),
        ("[!-~]{1,255}", any::<u16>()).prop_map(|(n, p)| TargetAddr::domain(n, p).unwrap()),
    ]
}

/// Bytes that look a little like an HTTP head, to reach deeper code paths.
fn http_ish() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"CONNECT ".to_vec()),
        Just(b"GET ".to_vec()),
        Just(b" HTTP/1.1".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\n".to_vec()),
        Just(b":".to_vec()),
        Just(b"[".to_vec()),
        Just(b"]".to_vec()),
        Just(b"Proxy-Authorization: Basic ".to_vec()),
        "[a-z0-9.:]{0,12}".prop_map(String::into_bytes),
        proptest::collection::vec(any::<u8>(), 0..8),
    ];
    proptest::collection::vec(piece, 0..24).prop_map(|v| v.concat())
}

proptest! {
    #[test]
    fn target_request_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok((_, used)) = target::parse_request(&bytes) {
            prop_assert!(used <= bytes.len());
        }
    }

    #[test]
    fn target_request_biased_never_panics(
        cmd in 0u8..3, atyp in 0u8..6, rest in proptest::collection::vec(any::<u8>(), 0..64)
    ) {
        let mut bytes = vec![1, cmd, atyp];
        bytes.extend(rest);
        let _ = target::parse_request(&bytes);
    }

    #[test]
    fn target_reply_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..4)) {
        let _ = target::parse_reply(&bytes);
    }

    #[test]
    fn addr_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = wire::parse_addr(&bytes);
    }

    #[test]
    fn datagram_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(d) = datagram::parse(&bytes) {
            prop_assert!(d.payload.len() < bytes.len());
        }
    }

    #[test]
    fn inbound_messages_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        use braid_proxy::inbound;
        if let Ok((_, used)) = inbound::parse_forward_request(&bytes) {
            prop_assert!(used <= bytes.len());
        }
        if let Ok((_, used)) = inbound::parse_forward_reply(&bytes) {
            prop_assert!(used <= bytes.len());
        }
        if let Ok((_, used)) = inbound::parse_inbound_header(&bytes) {
            prop_assert!(used <= bytes.len());
        }
        // With the right first bytes, so the bodies are reached.
        for head in [[1u8, 0x10], [1, 0], [1, 0x11]] {
            let mut b = head.to_vec();
            b.extend_from_slice(&bytes);
            let _ = inbound::parse_forward_request(&b);
            let _ = inbound::parse_forward_reply(&b);
            let _ = inbound::parse_inbound_header(&b);
        }
    }

    #[test]
    fn socks_udp_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = parse_udp(&bytes);
    }

    #[test]
    fn http_head_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = parse_head(&bytes, &HttpLimits::default());
        let small = HttpLimits { max_head_bytes: 64, max_headers: 2, ..HttpLimits::default() };
        let _ = parse_head(&bytes, &small);
    }

    #[test]
    fn http_ish_head_never_panics(bytes in http_ish()) {
        let _ = parse_head(&bytes, &HttpLimits::default());
    }

    #[test]
    fn basic_auth_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let c = Credentials::new("u", "p").unwrap();
        let _ = c.matches_basic(&bytes);
    }

    #[test]
    fn round_trips(t in target_addr(), flow in any::<u32>(),
                   payload in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut out = Vec::new();
        target::emit_request(&t, &mut out).unwrap();
        let (req, used) = target::parse_request(&out).unwrap();
        prop_assert_eq!(used, out.len());
        prop_assert_eq!(req.target.to_target_addr(), t.clone());

        out.clear();
        datagram::emit(flow, &t, &payload, &mut out).unwrap();
        let d = datagram::parse(&out).unwrap();
        prop_assert_eq!(d.flow_id, flow);
        prop_assert_eq!(d.addr.to_target_addr(), t.clone());
        prop_assert_eq!(d.payload, &payload[..]);

        out.clear();
        braid_proxy::socks5::emit_udp(&t, &payload, &mut out).unwrap();
        let p = parse_udp(&out).unwrap();
        prop_assert_eq!(p.addr.to_target_addr(), t);
        prop_assert_eq!(p.payload, &payload[..]);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The async handshakes never panic on random client bytes followed by EOF.
    #[test]
    fn handshakes_never_panic(
        prefix in prop_oneof![Just(vec![]), Just(vec![5u8, 1, 0]), Just(vec![5u8, 1, 2, 1])],
        bytes in proptest::collection::vec(any::<u8>(), 0..300),
        user_pass in any::<bool>(),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            use tokio::io::AsyncWriteExt;
            let auth = if user_pass {
                AuthPolicy::user_pass("u", "p").unwrap()
            } else {
                AuthPolicy::NoAuth
            };
            let (mut client, mut server) = tokio::io::duplex(4096);
            client.write_all(&prefix).await.unwrap();
            client.write_all(&bytes).await.unwrap();
            client.shutdown().await.unwrap();
            let _ = accept_with_timeout(&mut server, &auth, Duration::from_secs(1)).await;

            let (mut client, mut server) = tokio::io::duplex(4096);
            client.write_all(&bytes).await.unwrap();
            client.shutdown().await.unwrap();
            let limits = HttpLimits { timeout: Duration::from_secs(1), ..HttpLimits::default() };
            let _ = braid_proxy::http::accept(&mut server, &limits).await;
        });
    }
}
