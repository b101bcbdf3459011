//! Inbound ports: the messages by which an agent asks its server to open public ports for
//! it, the server's answer, the header of a stream the server opens towards the agent for
//! each connection to a public TCP port, and the flow ids of datagrams of a public UDP port.
//!
//! Owns: the byte layout below and the flow-id split. Must not touch: sockets, listeners,
//! which ports a server allows (the server's configuration decides), session streams.
//!
//! ```text
//! forward request = version u8 (=1) | command u8 (=0x10) | count u8 (1..=64)
//!                   | count x [proto u8 (6 TCP, 17 UDP) | port u16 BE]
//! forward reply   = version u8 (=1) | status u8 (=0) | count u8
//!                   | count x [proto u8 | port u16 BE | result u8 (a ForwardResult)]
//! inbound header  = version u8 (=1) | command u8 (=0x11) | proto u8 (=6) | port u16 BE
//!                   | atyp | addr | port u16 BE   (the public port, then who connected)
//! ```
//!
//! The request goes on a stream the agent opens (its first bytes, as a stream-open request
//! would be); a server that does not know command 0x10 answers with the stream-open reply
//! `1 | 7` (command not supported), which [`parse_forward_reply`] reports as
//! [`ForwardReply::Unsupported`]. Datagrams of a public UDP port carry the proxied-datagram
//! header ([`crate::datagram`]) with flow id `INBOUND_FLOW | port` and the sender's address;
//! the agent answers on the same flow id and address. Flow ids the agent gives its own UDP
//! associations stay below [`INBOUND_FLOW`].
//!
//! No-panic contract: the parsers accept any byte slice; `Incomplete` means "read more".

use std::net::SocketAddr;

use crate::addr::{TargetAddr, TargetRef};
use crate::target::{ReplyCode, VERSION};
use crate::wire::{byte, emit_addr, parse_addr, take, Invalid, ParseError};

/// Command byte of a forward request.
pub const CMD_FORWARD: u8 = 0x10;
/// Command byte of an inbound stream's header.
pub const CMD_INBOUND: u8 = 0x11;
/// Most ports in one request.
pub const MAX_PORTS: usize = 64;
/// The bit that marks a datagram flow id as that of a public UDP port.
pub const INBOUND_FLOW: u32 = 0x8000_0000;

/// A transport protocol of a public port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Proto {
    /// TCP (6).
    Tcp,
    /// UDP (17).
    Udp,
}

impl Proto {
    /// The protocol number on the wire.
    pub fn as_u8(self) -> u8 {
        match self {
            Proto::Tcp => 6,
            Proto::Udp => 17,
        }
    }

    fn from_u8(b: u8) -> Result<Proto, ParseError> {
        match b {
            6 => Ok(Proto::Tcp),
            17 => Ok(Proto::Udp),
            other => Err(Invalid::Malformed(if other == 0 {
                "protocol 0"
            } else {
                "protocol is neither 6 (TCP) nor 17 (UDP)"
            })
            .into()),
        }
    }

    /// `tcp` or `udp`.
    pub fn name(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }
}

/// One public port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PublicPort {
    /// TCP or UDP.
    pub proto: Proto,
    /// The port number on the server.
    pub port: u16,
}

impl std::fmt::Display for PublicPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.proto.name(), self.port)
    }
}

/// What the server did with one requested port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ForwardResult {
    /// Listening: connections and datagrams to it come to the agent.
    Opened = 0,
    /// The server's configuration does not allow this port for this agent's key.
    NotAllowed = 1,
    /// Another agent holds the port.
    InUse = 2,
    /// Allowed, but the server could not bind it (another program has it).
    BindFailed = 3,
}

impl ForwardResult {
    fn from_u8(b: u8) -> Result<ForwardResult, ParseError> {
        Ok(match b {
            0 => ForwardResult::Opened,
            1 => ForwardResult::NotAllowed,
            2 => ForwardResult::InUse,
            3 => ForwardResult::BindFailed,
            _ => return Err(Invalid::Malformed("forward result above 3").into()),
        })
    }
}

/// The server's answer to a forward request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForwardReply {
    /// One result per requested port.
    Results(Vec<(PublicPort, ForwardResult)>),
    /// The server does not know inbound ports (it answered with a stream-open reply code).
    Unsupported(ReplyCode),
}

fn ports_at(
    buf: &[u8],
    at: usize,
    with_result: bool,
) -> Result<(Vec<(PublicPort, u8)>, usize), ParseError> {
    let count = byte(buf, at)? as usize;
    if count == 0 || count > MAX_PORTS {
        return Err(Invalid::Malformed("port count is 0 or above 64").into());
    }
    let each = if with_result { 4 } else { 3 };
    let body = take(buf, at + 1, count * each)?;
    let mut out = Vec::with_capacity(count);
    for e in body.chunks_exact(each) {
        let proto = Proto::from_u8(e[0])?;
        let port = u16::from_be_bytes([e[1], e[2]]);
        if port == 0 {
            return Err(Invalid::Malformed("port 0").into());
        }
        out.push((
            PublicPort { proto, port },
            if with_result { e[3] } else { 0 },
        ));
    }
    Ok((out, at + 1 + count * each))
}

