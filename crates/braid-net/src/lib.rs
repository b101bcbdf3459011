//! braid-net: braid sessions over real networks.
//!
//! - [`driver`]: the tokio task that runs one session (timers, packets, streams),
//! - [`bridge`]: streams between the session task and application-side tasks,
//! - [`protect`]: the AEAD and replay window on every packet,
//! - [`udp`]: path sockets bound to interfaces or source addresses,
//! - [`batch`]: many datagrams per system call (UDP GSO and GRO),
//! - [`pmtu`]: each path's largest datagram (address family and route MTU),
//! - [`pktinfo`]: replies from the address asked, on sockets bound to a wildcard address,
//! - [`tcp`]: braid packets over TCP, for networks that block UDP,
//! - [`splice`]: relaying a TCP connection over a stream,
//! - [`agent`]: `braid agent` (SOCKS5, the HTTP proxy, UDP ASSOCIATE, live paths),
//! - [`pathmgr`]: the agent's path decisions from link and address events,
//! - [`netwatch`]: link and address events from the kernel (rtnetlink),
//! - [`nat64`]: the NAT64 prefix (RFC 7050, RFC 6052) for IPv6-only paths to an IPv4 server,
//! - [`policy`]: per-path backup, cap and power options, and the cap ledger,
//! - [`rules`]: per-destination rules (`--bypass`, `--pin`) and their matching,
//! - [`server`]: `braid server` (authenticated sessions, TCP and UDP to legacy servers),
//! - [`status`]: the status snapshots of `braid status` (stable JSON) and their rules.

pub mod agent;
pub mod batch;
pub mod bridge;
pub mod common;
pub mod driver;
pub mod nat64;
pub mod netwatch;
pub mod pathmgr;
pub mod pktinfo;
pub mod pmtu;
pub mod policy;
pub mod protect;
pub mod rules;
pub mod server;
pub mod splice;
pub mod status;
pub mod tcp;
pub mod udp;
