//! Testbed tests: emulator accuracy (delay, throughput, loss, CPU) and teardown after a
//! normal run and after SIGINT. They need root and network namespaces; elsewhere each test
//! prints why it skips and passes. They share the machine-wide run lock, so they take a
//! process-wide mutex and run one at a time.

use braid_sim::Scenario;
use braid_testbed::faults::FaultKind;
use braid_testbed::l2emu::{EmuConfig, LinkEmu};
use braid_testbed::lock::{RunLock, LOCK_FILE};
use braid_testbed::netns::{in_netns, list_testbed_namespaces, Topology};
use braid_testbed::probe::{EchoServer, Probe, ProbeRoute};
use braid_testbed::traffic::{self, Proto, TrafficServer, TransferSpec};
use braid_testbed::{run_scenario, unavailable_reason, RunOptions};
use std::io::{BufRead, BufReader};
use std::net::{SocketAddrV4, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::SERIAL;

fn skip(test: &str) -> bool {
    match unavailable_reason() {
        Some(why) => {
            println!("skipping {test}: {why}");
            true
        }
        None => false,
    }
}

fn scenario(text: &str) -> Scenario {
    Scenario::from_toml_str(text, Path::new("test.toml")).expect("test scenario")
}

fn paths_toml(paths: &[(&str, &str, &str, f64)]) -> String {
    let mut s = String::from("name = \"t\"\n");
    for (name, rate, delay, loss) in paths {
        s.push_str(&format!(
            "[[path]]\nname = \"{name}\"\nrate = \"{rate}\"\ndelay = \"{delay}\"\nloss = {loss}\n"
        ));
    }
    s.push_str("[workload]\nsize = \"1MB\"\n[[variant]]\nname = \"v\"\n");
    s
}

/// One-way delays of `count` UDP datagrams of `size` bytes sent every `gap` over path `i`
/// (client -> server); `None` for a datagram that did not arrive.
fn udp_probe(
    topo: &Topology,
    i: usize,
    count: usize,
    size: usize,
    gap: Duration,
    settle: Duration,
) -> Vec<Option<Duration>> {
    let l = &topo.paths[i];
    let (sip, cip) = (l.server_ip, l.client_ip);
    let rx = in_netns(&topo.server, move || {
        UdpSocket::bind(SocketAddrV4::new(sip, 9000)).expect("bind receiver")
    })
    .expect("server ns");
    let tx = in_netns(&topo.client, move || {
        UdpSocket::bind(SocketAddrV4::new(cip, 0)).expect("bind sender")
    })
    .expect("client ns");
    tx.connect(SocketAddrV4::new(sip, 9000)).expect("connect");
    rx.set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    // Kernel receive timestamps, and room for a second of datagrams: a receiving thread
    // that a busy host delays must not turn its own socket's overflow into the path's loss.
    let rcvbuf: libc::c_int = 8 << 20;
    for (opt, v) in [(libc::SO_TIMESTAMPNS, 1), (libc::SO_RCVBUFFORCE, rcvbuf)] {
        // SAFETY: a valid c_int option value on our socket.
        unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&rx),
                libc::SOL_SOCKET,
                opt,
                &v as *const libc::c_int as *const libc::c_void,
                4,
            );
        }
    }
    // Warm up ARP through the emulator (retry: the path may lose packets).
    let mut buf = vec![0u8; 2048];
    let warm = Instant::now();
    'warm: while warm.elapsed() < Duration::from_secs(5) {
        tx.send(&[0xffu8; 16]).unwrap();
        let until = Instant::now() + settle;
        while Instant::now() < until {
            if let Some((16, _)) = recv_stamped(&rx, &mut buf) {
                break 'warm;
            }
        }
    }
    let recv = std::thread::spawn(move || {
        let mut got: Vec<Option<Duration>> = vec![None; count];
        let end = Instant::now() + gap * count as u32 + settle;
        // After `end`, what the socket already holds is still read (its timestamps say when
        // it arrived): the thread may have been scheduled late.
        let mut drained = false;
        while !drained {
            let r = recv_stamped(&rx, &mut buf);
            drained = r.is_none() && Instant::now() >= end;
            if let Some((n, at)) = r {
                if n >= 16 && buf[..8] != [0xff; 8] {
                    let idx = u64::from_le_bytes(buf[..8].try_into().unwrap()) as usize;
                    let sent = u64::from_le_bytes(buf[8..16].try_into().unwrap());
                    if idx < count && got[idx].is_none() {
                        got[idx] = Some(Duration::from_nanos(at.saturating_sub(sent)));
                    }
                }
            }
        }
        got
    });
    // SAFETY: changes only this thread's scheduling; param outlives the call.
    unsafe {
        let param = libc::sched_param { sched_priority: 5 };
        libc::sched_setscheduler(0, libc::SCHED_FIFO, &param);
    }
    let mut pkt = vec![0u8; size.max(16)];
    let start = Instant::now();
    for k in 0..count {
        let due = start + gap * k as u32;
        if let Some(w) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(w);
        }
        pkt[..8].copy_from_slice(&(k as u64).to_le_bytes());
        pkt[8..16].copy_from_slice(&realtime_ns().to_le_bytes());
        let _ = tx.send(&pkt);
    }
    // SAFETY: as above, back to the normal policy.
    unsafe {
        let param = libc::sched_param { sched_priority: 0 };
        libc::sched_setscheduler(0, libc::SCHED_OTHER, &param);
    }
    recv.join().expect("receiver")
}

