//! Datagrams sent at the edges of a session's life.

use crate::session::names::tests::pump;
use crate::{Config, Instant, Session};
use bytes::Bytes;

/// Regression (issue 35, item 5): a datagram queued right after the session starts, before
/// the server's HELLO told the client its limit, was refused as "exceeds the limit of 0"
/// and lost. It is queued and delivered once the handshake completes.
#[test]
fn the_first_datagram_of_a_session_is_not_refused_with_a_limit_of_0() {
    let cfg = Config::default();
    let mut client = Session::connect(cfg.clone(), Instant(0), 0x1d6_0003, 0);
    let mut server = Session::accept(cfg, Instant(0), 0x1d6_0003);
    let first = Bytes::from_static(b"first datagram of the session");
    client
        .send_datagram(Instant(0), first.clone())
        .expect("queued before the handshake completes");
    pump(&mut client, &mut server, |s| !s.datagrams_in.is_empty());
    assert_eq!(server.recv_datagram(), Some(first));
}
