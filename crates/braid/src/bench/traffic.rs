//! The benchmark's traffic: a TCP source that sends a fixed number of bytes on every
//! connection, sinks that count them, kernel MPTCP sockets (IPPROTO_MPTCP), a SOCKS5
//! client (CONNECT and UDP ASSOCIATE) and the UDP flow of small datagrams.
//!
//! Owns: the sockets and threads of the load (named `load-*`, see [`super::measure`]).
//! Must not touch: braid's agent and server (reached only through SOCKS5 like any
//! application).

use super::measure::{on_thread, spawn_runtime};
use anyhow::{bail, Context, Result};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// IPPROTO_MPTCP (Linux 5.6 and later).
const IPPROTO_MPTCP: libc::c_int = 262;

/// A TCP (or MPTCP) socket of the kernel, made with `protocol` (0: TCP).
fn socket(protocol: libc::c_int) -> std::io::Result<std::os::fd::OwnedFd> {
    // SAFETY: socket() has no memory preconditions; the fd is owned from here on.
    let fd = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            protocol,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh, valid descriptor nobody else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Why kernel MPTCP cannot be measured here, or None if it can.
pub fn mptcp_unavailable() -> Option<String> {
    match std::fs::read_to_string("/proc/sys/net/mptcp/enabled") {
        Ok(s) if s.trim() == "0" => return Some("net.mptcp.enabled is 0".into()),
        Err(_) => return Some("the kernel has no MPTCP (/proc/sys/net/mptcp missing)".into()),
        Ok(_) => {}
    }
    match socket(IPPROTO_MPTCP) {
        Ok(_) => None,
        Err(e) => Some(format!(
            "socket(AF_INET, SOCK_STREAM, IPPROTO_MPTCP) failed: {e}"
        )),
    }
}

/// A listener on 127.0.0.1 (any port), MPTCP when `mptcp`.
fn listener(mptcp: bool) -> Result<std::net::TcpListener> {
    if !mptcp {
        return Ok(std::net::TcpListener::bind("127.0.0.1:0")?);
    }
    let fd = socket(IPPROTO_MPTCP).context("an MPTCP socket")?;
    let l = std::net::TcpListener::from(fd);
    let s = socket2_free_bind(&l, SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))?;
    Ok(s)
}

/// bind + listen of a raw listener socket.
fn socket2_free_bind(
    l: &std::net::TcpListener,
    addr: SocketAddrV4,
) -> Result<std::net::TcpListener> {
    use std::os::fd::AsRawFd;
    let sa = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: addr.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*addr.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: sa is a valid sockaddr_in of `len` bytes; the fd is open.
    let r = unsafe { libc::bind(l.as_raw_fd(), (&sa as *const libc::sockaddr_in).cast(), len) };
    if r != 0 {
        return Err(std::io::Error::last_os_error()).context("binding the MPTCP listener");
    }
    // SAFETY: the fd is an open, bound stream socket.
    if unsafe { libc::listen(l.as_raw_fd(), 1024) } != 0 {
        return Err(std::io::Error::last_os_error()).context("listening on the MPTCP listener");
    }
    l.try_clone().context("the MPTCP listener")
}

/// Connect to `to` with a kernel MPTCP socket (blocking connect, then non-blocking).
fn mptcp_connect(to: SocketAddr) -> Result<std::net::TcpStream> {
    use std::os::fd::AsRawFd;
    let SocketAddr::V4(to) = to else {
        bail!("IPv4 only")
    };
    let fd = socket(IPPROTO_MPTCP)?;
    let sa = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: to.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*to.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: as in bind above.
    let r = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_in).cast(),
            len,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error()).context("MPTCP connect");
    }
    let s = std::net::TcpStream::from(fd);
    s.set_nonblocking(true)?;
    Ok(s)
}