/// CLOCK_REALTIME in nanoseconds (the clock of kernel receive timestamps).
fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Receives one datagram with its kernel receive timestamp (SO_TIMESTAMPNS), so the
/// receiving thread's scheduling delay does not count.
fn recv_stamped(s: &UdpSocket, buf: &mut [u8]) -> Option<(usize, u64)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let mut control = [0u64; 16];
    // SAFETY: a zeroed msghdr is valid; every pointer in it refers to live buffers.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: msg is fully initialised and its buffers outlive the call.
    let n = unsafe { libc::recvmsg(std::os::fd::AsRawFd::as_raw_fd(s), &mut msg, 0) };
    if n < 0 {
        return None;
    }
    // SAFETY: walking the control messages the kernel wrote into `control`.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SO_TIMESTAMPNS {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                return Some((
                    n as usize,
                    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64,
                ));
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Some((n as usize, realtime_ns()))
}

fn emu_for(topo: &Topology, scn: &Scenario, i: usize) -> LinkEmu {
    let l = &topo.paths[i];
    LinkEmu::start(EmuConfig {
        name: scn.paths[i].name.clone(),
        ns: topo.emu.clone(),
        client_dev: l.emu_client_if.clone(),
        server_dev: l.emu_server_if.clone(),
        paths: vec![scn.paths[i].clone()],
        seed: 7 + i as u64,
    })
    .expect("emulator")
}

