//! Watches the kernel's links and addresses through rtnetlink notifications and turns them
//! into [`NetEvent`]s for the path manager.
//!
//! Owns: one `NETLINK_ROUTE` socket subscribed to link, IPv4/IPv6 address and route
//! changes, the initial dumps (links, addresses, then routes: only default routes of the
//! main table become events, for `--path auto`), and a fresh dump after the kernel reports
//! lost notifications (`ENOBUFS`). Must not touch: any decision (that is [`crate::pathmgr`]).
//! No polling: the task sleeps until the kernel sends something.
//!
//! The socket belongs to the network namespace of the thread that calls [`watch`].

use crate::pathmgr::NetEvent;
use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use netlink_packet_route::route::{RouteAttribute, RouteHeader, RouteMessage};
use netlink_packet_route::AddressFamily;
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use std::io;
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;
use tracing::{debug, warn};

/// What the watcher sends: kernel events, or `None` when the kernel view must be rebuilt
/// (events were lost; a full dump follows).
pub type WatchMsg = Option<NetEvent>;

const GROUPS: u32 = (libc::RTMGRP_LINK
    | libc::RTMGRP_IPV4_IFADDR
    | libc::RTMGRP_IPV6_IFADDR
    | libc::RTMGRP_IPV4_ROUTE
    | libc::RTMGRP_IPV6_ROUTE) as u32;

/// Start watching: the receiver gets the current links and addresses first, then every
/// change. Fails if rtnetlink is not available (not Linux, or no permission).
pub fn watch() -> io::Result<(
    mpsc::UnboundedReceiver<WatchMsg>,
    tokio::task::JoinHandle<()>,
)> {
    let mut sock = Socket::new(NETLINK_ROUTE)?;
    sock.bind(&SocketAddr::new(0, GROUPS))?;
    let _ = sock.set_rx_buf_sz(1 << 20);
    sock.set_non_blocking(true)?;
    // SAFETY: the AsyncFd owns the socket, so the descriptor stays open (and is not
    // reused) for as long as it is registered.
    let fd = unsafe { AsyncFd::register(sock) }.map_err(io::Error::from)?;
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        if let Err(e) = run(fd, tx).await {
            warn!("the link watcher stopped: {e}; paths no longer follow link changes");
        }
    });
    Ok((rx, task))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Dump {
    Links,
    Addresses,
    Routes,
    Done,
}

fn request(msg: RouteNetlinkMessage, seq: u32) -> Vec<u8> {
    let mut hdr = NetlinkHeader::default();
    hdr.flags = NLM_F_REQUEST | NLM_F_DUMP;
    hdr.sequence_number = seq;
    let mut m = NetlinkMessage::new(hdr, NetlinkPayload::from(msg));
    m.finalize();
    let mut buf = vec![0u8; m.buffer_len()];
    m.serialize(&mut buf);
    buf
}

fn send(fd: &AsyncFd<Socket>, msg: RouteNetlinkMessage, seq: u32) -> io::Result<()> {
    fd.get_ref().send(&request(msg, seq), 0).map(|_| ())
}

