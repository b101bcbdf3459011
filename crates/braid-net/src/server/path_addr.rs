//! Where each path of a server session sends: the agent's address and the server address
//! the agent sent to, shared by the session task (which sends), the worker (which learns a
//! path's first address) and the status board (which shows them).
//!
//! Owns: [`PathAddr`] and the shared map [`PathAddrs`]. Must not touch: sockets, sessions.

use braid_core::PathId;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

/// Where one path's packets go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PathAddr {
    /// The agent's address.
    pub peer: SocketAddr,
    /// The server's address the agent sends to, where the socket says it (a wildcard
    /// listener, see `pktinfo`): replies go from there. `None`: the kernel chooses (a
    /// listener on one address, a TCP path).
    pub local: Option<IpAddr>,
}

/// Each path's addresses of one session.
pub(super) type PathAddrs = Arc<Mutex<HashMap<PathId, PathAddr>>>;
