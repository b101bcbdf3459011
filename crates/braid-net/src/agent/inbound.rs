//! Inbound ports at the agent (`--forward tcp:PORT=HOST:PORT`, `udp:...`): asking the
//! server, once per session, to open the public ports; connecting each stream the server
//! opens for a connection to a public TCP port to its local service; relaying the
//! datagrams of a public UDP port to its service and the service's answers back to each
//! sender (docs/protocol.md section 19a).
//!
//! Owns: the forward specs ([`Forward`]), the per-session request and its log lines, the
//! local connections and the per-sender UDP sockets of inbound traffic. Must not touch:
//! the session (it talks to the session task through stream handles and commands), the
//! proxy front ends, which ports the server allows (the server decides).

use super::links::Task;
use crate::bridge::{Cmd, StreamHandle, StreamMsg};
use braid_proxy::inbound::{self as wire, ForwardReply, ForwardResult, Proto, PublicPort};
use braid_proxy::{datagram, TargetAddr};
use bytes::{Bytes, BytesMut};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, warn};

/// A sender's UDP socket towards the service is closed after this long without traffic.
const UDP_IDLE: Duration = Duration::from_secs(60);
/// Most senders of inbound UDP at once, over all public UDP ports.
const MAX_UDP_PEERS: usize = 4096;
/// How long the server has to answer the forward request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// One published service: a public port on the server and where its traffic goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forward {
    /// The port the server opens.
    pub port: PublicPort,
    /// The service behind the agent.
    pub target: TargetAddr,
    /// Each connection to the service starts with a PROXY protocol v2 header naming the
    /// real client (`,proxy-protocol` after the spec; TCP only).
    pub proxy_protocol: bool,
}

impl Forward {
    /// `tcp:PORT=HOST:PORT` or `udp:PORT=HOST:PORT` (HOST a name, an IPv4 address or an
    /// IPv6 address in brackets), a TCP one optionally followed by `,proxy-protocol`.
    pub fn parse(spec: &str) -> Result<Forward, String> {
        let bad = |why: &str| {
            format!("--forward {spec:?}: {why}; expected tcp:PORT=HOST:PORT or udp:PORT=HOST:PORT, like tcp:8080=127.0.0.1:80 (tcp:...,proxy-protocol to send the service a PROXY v2 header)")
        };
        let (spec_only, proxy_protocol) = match spec.trim().split_once(',') {
            None => (spec.trim(), false),
            Some((s, "proxy-protocol")) if s.starts_with("tcp:") => (s, true),
            Some((_, "proxy-protocol")) => {
                return Err(bad("the PROXY protocol is for tcp: ports only"))
            }
            Some((_, other)) => return Err(bad(&format!("unknown option {other:?}"))),
        };
        let (public, target) = spec_only.split_once('=').ok_or_else(|| bad("no '='"))?;
        let (proto, port) = public
            .split_once(':')
            .ok_or_else(|| bad("no ':' before '='"))?;
        let proto = match proto {
            "tcp" => Proto::Tcp,
            "udp" => Proto::Udp,
            _ => return Err(bad("the protocol is neither tcp nor udp")),
        };
        let port = match port.parse::<u16>() {
            Ok(0) | Err(_) => return Err(bad("the public port is 1 to 65535")),
            Ok(p) => p,
        };
        let target = match target.parse::<SocketAddr>() {
            Ok(a) if a.port() == 0 => return Err(bad("the service's port is 1 to 65535")),
            Ok(a) => TargetAddr::Ip(a),
            Err(_) => {
                let (host, p) = target
                    .rsplit_once(':')
                    .ok_or_else(|| bad("the service has no ':PORT'"))?;
                let p = match p.parse::<u16>() {
                    Ok(0) | Err(_) => return Err(bad("the service's port is 1 to 65535")),
                    Ok(p) => p,
                };
                TargetAddr::domain(host, p).map_err(|e| bad(&format!("bad host: {e}")))?
            }
        };
        Ok(Forward {
            port: PublicPort { proto, port },
            target,
            proxy_protocol,
        })
    }
}

/// Where one session's inbound traffic comes in; dropping it stops the session's tasks.
pub(super) struct Running {
    /// Streams the server opens.
    pub accepted: mpsc::UnboundedSender<StreamHandle>,
    /// Datagrams of inbound flows.
    pub datagrams: mpsc::Sender<Bytes>,
    _tasks: Vec<Task>,
}

