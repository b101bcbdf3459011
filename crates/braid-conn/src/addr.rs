//! Where a path's packets go and come from, and how large a datagram its address family
//! carries: 1472 bytes of UDP payload fill a 1500-byte MTU over IPv4, but over IPv6 (a
//! 40-byte header) only 1452 fit.
//!
//! Owns: [`PathAddr`], [`Transport`] and the header arithmetic. Must not touch: sockets or
//! the kernel's route MTU (braid-net's `pmtu` asks the kernel).

use std::net::{IpAddr, SocketAddr};

/// The MTU assumed where the route's is unknown (the server's side, a failed look-up).
pub const DEFAULT_MTU: u32 = 1500;
/// IPv4 and UDP headers.
const V4_HEADERS: u32 = 20 + 8;
/// IPv6 and UDP headers.
const V6_HEADERS: u32 = 40 + 8;

/// What carries a path's datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// UDP datagrams.
    #[default]
    Udp,
    /// Length-prefixed datagrams on a TCP connection (reliable: nothing is declared lost).
    Tcp,
}

/// One path's addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathAddr {
    /// The peer's address (at the server: the agent's address as the server sees it,
    /// after any NAT).
    pub remote: SocketAddr,
    /// This end's address the packets leave from, where the socket says it (a server on a
    /// wildcard address, see braid-net's `pktinfo`). `None`: the kernel chooses.
    pub local: Option<IpAddr>,
    /// UDP or TCP.
    pub transport: Transport,
}

/// True when `peer` is reached over IPv6 (an IPv4-mapped address is IPv4 on the wire).
pub fn is_ipv6_on_wire(peer: SocketAddr) -> bool {
    match peer {
        SocketAddr::V4(_) => false,
        SocketAddr::V6(a) => a.ip().to_ipv4_mapped().is_none(),
    }
}

/// The largest UDP payload towards `peer` over a route of `mtu` bytes ([`DEFAULT_MTU`]
/// when `None`): 1472 for IPv4 and 1452 for IPv6 over 1500.
pub fn datagram_limit(peer: SocketAddr, mtu: Option<u32>) -> usize {
    let headers = if is_ipv6_on_wire(peer) {
        V6_HEADERS
    } else {
        V4_HEADERS
    };
    mtu.unwrap_or(DEFAULT_MTU).saturating_sub(headers) as usize
}
