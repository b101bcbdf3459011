//! DNS over TCP (RFC 7766: a resolver retries a truncated answer over TCP; large answers
//! and zone data only come that way): a connection to port 53 that TUN mode terminates,
//! or one to the agent's resolver port (`--dns`), becomes a stream to the server's
//! resolver ([`datagram::SERVER_RESOLVER`], as UDP queries are), and the answers it
//! carries teach domain rules their addresses, as UDP answers do.
//!
//! Owns: choosing the stream's target and reading answers out of the TCP byte stream (each
//! message behind a two-byte length). Must not touch: opening streams and direct
//! connections (`direct::open_tcp`, `direct::open_stream`), relaying (the callers).

use super::direct::{self, Relay};
use super::Shared;
use crate::rules::Route;
use braid_proxy::target::ReplyCode;
use braid_proxy::{datagram, TargetAddr};
use std::net::SocketAddr;

/// The DNS port.
pub(super) const PORT: u16 = 53;

/// The server's resolver, as a stream's target.
pub(super) fn server_resolver() -> TargetAddr {
    TargetAddr::Domain(datagram::SERVER_RESOLVER.into(), PORT)
}

/// A TCP connection for DNS that asked `asked` (`None`: no one, the agent's resolver
/// port): a stream to the server's resolver, unless a rule names `asked` or no session is
/// up in direct mode; then straight to `asked` (there is no server's resolver without a
/// server).
pub(super) async fn open(shared: &Shared, asked: Option<SocketAddr>) -> Result<Relay, ReplyCode> {
    let ruled = asked.is_some_and(|a| shared.route_ip(a.ip()) != Route::Default);
    shared.wait_start().await;
    let direct_now = shared.direct_now();
    match asked {
        Some(a) if ruled || direct_now => direct::open_tcp(shared, &TargetAddr::Ip(a)).await,
        None if direct_now => Err(ReplyCode::NetworkUnreachable),
        _ => direct::open_stream(shared, &server_resolver())
            .await
            .map(|(r, w, early)| Relay::Session(r, w, early)),
    }
}

/// Splits the answers out of a DNS-over-TCP byte stream, fed as it arrives.
#[derive(Default)]
pub(super) struct Answers {
    buf: Vec<u8>,
}

impl Answers {
    /// Take `data`; call `each` with every message it completes.
    pub(super) fn feed(&mut self, data: &[u8], mut each: impl FnMut(&[u8])) {
        self.buf.extend_from_slice(data);
        let mut at = 0;
        while self.buf.len() - at >= 2 {
            let len = usize::from(u16::from_be_bytes([self.buf[at], self.buf[at + 1]]));
            if self.buf.len() - at - 2 < len {
                break;
            }
            each(&self.buf[at + 2..at + 2 + len]);
            at += 2 + len;
        }
        self.buf.drain(..at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Messages split anywhere, several in one piece, a zero-length one: each comes out
    /// whole, once, in order; what is left waits for its end.
    #[test]
    fn answers_are_split_out_of_the_stream_however_it_arrives() {
        let msgs: Vec<Vec<u8>> = vec![b"first".to_vec(), Vec::new(), vec![7u8; 300], b"x".to_vec()];
        let mut wire = Vec::new();
        for m in &msgs {
            wire.extend_from_slice(&(m.len() as u16).to_be_bytes());
            wire.extend_from_slice(m);
        }
        for cut in [1, 2, 3, 7, 64, wire.len()] {
            let mut a = Answers::default();
            let mut got = Vec::new();
            for piece in wire.chunks(cut) {
                a.feed(piece, |m| got.push(m.to_vec()));
            }
            assert_eq!(got, msgs, "pieces of {cut} bytes");
            assert!(a.buf.is_empty());
        }
        let mut a = Answers::default();
        let mut n = 0;
        a.feed(&[0, 5, b'a', b'b'], |_| n += 1);
        assert_eq!((n, a.buf.len()), (0, 4), "an incomplete message waits");
    }
}