#[test]
fn one_way_delay_within_1ms() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip("one_way_delay_within_1ms") {
        return;
    }
    let _lock = RunLock::acquire(Path::new(LOCK_FILE)).expect("run lock");
    let delays = [1u64, 10, 50, 200];
    let scn = scenario(&paths_toml(&[
        ("d1", "1Gbit", "1ms", 0.0),
        ("d10", "1Gbit", "10ms", 0.0),
        ("d50", "1Gbit", "50ms", 0.0),
        ("d200", "1Gbit", "200ms", 0.0),
    ]));
    let topo = Topology::create(&format!("xd{:x}", std::process::id()), 4).expect("topology");
    let emus: Vec<LinkEmu> = (0..4).map(|i| emu_for(&topo, &scn, i)).collect();
    for (i, &d) in delays.iter().enumerate() {
        // Further sets of probes when one misses: a busy moment of this 2-core machine (or
        // of the host under a virtual machine: CI once saw a 12.9 ms hiccup) can delay a few
        // dozen wake-ups of the emulator or the receiving kernel. Such moments are bursts,
        // but one was seen to last through four sets back to back (152-179 of 200 within
        // 1 ms, then 200 of 200 a minute later): up to 10 sets, 3 s apart, so they span
        // about 45 s (only when sets miss). A broken emulator is off on every set (and one
        // datagram early fails at once).
        let mut verdict = Err(String::new());
        for attempt in 0..10 {
            if attempt > 0 {
                std::thread::sleep(std::time::Duration::from_secs(3));
            }
            verdict = probe_delay(&topo, i, d, attempt);
            if verdict.is_ok() {
                break;
            }
        }
        if let Err(e) = verdict {
            panic!("{e}");
        }
    }
    drop(emus);
}

/// 200 probes over emulated path `i` with one-way delay `d` ms: the median and 95 % of
/// them must be within 1 ms of `d`.
fn probe_delay(topo: &Topology, i: usize, d: u64, attempt: u32) -> Result<(), String> {
    let got = udp_probe(
        topo,
        i,
        200,
        100,
        Duration::from_millis(2),
        Duration::from_millis(2 * d + 100),
    );
    let mut ms: Vec<f64> = got
        .iter()
        .flatten()
        .map(|x| x.as_secs_f64() * 1e3)
        .collect();
    assert_eq!(ms.len(), 200, "path {d} ms: every datagram arrives");
    ms.sort_by(f64::total_cmp);
    let (lo, med, hi) = (ms[0], ms[ms.len() / 2], ms[ms.len() - 1]);
    let within = ms.iter().filter(|&&x| (x - d as f64).abs() <= 1.0).count();
    println!(
        "delay {d} ms (set {attempt}): measured min {lo:.3} median {med:.3} p95 {:.3} max {hi:.3} ms; \
         {within} of {} within 1 ms",
        ms[ms.len() * 95 / 100],
        ms.len()
    );
    assert!(
        lo >= d as f64 - 0.2,
        "delay {d} ms: a datagram arrived after {lo:.3} ms, early"
    );
    if (med - d as f64).abs() > 1.0 {
        return Err(format!("delay {d} ms: median {med:.3} ms"));
    }
    if within * 100 < ms.len() * 95 {
        return Err(format!("delay {d} ms: only {within} within 1 ms"));
    }
    Ok(())
}

