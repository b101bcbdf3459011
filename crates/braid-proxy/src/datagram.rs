//! The payload of a session DATAGRAM frame that carries one proxied UDP datagram.
//!
//! Owns: the byte layout below. Must not touch: sockets, flow tables, the session.
//!
//! ```text
//! flow id u32 BE | atyp u8 | addr | port u16 BE | payload (the rest)
//! ```
//!
//! From agent to server the address is the destination; from server to agent it is the
//! source the reply came from. The flow id names the client's UDP association.
//!
//! No-panic contract: [`parse`] accepts any byte slice and returns `Err` for anything that is
//! not a whole header (`Incomplete` here means the datagram is truncated: drop it) or holds
//! an unknown address type or bad domain name. The payload may be empty.

use crate::addr::{AddrError, TargetAddr, TargetRef};
use crate::wire::{emit_addr, parse_addr, take, ParseError};

/// Header bytes before the address.
pub const FLOW_ID_LEN: usize = 4;

/// A destination name that means "the server's own DNS resolver": a datagram to
/// `resolver.braid.invalid:53` is a DNS query the server passes to its resolver (from
/// `--resolver`, else the first `nameserver` of its /etc/resolv.conf), so names are resolved
/// where the traffic leaves, not through a local link. `.invalid` never resolves anywhere
/// else (RFC 6761).
pub const SERVER_RESOLVER: &str = "resolver.braid.invalid";

/// A parsed proxied datagram, borrowing name and payload from the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyDatagram<'a> {
    /// The UDP association this datagram belongs to.
    pub flow_id: u32,
    /// Destination (agent to server) or source (server to agent).
    pub addr: TargetRef<'a>,
    /// The UDP payload.
    pub payload: &'a [u8],
}

/// Parses a whole DATAGRAM payload. No-panic contract: see the module docs.
pub fn parse(buf: &[u8]) -> Result<ProxyDatagram<'_>, ParseError> {
    let id = take(buf, 0, FLOW_ID_LEN)?;
    let flow_id = u32::from_be_bytes([id[0], id[1], id[2], id[3]]);
    let rest = buf.get(FLOW_ID_LEN..).unwrap_or_default();
    let (addr, used) = parse_addr(rest)?;
    let payload = rest.get(used..).unwrap_or_default();
    Ok(ProxyDatagram {
        flow_id,
        addr,
        payload,
    })
}

/// Appends a DATAGRAM payload to `out`. Refuses (appending nothing) on a bad domain name.
pub fn emit(
    flow_id: u32,
    addr: &TargetAddr,
    payload: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), AddrError> {
    let start = out.len();
    out.extend_from_slice(&flow_id.to_be_bytes());
    if let Err(e) = emit_addr(addr, out) {
        out.truncate(start);
        return Err(e);
    }
    out.extend_from_slice(payload);
    Ok(())
}

/// The session flow of an encoded datagram ([`emit`]'s output): a hash (64-bit FNV-1a) of
/// its header, the flow id and the address. One per association and destination from the
/// agent, and the same for the answers the server returns from that address, so each
/// conversation is one flow to the session's real-time classifier. 0 for bytes that do not
/// parse.
pub fn session_flow(buf: &[u8]) -> u64 {
    let Ok(p) = parse(buf) else { return 0 };
    let header = &buf[..buf.len() - p.payload.len()];
    header.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The encoded length of a datagram for `addr` with a `payload_len`-byte payload (useful to
/// check against the session's largest datagram before building it).
pub fn encoded_len(addr: &TargetAddr, payload_len: usize) -> usize {
    let addr_len = match addr {
        TargetAddr::Ip(std::net::SocketAddr::V4(_)) => 1 + 4 + 2,
        TargetAddr::Ip(std::net::SocketAddr::V6(_)) => 1 + 16 + 2,
        TargetAddr::Domain(name, _) => 1 + 1 + name.len() + 2,
    };
    FLOW_ID_LEN
        .saturating_add(addr_len)
        .saturating_add(payload_len)
}
