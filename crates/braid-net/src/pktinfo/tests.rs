//! A socket on a wildcard address answers from the address asked (loopback: Linux has the
//! whole of 127/8 there, so 127.0.0.2 is a second local address without root).

use super::*;
use crate::batch;
use bytes::BytesMut;
use std::time::Duration;
use tokio::net::UdpSocket;

const ASKED: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// A wildcard socket with packet info on, as the server binds it.
async fn wildcard(addr: &str) -> Option<UdpSocket> {
    let Ok(sock) = UdpSocket::bind(addr).await else {
        eprintln!("cannot bind {addr} here: skipping that case");
        return None;
    };
    assert!(enable(&sock, sock.local_addr().unwrap()).unwrap());
    batch::enable_gro(&sock);
    Some(sock)
}

/// A peer connected to `asked` on the server's port: it takes only what comes from there.
async fn peer(bind: &str, asked: IpAddr, server: &UdpSocket) -> UdpSocket {
    let p = UdpSocket::bind(bind).await.unwrap();
    let port = server.local_addr().unwrap().port();
    p.connect(SocketAddr::new(asked, port)).await.unwrap();
    p
}

async fn recv(sock: &UdpSocket) -> (batch::Received, Vec<u8>) {
    let mut buf = BytesMut::new();
    let r = tokio::time::timeout(Duration::from_secs(2), batch::recv_async(sock, &mut buf))
        .await
        .expect("the datagram arrives")
        .unwrap();
    (r, buf.to_vec())
}

async fn answered(p: &UdpSocket) -> Option<Vec<u8>> {
    let mut buf = [0u8; 2048];
    let got = tokio::time::timeout(Duration::from_millis(300), p.recv(&mut buf)).await;
    got.ok().map(|r| buf[..r.unwrap()].to_vec())
}

/// The server's socket on 0.0.0.0 gets a datagram sent to 127.0.0.2 from 127.0.0.1: it
/// learns the address asked, and its answer from there reaches the connected peer. The
/// kernel's own choice (127.0.0.1, the route back's) does not: that was the bug.
#[tokio::test]
async fn a_wildcard_socket_answers_from_the_address_asked() {
    for (server, peer_bind) in [("0.0.0.0:0", "127.0.0.1:0"), ("[::]:0", "127.0.0.1:0")] {
        let Some(server) = wildcard(server).await else {
            continue;
        };
        let p = peer(peer_bind, ASKED.into(), &server).await;
        p.send(b"hello").await.unwrap();
        let (r, data) = recv(&server).await;
        assert_eq!(data, b"hello");
        assert_eq!(r.local, Some(ASKED.into()), "{server:?}: the address asked");
        let at = p.local_addr().unwrap();
        assert_eq!(crate::udp::canonical(r.from), at);
        // The kernel's choice: dropped by the connected peer.
        batch::send(&server, r.from, b"kernel", 6).unwrap();
        assert_eq!(
            answered(&p).await,
            None,
            "a reply from 127.0.0.1 is dropped"
        );
        // From the address asked: received. A GSO batch too.
        batch::send_from(&server, r.from, r.local, b"asked", 5).unwrap();
        assert_eq!(answered(&p).await.as_deref(), Some(&b"asked"[..]));
        let batch: Vec<u8> = (0..10 * 300).map(|i| i as u8).collect();
        batch::send_from(&server, r.from, r.local, &batch, 300).unwrap();
        for chunk in batch.chunks(300) {
            assert_eq!(answered(&p).await.as_deref(), Some(chunk));
        }
    }
}

/// IPv6 on a dual-stack wildcard socket: the address asked (::1, the one IPv6 loopback
/// address) is read from IPV6_PKTINFO and the answer goes from it.
#[tokio::test]
async fn a_dual_stack_socket_reads_and_answers_ipv6_too() {
    let Some(server) = wildcard("[::]:0").await else {
        return;
    };
    let Ok(p) = UdpSocket::bind("[::1]:0").await else {
        return eprintln!("no IPv6 loopback here: skipping");
    };
    let port = server.local_addr().unwrap().port();
    p.connect(("::1", port)).await.unwrap();
    p.send(b"six").await.unwrap();
    let (r, _) = recv(&server).await;
    assert_eq!(r.local, Some(Ipv6Addr::LOCALHOST.into()));
    batch::send_from(&server, r.from, r.local, b"back", 4).unwrap();
    assert_eq!(answered(&p).await.as_deref(), Some(&b"back"[..]));
    let batch: Vec<u8> = (0..10 * 1300).map(|i| i as u8).collect();
    batch::send_from(&server, r.from, r.local, &batch, 1300).unwrap();
    for chunk in batch.chunks(1300) {
        assert_eq!(answered(&p).await.as_deref(), Some(chunk));
    }
}

/// A socket on one address gets no packet info: nothing changes there.
#[tokio::test]
async fn a_socket_on_one_address_gets_no_packet_info() {
    let server = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    assert!(!enable(&server, server.local_addr().unwrap()).unwrap());
    let p = peer("127.0.0.1:0", Ipv4Addr::LOCALHOST.into(), &server).await;
    p.send(b"x").await.unwrap();
    assert_eq!(recv(&server).await.0.local, None);
}

/// An address that is not this host's (gone since the agent asked it): the kernel
/// chooses, as before, instead of losing the packet.
#[tokio::test]
async fn an_address_no_longer_here_falls_back_to_the_kernels_choice() {
    let server = wildcard("0.0.0.0:0").await.unwrap();
    let p = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let gone: IpAddr = Ipv4Addr::new(192, 0, 2, 1).into();
    batch::send_from(&server, p.local_addr().unwrap(), Some(gone), b"x", 1).unwrap();
    let mut buf = [0u8; 8];
    let got = tokio::time::timeout(Duration::from_secs(2), p.recv_from(&mut buf)).await;
    assert_eq!(got.expect("it arrives").unwrap().0, 1);
}

/// The TCP fallback needs nothing of this: a connection accepted on a wildcard listener
/// goes from the address the peer connected to.
#[tokio::test]
async fn tcp_accepted_on_a_wildcard_listener_is_from_the_address_asked() {
    let l = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let c = tokio::net::TcpStream::connect((ASKED, port)).await.unwrap();
    let (s, _) = l.accept().await.unwrap();
    assert_eq!(s.local_addr().unwrap(), SocketAddr::from((ASKED, port)));
    assert_eq!(c.peer_addr().unwrap(), SocketAddr::from((ASKED, port)));
}