/// A source on its own thread (`load-source`): every connection gets `per_conn` bytes,
/// then FIN. MPTCP when `mptcp`.
pub fn start_source(per_conn: u64, mptcp: bool) -> Result<SocketAddr> {
    let l = listener(mptcp)?;
    l.set_nonblocking(true)?;
    let addr = l.local_addr()?;
    spawn_runtime("load-source", move || {
        Box::pin(async move {
            let l = TcpListener::from_std(l)?;
            loop {
                let (mut s, _): (TcpStream, _) = l.accept().await?;
                tokio::spawn(async move {
                    let buf = vec![0x5au8; 256 * 1024];
                    let mut left = per_conn;
                    while left > 0 {
                        let n = left.min(buf.len() as u64) as usize;
                        if s.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                        left -= n as u64;
                    }
                    let _ = s.shutdown().await;
                });
            }
            #[allow(unreachable_code)]
            Ok::<(), anyhow::Error>(())
        })
    })?;
    Ok(addr)
}

/// Read a stream to its end; an error unless exactly `size` bytes came.
async fn sink(mut s: TcpStream, size: u64, done: Arc<AtomicU64>) -> Result<()> {
    let mut buf = vec![0u8; 256 * 1024];
    let mut got = 0u64;
    loop {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        got += n as u64;
        done.fetch_add(n as u64, Ordering::Relaxed);
    }
    if got != size {
        bail!("received {got} of {size} bytes");
    }
    Ok(())
}

/// How the sink reaches the source.
#[derive(Debug, Clone)]
pub enum Via {
    /// Straight TCP.
    Tcp,
    /// Kernel MPTCP.
    Mptcp,
    /// SOCKS5 CONNECT through these proxies (one per agent, each `streams` times).
    Socks(Vec<SocketAddr>),
}

/// Open `streams` connections (per proxy for [`Via::Socks`], else in all) to `source` and
/// read `per_conn` bytes from each, on a `load-sink` thread. `progress` counts the bytes.
pub fn sink_all(
    via: Via,
    source: SocketAddr,
    streams: usize,
    per_conn: u64,
    progress: Arc<AtomicU64>,
) -> Result<()> {
    on_thread("load-sink", move || {
        Box::pin(async move {
            let mut tasks = tokio::task::JoinSet::new();
            let targets: Vec<Option<SocketAddr>> = match &via {
                Via::Socks(p) => p.iter().flat_map(|&p| vec![Some(p); streams]).collect(),
                _ => vec![None; streams],
            };
            for proxy in targets {
                let (via, done) = (via.clone(), progress.clone());
                tasks.spawn(async move {
                    let s = match (proxy, via) {
                        (Some(p), _) => socks_connect(p, source).await?,
                        (None, Via::Mptcp) => TcpStream::from_std(mptcp_connect(source)?)?,
                        _ => TcpStream::connect(source).await?,
                    };
                    sink(s, per_conn, done).await
                });
            }
            while let Some(r) = tasks.join_next().await {
                r.context("a sink task failed")??;
            }
            Ok(())
        })
    })
}

/// One connection to `target` made the way `via` says (through its first proxy).
pub async fn connect(via: &Via, target: SocketAddr) -> Result<TcpStream> {
    Ok(match via {
        Via::Socks(p) => {
            let proxy = p.first().context("no SOCKS5 proxy")?;
            socks_connect(*proxy, target).await?
        }
        Via::Mptcp => TcpStream::from_std(mptcp_connect(target)?)?,
        Via::Tcp => TcpStream::connect(target).await?,
    })
}

async fn socks_hello(proxy: SocketAddr) -> Result<TcpStream> {
    let mut s = TcpStream::connect(proxy).await?;
    s.write_all(&[5, 1, 0]).await?;
    let mut r = [0u8; 2];
    s.read_exact(&mut r).await?;
    if r != [5, 0] {
        bail!("the SOCKS5 proxy {proxy} refused no-authentication");
    }
    Ok(s)
}