/// Start a session's inbound ports (`None` when no port is forwarded): ask the server
/// for them, then serve what comes. `cmd` is the session task's.
pub(super) fn start(
    forwards: &[Forward],
    cmd: mpsc::UnboundedSender<Cmd>,
    idle: Duration,
) -> Option<Running> {
    if forwards.is_empty() {
        return None;
    }
    let forwards: Arc<[Forward]> = forwards.into();
    let (acc_tx, mut acc_rx) = mpsc::unbounded_channel::<StreamHandle>();
    let (dg_tx, dg_rx) = mpsc::channel::<Bytes>(1024);
    let request = Task(tokio::spawn(request(forwards.clone(), cmd.clone())));
    let fw = forwards.clone();
    let streams = Task(tokio::spawn(async move {
        while let Some(h) = acc_rx.recv().await {
            tokio::spawn(serve_stream(h, fw.clone(), idle));
        }
    }));
    let udp = Task(tokio::spawn(udp_inbound(dg_rx, forwards, cmd)));
    Some(Running {
        accepted: acc_tx,
        datagrams: dg_tx,
        _tasks: vec![request, streams, udp],
    })
}

/// Ask the server for the ports and log what it answered.
async fn request(forwards: Arc<[Forward]>, cmd: mpsc::UnboundedSender<Cmd>) {
    let ports: Vec<PublicPort> = forwards.iter().map(|f| f.port).collect();
    let (tx, rx) = oneshot::channel();
    if cmd.send(Cmd::Open(tx)).is_err() {
        return;
    }
    let Ok(Ok(h)) = rx.await else {
        warn!("inbound ports not requested: no stream to the server");
        return;
    };
    let (mut reader, writer) = (h.reader, h.writer);
    let mut req = Vec::new();
    if wire::emit_forward_request(&ports, &mut req).is_err() {
        warn!("inbound ports not requested: 1 to 64 ports can be forwarded");
        return;
    }
    if writer.write(Bytes::from(req)).await.is_err() {
        return;
    }
    let answer = async {
        let mut head = BytesMut::new();
        loop {
            match wire::parse_forward_reply(&head) {
                Ok((r, _)) => return Some(r),
                Err(braid_proxy::ParseError::Incomplete) => {}
                Err(e) => {
                    warn!("inbound ports: the server's answer is malformed: {e}");
                    return None;
                }
            }
            match reader.read().await {
                Some(StreamMsg::Data(b)) => head.extend_from_slice(&b),
                _ => return None,
            }
        }
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, answer).await {
        Ok(Some(ForwardReply::Results(results))) => log_results(&forwards, &results),
        Ok(Some(ForwardReply::Unsupported(code))) => warn!(
            ?code,
            "inbound ports refused: the server does not support them (update braid on the server)"
        ),
        Ok(None) => warn!("inbound ports: the server closed the request without an answer"),
        Err(_) => warn!("inbound ports: no answer from the server in {REQUEST_TIMEOUT:?}"),
    }
    writer.finish();
}

fn log_results(forwards: &[Forward], results: &[(PublicPort, ForwardResult)]) {
    for (port, r) in results {
        let to = forwards
            .iter()
            .find(|f| f.port == *port)
            .map_or(String::new(), |f| f.target.to_string());
        match r {
            ForwardResult::Opened => info!(%port, %to, "inbound port open on the server"),
            ForwardResult::NotAllowed => warn!(
                %port, %to,
                "inbound port refused by the server: its configuration does not allow this \
                 port for this agent's key (the server's [forward] table, docs/deployment.md)"
            ),
            ForwardResult::InUse => {
                warn!(%port, %to, "inbound port refused by the server: another agent holds it")
            }
            ForwardResult::BindFailed => warn!(
                %port, %to,
                "inbound port allowed but the server could not open it (another program uses it there)"
            ),
        }
    }
}

