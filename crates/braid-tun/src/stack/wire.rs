//! The IP packets the stack looks at itself rather than handing to smoltcp: a first look at
//! every packet from the TUN device (family, protocol, addresses, fragments, a TCP SYN) and
//! the UDP datagrams of flows, parsed and built with smoltcp's wire types.
//!
//! Owns: classifying one packet and building one UDP packet. Must not touch: sockets,
//! connections, time.

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    IpAddress, IpProtocol, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, TcpPacket, UdpPacket,
    UdpRepr,
};
use std::net::{IpAddr, SocketAddr};

/// IPv4 header without options, IPv6 fixed header, UDP header.
pub const IPV4_HEADER: usize = 20;
pub const IPV6_HEADER: usize = 40;
pub const UDP_HEADER: usize = 8;

/// Why a packet from the TUN device was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Drop {
    /// Too short, a wrong version, lengths that do not add up, or a bad checksum.
    Malformed,
    /// A fragment: the TUN device's MTU is chosen so that nothing needs fragmenting.
    Fragment,
    /// A protocol the stack does not carry (neither TCP, UDP nor ICMP echo).
    Protocol,
    /// A TCP SYN beyond the connection limit (answered with a reset).
    ConnectionLimit,
    /// The queue toward the TUN device is full.
    QueueFull,
}

/// What one packet from the TUN device is.
#[derive(Debug, PartialEq, Eq)]
pub enum Kind<'a> {
    /// A UDP datagram, checksum verified.
    Udp {
        src: SocketAddr,
        dst: SocketAddr,
        payload: &'a [u8],
    },
    /// A TCP segment (smoltcp checks the rest); `syn` when it opens a connection (SYN
    /// without ACK).
    Tcp {
        src: SocketAddr,
        dst: SocketAddr,
        syn: bool,
    },
    /// Anything else smoltcp may answer (ICMP echo).
    Other,
}

/// Classifies one IP packet. UDP is verified here (smoltcp never sees it); TCP and the rest
/// are verified by smoltcp.
pub fn classify(packet: &[u8]) -> Result<Kind<'_>, Drop> {
    let (src, dst, proto, payload) = match packet.first().map(|b| b >> 4) {
        Some(4) => {
            let p = Ipv4Packet::new_checked(packet).map_err(|_| Drop::Malformed)?;
            if !p.verify_checksum() {
                return Err(Drop::Malformed);
            }
            if p.more_frags() || p.frag_offset() != 0 {
                return Err(Drop::Fragment);
            }
            let (s, d) = (IpAddr::V4(p.src_addr()), IpAddr::V4(p.dst_addr()));
            (s, d, p.next_header(), p.payload())
        }
        Some(6) => {
            let p = Ipv6Packet::new_checked(packet).map_err(|_| Drop::Malformed)?;
            let (s, d) = (IpAddr::V6(p.src_addr()), IpAddr::V6(p.dst_addr()));
            (s, d, p.next_header(), p.payload())
        }
        _ => return Err(Drop::Malformed),
    };
    match proto {
        IpProtocol::Udp => {
            let u = UdpPacket::new_checked(payload).map_err(|_| Drop::Malformed)?;
            // A zero checksum is "none" in IPv4 only; IPv6 requires one.
            let unchecked = src.is_ipv4() && u.checksum() == 0;
            if !unchecked && !u.verify_checksum(&src.into(), &dst.into()) {
                return Err(Drop::Malformed);
            }
            Ok(Kind::Udp {
                src: SocketAddr::new(src, u.src_port()),
                dst: SocketAddr::new(dst, u.dst_port()),
                payload: u.payload(),
            })
        }
        IpProtocol::Tcp => {
            let t = TcpPacket::new_checked(payload).map_err(|_| Drop::Malformed)?;
            Ok(Kind::Tcp {
                src: SocketAddr::new(src, t.src_port()),
                dst: SocketAddr::new(dst, t.dst_port()),
                syn: t.syn() && !t.ack(),
            })
        }
        IpProtocol::Icmp | IpProtocol::Icmpv6 => Ok(Kind::Other),
        _ => Err(Drop::Protocol),
    }
}

/// Bytes of an IP packet carrying `payload` bytes of UDP from `from`.
pub fn udp_packet_len(from: &SocketAddr, payload: usize) -> usize {
    let ip = if from.is_ipv4() {
        IPV4_HEADER
    } else {
        IPV6_HEADER
    };
    ip + UDP_HEADER + payload
}

/// Builds the IP packet carrying one UDP datagram `from` -> `to`; `None` when the two are
/// not of one family.
pub fn build_udp(from: SocketAddr, to: SocketAddr, payload: &[u8]) -> Option<Vec<u8>> {
    let caps = ChecksumCapabilities::default();
    let udp_len = UDP_HEADER + payload.len();
    let mut buf = vec![0u8; udp_packet_len(&from, payload.len())];
    let udp = UdpRepr {
        src_port: from.port(),
        dst_port: to.port(),
    };
    let (src, dst): (IpAddress, IpAddress) = (from.ip().into(), to.ip().into());
    let body = match (from.ip(), to.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let repr = Ipv4Repr {
                src_addr: s,
                dst_addr: d,
                next_header: IpProtocol::Udp,
                payload_len: udp_len,
                hop_limit: 64,
            };
            let mut p = Ipv4Packet::new_unchecked(&mut buf[..]);
            repr.emit(&mut p, &caps);
            IPV4_HEADER
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let repr = Ipv6Repr {
                src_addr: s,
                dst_addr: d,
                next_header: IpProtocol::Udp,
                payload_len: udp_len,
                hop_limit: 64,
            };
            let mut p = Ipv6Packet::new_unchecked(&mut buf[..]);
            repr.emit(&mut p);
            IPV6_HEADER
        }
        _ => return None,
    };
    let mut u = UdpPacket::new_unchecked(&mut buf[body..]);
    udp.emit(
        &mut u,
        &src,
        &dst,
        payload.len(),
        |b| b.copy_from_slice(payload),
        &caps,
    );
    Some(buf)
}