/// Send a SOCKS5 request (`cmd` 1: CONNECT, 3: UDP ASSOCIATE) and read the reply's address.
async fn socks_request(s: &mut TcpStream, cmd: u8, target: SocketAddrV4) -> Result<SocketAddr> {
    let mut req = vec![5, cmd, 0, 1];
    req.extend_from_slice(&target.ip().octets());
    req.extend_from_slice(&target.port().to_be_bytes());
    s.write_all(&req).await?;
    let mut rep = [0u8; 10];
    s.read_exact(&mut rep).await?;
    if rep[1] != 0 || rep[3] != 1 {
        bail!(
            "SOCKS5 request {cmd} refused with code {} (address type {})",
            rep[1],
            rep[3]
        );
    }
    let ip = Ipv4Addr::new(rep[4], rep[5], rep[6], rep[7]);
    Ok(SocketAddr::from((ip, u16::from_be_bytes([rep[8], rep[9]]))))
}

async fn socks_connect(proxy: SocketAddr, target: SocketAddr) -> Result<TcpStream> {
    let SocketAddr::V4(t) = target else {
        bail!("IPv4 only")
    };
    let mut s = socks_hello(proxy).await?;
    socks_request(&mut s, 1, t).await?;
    Ok(s)
}

/// What the UDP flow achieved.
#[derive(Debug, Clone, serde::Serialize)]
pub struct UdpReport {
    /// Payload bytes of each datagram.
    pub datagram_bytes: usize,
    /// Datagrams a second the sender offered (0: as fast as it could).
    pub offered_per_s: u64,
    /// Datagrams sent to the agent's relay.
    pub sent: u64,
    /// Datagrams that reached the sink.
    pub delivered: u64,
    /// From the first datagram sent to the last delivered.
    pub seconds: f64,
    /// `delivered / seconds`.
    pub datagrams_per_s: f64,
    /// `1 - delivered / sent`.
    pub loss: f64,
}