/// A stream the server opened: read its header, connect the service, relay.
async fn serve_stream(h: StreamHandle, forwards: Arc<[Forward]>, idle: Duration) {
    let StreamHandle {
        id,
        mut reader,
        writer,
    } = h;
    let mut head = BytesMut::new();
    let (hdr, used) = loop {
        match wire::parse_inbound_header(&head) {
            Ok(x) => break x,
            Err(braid_proxy::ParseError::Incomplete) if head.len() < 512 => {}
            Err(e) => {
                debug!(
                    stream = id,
                    "a stream from the server that is not inbound: {e}"
                );
                writer.reset(1);
                return;
            }
        }
        match reader.read().await {
            Some(StreamMsg::Data(b)) => head.extend_from_slice(&b),
            _ => return,
        }
    };
    let Some(f) = forwards.iter().find(|f| f.port == hdr.port) else {
        warn!(port = %hdr.port, "the server sent a connection for a port this agent does not forward");
        writer.reset(1);
        return;
    };
    let early = head.split_off(used).freeze();
    match crate::common::connect(&f.target, Duration::from_secs(10)).await {
        Ok(mut tcp) => {
            debug!(port = %hdr.port, peer = %hdr.peer, to = %f.target, "inbound connection");
            if f.proxy_protocol {
                if let Err(e) = tcp.write_all(&proxy_header(hdr.peer, hdr.port.port)).await {
                    debug!(port = %hdr.port, "PROXY header not sent: {e}");
                    writer.reset(1);
                    return;
                }
            }
            crate::splice::splice(tcp, reader, writer, early, idle).await;
        }
        Err(code) => {
            warn!(port = %hdr.port, peer = %hdr.peer, to = %f.target, ?code,
                  "inbound connection: the service does not answer");
            writer.reset(u64::from(code.as_u8()));
        }
    }
}

/// The PROXY v2 header for a connection from `peer` to public port `port`. The agent does
/// not know which of the server's addresses the client connected to: the destination is
/// the unspecified address of the client's family, with the public port.
fn proxy_header(peer: SocketAddr, port: u16) -> Vec<u8> {
    let any: std::net::IpAddr = match peer {
        SocketAddr::V4(_) => std::net::Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
    };
    braid_proxy::proxy_v2::encode(peer, SocketAddr::new(any, port))
}

type Peers = Arc<Mutex<HashMap<(u16, SocketAddr), Arc<UdpSocket>>>>;

/// Datagrams of public UDP ports: one socket towards the service per sender, whose
/// answers go back on the port's flow to that sender.
async fn udp_inbound(
    mut rx: mpsc::Receiver<Bytes>,
    forwards: Arc<[Forward]>,
    cmd: mpsc::UnboundedSender<Cmd>,
) {
    let peers: Peers = Arc::new(Mutex::new(HashMap::new()));
    let mut returns = tokio::task::JoinSet::new();
    let mut refused = 0u64;
    while let Some(d) = rx.recv().await {
        let Ok(p) = datagram::parse(&d) else { continue };
        let (Some(port), TargetAddr::Ip(peer)) =
            (wire::inbound_port(p.flow_id), p.addr.to_target_addr())
        else {
            continue;
        };
        let key = (port, peer);
        let known = peers.lock().ok().and_then(|m| m.get(&key).cloned());
        let sock = match known {
            Some(s) => s,
            None => {
                let public = PublicPort {
                    proto: Proto::Udp,
                    port,
                };
                let Some(f) = forwards.iter().find(|f| f.port == public) else {
                    continue;
                };
                if peers.lock().map_or(0, |m| m.len()) >= MAX_UDP_PEERS {
                    if refused == 0 {
                        warn!(
                            limit = MAX_UDP_PEERS,
                            "inbound UDP: too many senders at once; new ones are dropped"
                        );
                    }
                    refused += 1;
                    continue;
                }
                let Some(s) = service_socket(&f.target).await else {
                    continue;
                };
                let s = Arc::new(s);
                if let Ok(mut m) = peers.lock() {
                    m.insert(key, s.clone());
                }
                returns.spawn(udp_return(s.clone(), key, peers.clone(), cmd.clone()));
                s
            }
        };
        if let Err(e) = sock.send(p.payload).await {
            debug!(port, %peer, "inbound UDP to the service failed: {e}");
        }
        while returns.try_join_next().is_some() {}
    }
}

