//! braid's TUN front end: every application on the device (or every host behind it) is
//! carried without a proxy setting.
//!
//! - `stack`: the sans-IO userspace TCP/IP stack that turns the IP packets of the TUN
//!   device into TCP connections and UDP flows;
//! - `device`: the TUN device itself (Linux);
//! - `routing`: policy routing into the device, keeping braid's own sockets out;
//! - `netlink`: the rtnetlink requests `device` and `routing` make.
//!
//! Owns: what happens to IP packets between the TUN device and the agent's streams and
//! datagram flows. Must not touch: the braid session or its paths.

pub mod device;
mod netlink;
pub mod routing;
pub mod stack;