/// Ask for a 4 MiB receive buffer (the kernel caps it at net.core.rmem_max).
fn big_receive_buffer(s: &std::net::UdpSocket) {
    use std::os::fd::AsRawFd;
    let v: libc::c_int = 4 << 20;
    // SAFETY: setsockopt reads an int of the given size from a valid pointer.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// Payload of every datagram of the UDP flow.
pub const DATAGRAM: usize = 200;

/// Datagrams the UDP flow's sender hands the kernel per call.
const SENDER_BATCH: usize = 32;

/// `count` datagrams of 200 bytes through SOCKS5 UDP ASSOCIATE at `proxy` to a UDP sink,
/// offered at `rate` datagrams a second (0: as fast as the sender can); the flow is warmed
/// up first (until one datagram got through) so that the session's flow set-up is not
/// counted.
pub fn udp_flow(proxy: SocketAddr, count: u64, rate: u64) -> Result<UdpReport> {
    let sink = std::net::UdpSocket::bind("127.0.0.1:0")?;
    big_receive_buffer(&sink);
    sink.set_read_timeout(Some(Duration::from_millis(200)))?;
    let sink_addr = match sink.local_addr()? {
        SocketAddr::V4(a) => a,
        SocketAddr::V6(_) => bail!("IPv4 only"),
    };
    let (warm, sending) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(true)));
    let counter = udp_sink(sink, warm.clone(), sending.clone())?;
    let result = on_thread("load-udp-send", move || {
        Box::pin(async move {
            let mut ctl = socks_hello(proxy).await?;
            let relay =
                socks_request(&mut ctl, 3, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)).await?;
            let relay = if relay.ip().is_unspecified() {
                SocketAddr::from((Ipv4Addr::LOCALHOST, relay.port()))
            } else {
                relay
            };
            let tx = std::net::UdpSocket::bind("127.0.0.1:0")?;
            let mut dg = vec![0u8, 0, 0, 1];
            dg.extend_from_slice(&sink_addr.ip().octets());
            dg.extend_from_slice(&sink_addr.port().to_be_bytes());
            let head = dg.len();
            dg.resize(head + DATAGRAM, 0x33);
            // Warm up: datagrams marked 0 until one arrives.
            dg[head] = 0;
            let t = Instant::now();
            while warm.load(Ordering::Relaxed) == 0 {
                if t.elapsed() > Duration::from_secs(10) {
                    bail!("no datagram got through the agent's UDP relay {relay} in 10 s");
                }
                tx.send_to(&dg, relay)?;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            dg[head] = 1;
            // The sender is the test rig, not what is measured: it hands the kernel
            // SENDER_BATCH datagrams per call (UDP GSO where the kernel has it, as QUIC
            // stacks send), so that it is not the bottleneck. The agent still receives
            // them one datagram at a time, or GRO-coalesced where the kernel keeps the batch.
            let batch: Vec<u8> = dg.repeat(SENDER_BATCH);
            let start = Instant::now();
            let mut sent = 0u64;
            while sent < count {
                // Paced at `rate` datagrams a second (a burst per millisecond at most).
                if rate > 0 {
                    let due = start + Duration::from_secs_f64(sent as f64 / rate as f64);
                    let now = Instant::now();
                    if due > now + Duration::from_millis(1) {
                        tokio::time::sleep(due - now).await;
                    }
                }
                let n = (count - sent).min(SENDER_BATCH as u64) as usize;
                match braid_net::batch::send(&tx, relay, &batch[..n * dg.len()], dg.len()) {
                    Ok(()) => sent += n as u64,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e.into()),
                }
                // Let the control connection live (the agent ends the flow without it).
                if sent % 4096 < n as u64 {
                    tokio::task::yield_now().await;
                }
            }
            Ok((start, sent, ctl.into_std()?))
        })
    });
    sending.store(false, Ordering::Relaxed);
    let (got, last) = counter
        .join()
        .map_err(|_| anyhow::anyhow!("the UDP sink panicked"))?;
    let (start, sent, _ctl) = result?;
    let seconds = last.map_or(0.0, |l| l.duration_since(start).as_secs_f64());
    Ok(UdpReport {
        datagram_bytes: DATAGRAM,
        offered_per_s: rate,
        sent,
        delivered: got,
        seconds,
        datagrams_per_s: if seconds > 0.0 {
            got as f64 / seconds
        } else {
            0.0
        },
        loss: 1.0 - got as f64 / sent.max(1) as f64,
    })
}

/// The UDP flow's sink thread on `sink`: counts measured datagrams (first byte 1) and
/// warm-up ones (0, into `w`) apart; ends 1 s after the last datagram once `s` (sending)
/// is false, with the count and the last arrival.
fn udp_sink(
    sink: std::net::UdpSocket,
    w: Arc<AtomicU64>,
    s: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<(u64, Option<Instant>)>> {
    // The sink: counts measured datagrams (first byte 1) and warm-up ones (0) apart.
    Ok(std::thread::Builder::new()
        .name("load-udp-sink".into())
        .spawn(move || {
            // GRO where the kernel has it: the sink, part of the rig, takes the server's
            // GSO batches whole instead of paying a system call per datagram.
            braid_net::batch::enable_gro(&sink);
            let mut buf = bytes::BytesMut::new();
            let (mut got, mut last, mut quiet) = (0u64, None, Instant::now());
            loop {
                if let Ok(r) = braid_net::batch::recv(&sink, &mut buf) {
                    for d in braid_net::batch::split(&mut buf, r.segment_size) {
                        if d.len() == DATAGRAM && d[0] == 1 {
                            got += 1;
                            last = Some(Instant::now());
                            quiet = Instant::now();
                        } else {
                            w.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                buf.clear();
                let idle = quiet.elapsed() > Duration::from_millis(1000);
                if !s.load(Ordering::Relaxed) && idle {
                    return (got, last);
                }
            }
        })?)
}
