//! What the server does for a session's streams and datagrams: each stream's open request,
//! the TCP connection to its target and the relay; each UDP flow's socket and its return
//! traffic.
//!
//! Owns: resolving and connecting targets, the per-session UDP flow table and the bound on
//! UDP return traffic. Must not touch: the session (it talks to the session task through
//! stream handles and commands), handshakes and the listening socket.
//!
//! Bounded memory for UDP return traffic: datagrams from targets travel to the session task
//! as commands; each carries a share of the session's [`UDP_RETURN_BYTES`] budget until the
//! session task (and the core's datagram queue) let go of it. A datagram that does not fit
//! the budget is dropped (UDP semantics, counted), so a target flooding a flow cannot grow
//! the server's memory; the core's own queue drops its oldest datagram when full.

pub use super::budget::UdpBudget;
use super::egress::{AgentEgress, HostAddrs, Kind};
use super::inbound::SessionPorts;
use super::shares::AgentShare;
use crate::bridge::{Cmd, StreamHandle, StreamMsg};
pub use crate::common::connect;
use braid_proxy::target::{self, ReplyCode};
use braid_proxy::{datagram, TargetAddr};
use bytes::{Bytes, BytesMut};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

/// Bytes of proxied UDP return traffic one session may have waiting between the flows'
/// sockets and the wire.
pub const UDP_RETURN_BYTES: usize = 1 << 20;

/// One proxied connection: read the open request, connect (to an address the egress
/// policy allows, for an agent whose quota is not used up), answer, relay (through the
/// agent's share: quotas, fair shares). A stream that starts with a forward request goes to the
/// session's inbound ports instead; one to [`datagram::SERVER_RESOLVER`] goes to the
/// server's resolver (DNS over TCP; the operator's choice, so no egress check).
pub(crate) async fn serve_stream(
    h: StreamHandle,
    (connect_timeout, resolver): (Duration, Option<SocketAddr>),
    idle: Duration,
    (ports, egress, share): (&Arc<SessionPorts>, &AgentEgress, &Arc<AgentShare>),
) {
    let StreamHandle {
        id,
        mut reader,
        writer,
    } = h;
    let mut head = BytesMut::new();
    let (target, used) = loop {
        if braid_proxy::inbound::is_forward_request(&head) {
            return ports.serve_request(reader, writer, head).await;
        }
        match target::parse_request(&head) {
            Ok((req, used)) => break (req.target.to_target_addr(), used),
            Err(braid_proxy::ParseError::Incomplete) => {}
            Err(e) => {
                warn!(stream = id, "bad stream-open request: {e}");
                reply(&writer, e.reply_code()).await;
                writer.finish();
                return;
            }
        }
        match reader.read().await {
            Some(StreamMsg::Data(b)) => head.extend_from_slice(&b),
            _ => return,
        }
        if head.len() > 4096 {
            return;
        }
    };
    let early = head.split_off(used).freeze();
    if share.quota_reached().is_some() {
        // Logged by the share, once per period reached.
        reply(&writer, ReplyCode::NotAllowed).await;
        writer.finish();
        return;
    }
    let conn = match &target {
        TargetAddr::Domain(n, _) if n == datagram::SERVER_RESOLVER => match resolver {
            Some(r) => connect(&TargetAddr::Ip(r), connect_timeout).await,
            None => {
                info!(stream = id, "a DNS connection for the server's resolver refused: none is configured (--resolver)");
                reply(&writer, ReplyCode::HostUnreachable).await;
                writer.finish();
                return;
            }
        },
        t => connect_allowed(t, connect_timeout, egress).await,
    };
    match conn {
        Ok(tcp) => {
            debug!(stream = id, %target, "connected");
            reply(&writer, ReplyCode::Succeeded).await;
            crate::splice::splice_metered(tcp, reader, writer, (early, idle), &**share).await;
        }
        Err(ReplyCode::NotAllowed) => {
            // Logged by the egress policy, once a minute per destination.
            debug!(stream = id, %target, "refused by the egress policy");
            reply(&writer, ReplyCode::NotAllowed).await;
            writer.finish();
        }
        Err(code) => {
            info!(stream = id, %target, ?code, "connect failed");
            reply(&writer, code).await;
            writer.finish();
        }
    }
}

