//! One-shot rtnetlink requests, each answered by the kernel's acknowledgement: what the TUN
//! set-up needs (link up and MTU, addresses, routes, policy rules) and the dumps it reads to
//! find what an earlier run left behind.
//!
//! Owns: a blocking `NETLINK_ROUTE` socket of the calling thread's network namespace and the
//! request/acknowledgement exchange. Must not touch: what is asked for (that is `routing`).

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL,
    NLM_F_REQUEST,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use std::io;

/// A netlink socket for requests.
pub struct Netlink {
    sock: Socket,
    seq: u32,
}

/// How a request changes the kernel's tables.
#[derive(Clone, Copy)]
pub enum Mode {
    /// Create; fail if it exists.
    Create,
    /// Change or delete what exists.
    Change,
}

impl Netlink {
    pub fn open() -> io::Result<Netlink> {
        let mut sock = Socket::new(NETLINK_ROUTE)?;
        sock.bind_auto()?;
        sock.connect(&SocketAddr::new(0, 0))?;
        Ok(Netlink { sock, seq: 0 })
    }

    fn send(&mut self, msg: RouteNetlinkMessage, flags: u16) -> io::Result<u32> {
        self.seq = self.seq.wrapping_add(1);
        let mut hdr = NetlinkHeader::default();
        hdr.flags = flags;
        hdr.sequence_number = self.seq;
        let mut m = NetlinkMessage::new(hdr, NetlinkPayload::from(msg));
        m.finalize();
        let mut buf = vec![0u8; m.buffer_len()];
        m.serialize(&mut buf);
        self.sock.send(&buf, 0)?;
        Ok(self.seq)
    }

    /// Sends `msg` and waits for the kernel's acknowledgement; its error if it refused.
    pub fn request(&mut self, msg: RouteNetlinkMessage, mode: Mode) -> io::Result<()> {
        let flags = match mode {
            Mode::Create => NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
            Mode::Change => NLM_F_REQUEST | NLM_F_ACK,
        };
        let seq = self.send(msg, flags)?;
        let mut result = None;
        self.read(seq, |payload| {
            if let NetlinkPayload::Error(e) = payload {
                result = Some(match e.code {
                    None => Ok(()),
                    Some(_) => Err(e.to_io()),
                });
                return true;
            }
            false
        })?;
        result.unwrap_or(Ok(()))
    }

    /// Every message of a dump of `msg`.
    pub fn dump(&mut self, msg: RouteNetlinkMessage) -> io::Result<Vec<RouteNetlinkMessage>> {
        let seq = self.send(msg, NLM_F_REQUEST | NLM_F_DUMP)?;
        let mut out = Vec::new();
        let mut failed = None;
        self.read(seq, |payload| match payload {
            NetlinkPayload::InnerMessage(m) => {
                out.push(m);
                false
            }
            NetlinkPayload::Error(e) if e.code.is_some() => {
                failed = Some(e.to_io());
                true
            }
            _ => true,
        })?;
        match failed {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// Reads the answers to request `seq` until `f` says the exchange is over (an
    /// acknowledgement, an error or the end of a dump).
    fn read(
        &mut self,
        seq: u32,
        mut f: impl FnMut(NetlinkPayload<RouteNetlinkMessage>) -> bool,
    ) -> io::Result<()> {
        let mut buf = Vec::with_capacity(1 << 16);
        loop {
            buf.clear();
            let n = self.sock.recv(&mut buf, 0)?;
            let mut off = 0;
            while off < n.min(buf.len()) {
                let msg = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&buf[off..])
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
                let len = msg.header.length as usize;
                if len == 0 {
                    break;
                }
                off += len;
                if msg.header.sequence_number != seq {
                    continue;
                }
                if matches!(msg.payload, NetlinkPayload::Done(_)) || f(msg.payload) {
                    return Ok(());
                }
            }
        }
    }
}