#[test]
fn tcp_throughput_within_5_percent_and_emulator_cpu() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip("tcp_throughput_within_5_percent") {
        return;
    }
    let _lock = RunLock::acquire(Path::new(LOCK_FILE)).expect("run lock");
    let rates = [10u64, 50, 200];
    let scn = scenario(&paths_toml(&[
        ("r10", "10Mbit", "5ms", 0.0),
        ("r50", "50Mbit", "5ms", 0.0),
        ("r200", "200Mbit", "5ms", 0.0),
    ]));
    let topo = Topology::create(&format!("xr{:x}", std::process::id()), 3).expect("topology");
    let emus: Vec<LinkEmu> = (0..3).map(|i| emu_for(&topo, &scn, i)).collect();
    let server = TrafficServer::start(
        &topo.server,
        SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0),
        Proto::Tcp,
    )
    .expect("traffic server");
    // TCP payload per 1500-byte IP packet: 1500 - 20 (IP) - 20 (TCP) - 12 (timestamps).
    let payload_share = 1448.0 / 1500.0;
    for (i, &mbit) in rates.iter().enumerate() {
        let l = &topo.paths[i];
        let secs = 3.5;
        let size = (mbit as f64 * 1e6 / 8.0 * secs) as u64;
        let cpu0 = emus[i]
            .counters()
            .cpu_ns
            .load(std::sync::atomic::Ordering::Relaxed);
        let t0 = Instant::now();
        let out = traffic::transfer(&TransferSpec {
            ns: topo.client.clone(),
            target: SocketAddrV4::new(l.server_ip, server.addr.port()),
            bind: Some(l.client_ip),
            proto: Proto::Tcp,
            cc: Some("cubic".into()),
            socks: None,
            direction: braid_sim::Direction::Down,
            size,
            seed: 1,
            timeout: Duration::from_secs(30),
        })
        .expect("transfer");
        let wall = t0.elapsed().as_secs_f64();
        std::thread::sleep(Duration::from_millis(150));
        let cpu = emus[i]
            .counters()
            .cpu_ns
            .load(std::sync::atomic::Ordering::Relaxed)
            - cpu0;
        assert!(out.verified, "{mbit} Mbit/s: {:?}", out.error);
        // Steady state: skip the first second (slow start) and the last, partial sample.
        let s = &out.samples_bps;
        let steady = &s[10.min(s.len())..s.len().saturating_sub(1)];
        assert!(
            steady.len() >= 10,
            "{mbit} Mbit/s: too few samples ({})",
            s.len()
        );
        let measured = steady.iter().sum::<f64>() / steady.len() as f64;
        let expect = mbit as f64 * 1e6 * payload_share;
        let err = (measured - expect) / expect;
        println!(
            "rate {mbit} Mbit/s: steady goodput {:.2} Mbit/s (expected {:.2} = rate x 1448/1500, \
             error {:+.2} %), whole transfer {:.2} Mbit/s; emulator CPU {:.1} % of one core \
             ({:.3} s CPU in {:.2} s)",
            measured / 1e6,
            expect / 1e6,
            err * 100.0,
            out.goodput_bps / 1e6,
            cpu as f64 / 1e9 / wall * 100.0,
            cpu as f64 / 1e9,
            wall
        );
        assert!(
            err.abs() <= 0.05,
            "{mbit} Mbit/s: goodput off by {:.2} %",
            err * 100.0
        );
    }
    drop(server);
    drop(emus);
}

#[test]
fn loss_within_binomial_bound() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip("loss_within_binomial_bound") {
        return;
    }
    let _lock = RunLock::acquire(Path::new(LOCK_FILE)).expect("run lock");
    let scn = scenario(&paths_toml(&[
        ("l5", "100Mbit", "1ms", 0.05),
        ("l1", "100Mbit", "1ms", 0.01),
    ]));
    let topo = Topology::create(&format!("xl{:x}", std::process::id()), 2).expect("topology");
    let emus: Vec<LinkEmu> = (0..2).map(|i| emu_for(&topo, &scn, i)).collect();
    let n = 4000usize;
    for (i, p) in [(0usize, 0.05f64), (1, 0.01)] {
        let got = udp_probe(
            &topo,
            i,
            n,
            200,
            Duration::from_micros(100),
            Duration::from_millis(50),
        );
        let lost = got.iter().filter(|x| x.is_none()).count() as f64;
        let mean = n as f64 * p;
        let bound = 2.576 * (n as f64 * p * (1.0 - p)).sqrt();
        println!(
            "loss {:.1} %: {lost} of {n} lost ({:.2} %), 99 % bound {:.0}..{:.0}",
            p * 100.0,
            lost / n as f64 * 100.0,
            mean - bound,
            mean + bound
        );
        assert!((lost - mean).abs() <= bound, "loss {p}: {lost} lost of {n}");
    }
    drop(emus);
}

/// Children of this process that are still around (helpers must all be reaped).
fn helper_processes() -> Vec<String> {
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in dir.flatten() {
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains("ss-server") || cmd.contains("ss-local") || cmd.contains("braid-testbed-") {
            found.push(cmd);
        }
    }
    found
}

