//! PATH_NAME between two sessions: names reach the peer (set before the handshake or for a
//! path added later), and a peer that does not announce `PATH_NAMES` is never sent one.

use crate::wire::{features, FrameIter, Writer};
use crate::{Config, Instant, Session};
use braid_testkit::wire::{keep_all, Wire};
use std::time::Duration;

const SID: u64 = 0x1d6_0002;

/// Run both sessions over the kit's wire, delivering every datagram after 5 ms, until
/// `done` or 10 s (the client adds a path 9 named "wifi" once established).
pub(in crate::session) fn pump(
    client: &mut Session,
    server: &mut Session,
    mut done: impl FnMut(&Session) -> bool,
) {
    let mut wire = Wire::new(Duration::from_millis(5));
    while wire.now < Duration::from_secs(10).as_nanos() as u64 {
        if client.is_established() && !client.path_ids().contains(&9) {
            client.add_path(Instant(wire.now), 9).unwrap();
            client.set_path_name(Instant(wire.now), 9, "wifi");
        }
        if done(server) {
            return;
        }
        assert!(wire.step(client, server, &mut keep_all), "something is due");
    }
}

#[test]
fn path_names_reach_the_server() {
    let cfg = Config::default();
    let mut client = Session::connect(cfg.clone(), Instant(0), SID, 0);
    let mut server = Session::accept(cfg, Instant(0), SID);
    client.set_path_name(Instant(0), 0, "lte");
    pump(&mut client, &mut server, |s| {
        s.peer_path_name(0).is_some() && s.peer_path_name(9).is_some()
    });
    assert_eq!(server.peer_path_name(0), Some("lte"));
    assert_eq!(server.peer_path_name(9), Some("wifi"));
    assert_eq!(server.peer_path_name(1), None);
}

#[test]
fn no_path_name_to_a_peer_that_does_not_read_them() {
    let cfg = Config::default();
    let mut client = Session::connect(cfg, Instant(0), SID, 0);
    let mut hello = client.hello_params();
    // What an older server announces: every capability but PATH_NAMES.
    hello.features &= !features::PATH_NAMES;
    client.peer_params = Some(hello);
    client.set_path_name(Instant(0), 0, "lte");
    client.names_on_hello();
    assert!(client.pending.path_name.is_empty());
    let mut buf = [0u8; 64];
    let mut w = Writer::new(&mut buf);
    let mut wrote = Vec::new();
    client.write_path_names(&mut w, &mut wrote);
    assert!(wrote.is_empty() && w.pos() == 0);
    // The same session once the peer says it reads them: the name goes out.
    hello.features |= features::PATH_NAMES;
    client.peer_params = Some(hello);
    client.names_on_hello();
    let mut w = Writer::new(&mut buf);
    client.write_path_names(&mut w, &mut wrote);
    let n = w.pos();
    assert_eq!(wrote, vec![0]);
    assert_eq!(
        FrameIter::new(&buf[..n]).next().unwrap().unwrap(),
        crate::wire::Frame::PathName {
            path: 0,
            name: "lte"
        }
    );
}