/// A socket connected to the service (a name is resolved once per sender).
async fn service_socket(target: &TargetAddr) -> Option<UdpSocket> {
    let to = match target {
        TargetAddr::Ip(a) => *a,
        TargetAddr::Domain(n, p) => match tokio::net::lookup_host((n.as_str(), *p)).await {
            Ok(mut a) => a.next()?,
            Err(e) => {
                warn!(%target, "inbound UDP: cannot resolve the service: {e}");
                return None;
            }
        },
    };
    let any: SocketAddr = if to.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let s = UdpSocket::bind(any).await.ok()?;
    s.connect(to).await.ok()?;
    Some(s)
}

/// The service's answers to one sender, until the socket idles for [`UDP_IDLE`].
async fn udp_return(
    s: Arc<UdpSocket>,
    (port, peer): (u16, SocketAddr),
    peers: Peers,
    cmd: mpsc::UnboundedSender<Cmd>,
) {
    let flow = wire::inbound_flow(port);
    let mut buf = vec![0u8; 65536];
    loop {
        let n = match tokio::time::timeout(UDP_IDLE, s.recv(&mut buf)).await {
            Ok(Ok(n)) => n,
            // The service is not listening (ICMP port unreachable): keep waiting.
            Ok(Err(_)) => continue,
            Err(_) => break,
        };
        let mut out = Vec::with_capacity(n + 32);
        if datagram::emit(flow, &TargetAddr::Ip(peer), &buf[..n], &mut out).is_err() {
            continue;
        }
        let d = Bytes::from(out);
        if cmd
            .send(Cmd::Datagram(datagram::session_flow(&d), d))
            .is_err()
        {
            break;
        }
    }
    if let Ok(mut m) = peers.lock() {
        m.remove(&(port, peer));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_specs_parse() {
        let f = Forward::parse("tcp:8080=127.0.0.1:80").unwrap();
        assert_eq!(
            f.port,
            PublicPort {
                proto: Proto::Tcp,
                port: 8080
            }
        );
        assert_eq!(f.target, TargetAddr::Ip("127.0.0.1:80".parse().unwrap()));
        let f = Forward::parse("udp:5353=[fd00::1]:53").unwrap();
        assert_eq!(f.port.proto, Proto::Udp);
        assert_eq!(f.target, TargetAddr::Ip("[fd00::1]:53".parse().unwrap()));
        let f = Forward::parse("tcp:2222=nas.lan:22").unwrap();
        assert_eq!(f.target, TargetAddr::domain("nas.lan", 22).unwrap());
        assert!(!f.proxy_protocol);
    }

    /// Issue 38 item 13: `,proxy-protocol` after a TCP spec asks for the PROXY v2 header;
    /// the header names the real client and the public port.
    #[test]
    fn the_proxy_protocol_is_asked_per_tcp_forward_and_names_the_client() {
        let f = Forward::parse("tcp:8080=127.0.0.1:80,proxy-protocol").unwrap();
        assert!(f.proxy_protocol);
        assert_eq!(f.target, TargetAddr::Ip("127.0.0.1:80".parse().unwrap()));
        for bad in [
            "udp:53=127.0.0.1:53,proxy-protocol",
            "tcp:1=127.0.0.1:1,gzip",
        ] {
            let e = Forward::parse(bad).unwrap_err();
            assert!(e.contains("expected tcp:PORT=HOST:PORT"), "{bad}: {e}");
        }
        let client: SocketAddr = "198.51.100.9:50123".parse().unwrap();
        let h = proxy_header(client, 8080);
        let (src, dst, n) = braid_proxy::proxy_v2::parse(&h).unwrap();
        assert_eq!(
            (src, dst, n),
            (client, "0.0.0.0:8080".parse().unwrap(), h.len())
        );
    }

    #[test]
    fn bad_forward_specs_say_what_is_expected() {
        for bad in [
            "8080=127.0.0.1:80",
            "tcp:8080",
            "sctp:1=127.0.0.1:1",
            "tcp:0=127.0.0.1:80",
            "tcp:8080=127.0.0.1",
            "tcp:8080=127.0.0.1:0",
            "tcp:8080=:80",
        ] {
            let e = Forward::parse(bad).unwrap_err();
            assert!(e.contains("expected tcp:PORT=HOST:PORT"), "{bad}: {e}");
        }
    }
}