/// Resolve `target` and connect to the first of its addresses the egress policy allows
/// and that answers; none allowed: [`ReplyCode::NotAllowed`] (SOCKS5 reply 2, HTTP 403),
/// counted once.
async fn connect_allowed(
    target: &TargetAddr,
    timeout: Duration,
    egress: &AgentEgress,
) -> Result<tokio::net::TcpStream, ReplyCode> {
    let mut addrs = crate::common::resolve(target, timeout).await?;
    let host = egress.host();
    let mut refused = None;
    addrs.retain(|&a| {
        let d = egress.decide(a, &host);
        if !d.allowed && refused.is_none() {
            refused = Some((a, d.clone()));
        }
        d.allowed
    });
    match refused {
        Some((a, d)) if addrs.is_empty() => {
            egress.refused(a, &d, Kind::Connection);
            Err(ReplyCode::NotAllowed)
        }
        _ => crate::common::connect_any(&addrs, timeout).await,
    }
}

async fn reply(w: &crate::bridge::StreamWriter, code: ReplyCode) {
    let mut out = Vec::with_capacity(2);
    target::emit_reply(code, &mut out);
    let _ = w.write(Bytes::from(out)).await;
}

/// UDP flows of one session (and the agent's answers on its public UDP ports, which go
/// to [`SessionPorts::send_back`]): each flow gets its own socket towards its destinations. Ends
/// when the session task drops its datagram channel; the flows' sockets close with it.
/// A datagram to a destination the egress policy refuses (checked after the name is
/// resolved) is dropped and counted.
///
/// Datagrams are taken from the channel in batches; consecutive ones of one flow to one
/// address and of one size leave in one system call (UDP GSO, see [`crate::batch`]), so a
/// flow of small datagrams costs a fraction of a `sendto` each.
pub async fn udp_flows(
    mut rx: mpsc::Receiver<Bytes>,
    cmd: mpsc::UnboundedSender<Cmd>,
    (max_flows, resolver): (usize, Option<SocketAddr>),
    (session, ports, egress): (u64, Arc<SessionPorts>, AgentEgress),
    open_flows: Arc<std::sync::atomic::AtomicUsize>,
) {
    // Nothing more is allocated before the session's first datagram: most sessions send
    // none, and every handshake starts this task.
    let mut batch: Vec<Bytes> = Vec::new();
    if rx.recv_many(&mut batch, crate::batch::MAX_SEGMENTS).await == 0 {
        return;
    }
    let budget = UdpBudget::new(UDP_RETURN_BYTES);
    // Each flow's socket, and whether it is an IPv6 (dual-stack) one.
    let mut flows: HashMap<u32, (Arc<UdpSocket>, bool)> = HashMap::new();
    let mut returns = tokio::task::JoinSet::new();
    let mut refused_flows = 0u64;
    let mut run = Run::default();
    loop {
        // The server's addresses, and the last destination checked and whether it was
        // allowed, for this batch: a flow's datagrams to one address cost one decision.
        let (host, mut last) = (egress.host(), None::<(SocketAddr, bool)>);
        for d in batch.drain(..) {
            let Ok(p) = datagram::parse(&d) else {
                debug!("dropped a malformed proxied datagram");
                continue;
            };
            if let Some(port) = braid_proxy::inbound::inbound_port(p.flow_id) {
                // The agent's answer on one of its public UDP ports.
                run.flush().await;
                ports
                    .send_back(port, &p.addr.to_target_addr(), p.payload)
                    .await;
                continue;
            }
            let (sock, v6) = match flows.get(&p.flow_id) {
                Some(s) => s.clone(),
                None => {
                    if flows.len() >= max_flows {
                        if refused_flows == 0 {
                            warn!(
                                session = format_args!("{session:016x}"),
                                limit = max_flows,
                                "UDP flow limit reached; datagrams of new flows are dropped \
                                 (counted, total logged when the session ends)"
                            );
                        }
                        refused_flows += 1;
                        continue;
                    }
                    let Ok(s) = crate::udp::flow_socket() else {
                        continue;
                    };
                    let v6 = s.local_addr().is_ok_and(|a| a.is_ipv6());
                    let s = Arc::new(s);
                    flows.insert(p.flow_id, (s.clone(), v6));
                    open_flows.store(flows.len(), std::sync::atomic::Ordering::Relaxed);
                    returns.spawn(udp_return(
                        s.clone(),
                        p.flow_id,
                        cmd.clone(),
                        budget.clone(),
                    ));
                    (s, v6)
                }
            };
            let mut dest = p.addr.to_target_addr();
            // The operator's resolver: no egress check.
            let mut to_resolver = false;
            if matches!(&dest, TargetAddr::Domain(n, _) if n == datagram::SERVER_RESOLVER) {
                match resolver {
                    Some(r) => (dest, to_resolver) = (TargetAddr::Ip(r), true),
                    None => {
                        debug!("a DNS query for the server's resolver dropped: none is configured");
                        continue;
                    }
                }
            }
            match dest {
                TargetAddr::Ip(to) => {
                    if !to_resolver {
                        let allowed = match last {
                            Some((at, true)) if at == to => true,
                            Some((at, false)) if at == to => egress.count_refused(Kind::Datagram),
                            _ => egress.check_with(to, Kind::Datagram, &host),
                        };
                        last = Some((to, allowed));
                        if !allowed {
                            continue;
                        }
                    }
                    let to = crate::udp::reachable_from(v6, to);
                    if !run.extend(p.flow_id, to, p.payload) {
                        run.flush().await;
                        run.start(p.flow_id, sock, to, p.payload);
                    }
                }
                TargetAddr::Domain(name, port) => {
                    run.flush().await;
                    if let Some(to) = resolve_allowed(&name, port, &egress, &host).await {
                        let _ = sock
                            .send_to(p.payload, crate::udp::reachable_from(v6, to))
                            .await;
                    }
                }
            }
        }
        run.flush().await;
        if rx.recv_many(&mut batch, crate::batch::MAX_SEGMENTS).await == 0 {
            break;
        }
    }
    // Dropping the set aborts the return tasks, which closes the flows' sockets.
    drop(returns);
    if refused_flows > 0 || budget.dropped() > 0 {
        info!(
            session = format_args!("{session:016x}"),
            refused_flows,
            return_dropped = budget.dropped(),
            "UDP datagrams dropped over the session (flow limit, full return queue)"
        );
    }
}

