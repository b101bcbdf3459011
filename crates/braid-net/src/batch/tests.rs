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

/// `RecvBatch`: datagrams that GRO does not coalesce (different sizes, different senders,
/// GRO off) come several to a system call, each from its own sender, in order.
#[tokio::test]
async fn recvmmsg_takes_several_datagrams_of_several_senders_in_one_call() {
    for gro in [true, false] {
        let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        if gro {
            enable_gro(&sock);
        }
        let to = sock.local_addr().unwrap();
        let (a, b) = (
            UdpSocket::bind("127.0.0.1:0").await.unwrap(),
            UdpSocket::bind("127.0.0.1:0").await.unwrap(),
        );
        // Sizes that differ from one datagram to the next, alternating senders: 20 of them.
        let mut want = Vec::new();
        for i in 0..20usize {
            let d: Vec<u8> = (0..(100 + i * 37)).map(|j| (i * 7 + j) as u8).collect();
            let from = if i % 2 == 0 { &a } else { &b };
            from.send_to(&d, to).await.unwrap();
            want.push((from.local_addr().unwrap(), d));
        }
        let mut rb = RecvBatch::new();
        let (mut got, mut calls) = (Vec::new(), 0);
        while got.len() < want.len() {
            let n = tokio::time::timeout(Duration::from_secs(5), recv_batch_async(&sock, &mut rb))
                .await
                .expect("the datagrams arrive")
                .unwrap();
            assert!((1..=MESSAGES).contains(&n));
            calls += 1;
            for (r, datagrams) in rb.messages() {
                got.extend(datagrams.map(|d| (r.from, d.to_vec())));
            }
        }
        assert!(
            got == want,
            "gro {gro}: every datagram with its sender, in order"
        );
        assert!(
            calls <= want.len().div_ceil(MESSAGES) + 1,
            "gro {gro}: {calls} calls for {} datagrams",
            want.len()
        );
    }
}