fn leftover_check(what: &str) {
    let ns = list_testbed_namespaces();
    assert!(ns.is_empty(), "{what}: namespaces left: {ns:?}");
    let procs = helper_processes();
    assert!(procs.is_empty(), "{what}: processes left: {procs:?}");
    let links = Command::new("ip")
        .args(["-o", "link"])
        .output()
        .expect("ip link");
    let links = String::from_utf8_lossy(&links.stdout);
    assert!(
        !links
            .lines()
            .any(|l| l.contains(" p0c") || l.contains(" bond0")),
        "{what}: links left in the root namespace: {links}"
    );
}

#[test]
fn normal_run_leaves_nothing_behind() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip("normal_run_leaves_nothing_behind") {
        return;
    }
    let allowed_before =
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_allowed_congestion_control").unwrap();
    let mut text = String::from(
        "name = \"clean\"\n[[path]]\nname = \"a\"\nrate = \"50Mbit\"\ndelay = \"5ms\"\n\
         [[path]]\nname = \"b\"\nrate = \"20Mbit\"\ndelay = \"20ms\"\n\
         [workload]\nsize = \"12MB\"\n\
         [[variant]]\nname = \"tcp\"\nkind = \"tcp\"\npaths = [\"a\"]\n\
         [[variant]]\nname = \"mptcp\"\nkind = \"mptcp\"\n\
         [[variant]]\nname = \"bond\"\nkind = \"bond\"\n\
         [[variant]]\nname = \"ss\"\nkind = \"ss-mptcp\"\n",
    );
    if braid_testbed::find_braid().is_some() {
        text.push_str("[[variant]]\nname = \"braid\"\n");
    } else {
        println!("no working braid binary: the braid variant is left out");
    }
    let scn = scenario(&text);
    let opts = RunOptions {
        handle_signals: false,
        ..RunOptions::default()
    };
    let rep = run_scenario(&scn, &opts, |_| {}).expect("run");
    print!("{}", rep.report.table());
    assert!(rep.report.all_verified());
    assert_eq!(rep.report.mode, "testbed");
    assert_eq!(rep.samples.len(), rep.report.results.len());
    let mptcp = &rep.report.results[1];
    assert!(
        mptcp.paths.iter().all(|p| p.bytes > 100_000),
        "MPTCP used both paths: {:?}",
        mptcp.paths
    );
    check_latency(&rep);
    let json = serde_json::to_string(&rep).unwrap();
    assert!(json.contains("\"mode\":\"testbed\"") && json.contains("\"throughput_bps\""));
    for key in [
        "latency_idle_p50_ms",
        "latency_load_p99_ms",
        "probe_loss",
        "rpm",
        "probe_rtt_s",
    ] {
        assert!(json.contains(&format!("\"{key}\"")), "{key} in the JSON");
    }
    leftover_check("after a normal run");
    let allowed_after =
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_allowed_congestion_control").unwrap();
    assert_eq!(allowed_before, allowed_after, "host sysctl restored");
}

/// Every variant's transfer carries the latency record, measured along its own route: the
/// idle median at least the shortest path's round trip (10 ms: the probe crossed the
/// emulated links, not a loopback), `tcp` on path "a" about 10 ms (not path "b"'s 40),
/// loaded samples kept, and an RPM (the transfers outlast `rpm::RPM_DELAY`).
fn check_latency(rep: &braid_testbed::TestbedReport) {
    for (r, s) in rep.report.results.iter().zip(&rep.samples) {
        let l = &r.latency;
        println!(
            "{}: {l:?}, {} loaded probes",
            r.variant,
            s.probe_rtt_s.len()
        );
        let idle = l.latency_idle_p50_ms.expect("idle p50");
        assert!(
            (10.0..60.0).contains(&idle),
            "{}: idle p50 {idle}",
            r.variant
        );
        if r.variant == "tcp" {
            assert!(idle < 14.0, "tcp on path a: idle p50 {idle} ms");
        }
        let (p50, p95, p99) = (
            l.latency_load_p50_ms.expect("loaded p50"),
            l.latency_load_p95_ms.expect("loaded p95"),
            l.latency_load_p99_ms.expect("loaded p99"),
        );
        assert!(
            p50 >= 10.0 && p50 <= p95 && p95 <= p99,
            "{}: {l:?}",
            r.variant
        );
        let loss = l.probe_loss.expect("probe loss");
        assert!(loss < 0.5, "{}: probe loss {loss}", r.variant);
        assert!(l.rpm.is_some_and(|x| x > 0.0), "{}: no RPM", r.variant);
        let n = s.probe_rtt_s.len() as f64;
        assert!(
            n >= r.completion_s * 40.0,
            "{}: {n} loaded probes in {:.2} s",
            r.variant,
            r.completion_s
        );
    }
}

