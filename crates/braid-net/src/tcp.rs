//! The TCP transport of braid packets, for networks that block UDP (hotel and corporate
//! WiFi): the same sealed packets, each preceded by its length (u16, big-endian), over one
//! TCP connection per path to the server's port number.
//!
//! Owns: the framing, the agent's connection for a path (bound to the path's interface or
//! address, like its UDP socket), the server's TCP listener and its table of connections
//! (packets for a TCP peer go down its connection, not out of the UDP socket). Must not
//! touch: what the packets mean (the listener hands them to the same code as UDP
//! datagrams; the session task to the session), when to fall back (`pathmgr`).
//!
//! A connection's writer never drops a packet while the connection lives (a reliable path
//! declares nothing lost, `Session::set_path_reliable`); the congestion controller of the
//! path (BBR) bounds what waits in its queue. A frame longer than [`MAX_FRAME`] or a
//! connection that sends nothing for [`IDLE`] is closed.

use crate::driver::Incoming;
use crate::udp::{PathBind, SOCKET_BUFFER};
use bytes::{BufMut, Bytes, BytesMut};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

/// Largest packet carried (the largest handshake or transport packet is smaller).
pub const MAX_FRAME: usize = 2048;
/// A connection that carries nothing for this long is closed (keepalives come every 25 s).
pub const IDLE: Duration = Duration::from_secs(120);
/// How long the agent waits for a connection to the server.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Most TCP connections the server keeps at once.
pub const MAX_CONNECTIONS: usize = 4096;

/// Aborts a task when dropped.
pub struct AbortOnDrop<T>(pub tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `packet` with its length in front.
pub fn frame(packet: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(packet.len() + 2);
    b.put_u16(packet.len() as u16);
    b.put_slice(packet);
    b.freeze()
}

/// Read one framed packet into `buf`; `Ok(None)` at a clean end of the connection.
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut BytesMut,
) -> io::Result<Option<BytesMut>> {
    let mut len = [0u8; 2];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let n = u16::from_be_bytes(len) as usize;
    if n == 0 || n > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a framed braid packet of {n} bytes (1 to {MAX_FRAME} allowed)"),
        ));
    }
    buf.resize(n, 0);
    r.read_exact(&mut buf[..]).await?;
    Ok(Some(buf.split()))
}

/// Where a path's TCP packets go: dropping every clone closes the connection's writer.
pub type FrameSender = mpsc::UnboundedSender<Bytes>;

/// Write every frame from `rx` to `w`, several at a time when they queue up.
async fn write_frames(
    mut w: tokio::net::tcp::OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Bytes>,
) -> io::Result<()> {
    let mut out = BytesMut::new();
    while let Some(f) = rx.recv().await {
        out.extend_from_slice(&f);
        while out.len() < 256 << 10 {
            match rx.try_recv() {
                Ok(f) => out.extend_from_slice(&f),
                Err(_) => break,
            }
        }
        w.write_all(&out).await?;
        out.clear();
    }
    let _ = w.shutdown().await;
    Ok(())
}

/// Connect path `bind` to `server` over TCP (same binding rules as its UDP socket).
pub async fn connect(bind: &PathBind, server: SocketAddr) -> io::Result<TcpStream> {
    let s = if server.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if let Some(mark) = crate::udp::socket_mark() {
        // TUN mode: braid's own connections stay out of the tunnel (see udp::set_socket_mark).
        socket2::SockRef::from(&s).set_mark(mark)?;
    }
    match bind {
        PathBind::Interface(dev) => s.bind_device(Some(dev.as_bytes())).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot bind a TCP socket to interface {dev:?}: {e} (needs root or CAP_NET_RAW)"),
            )
        })?,
        PathBind::Address(ip) => s.bind(SocketAddr::new(*ip, 0)).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot bind a TCP socket to {ip}: {e}"))
        })?,
        PathBind::Auto => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an auto path is connected from the interface the path manager chose",
            ))
        }
    }
    let _ = s.set_send_buffer_size(SOCKET_BUFFER as u32);
    let _ = s.set_recv_buffer_size(SOCKET_BUFFER as u32);
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, s.connect(server))
        .await
        .map_err(|_| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("TCP connect to {server} took more than {CONNECT_TIMEOUT:?}"),
            )
        })??;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// The agent's side of a connected path: frames sent on the returned sender go to the
/// server; packets received go to `incoming` (as from `server`); when the connection ends
/// either way, `closed` gets `id` once.
pub fn agent_link<Id: Copy + Send + 'static>(
    stream: TcpStream,
    server: SocketAddr,
    incoming: mpsc::Sender<Incoming>,
    id: Id,
    closed: mpsc::UnboundedSender<Id>,
) -> (FrameSender, tokio::task::JoinHandle<()>) {
    let (r, w) = stream.into_split();
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let reader = async move {
            let mut r = r;
            let mut buf = BytesMut::with_capacity(64 << 10);
            loop {
                match tokio::time::timeout(IDLE, read_frame(&mut r, &mut buf)).await {
                    Ok(Ok(Some(data))) => {
                        let pkt = Incoming {
                            from: server,
                            local: None,
                            data,
                            header: None,
                        };
                        if incoming.send(pkt).await.is_err() {
                            return "the session ended".to_string();
                        }
                    }
                    Ok(Ok(None)) => return "the server closed the connection".into(),
                    Ok(Err(e)) => return format!("{e}"),
                    Err(_) => return format!("nothing received for {IDLE:?}"),
                }
            }
        };
        let why = tokio::select! {
            why = reader => why,
            r = write_frames(w, rx) => match r {
                Ok(()) => "closed by the agent".to_string(),
                Err(e) => format!("{e}"),
            },
        };
        debug!(%server, "TCP connection of a path ended: {why}");
        let _ = closed.send(id);
    });
    (tx, task)
}

