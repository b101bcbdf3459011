//! The SOCKS5 front end (RFC 1928, with username/password authentication per RFC 1929) and
//! the SOCKS5 UDP request header.
//!
//! Owns: the server side of the SOCKS5 handshake on one accepted client stream — method
//! negotiation, authentication, the request, failure replies — and [`reply`] for the final
//! answer; the UDP header codec ([`parse_udp`], [`emit_udp`]). Must not touch: listening
//! sockets, the session, connecting to targets, UDP sockets (the network driver does those).
//!
//! Limits: the whole handshake (greeting, authentication, request, and any failure reply)
//! must finish within a deadline ([`DEFAULT_HANDSHAKE_TIMEOUT`], or the one passed to
//! [`accept_with_timeout`]); every length field is a `u8`, so nothing read exceeds 255 bytes
//! and buffers are fixed-size. [`accept`] reads exactly the handshake's bytes and never past
//! the request, so the stream can be relayed afterwards.
//!
//! No-panic contract: [`accept`] never panics on any client bytes; [`parse_udp`] accepts any
//! byte slice and returns `Err` for a truncated header, FRAG != 0, an unknown address type or
//! a bad domain name.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::addr::{AddrError, TargetAddr, TargetRef};
use crate::auth::{ct_eq, CredentialsError};
use crate::reply::ReplyCode;
use crate::wire::{self, byte, emit_addr, Invalid, ParseError, ATYP_DOMAIN, ATYP_IPV4, ATYP_IPV6};

/// The SOCKS protocol version byte.
pub const SOCKS_VERSION: u8 = 5;
/// How long [`accept`] allows for the whole handshake.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Method: no authentication required.
pub const METHOD_NO_AUTH: u8 = 0x00;
/// Method: username/password (RFC 1929).
pub const METHOD_USER_PASS: u8 = 0x02;
/// Method: no acceptable methods.
pub const METHOD_NONE_ACCEPTABLE: u8 = 0xFF;
/// Command: CONNECT.
pub const CMD_CONNECT: u8 = 1;
/// Command: BIND (refused).
pub const CMD_BIND: u8 = 2;
/// Command: UDP ASSOCIATE.
pub const CMD_UDP_ASSOCIATE: u8 = 3;

/// Which authentication the proxy port demands.
#[derive(Clone, PartialEq, Eq)]
pub enum AuthPolicy {
    /// Accept clients that offer method 0x00 (no authentication).
    NoAuth,
    /// Demand method 0x02 and these credentials (each should be 1..=255 bytes; build with
    /// [`AuthPolicy::user_pass`] to have that checked — longer values can never match).
    UserPass {
        /// The username.
        user: String,
        /// The password.
        pass: String,
    },
}

impl AuthPolicy {
    /// A `UserPass` policy after checking both fields are 1..=255 bytes.
    pub fn user_pass(
        user: impl Into<String>,
        pass: impl Into<String>,
    ) -> Result<Self, CredentialsError> {
        let (user, pass) = (user.into(), pass.into());
        if user.is_empty() || user.len() > 255 {
            return Err(CredentialsError::UserLength(user.len()));
        }
        if pass.is_empty() || pass.len() > 255 {
            return Err(CredentialsError::PassLength(pass.len()));
        }
        Ok(AuthPolicy::UserPass { user, pass })
    }

    fn method(&self) -> u8 {
        match self {
            AuthPolicy::NoAuth => METHOD_NO_AUTH,
            AuthPolicy::UserPass { .. } => METHOD_USER_PASS,
        }
    }
}

impl std::fmt::Debug for AuthPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AuthPolicy::NoAuth => f.write_str("NoAuth"),
            AuthPolicy::UserPass { user, .. } => f
                .debug_struct("UserPass")
                .field("user", user)
                .field("pass", &"<redacted>")
                .finish(),
        }
    }
}

/// What the client asked for, once the handshake succeeded. The caller must answer with
/// [`reply`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SocksRequest {
    /// Open a TCP connection to this target.
    Connect(TargetAddr),
    /// Relay UDP; the address is the client's hint of where it will send from (often
    /// `0.0.0.0:0`, meaning unknown).
    UdpAssociate(TargetAddr),
}

