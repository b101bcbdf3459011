//! `braid bench [--size N] [--json]`: one stream through agent and server on loopback, encryption on,
//! one path, no impairment — next to plain TCP over loopback in the same run.
//!
//! Server, agent and the traffic source/sink each run on their own thread with their own
//! single-threaded runtime (as the `braid server` and `braid agent` processes do). Reported:
//! goodput and CPU seconds per GB (all threads of this process, so the source and sink are
//! counted in both rows), and braid's figures as ratios to TCP's.

use anyhow::{bail, Context, Result};
use braid_crypto::StaticKeypair;
use braid_net::agent::{Agent, AgentConfig, AgentPath};
use braid_net::server::{Server, ServerConfig};
use braid_net::udp::PathBind;
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One row of the benchmark.
#[derive(Debug, Serialize)]
pub struct Row {
    /// "tcp" or "braid".
    pub name: String,
    /// Bytes moved.
    pub bytes: u64,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Goodput, Gbit/s.
    pub gbit_per_s: f64,
    /// Process CPU seconds (user + system) per GB moved.
    pub cpu_s_per_gb: f64,
}

/// The whole benchmark.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Plain TCP, then braid.
    pub rows: Vec<Row>,
    /// braid goodput / TCP goodput.
    pub goodput_ratio: f64,
    /// braid CPU per GB / TCP CPU per GB.
    pub cpu_ratio: f64,
}

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes into the zeroed struct we pass.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn thread_runtime(
    name: &str,
    f: impl FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> + Send + 'static,
) {
    let name = name.to_string();
    std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                rt.block_on(f());
            }
        })
        .ok();
}

/// A source that sends `size` bytes to every connection, on its own thread.
fn start_source(size: u64) -> Result<SocketAddr> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    l.set_nonblocking(true)?;
    let addr = l.local_addr()?;
    thread_runtime("bench-source", move || {
        Box::pin(async move {
            let Ok(l) = TcpListener::from_std(l) else {
                return;
            };
            let buf = vec![0x5au8; 256 * 1024];
            while let Ok((mut s, _)) = l.accept().await {
                let mut left = size;
                while left > 0 {
                    let n = left.min(buf.len() as u64) as usize;
                    if s.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                    left -= n as u64;
                }
                let _ = s.shutdown().await;
            }
        })
    });
    Ok(addr)
}

async fn sink(mut s: TcpStream, size: u64) -> Result<()> {
    let mut buf = vec![0u8; 256 * 1024];
    let mut got = 0u64;
    loop {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        got += n as u64;
    }
    if got != size {
        bail!("received {got} of {size} bytes");
    }
    Ok(())
}

async fn socks_connect(proxy: SocketAddr, target: SocketAddr) -> Result<TcpStream> {
    let mut s = TcpStream::connect(proxy).await?;
    s.write_all(&[5, 1, 0]).await?;
    let mut r = [0u8; 2];
    s.read_exact(&mut r).await?;
    let SocketAddr::V4(t) = target else {
        bail!("IPv4 only")
    };
    let mut req = vec![5, 1, 0, 1];
    req.extend_from_slice(&t.ip().octets());
    req.extend_from_slice(&t.port().to_be_bytes());
    s.write_all(&req).await?;
    let mut rep = [0u8; 10];
    s.read_exact(&mut rep).await?;
    if rep[1] != 0 {
        bail!("SOCKS5 CONNECT refused with code {}", rep[1]);
    }
    Ok(s)
}

fn row(name: &str, bytes: u64, seconds: f64, cpu: f64) -> Row {
    Row {
        name: name.into(),
        bytes,
        seconds,
        gbit_per_s: bytes as f64 * 8.0 / seconds / 1e9,
        cpu_s_per_gb: cpu / (bytes as f64 / 1e9),
    }
}

/// Run the benchmark moving `size` bytes each way of measuring.
pub fn loopback(size: u64) -> Result<Report> {
    let source = start_source(size)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;

    // Plain TCP.
    let (c0, t0) = (cpu_seconds(), Instant::now());
    rt.block_on(async { sink(TcpStream::connect(source).await?, size).await })?;
    let tcp = row("tcp", size, t0.elapsed().as_secs_f64(), cpu_seconds() - c0);

    // braid: server and agent on their own threads.
    let server_key = StaticKeypair::generate()?;
    let agent_key = StaticKeypair::generate()?;
    let server_pub = server_key.public();
    let scfg = ServerConfig::new("127.0.0.1:0".parse()?, server_key, vec![agent_key.public()]);
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    thread_runtime("bench-server", move || {
        Box::pin(async move {
            match Server::bind(scfg).await {
                Ok(s) => {
                    let _ = addr_tx.send(s.local_addr().ok());
                    let _ = s.run().await;
                }
                Err(_) => {
                    let _ = addr_tx.send(None);
                }
            }
        })
    });
    let server = addr_rx
        .recv_timeout(Duration::from_secs(5))?
        .context("the benchmark server did not start")?;
    let path = AgentPath::new("lo", PathBind::Address("127.0.0.1".parse()?));
    let acfg = AgentConfig {
        socks: Some("127.0.0.1:0".parse()?),
        // The core's stack as it is (the agent's defaults differ only in timeouts).
        transport: braid_core::Config::default(),
        ..AgentConfig::new(server, server_pub, Arc::new(agent_key), vec![path])
    };
    let (socks_tx, socks_rx) = std::sync::mpsc::channel();
    thread_runtime("bench-agent", move || {
        Box::pin(async move {
            match Agent::start(acfg).await {
                Ok(mut a) => {
                    let ok = a.wait_established(Duration::from_secs(10)).await;
                    let _ = socks_tx.send(if ok { a.socks } else { None });
                    // Keep the agent alive for the rest of the process.
                    std::future::pending::<()>().await;
                }
                Err(_) => {
                    let _ = socks_tx.send(None);
                }
            }
        })
    });
    let socks = socks_rx
        .recv_timeout(Duration::from_secs(15))?
        .context("the benchmark agent did not establish a session")?;
    let (c0, t0) = (cpu_seconds(), Instant::now());
    rt.block_on(async { sink(socks_connect(socks, source).await?, size).await })?;
    let braid = row(
        "braid",
        size,
        t0.elapsed().as_secs_f64(),
        cpu_seconds() - c0,
    );
    Ok(Report {
        goodput_ratio: braid.gbit_per_s / tcp.gbit_per_s,
        cpu_ratio: braid.cpu_s_per_gb / tcp.cpu_s_per_gb,
        rows: vec![tcp, braid],
    })
}

/// Print the report as a table.
pub fn print(r: &Report) {
    println!(
        "{:<6} {:>10} {:>9} {:>10} {:>12}",
        "", "bytes", "seconds", "Gbit/s", "CPU s/GB"
    );
    for x in &r.rows {
        println!(
            "{:<6} {:>10} {:>9.2} {:>10.2} {:>12.2}",
            x.name, x.bytes, x.seconds, x.gbit_per_s, x.cpu_s_per_gb
        );
    }
    println!(
        "braid / tcp: goodput {:.3}, CPU per GB {:.1}x (one stream, one path, encrypted, loopback)",
        r.goodput_ratio, r.cpu_ratio
    );
}