#[test]
fn sigint_mid_transfer_leaves_nothing_behind() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip("sigint_mid_transfer_leaves_nothing_behind") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("slow.toml");
    std::fs::write(
        &file,
        "name = \"slow\"\n[[path]]\nname = \"a\"\nrate = \"10Mbit\"\ndelay = \"10ms\"\n\
         [[path]]\nname = \"b\"\nrate = \"10Mbit\"\ndelay = \"20ms\"\n\
         [workload]\nsize = \"64MB\"\n[[variant]]\nname = \"ss\"\nkind = \"ss-mptcp\"\n",
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_braid-testbed"))
        .arg("run")
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start braid-testbed");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut log = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(l) => {
                let started = l.contains("rep 0 size");
                log.push(l);
                if started {
                    break;
                }
            }
            Err(_) if Instant::now() > deadline => {
                let _ = child.kill();
                panic!("the transfer never started: {log:?}");
            }
            Err(_) => {}
        }
    }
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        !list_testbed_namespaces().is_empty(),
        "namespaces exist mid-run"
    );
    assert!(!helper_processes().is_empty(), "helpers run mid-transfer");
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no exit after SIGINT"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    while let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
        log.push(l);
    }
    println!(
        "exited {status} {:.2} s after SIGINT; stderr: {}",
        t.elapsed().as_secs_f64(),
        log.join(" / ")
    );
    assert_eq!(status.code(), Some(2));
    assert!(
        log.iter().any(|l| l.contains("interrupted by SIGINT")),
        "{log:?}"
    );
    leftover_check("after SIGINT");
}

/// The latency probe on a path with 10 ms one-way delay and one with 25 ms: idle medians
/// 20-23 ms and 50-53 ms, nothing lost, and a window holds only the packets sent in it.
#[test]
fn latency_probe_measures_the_round_trip() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip("latency_probe_measures_the_round_trip") {
        return;
    }
    let _lock = RunLock::acquire(Path::new(LOCK_FILE)).expect("run lock");
    let scn = scenario(&paths_toml(&[
        ("d10", "100Mbit", "10ms", 0.0),
        ("d25", "100Mbit", "25ms", 0.0),
    ]));
    let topo = Topology::create(&format!("xp{:x}", std::process::id()), 2).expect("topology");
    let emus: Vec<LinkEmu> = (0..2).map(|i| emu_for(&topo, &scn, i)).collect();
    let any = SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0);
    let echo = EchoServer::start(&topo.server, any).expect("echo responder");
    for (i, lo, hi) in [(0usize, 20.0, 23.0), (1, 50.0, 53.0)] {
        let l = &topo.paths[i];
        let route = ProbeRoute::Direct {
            bind: Some(l.client_ip),
            target: SocketAddrV4::new(l.server_ip, echo.addr.port()),
        };
        let probe = Probe::start(&topo.client, route, Duration::from_secs(10)).expect("probe");
        std::thread::sleep(Duration::from_secs(1));
        let run = probe.finish();
        assert!(run.warmed_up && run.error.is_none(), "{:?}", run.error);
        let from = run.measuring_from.expect("measuring");
        let (rtts, sent) = run.window(from, Instant::now());
        let mut ms: Vec<f64> = rtts.iter().map(|s| s * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        let p50 = braid_sim::latency::percentile(&ms, 0.5).expect("samples");
        println!(
            "path {i}: {sent} probes in 1 s, {} answered, min {:.2} p50 {p50:.2} max {:.2} ms",
            ms.len(),
            ms[0],
            ms[ms.len() - 1]
        );
        assert!((45..=55).contains(&sent), "50 a second, got {sent}");
        assert_eq!(ms.len(), sent, "nothing lost on a lossless path");
        assert!(
            (lo..=hi).contains(&p50),
            "path {i}: idle p50 {p50:.2} ms, expected {lo}-{hi}"
        );
        assert!(
            ms[0] >= lo - 0.2,
            "path {i}: an answer after {:.2} ms",
            ms[0]
        );
    }
    drop(echo);
    drop(emus);
}