/// The first address of `name` the egress policy allows `egress`'s agent; none (a refusal
/// counted) or no answer: `None`.
async fn resolve_allowed(
    name: &str,
    port: u16,
    egress: &AgentEgress,
    host: &HostAddrs,
) -> Option<SocketAddr> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((name, port)).await.ok()?.collect();
    let found = addrs.iter().find(|a| egress.decide(**a, host).allowed);
    if found.is_none() {
        let first = *addrs.first()?;
        egress.check_with(first, Kind::Datagram, host);
    }
    found.copied()
}

/// Datagrams of one flow to one address, of one size but perhaps the last, waiting to
/// leave in one GSO send.
#[derive(Default)]
struct Run {
    sock: Option<Arc<UdpSocket>>,
    flow: u32,
    to: Option<SocketAddr>,
    segment: usize,
    count: usize,
    /// The last datagram was shorter than `segment`: nothing may follow it.
    closed: bool,
    buf: Vec<u8>,
}

impl Run {
    /// Append `payload` if it may join this run.
    fn extend(&mut self, flow: u32, to: SocketAddr, payload: &[u8]) -> bool {
        let fits = self.sock.is_some()
            && self.flow == flow
            && self.to == Some(to)
            && !self.closed
            && !payload.is_empty()
            && payload.len() <= self.segment
            && self.count < crate::batch::max_segments(self.segment)
            && self.buf.len() + payload.len() <= crate::batch::MAX_GSO_BYTES;
        if fits {
            self.buf.extend_from_slice(payload);
            self.count += 1;
            self.closed = payload.len() < self.segment;
        }
        fits
    }

    fn start(&mut self, flow: u32, sock: Arc<UdpSocket>, to: SocketAddr, payload: &[u8]) {
        self.sock = Some(sock);
        self.flow = flow;
        self.to = Some(to);
        self.segment = payload.len();
        self.count = 1;
        self.closed = payload.is_empty();
        self.buf.clear();
        self.buf.extend_from_slice(payload);
    }