/// The server's TCP connections, by peer address.
#[derive(Clone, Default)]
pub struct TcpPeers(Arc<Mutex<HashMap<SocketAddr, FrameSender>>>);

impl TcpPeers {
    /// True when `addr` is the peer of a live TCP connection.
    pub fn contains(&self, addr: &SocketAddr) -> bool {
        self.0.lock().is_ok_and(|m| m.contains_key(addr))
    }

    /// Send `packet` down the connection of `to`. False when `to` has none (then it is a
    /// UDP peer).
    pub fn send(&self, to: &SocketAddr, packet: &[u8]) -> bool {
        let Ok(m) = self.0.lock() else { return false };
        match m.get(to) {
            Some(tx) => {
                let _ = tx.send(frame(packet));
                true
            }
            None => false,
        }
    }

    fn len(&self) -> usize {
        self.0.lock().map_or(0, |m| m.len())
    }
}

/// Sends on the server's UDP socket, or down the TCP connection of a TCP peer.
#[derive(Clone)]
pub struct Outbound {
    /// The listening UDP socket.
    pub udp: Arc<tokio::net::UdpSocket>,
    /// The TCP connections.
    pub tcp: TcpPeers,
}

impl Outbound {
    /// Send one packet to `to`, over UDP from the local address `src` where given (the
    /// address the peer sent to, on a wildcard listener; see `pktinfo`). A TCP peer's
    /// connection already goes from the address the peer connected to.
    pub fn send_to(&self, packet: &[u8], to: SocketAddr, src: Option<IpAddr>) -> io::Result<()> {
        if self.tcp.send(&to, packet) {
            return Ok(());
        }
        match src {
            None => self.udp.try_send_to(packet, to).map(|_| ()),
            Some(_) => crate::batch::send_from(self.udp.as_ref(), to, src, packet, packet.len()),
        }
    }
}

/// Bind the server's TCP listener on `addr` (the UDP socket's address and port).
pub async fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let s = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    s.set_reuseaddr(true)?;
    s.bind(addr).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "cannot listen on TCP {addr} (for agents on networks that block UDP): {e}; \
                 free that TCP port or choose another --listen port"
            ),
        )
    })?;
    s.listen(1024)
}

/// Accept TCP connections and hand every packet they carry to `packets` with the
/// connection's peer address, as the UDP socket does; register each connection in `peers`
/// so replies go back down it. (No local address with them: a connection accepted on a
/// wildcard listener answers from the address the agent connected to by itself.)
pub async fn serve(listener: TcpListener, peers: TcpPeers, packets: mpsc::Sender<Incoming>) {
    loop {
        let (stream, from) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                debug!("TCP accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if peers.len() >= MAX_CONNECTIONS {
            warn!(%from, limit = MAX_CONNECTIONS, "too many TCP connections: refused one");
            continue;
        }
        let _ = stream.set_nodelay(true);
        let (r, w) = stream.into_split();
        let (tx, rx) = mpsc::unbounded_channel();
        if let Ok(mut m) = peers.0.lock() {
            m.insert(from, tx);
        }
        // Not "its network blocks UDP" yet: an agent whose key is wrong connects too after
        // its UDP went unanswered. The worker says it when a handshake over it succeeds.
        debug!(%from, "TCP connection accepted");
        let (peers, packets) = (peers.clone(), packets.clone());
        tokio::spawn(async move {
            let reader = async move {
                let mut r = r;
                let mut buf = BytesMut::with_capacity(64 << 10);
                loop {
                    match tokio::time::timeout(IDLE, read_frame(&mut r, &mut buf)).await {
                        Ok(Ok(Some(data))) => {
                            let pkt = Incoming {
                                from,
                                local: None,
                                data,
                                header: None,
                            };
                            if packets.send(pkt).await.is_err() {
                                return "the server stopped".to_string();
                            }
                        }
                        Ok(Ok(None)) => return "closed by the agent".into(),
                        Ok(Err(e)) => return format!("{e}"),
                        Err(_) => return format!("nothing received for {IDLE:?}"),
                    }
                }
            };
            let why = tokio::select! {
                why = reader => why,
                r = write_frames(w, rx) => r.err().map_or("closed".to_string(), |e| e.to_string()),
            };
            if let Ok(mut m) = peers.0.lock() {
                m.remove(&from);
            }
            info!(%from, "TCP connection ended: {why}");
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_and_bad_lengths_are_refused() {
        let mut wire = Vec::new();
        for p in [&b"a"[..], &[7u8; 1472][..], &[1u8; MAX_FRAME][..]] {
            wire.extend_from_slice(&frame(p));
        }
        let mut r = &wire[..];
        let mut buf = BytesMut::new();
        assert_eq!(
            &read_frame(&mut r, &mut buf).await.unwrap().unwrap()[..],
            b"a"
        );
        assert_eq!(
            read_frame(&mut r, &mut buf).await.unwrap().unwrap().len(),
            1472
        );
        assert_eq!(
            read_frame(&mut r, &mut buf).await.unwrap().unwrap().len(),
            MAX_FRAME
        );
        assert!(read_frame(&mut r, &mut buf).await.unwrap().is_none());
        for bad in [&[0u8, 0][..], &[0x08, 0x01, 0][..]] {
            let mut r = bad;
            let e = read_frame(&mut r, &mut buf).await.unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{bad:?}");
        }
        // Cut short inside a packet: an error, not a packet.
        let mut r = &wire[..10];
        read_frame(&mut r, &mut buf).await.unwrap();
        assert!(read_frame(&mut r, &mut buf).await.is_err());
    }
}