/// A carrier loss on the first path of `mptcp` (2 s from 1.5 s) and a black hole on the
/// second (a scenario blackout, 1 s from 6 s: after the first path's recovery, which the
/// kernel's backed-off retransmission timer can put past 4.5 s) during one transfer: both are reported; the
/// probe, which takes the first path, has a gap of about 2 s around the carrier loss (so the
/// carrier really went down) and none around the black hole on the other path, and the
/// transfer still arrives. A
/// fault on a path the scenario lacks is refused before anything is built.
#[test]
fn carrier_loss_and_black_hole_are_measured() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip("carrier_loss_and_black_hole_are_measured") {
        return;
    }
    let scn = scenario(
        "name = \"faults\"\n[[path]]\nname = \"a\"\nrate = \"20Mbit\"\ndelay = \"5ms\"\n\
         [[path]]\nname = \"b\"\nrate = \"20Mbit\"\ndelay = \"5ms\"\n\
         blackouts = [{ at = \"6s\", duration = \"1s\" }]\n\
         [workload]\nsize = \"40MB\"\n[[variant]]\nname = \"mptcp\"\nkind = \"mptcp\"\n",
    );
    let mut opts = RunOptions {
        handle_signals: false,
        ..RunOptions::default()
    };
    opts.faults = vec!["carrier:zzz:1s:1s".parse().unwrap()];
    let e = run_scenario(&scn, &opts, |_| {}).unwrap_err().to_string();
    assert!(e.contains("\"zzz\"") && e.contains("a, b"), "{e}");
    opts.faults = vec!["carrier:a:1.5s:2s".parse().unwrap()];
    let rep = run_scenario(&scn, &opts, |_| {}).expect("run");
    print!("{}", braid_testbed::faults::table(&rep.faults));
    assert!(
        rep.report.all_verified(),
        "{:?}",
        rep.report.results[0].error
    );
    assert_eq!(rep.faults.len(), 2, "{:?}", rep.faults);
    let carrier = &rep.faults[0];
    assert_eq!(carrier.fault.kind, FaultKind::Carrier);
    let gap = carrier.probe_longest_gap_s.expect("probe gap");
    assert!((1.8..3.5).contains(&gap), "probe gap {gap} s");
    assert!(carrier.probe_loss_during.is_some() && carrier.time_to_fallback_s.is_some());
    let hole = &rep.faults[1];
    assert_eq!(
        (hole.fault.kind, hole.fault.path.as_str(), hole.fault.at_s),
        (FaultKind::BlackHole, "b", 6.0)
    );
    // The probe takes path a: the black hole on b leaves it alone.
    let gap = hole.probe_longest_gap_s.expect("probe gap");
    assert!(
        gap < 0.5,
        "probe gap {gap} s around the black hole on the other path"
    );
    let json = serde_json::to_string(&rep).unwrap();
    assert!(
        json.contains("\"time_to_recovery_s\""),
        "faults in the JSON"
    );
}
