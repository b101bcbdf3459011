//! Batched sends arrive as the datagrams they were, with and without GRO.

use super::*;
use std::time::Duration;
use tokio::net::UdpSocket;

/// `count` datagrams of `seg` bytes (the last `last` bytes), each byte naming its datagram.
fn datagrams(count: usize, seg: usize, last: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| {
            let n = if i + 1 == count { last } else { seg };
            (0..n).map(|j| (i * 31 + j) as u8).collect()
        })
        .collect()
}

async fn receive_all(sock: &UdpSocket, want: usize) -> (Vec<Vec<u8>>, usize) {
    let mut buf = BytesMut::new();
    let (mut got, mut calls) = (Vec::new(), 0);
    while got.len() < want {
        let r = tokio::time::timeout(Duration::from_secs(5), recv_async(sock, &mut buf))
            .await
            .expect("the datagrams arrive")
            .unwrap();
        calls += 1;
        assert_eq!(r.from, sock.local_addr().unwrap(), "sent to itself");
        assert_eq!(buf.len(), r.len);
        got.extend(split(&mut buf, r.segment_size).map(|d| d.to_vec()));
    }
    (got, calls)
}

#[tokio::test]
async fn a_gso_batch_arrives_as_its_datagrams_with_and_without_gro() {
    for gro in [true, false] {
        let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let to = sock.local_addr().unwrap();
        if gro {
            assert!(enable_gro(&sock) || !gso_enabled(), "GSO without GRO");
        }
        // Two batches: full segments with a shorter last one, then full segments only,
        // more than one GSO send can take.
        let a = datagrams(9, 1400, 377);
        let n = max_segments(1400) + 3;
        let b = datagrams(n, 1400, 1400);
        for d in [&a, &b] {
            send(&sock, to, &d.concat(), 1400).unwrap();
        }
        let want: Vec<Vec<u8>> = a.iter().chain(&b).cloned().collect();
        let (got, calls) = receive_all(&sock, want.len()).await;
        assert_eq!(got.len(), want.len(), "gro {gro}: every datagram, no more");
        assert!(got == want, "gro {gro}: same datagrams in the same order");
        if gro && gso_enabled() {
            assert!(
                calls < want.len() / 4,
                "GRO delivered batches ({calls} receives)"
            );
        } else if !gro {
            assert_eq!(calls, want.len(), "without GRO one datagram per receive");
        }
    }
}

#[tokio::test]
async fn a_single_datagram_is_sent_and_received_alone() {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    enable_gro(&sock);
    let to = sock.local_addr().unwrap();
    send(&sock, to, b"hello", 1400).unwrap();
    let (got, _) = receive_all(&sock, 1).await;
    assert_eq!(got, vec![b"hello".to_vec()]);
}