fn check_version(buf: &[u8]) -> Result<(), ParseError> {
    let v = byte(buf, 0)?;
    if v != VERSION {
        return Err(Invalid::BadVersion {
            expected: VERSION,
            got: v,
        }
        .into());
    }
    Ok(())
}

/// Whether `buf` starts like a forward request (version and command bytes), so a stream
/// can be told apart from a stream-open request before it is complete.
pub fn is_forward_request(buf: &[u8]) -> bool {
    buf.len() >= 2 && buf[0] == VERSION && buf[1] == CMD_FORWARD
}

/// Appends a forward request for `ports` (1 to [`MAX_PORTS`], none 0) to `out`.
pub fn emit_forward_request(ports: &[PublicPort], out: &mut Vec<u8>) -> Result<(), Invalid> {
    if ports.is_empty() || ports.len() > MAX_PORTS || ports.iter().any(|p| p.port == 0) {
        return Err(Invalid::Malformed("1 to 64 ports, none 0"));
    }
    out.extend_from_slice(&[VERSION, CMD_FORWARD, ports.len() as u8]);
    for p in ports {
        out.push(p.proto.as_u8());
        out.extend_from_slice(&p.port.to_be_bytes());
    }
    Ok(())
}

/// Parses a forward request; returns the ports and the bytes consumed.
pub fn parse_forward_request(buf: &[u8]) -> Result<(Vec<PublicPort>, usize), ParseError> {
    check_version(buf)?;
    let cmd = byte(buf, 1)?;
    if cmd != CMD_FORWARD {
        return Err(Invalid::UnsupportedCommand(cmd).into());
    }
    let (ports, used) = ports_at(buf, 2, false)?;
    Ok((ports.into_iter().map(|p| p.0).collect(), used))
}

/// Appends the answer to a forward request (1 to [`MAX_PORTS`] results) to `out`.
pub fn emit_forward_reply(
    results: &[(PublicPort, ForwardResult)],
    out: &mut Vec<u8>,
) -> Result<(), Invalid> {
    if results.is_empty() || results.len() > MAX_PORTS {
        return Err(Invalid::Malformed("1 to 64 results"));
    }
    out.extend_from_slice(&[VERSION, 0, results.len() as u8]);
    for (p, r) in results {
        out.push(p.proto.as_u8());
        out.extend_from_slice(&p.port.to_be_bytes());
        out.push(*r as u8);
    }
    Ok(())
}

/// Parses the server's answer to a forward request; returns it and the bytes consumed. A
/// non-zero status is a stream-open reply of a server without inbound ports (2 bytes).
pub fn parse_forward_reply(buf: &[u8]) -> Result<(ForwardReply, usize), ParseError> {
    check_version(buf)?;
    let status = byte(buf, 1)?;
    if status != 0 {
        let code = ReplyCode::from_u8(status).ok_or(Invalid::UnknownStatus(status))?;
        return Ok((ForwardReply::Unsupported(code), 2));
    }
    let (ports, used) = ports_at(buf, 2, true)?;
    let results = ports
        .into_iter()
        .map(|(p, r)| Ok((p, ForwardResult::from_u8(r)?)))
        .collect::<Result<Vec<_>, ParseError>>()?;
    Ok((ForwardReply::Results(results), used))
}

/// The header of a stream the server opens for a connection to a public TCP port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InboundHeader {
    /// The public port connected to.
    pub port: PublicPort,
    /// Who connected.
    pub peer: SocketAddr,
}

/// Appends an inbound stream's header to `out`.
pub fn emit_inbound_header(h: &InboundHeader, out: &mut Vec<u8>) {
    out.extend_from_slice(&[VERSION, CMD_INBOUND, h.port.proto.as_u8()]);
    out.extend_from_slice(&h.port.port.to_be_bytes());
    // An IP address always encodes.
    let _ = emit_addr(&TargetAddr::Ip(h.peer), out);
}

/// Parses an inbound stream's header; returns it and the bytes consumed.
pub fn parse_inbound_header(buf: &[u8]) -> Result<(InboundHeader, usize), ParseError> {
    check_version(buf)?;
    let cmd = byte(buf, 1)?;
    if cmd != CMD_INBOUND {
        return Err(Invalid::UnsupportedCommand(cmd).into());
    }
    let proto = Proto::from_u8(byte(buf, 2)?)?;
    let p = take(buf, 3, 2)?;
    let port = u16::from_be_bytes([p[0], p[1]]);
    let (addr, used) = parse_addr(buf.get(5..).unwrap_or_default())?;
    let TargetRef::Ip(peer) = addr else {
        return Err(Invalid::Malformed("an inbound peer must be an IP address").into());
    };
    Ok((
        InboundHeader {
            port: PublicPort { proto, port },
            peer,
        },
        5 + used,
    ))
}

