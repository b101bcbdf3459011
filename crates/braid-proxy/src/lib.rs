//! braid-proxy: the proxy front ends of the braid agent and the small headers that carry
//! proxied traffic over a session.
//!
//! Owns: protocol logic only — codecs and per-connection handshakes on any
//! `AsyncRead + AsyncWrite` stream. Must not touch: listening sockets, the session, target
//! connections, UDP sockets, configuration files (the network driver does those).
//!
//! - [`addr`]: [`TargetAddr`] and [`TargetRef`], domain validation,
//! - [`wire`]: the shared `atyp | addr | port` encoding and [`ParseError`],
//! - [`target`]: the stream-open header and its reply ([`ReplyCode`], from `reply`),
//! - [`datagram`]: the DATAGRAM-frame payload carrying proxied UDP,
//! - [`inbound`]: inbound ports (the agent's forward request, the server's answer, the
//!   header of a stream the server opens for a connection to a public port),
//! - [`proxy_v2`]: the PROXY protocol v2 header an agent may put in front of an inbound
//!   connection (the real client's address for the service),
//! - [`socks5`]: the SOCKS5 handshake (RFC 1928/1929) and the SOCKS5 UDP header,
//! - [`http`]: the HTTP/1.1 proxy handshake (CONNECT and absolute-form `http://` requests),
//! - `forward`: rewriting an absolute-form request for the origin; `http_reply`: the HTTP
//!   proxy's responses (re-exported from [`http`]),
//! - [`auth`]: credentials, constant-time comparison, HTTP Basic,
//! - [`limits`]: connection limits, handshake and idle timeouts, accept backoff.
//!
//! No-panic contract: every parser in this crate accepts any byte slice and reports malformed
//! input as an error; every handshake reports malformed client input as an error. Property
//! tests in `tests/` feed each parser random bytes.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod addr;
pub mod auth;
pub mod datagram;
mod forward;
pub mod http;
mod http_error;
mod http_reply;
pub mod inbound;
pub mod limits;
pub mod proxy_v2;
mod reply;
pub mod socks5;
pub mod target;
pub mod wire;

pub use addr::{AddrError, TargetAddr, TargetRef};
pub use auth::Credentials;
pub use http::{HttpError, HttpLimits};
pub use limits::{AcceptBackoff, ProxyLimits};
pub use reply::ReplyCode;
pub use socks5::{AuthPolicy, SocksError, SocksRequest};
pub use wire::{Invalid, ParseError};