/// Why a SOCKS5 handshake failed. Where the protocol allows, the client has already been sent
/// the matching failure reply.
#[derive(Debug, thiserror::Error)]
pub enum SocksError {
    /// The handshake did not finish within the deadline.
    #[error("SOCKS5 handshake not finished within {0:?}; the client stalled or is too slow (raise the handshake timeout for very slow links)")]
    Timeout(Duration),
    /// The client closed the connection mid-handshake.
    #[error("client closed the connection in the middle of the SOCKS5 handshake")]
    Closed,
    /// Reading or writing the client stream failed.
    #[error("I/O error during the SOCKS5 handshake: {0}")]
    Io(io::Error),
    /// The first byte is not 5.
    #[error("client sent version byte {0:#04x}, not 5; this port speaks SOCKS5 only (point HTTP clients at the HTTP CONNECT port)")]
    BadVersion(u8),
    /// The client offered no method the policy accepts (replied 0xFF).
    #[error("client offered authentication methods {offered:02x?} but this port requires method {required:#04x} (0x00 = none, 0x02 = username/password); configure the client accordingly")]
    NoAcceptableMethod {
        /// The methods the client offered.
        offered: Vec<u8>,
        /// The method the policy requires.
        required: u8,
    },
    /// The username/password sub-negotiation had a version other than 1.
    #[error("username/password sub-negotiation version is {0}, expected 1 (RFC 1929)")]
    BadAuthVersion(u8),
    /// Wrong username or password (replied status 0x01).
    #[error("wrong SOCKS5 username or password; check the client's proxy credentials")]
    AuthFailed,
    /// BIND or an unknown command (replied 7).
    #[error("SOCKS5 command {0} is not supported (only 1 CONNECT and 3 UDP ASSOCIATE are); replied 'command not supported'")]
    UnsupportedCommand(u8),
    /// Unknown address type (replied 8).
    #[error("SOCKS5 address type {0} is not supported (use 1 IPv4, 3 domain or 4 IPv6); replied 'address type not supported'")]
    UnsupportedAddressType(u8),
    /// The domain name in the request is invalid (replied 1).
    #[error("bad domain name in the SOCKS5 request: {0}")]
    BadDomain(AddrError),
}

impl From<io::Error> for SocksError {
    fn from(e: io::Error) -> Self {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            SocksError::Closed
        } else {
            SocksError::Io(e)
        }
    }
}

/// Runs the server side of the SOCKS5 handshake with [`DEFAULT_HANDSHAKE_TIMEOUT`].
///
/// See [`accept_with_timeout`].
pub async fn accept<S>(stream: &mut S, auth: &AuthPolicy) -> Result<SocksRequest, SocksError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    accept_with_timeout(stream, auth, DEFAULT_HANDSHAKE_TIMEOUT).await
}

/// Runs the server side of the SOCKS5 handshake: method negotiation, authentication as
/// `auth` demands, then the request. The whole exchange must finish within `timeout`.
///
/// On success the caller opens the target and answers with [`reply`]. On failure the client
/// has been sent the fitting reply where the protocol has one (0xFF method, auth status 1,
/// reply 7 for BIND or unknown commands, 8 for unknown address types, 1 for a bad name) and
/// the stream should be closed. Never panics on any input.
pub async fn accept_with_timeout<S>(
    stream: &mut S,
    auth: &AuthPolicy,
    timeout: Duration,
) -> Result<SocksRequest, SocksError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match tokio::time::timeout(timeout, handshake(stream, auth)).await {
        Ok(r) => r,
        Err(_) => Err(SocksError::Timeout(timeout)),
    }
}

async fn write_flush<S: AsyncWrite + Unpin>(stream: &mut S, bytes: &[u8]) -> io::Result<()> {
    stream.write_all(bytes).await?;
    stream.flush().await
}

/// Sends a failure reply (best effort) and returns `err`.
async fn fail<S: AsyncWrite + Unpin>(
    stream: &mut S,
    code: ReplyCode,
    err: SocksError,
) -> SocksError {
    let _ = reply(stream, code, unspecified()).await;
    err
}

fn unspecified() -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))
}

async fn handshake<S>(stream: &mut S, auth: &AuthPolicy) -> Result<SocksRequest, SocksError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // Greeting: VER NMETHODS METHODS.
    let mut head = [0u8; 2];
    stream.read_exact(&mut head).await?;
    if head[0] != SOCKS_VERSION {
        return Err(SocksError::BadVersion(head[0]));
    }
    let mut methods = [0u8; 255];
    let offered = &mut methods[..usize::from(head[1])];
    stream.read_exact(offered).await?;
    let required = auth.method();
    if !offered.contains(&required) {
        let _ = write_flush(stream, &[SOCKS_VERSION, METHOD_NONE_ACCEPTABLE]).await;
        return Err(SocksError::NoAcceptableMethod {
            offered: offered.to_vec(),
            required,
        });
    }
    write_flush(stream, &[SOCKS_VERSION, required]).await?;

    if let AuthPolicy::UserPass { user, pass } = auth {
        authenticate(stream, user.as_bytes(), pass.as_bytes()).await?;
    }

    // Request: VER CMD RSV ATYP DST.ADDR DST.PORT.
    let mut req = [0u8; 4];
    stream.read_exact(&mut req).await?;
    let [ver, cmd, _rsv, atyp] = req;
    if ver != SOCKS_VERSION {
        return Err(fail(
            stream,
            ReplyCode::GeneralFailure,
            SocksError::BadVersion(ver),
        )
        .await);
    }
    // Collect atyp | addr | port, then decode with the shared codec.
    let mut addr = [0u8; wire::MAX_ADDR_LEN];
    addr[0] = atyp;
    let len = match atyp {
        ATYP_IPV4 => 1 + 4 + 2,
        ATYP_IPV6 => 1 + 16 + 2,
        ATYP_DOMAIN => {
            stream.read_exact(&mut addr[1..2]).await?;
            1 + 1 + usize::from(addr[1]) + 2
        }
        other => {
            let e = SocksError::UnsupportedAddressType(other);
            return Err(fail(stream, ReplyCode::AddressTypeNotSupported, e).await);
        }
    };
    let already = if atyp == ATYP_DOMAIN { 2 } else { 1 };
    stream.read_exact(&mut addr[already..len]).await?;
    let target = match wire::parse_addr(&addr[..len]) {
        Ok((t, _)) => t.to_target_addr(),
        Err(ParseError::Invalid(Invalid::BadDomain(e))) => {
            return Err(fail(stream, ReplyCode::GeneralFailure, SocksError::BadDomain(e)).await);
        }
        Err(ParseError::Invalid(Invalid::UnsupportedAddressType(a))) => {
            let e = SocksError::UnsupportedAddressType(a);
            return Err(fail(stream, ReplyCode::AddressTypeNotSupported, e).await);
        }
        Err(_) => {
            let e = SocksError::Io(io::Error::other("address decoding failed"));
            return Err(fail(stream, ReplyCode::GeneralFailure, e).await);
        }
    };
    match cmd {
        CMD_CONNECT => Ok(SocksRequest::Connect(target)),
        CMD_UDP_ASSOCIATE => Ok(SocksRequest::UdpAssociate(target)),
        other => {
            let e = SocksError::UnsupportedCommand(other);
            Err(fail(stream, ReplyCode::CommandNotSupported, e).await)
        }
    }
}

