//! The flapping soak (issue 14): agents x streams of back-to-back downloads against one
//! `braid server` process while the links flap, with the server's memory, descriptors,
//! goodput and bytes lost reported.
//!
//! Each agent (in this process) has two paths through braid-emu on loopback; every
//! `BRAID_SOAK_FLAP` seconds (10) path k % 2 of every agent is cut for half the period. Every
//! download is compared byte for byte. The suite runs 45 s with 2 agents x 2 streams;
//! `scripts/soak flap` runs the 30 minutes (`BRAID_SOAK_SECS`). Memory is compared
//! between the end and minute 5 (a third of the run when shorter).

use crate::soakrig;

use braid_emu::Emulator;
use soakrig::*;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const BLOB: usize = 1 << 20;

fn blob() -> Vec<u8> {
    let mut x = 0x9e37_79b9u64;
    (0..BLOB)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as u8
        })
        .collect()
}

/// A TCP server that writes the blob to each connection and closes it.
async fn blob_server(data: Arc<Vec<u8>>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            let d = data.clone();
            tokio::spawn(async move {
                let _ = s.write_all(&d).await;
                let _ = s.shutdown().await;
            });
        }
    });
    addr
}

#[derive(Default)]
struct Tally {
    downloads: AtomicU64,
    bytes: AtomicU64,
    bad: AtomicU64,
}

fn spec(rate: &str, delay: &str) -> braid_sim::PathSpec {
    let text = format!(
        "name = \"s\"\n[[path]]\nname = \"p\"\nrate = \"{rate}\"\ndelay = \"{delay}\"\n\
         queue = \"60KB\"\n[workload]\nsize = \"1MB\"\n[[variant]]\nname = \"v\"\n"
    );
    braid_sim::Scenario::from_toml_str(&text, std::path::Path::new("<soak>"))
        .unwrap()
        .paths
        .remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flapping_links_soak_loses_no_byte_and_server_memory_stays_flat() {
    log_init();
    raise_nofile();
    let secs = env("BRAID_SOAK_SECS", 45);
    let flap = env("BRAID_SOAK_FLAP", 10);
    let (na, ns) = (
        env("BRAID_SOAK_AGENTS", 2) as usize,
        env("BRAID_SOAK_STREAMS", 2) as usize,
    );
    let keys = keys(na);
    let pubs: Vec<_> = keys.iter().map(|k| k.public()).collect();
    let server = ServerProc::start(&pubs, na + 10);
    let mut emus: Vec<[Emulator; 2]> = Vec::new();
    let mut cfgs = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let mk = |j: u64, rate, delay| {
            Emulator::start(
                &spec(rate, delay),
                i as u64 * 2 + j,
                "127.0.0.1:0".parse().unwrap(),
                "127.0.0.1:0".parse().unwrap(),
                server.addr,
            )
            .unwrap()
        };
        let pair = [mk(0, "12Mbit", "4ms"), mk(1, "8Mbit", "10ms")];
        let paths = vec![
            (source(2 * i), Some(pair[0].agent_side)),
            (source(2 * i + 1), Some(pair[1].agent_side)),
        ];
        cfgs.push(agent_cfg(&server, key.clone(), paths, true));
        emus.push(pair);
    }
    let agents = start_agents(cfgs, Duration::from_secs(30)).await;
    let data = Arc::new(blob());
    let target = blob_server(data.clone()).await;
    let tally = Arc::new(Tally::default());
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(secs);
    let mut workers = Vec::new();
    for a in &agents {
        for _ in 0..ns {
            let (socks, data, tally) = (a.socks.unwrap(), data.clone(), tally.clone());
            workers.push(tokio::spawn(async move {
                let mut buf = Vec::with_capacity(BLOB);
                while Instant::now() < deadline {
                    buf.clear();
                    let r = async {
                        let mut s = socks_connect(socks, target).await?;
                        s.read_to_end(&mut buf).await
                    };
                    let ok = matches!(
                        tokio::time::timeout(Duration::from_secs(60), r).await,
                        Ok(Ok(_))
                    ) && buf[..] == data[..];
                    if !ok {
                        eprintln!("download failed or differs: {} bytes", buf.len());
                        tally.bad.fetch_add(1, Ordering::Relaxed);
                    }
                    tally.downloads.fetch_add(1, Ordering::Relaxed);
                    tally.bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
                }
            }));
        }
    }
    // Flap and sample until the deadline.
    let reference_at = Duration::from_secs(300.min(secs / 3));
    let mut reference = None;
    let mut k = 0u64;
    let mut next_sample = Duration::ZERO;
    let me = std::process::id();
    while Instant::now() < deadline {
        let now = t0.elapsed();
        let phase = now.as_millis() as u64 % (flap * 1000);
        let cut_idx = (now.as_secs() / flap % 2) as usize;
        let cutting = phase < flap * 500;
        for pair in &emus {
            pair[cut_idx].set_cut(cutting);
            pair[1 - cut_idx].set_cut(false);
        }
        if now >= next_sample {
            eprintln!(
                "t={:>5} s: server RSS {:.1} MB, {} fds; agents' process RSS {:.1} MB; {} \
                 downloads, {} bad",
                now.as_secs(),
                mb(server.rss_kb()),
                server.fds(),
                mb(rss_kb(me)),
                tally.downloads.load(Ordering::Relaxed),
                tally.bad.load(Ordering::Relaxed)
            );
            next_sample += Duration::from_secs(if secs > 300 { 60 } else { 5 });
        }
        if reference.is_none() && now >= reference_at {
            reference = Some((now, server.rss_kb()));
        }
        k += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for pair in &emus {
        pair[0].set_cut(false);
        pair[1].set_cut(false);
    }
    for w in workers {
        w.await.unwrap();
    }
    let took = t0.elapsed();
    let end = server.rss_kb();
    let (ref_at, ref_rss) = reference.unwrap();
    let (n, bytes, bad) = (
        tally.downloads.load(Ordering::Relaxed),
        tally.bytes.load(Ordering::Relaxed),
        tally.bad.load(Ordering::Relaxed),
    );
    let lost = n * BLOB as u64 - bytes;
    eprintln!(
        "soak {secs} s, {na} agents x {ns} streams, a path cut for {} s every {flap} s: {n} \
         downloads of 1 MB ({bad} bad), {lost} bytes lost, goodput {:.1} Mbit/s; server RSS \
         {:.1} MB at {} s, {:.1} MB at the end ({:+.1} %), {} fds at the end",
        flap / 2,
        bytes as f64 * 8.0 / took.as_secs_f64() / 1e6,
        mb(ref_rss),
        ref_at.as_secs(),
        mb(end),
        (end as f64 / ref_rss as f64 - 1.0) * 100.0,
        server.fds(),
    );
    let _ = k;
    assert_eq!(bad, 0, "downloads failed or differed");
    assert_eq!(lost, 0, "bytes lost");
    assert!(n >= (na * ns) as u64, "no download finished");
    // Within 10 %; short runs get 1 MB of slack for the allocator's warm-up.
    let slack = if secs >= 600 { 0 } else { 1024 };
    assert!(
        end <= ref_rss + ref_rss / 10 + slack,
        "server RSS grew from {ref_rss} KB to {end} KB"
    );
}
