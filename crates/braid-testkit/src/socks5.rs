//! A SOCKS5 client for tests (RFC 1928, no authentication): CONNECT and UDP ASSOCIATE
//! through an agent's SOCKS5 port, and the UDP header of a datagram sent through its relay.
//!
//! Owns: the client's bytes. Must not touch: the agent (tests pass its port).

use std::net::{IpAddr, SocketAddr};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

/// A request's destination: an address, or a name the far end resolves.
#[derive(Debug, Clone, Copy)]
pub enum Dest<'a> {
    Addr(SocketAddr),
    Name(&'a str, u16),
}

impl From<SocketAddr> for Dest<'_> {
    fn from(a: SocketAddr) -> Self {
        Dest::Addr(a)
    }
}

/// The destination's bytes: `atyp, address, port`.
fn emit(to: Dest<'_>, out: &mut Vec<u8>) {
    match to {
        Dest::Addr(a) => {
            match a.ip() {
                IpAddr::V4(ip) => {
                    out.push(1);
                    out.extend_from_slice(&ip.octets());
                }
                IpAddr::V6(ip) => {
                    out.push(4);
                    out.extend_from_slice(&ip.octets());
                }
            }
            out.extend_from_slice(&a.port().to_be_bytes());
        }
        Dest::Name(n, port) => {
            out.extend_from_slice(&[3, n.len() as u8]);
            out.extend_from_slice(n.as_bytes());
            out.extend_from_slice(&port.to_be_bytes());
        }
    }
}

/// The greeting, then a request of `cmd` (1 CONNECT, 3 UDP ASSOCIATE) for `to` on `s`: the
/// reply's code (0 is success) and bound address (unspecified when the reply names a host).
pub async fn request(
    s: &mut TcpStream,
    cmd: u8,
    to: Dest<'_>,
) -> std::io::Result<(u8, SocketAddr)> {
    s.write_all(&[5, 1, 0]).await?;
    let mut r = [0u8; 2];
    s.read_exact(&mut r).await?;
    let mut req = vec![5, cmd, 0];
    emit(to, &mut req);
    s.write_all(&req).await?;
    let mut head = [0u8; 4];
    s.read_exact(&mut head).await?;
    let ip: IpAddr = match head[3] {
        4 => {
            let mut a = [0u8; 16];
            s.read_exact(&mut a).await?;
            a.into()
        }
        3 => {
            let mut n = [0u8; 1];
            s.read_exact(&mut n).await?;
            let mut name = vec![0u8; n[0] as usize];
            s.read_exact(&mut name).await?;
            IpAddr::from([0, 0, 0, 0])
        }
        _ => {
            let mut a = [0u8; 4];
            s.read_exact(&mut a).await?;
            a.into()
        }
    };
    let mut port = [0u8; 2];
    s.read_exact(&mut port).await?;
    Ok((head[1], SocketAddr::new(ip, u16::from_be_bytes(port))))
}

/// A CONNECT to `to` through `socks`: the stream, or the reply code when refused.
pub async fn connect<'a>(socks: SocketAddr, to: impl Into<Dest<'a>>) -> Result<TcpStream, u8> {
    let mut s = TcpStream::connect(socks)
        .await
        .expect("the SOCKS5 port accepts");
    match request(&mut s, 1, to.into()).await.expect("a SOCKS5 reply") {
        (0, _) => Ok(s),
        (code, _) => Err(code),
    }
}

/// A CONNECT where failing is an outcome, not a test failure (soak and limit tests count
/// failures): any I/O error, or a refusal as an error naming its reply code.
pub async fn try_connect<'a>(
    socks: SocketAddr,
    to: impl Into<Dest<'a>>,
) -> std::io::Result<TcpStream> {
    let mut s = TcpStream::connect(socks).await?;
    match request(&mut s, 1, to.into()).await? {
        (0, _) => Ok(s),
        (code, _) => Err(std::io::Error::other(format!(
            "SOCKS5 CONNECT refused with code {code}"
        ))),
    }
}

/// A CONNECT that must succeed.
pub async fn open<'a>(socks: SocketAddr, to: impl Into<Dest<'a>>) -> TcpStream {
    let to = to.into();
    connect(socks, to)
        .await
        .unwrap_or_else(|code| panic!("SOCKS5 CONNECT to {to:?} refused with code {code}"))
}

/// A UDP ASSOCIATE through `socks` (IPv4 client): its control connection (the association
/// lasts while it is open), a client socket on 127.0.0.1 and the relay's address.
pub async fn associate(socks: SocketAddr) -> (TcpStream, UdpSocket, SocketAddr) {
    let mut ctl = TcpStream::connect(socks)
        .await
        .expect("the SOCKS5 port accepts");
    let any = SocketAddr::from(([0, 0, 0, 0], 0));
    let (code, relay) = request(&mut ctl, 3, any.into())
        .await
        .expect("a SOCKS5 reply");
    assert_eq!(code, 0, "UDP ASSOCIATE refused with code {code}");
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    (ctl, client, relay)
}

/// A datagram for the relay: the SOCKS5 UDP header for `to`, then `payload`.
pub fn udp_packet(to: Dest<'_>, payload: &[u8]) -> Vec<u8> {
    let mut pkt = vec![0, 0, 0];
    emit(to, &mut pkt);
    pkt.extend_from_slice(payload);
    pkt
}