/// The flow id of the datagrams of public UDP port `port`.
pub fn inbound_flow(port: u16) -> u32 {
    INBOUND_FLOW | u32::from(port)
}

/// The public UDP port of an inbound flow id, `None` for the agent's own flows.
pub fn inbound_port(flow_id: u32) -> Option<u16> {
    (flow_id & INBOUND_FLOW != 0).then_some((flow_id & 0xffff) as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(port: u16) -> PublicPort {
        PublicPort {
            proto: Proto::Tcp,
            port,
        }
    }
    fn udp(port: u16) -> PublicPort {
        PublicPort {
            proto: Proto::Udp,
            port,
        }
    }

    /// The bytes are pinned: an agent and a server of different builds must agree.
    #[test]
    fn forward_request_bytes_are_pinned() {
        let mut out = Vec::new();
        emit_forward_request(&[tcp(8080), udp(5000)], &mut out).unwrap();
        assert_eq!(out, [1, 0x10, 2, 6, 0x1f, 0x90, 17, 0x13, 0x88]);
        let (ports, used) = parse_forward_request(&out).unwrap();
        assert_eq!((ports, used), (vec![tcp(8080), udp(5000)], 9));
        for cut in 0..out.len() {
            assert_eq!(
                parse_forward_request(&out[..cut]),
                Err(ParseError::Incomplete)
            );
        }
        assert!(is_forward_request(&out[..2]));
        assert!(!is_forward_request(&[1, 1]));
    }

    #[test]
    fn forward_reply_bytes_are_pinned() {
        let mut out = Vec::new();
        let r = [
            (tcp(8080), ForwardResult::Opened),
            (udp(5000), ForwardResult::NotAllowed),
        ];
        emit_forward_reply(&r, &mut out).unwrap();
        assert_eq!(out, [1, 0, 2, 6, 0x1f, 0x90, 0, 17, 0x13, 0x88, 1]);
        let (got, used) = parse_forward_reply(&out).unwrap();
        assert_eq!((got, used), (ForwardReply::Results(r.to_vec()), 11));
        // An old server's answer: "command not supported".
        assert_eq!(
            parse_forward_reply(&[1, 7]).unwrap(),
            (ForwardReply::Unsupported(ReplyCode::CommandNotSupported), 2)
        );
    }

    #[test]
    fn inbound_header_bytes_are_pinned() {
        let h = InboundHeader {
            port: tcp(8080),
            peer: "192.0.2.9:40000".parse().unwrap(),
        };
        let mut out = Vec::new();
        emit_inbound_header(&h, &mut out);
        assert_eq!(out, [1, 0x11, 6, 0x1f, 0x90, 1, 192, 0, 2, 9, 0x9c, 0x40]);
        assert_eq!(parse_inbound_header(&out).unwrap(), (h, out.len()));
        for cut in 0..out.len() {
            assert_eq!(
                parse_inbound_header(&out[..cut]),
                Err(ParseError::Incomplete)
            );
        }
    }

    #[test]
    fn malformed_messages_are_invalid_not_panics() {
        assert!(matches!(
            parse_forward_request(&[1, 0x10, 0]),
            Err(ParseError::Invalid(_))
        ));
        assert!(matches!(
            parse_forward_request(&[1, 0x10, 65]),
            Err(ParseError::Invalid(_))
        ));
        assert!(matches!(
            parse_forward_request(&[1, 0x10, 1, 7, 0, 80]),
            Err(ParseError::Invalid(_))
        ));
        assert!(matches!(
            parse_forward_request(&[1, 0x10, 1, 6, 0, 0]),
            Err(ParseError::Invalid(_))
        ));
        assert!(matches!(
            parse_forward_reply(&[1, 0, 1, 6, 0, 80, 9]),
            Err(ParseError::Invalid(_))
        ));
        // A domain is not a peer.
        let mut out = vec![1, 0x11, 6, 0, 80];
        emit_addr(&TargetAddr::domain("a.example", 1).unwrap(), &mut out).unwrap();
        assert!(matches!(
            parse_inbound_header(&out),
            Err(ParseError::Invalid(_))
        ));
        assert!(emit_forward_request(&[], &mut Vec::new()).is_err());
        assert!(emit_forward_request(&[tcp(0)], &mut Vec::new()).is_err());
    }

    #[test]
    fn inbound_flow_ids_stay_apart_from_the_agents() {
        assert_eq!(inbound_flow(5000), 0x8000_1388);
        assert_eq!(inbound_port(inbound_flow(5000)), Some(5000));
        assert_eq!(inbound_port(1), None);
        assert_eq!(inbound_port(0x7fff_ffff), None);
    }
}