async fn run(fd: AsyncFd<Socket>, tx: mpsc::UnboundedSender<WatchMsg>) -> io::Result<()> {
    let mut seq = 1u32;
    send(
        &fd,
        RouteNetlinkMessage::GetLink(LinkMessage::default()),
        seq,
    )?;
    let mut dump = Dump::Links;
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 16);
    loop {
        let mut guard = fd.readable().await?;
        buf.clear();
        let n = match guard.try_io(|s| s.get_ref().recv(&mut buf, 0)) {
            Err(_would_block) => continue,
            Ok(Ok(n)) => n,
            Ok(Err(e)) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                warn!("the kernel dropped link notifications; reading every link again");
                if tx.send(None).is_err() {
                    return Ok(());
                }
                if dump == Dump::Done {
                    seq += 1;
                    send(
                        &fd,
                        RouteNetlinkMessage::GetLink(LinkMessage::default()),
                        seq,
                    )?;
                    dump = Dump::Links;
                }
                continue;
            }
            Ok(Err(e)) => return Err(e),
        };
        let mut off = 0;
        while off < n.min(buf.len()) {
            let msg = match NetlinkMessage::<RouteNetlinkMessage>::deserialize(&buf[off..]) {
                Ok(m) => m,
                Err(e) => {
                    debug!("unparsable netlink message: {e}");
                    break;
                }
            };
            let len = msg.header.length as usize;
            off += len.max(16).next_multiple_of(4);
            match msg.payload {
                NetlinkPayload::Done(_) => match dump {
                    Dump::Links => {
                        seq += 1;
                        send(
                            &fd,
                            RouteNetlinkMessage::GetAddress(AddressMessage::default()),
                            seq,
                        )?;
                        dump = Dump::Addresses;
                    }
                    Dump::Addresses => {
                        seq += 1;
                        send(
                            &fd,
                            RouteNetlinkMessage::GetRoute(RouteMessage::default()),
                            seq,
                        )?;
                        dump = Dump::Routes;
                    }
                    _ => dump = Dump::Done,
                },
                NetlinkPayload::InnerMessage(m) => {
                    if let Some(ev) = convert(m) {
                        if tx.send(Some(ev)).is_err() {
                            return Ok(());
                        }
                    }
                }
                NetlinkPayload::Error(e) => debug!("netlink error: {e:?}"),
                _ => {}
            }
        }
    }
}

fn link_name(m: &LinkMessage) -> Option<String> {
    m.attributes.iter().find_map(|a| match a {
        LinkAttribute::IfName(n) => Some(n.clone()),
        _ => None,
    })
}

fn address(m: &AddressMessage) -> Option<std::net::IpAddr> {
    // IFA_LOCAL is the local address on point-to-point links; IFA_ADDRESS elsewhere.
    let local = m.attributes.iter().find_map(|a| match a {
        AddressAttribute::Local(ip) => Some(*ip),
        _ => None,
    });
    local.or_else(|| {
        m.attributes.iter().find_map(|a| match a {
            AddressAttribute::Address(ip) => Some(*ip),
            _ => None,
        })
    })
}

/// A default route of the main table: (its output interface, IPv6, metric).
fn default_route(r: &RouteMessage) -> Option<(u32, bool, u32)> {
    if r.header.destination_prefix_length != 0 {
        return None;
    }
    let table = r
        .attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(r.header.table as u32);
    if table != RouteHeader::RT_TABLE_MAIN as u32 {
        return None;
    }
    let v6 = match r.header.address_family {
        AddressFamily::Inet => false,
        AddressFamily::Inet6 => true,
        _ => return None,
    };
    let mut index = None;
    let mut metric = 0;
    for a in &r.attributes {
        match a {
            RouteAttribute::Oif(i) => index = Some(*i),
            RouteAttribute::Priority(m) => metric = *m,
            _ => {}
        }
    }
    Some((index?, v6, metric))
}

/// One rtnetlink message as a path-manager event.
fn convert(m: RouteNetlinkMessage) -> Option<NetEvent> {
    match m {
        RouteNetlinkMessage::NewLink(l) => {
            let f = l.header.flags;
            Some(NetEvent::Link {
                index: l.header.index,
                name: link_name(&l)?,
                up: f.contains(LinkFlags::Up) && f.contains(LinkFlags::Running),
            })
        }
        RouteNetlinkMessage::DelLink(l) => Some(NetEvent::LinkGone {
            index: l.header.index,
        }),
        RouteNetlinkMessage::NewAddress(a) => Some(NetEvent::Addr {
            index: a.header.index,
            addr: address(&a)?,
        }),
        RouteNetlinkMessage::DelAddress(a) => Some(NetEvent::AddrGone {
            index: a.header.index,
            addr: address(&a)?,
        }),
        RouteNetlinkMessage::NewRoute(r) => {
            let (index, v6, metric) = default_route(&r)?;
            Some(NetEvent::DefaultRoute { index, v6, metric })
        }
        RouteNetlinkMessage::DelRoute(r) => {
            let (index, v6, metric) = default_route(&r)?;
            Some(NetEvent::DefaultRouteGone { index, v6, metric })
        }
        _ => None,
    }
}