/// RFC 1929: VER(1) ULEN UNAME PLEN PASSWD, answered with VER(1) STATUS.
async fn authenticate<S>(stream: &mut S, user: &[u8], pass: &[u8]) -> Result<(), SocksError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut head = [0u8; 2];
    stream.read_exact(&mut head).await?;
    if head[0] != 1 {
        let _ = write_flush(stream, &[1, 1]).await;
        return Err(SocksError::BadAuthVersion(head[0]));
    }
    let mut uname = [0u8; 255];
    let uname = &mut uname[..usize::from(head[1])];
    stream.read_exact(uname).await?;
    let mut plen = [0u8; 1];
    stream.read_exact(&mut plen).await?;
    let mut passwd = [0u8; 255];
    let passwd = &mut passwd[..usize::from(plen[0])];
    stream.read_exact(passwd).await?;
    // `&` rather than `&&`: always compare both.
    let ok = ct_eq(uname, user) & ct_eq(passwd, pass);
    write_flush(stream, &[1, if ok { 0 } else { 1 }]).await?;
    if ok {
        Ok(())
    } else {
        Err(SocksError::AuthFailed)
    }
}

/// Sends the final reply to a request: `code` and the bound address (for CONNECT, the
/// server-side address or `0.0.0.0:0` when unknown; for UDP ASSOCIATE, the relay's UDP
/// address the client must send to). Not time-limited: wrap it in a timeout if needed.
pub async fn reply<S>(stream: &mut S, code: ReplyCode, bound: SocketAddr) -> io::Result<()>
where
    S: AsyncWrite + Unpin,
{
    let mut out = Vec::with_capacity(22);
    out.extend_from_slice(&[SOCKS_VERSION, code.as_u8(), 0]);
    // An IP address always encodes.
    emit_addr(&TargetAddr::Ip(bound), &mut out).map_err(io::Error::other)?;
    write_flush(stream, &out).await
}

/// One parsed SOCKS5 UDP request (RFC 1928 §7), borrowing from the datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpPacket<'a> {
    /// Destination (client to relay) or source (relay to client).
    pub addr: TargetRef<'a>,
    /// The UDP payload.
    pub payload: &'a [u8],
}

/// Parses `RSV(2) FRAG(1) ATYP DST.ADDR DST.PORT DATA`. The reserved bytes are ignored.
///
/// No-panic contract: accepts any byte slice. A datagram with FRAG != 0 gives
/// `Err(Invalid(Fragmented))` and must be dropped; `Incomplete` means truncated (drop it).
pub fn parse_udp(buf: &[u8]) -> Result<UdpPacket<'_>, ParseError> {
    let frag = byte(buf, 2)?;
    if frag != 0 {
        return Err(Invalid::Fragmented(frag).into());
    }
    let rest = buf.get(3..).unwrap_or_default();
    let (addr, used) = wire::parse_addr(rest)?;
    Ok(UdpPacket {
        addr,
        payload: rest.get(used..).unwrap_or_default(),
    })
}

/// Appends a SOCKS5 UDP header for `addr` (FRAG 0) and `payload` to `out`. Refuses
/// (appending nothing) on a bad domain name.
pub fn emit_udp(addr: &TargetAddr, payload: &[u8], out: &mut Vec<u8>) -> Result<(), AddrError> {
    let start = out.len();
    out.extend_from_slice(&[0, 0, 0]);
    if let Err(e) = emit_addr(addr, out) {
        out.truncate(start);
        return Err(e);
    }
    out.extend_from_slice(payload);
    Ok(())
}