    /// Send what the run holds (one system call while the kernel takes GSO), waiting for
    /// room in the socket's buffer; a failure loses the run's datagrams (UDP semantics).
    async fn flush(&mut self) {
        let (Some(sock), Some(to)) = (self.sock.take(), self.to.take()) else {
            return;
        };
        let (buf, seg) = (&self.buf, self.segment.max(1));
        if buf.is_empty() {
            // An empty datagram is a datagram too.
            let _ = sock.send_to(&[], to).await;
            return;
        }
        let sent = sock
            .async_io(tokio::io::Interest::WRITABLE, || {
                crate::batch::send(&*sock, to, buf, seg)
            })
            .await;
        if let Err(e) = sent {
            debug!(%to, "UDP flow send failed: {e}");
        }
        self.buf.clear();
        self.count = 0;
    }
}

/// The first `nameserver` of /etc/resolv.conf, port 53.
pub fn system_resolver() -> Option<SocketAddr> {
    let text = std::fs::read_to_string("/etc/resolv.conf").ok()?;
    parse_resolv_conf(&text)
}

/// How long [`SystemResolver`] keeps what it read from `/etc/resolv.conf`.
pub const RESOLV_CONF_TTL: std::time::Duration = std::time::Duration::from_secs(5);

/// The system's name server for new sessions, read from `/etc/resolv.conf` at most once a
/// [`RESOLV_CONF_TTL`] rather than once per session (an open, a stat and a read on every
/// handshake); an edit of the file reaches the sessions started after that.
#[derive(Debug, Default)]
pub struct SystemResolver {
    cached: std::sync::Mutex<Option<(std::time::Instant, Option<SocketAddr>)>>,
}

impl SystemResolver {
    /// The name server, as [`system_resolver`] gives it.
    pub fn get(&self) -> Option<SocketAddr> {
        self.get_with(system_resolver)
    }

    fn get_with(&self, read: impl FnOnce() -> Option<SocketAddr>) -> Option<SocketAddr> {
        let mut c = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        match *c {
            Some((at, r)) if at.elapsed() < RESOLV_CONF_TTL => r,
            _ => {
                let r = read();
                *c = Some((std::time::Instant::now(), r));
                r
            }
        }
    }
}

fn parse_resolv_conf(text: &str) -> Option<SocketAddr> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|a| a.trim().split('%').next()?.parse::<std::net::IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .next()
}

async fn udp_return(
    sock: Arc<UdpSocket>,
    flow: u32,
    cmd: mpsc::UnboundedSender<Cmd>,
    budget: UdpBudget,
) {
    let mut buf = vec![0u8; 65536];
    while let Ok((n, from)) = sock.recv_from(&mut buf).await {
        let mut out = Vec::with_capacity(n + 32);
        if datagram::emit(
            flow,
            &TargetAddr::Ip(crate::udp::canonical(from)),
            &buf[..n],
            &mut out,
        )
        .is_err()
        {
            continue;
        }
        let Some(d) = budget.admit(out) else {
            continue;
        };
        // The flow of the agent's datagrams to this address (the same header): the call
        // that asked gets its answers treated as it is.
        let flow = datagram::session_flow(&d);
        if cmd.send(Cmd::Datagram(flow, d)).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file is read once per TTL, not once per session (each read costs syscalls on
    /// every handshake).
    #[test]
    fn the_system_resolver_is_read_once_per_ttl() {
        let (cache, reads) = (SystemResolver::default(), std::cell::Cell::new(0));
        let addr: SocketAddr = "10.0.0.53:53".parse().unwrap();
        let read = || {
            reads.set(reads.get() + 1);
            Some(addr)
        };
        for _ in 0..3 {
            assert_eq!(cache.get_with(read), Some(addr));
        }
        assert_eq!(reads.get(), 1);
        // Past the TTL it reads again.
        if let Ok(mut c) = cache.cached.lock() {
            let old = std::time::Instant::now().checked_sub(RESOLV_CONF_TTL * 2);
            *c = old.map(|t| (t, None));
        }
        assert_eq!(cache.get_with(read), Some(addr));
        assert_eq!(reads.get(), 2);
    }

    #[test]
    fn resolv_conf_first_nameserver() {
        let t = "# comment\nsearch example.org\nnameserver fe80::1%eth0\nnameserver 9.9.9.9\n";
        assert_eq!(parse_resolv_conf(t), Some("[fe80::1]:53".parse().unwrap()));
        assert_eq!(
            parse_resolv_conf("nameserver 10.0.0.53\n"),
            Some("10.0.0.53:53".parse().unwrap())
        );
        assert_eq!(parse_resolv_conf("options ndots:1\n"), None);
    }
}
