//! Round trips of the stream-open header, its reply, the proxied datagram and the SOCKS5
//! UDP header.

use braid_proxy::datagram;
use braid_proxy::socks5::{emit_udp, parse_udp};
use braid_proxy::target::{
    emit_reply, emit_request, parse_reply, parse_request, Command, MAX_REQUEST_LEN,
};
use braid_proxy::{Invalid, ParseError, ReplyCode, TargetAddr};

fn targets() -> Vec<TargetAddr> {
    vec![
        TargetAddr::Ip("192.0.2.1:80".parse().unwrap()),
        TargetAddr::Ip("[2001:db8::1]:443".parse().unwrap()),
        TargetAddr::domain("example.com", 8080).unwrap(),
        TargetAddr::domain("x".repeat(255), 65535).unwrap(),
    ]
}

#[test]
fn request_round_trip_and_every_prefix_is_incomplete() {
    for t in targets() {
        let mut out = vec![0xAA]; // existing contents are kept
        emit_request(&t, &mut out).unwrap();
        let bytes = &out[1..];
        assert!(bytes.len() <= MAX_REQUEST_LEN);
        let mut with_tail = bytes.to_vec();
        with_tail.extend_from_slice(b"payload");
        let (req, used) = parse_request(&with_tail).unwrap();
        assert_eq!(used, bytes.len());
        assert_eq!(req.command, Command::Connect);
        assert_eq!(req.target.to_target_addr(), t);
        for cut in 0..bytes.len() {
            assert_eq!(
                parse_request(&bytes[..cut]),
                Err(ParseError::Incomplete),
                "cut {cut}"
            );
        }
    }
}

#[test]
fn request_layout() {
    let mut out = Vec::new();
    emit_request(&TargetAddr::domain("ab", 258).unwrap(), &mut out).unwrap();
    assert_eq!(out, [1, 1, 3, 2, b'a', b'b', 1, 2]);
}

#[test]
fn request_refusals_carry_reply_codes() {
    let e = parse_request(&[2, 1, 1]).unwrap_err();
    assert_eq!(
        e,
        ParseError::Invalid(Invalid::BadVersion {
            expected: 1,
            got: 2
        })
    );
    let e = parse_request(&[1, 2, 1]).unwrap_err();
    assert_eq!(e.reply_code(), ReplyCode::CommandNotSupported);
    let e = parse_request(&[1, 1, 7]).unwrap_err();
    assert_eq!(e.reply_code(), ReplyCode::AddressTypeNotSupported);
    let e = parse_request(&[1, 1, 3, 1, 0, 0, 80]).unwrap_err();
    assert!(matches!(e, ParseError::Invalid(Invalid::BadDomain(_))));
    assert!(!e.to_string().is_empty());
    let mut out = Vec::new();
    assert!(emit_request(&TargetAddr::Domain(String::new(), 1), &mut out).is_err());
    assert!(out.is_empty());
}

#[test]
fn reply_round_trip() {
    for b in 0..=8u8 {
        let code = ReplyCode::from_u8(b).unwrap();
        let mut out = Vec::new();
        emit_reply(code, &mut out);
        assert_eq!(out, [1, b]);
        assert_eq!(parse_reply(&out), Ok((code, 2)));
    }
    assert_eq!(parse_reply(&[]), Err(ParseError::Incomplete));
    assert_eq!(parse_reply(&[1]), Err(ParseError::Incomplete));
    assert_eq!(
        parse_reply(&[1, 9]),
        Err(ParseError::Invalid(Invalid::UnknownStatus(9)))
    );
}

#[test]
fn datagram_round_trip() {
    for (i, t) in targets().into_iter().enumerate() {
        for payload in [&b""[..], b"hello", &[0u8; 1200]] {
            let mut out = Vec::new();
            datagram::emit(0xDEAD_0000 + i as u32, &t, payload, &mut out).unwrap();
            assert_eq!(out.len(), datagram::encoded_len(&t, payload.len()));
            let d = datagram::parse(&out).unwrap();
            assert_eq!(d.flow_id, 0xDEAD_0000 + i as u32);
            assert_eq!(d.addr.to_target_addr(), t);
            assert_eq!(d.payload, payload);
        }
    }
    assert_eq!(datagram::parse(&[0, 0, 0]), Err(ParseError::Incomplete));
    assert_eq!(
        datagram::parse(&[0, 0, 0, 1, 1, 10]),
        Err(ParseError::Incomplete)
    );
}

#[test]
fn a_datagrams_session_flow_is_its_flow_id_and_address() {
    let enc = |flow: u32, t: &TargetAddr, payload: &[u8]| {
        let mut out = Vec::new();
        datagram::emit(flow, t, payload, &mut out).unwrap();
        datagram::session_flow(&out)
    };
    let ts = targets();
    let (a, b) = (&ts[0], &ts[1]);
    assert_eq!(
        enc(1, a, b"x"),
        enc(1, a, &[0u8; 900]),
        "the payload does not count"
    );
    assert_ne!(enc(1, a, b"x"), enc(2, a, b"x"), "another association");
    assert_ne!(enc(1, a, b"x"), enc(1, b, b"x"), "another destination");
    assert_eq!(
        datagram::session_flow(&[0, 0, 0]),
        0,
        "bytes that do not parse"
    );
}

#[test]
fn socks_udp_round_trip_and_fragments_dropped() {
    for t in targets() {
        let mut out = Vec::new();
        emit_udp(&t, b"query", &mut out).unwrap();
        assert_eq!(&out[..3], &[0, 0, 0]);
        let p = parse_udp(&out).unwrap();
        assert_eq!(p.addr.to_target_addr(), t);
        assert_eq!(p.payload, b"query");
    }
    let frag = [0, 0, 1, 1, 127, 0, 0, 1, 0, 53, b'x'];
    assert_eq!(
        parse_udp(&frag),
        Err(ParseError::Invalid(Invalid::Fragmented(1)))
    );
    assert_eq!(parse_udp(&[0, 0]), Err(ParseError::Incomplete));
}
