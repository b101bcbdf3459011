//! The TUN device, its routing and the userspace stack against the real kernel, each test in
//! a network namespace of its own (root only; elsewhere each test prints why it skips).

use braid_core::time::Instant;
use braid_tun::device::TunDevice;
use braid_tun::routing::{installed, Routing, RoutingConfig};
use braid_tun::stack::{Event, StackConfig, TunStack};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::{Duration, Instant as StdInstant};

/// Runs `f` on a thread of its own in a fresh network namespace with loopback up; `None`
/// (after saying why) where namespaces or the TUN device are not available.
fn in_fresh_netns<T: Send + 'static>(
    test: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("skipping {test}: needs root (network namespaces, TUN)");
        return None;
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        println!("skipping {test}: /dev/net/tun is missing");
        return None;
    }
    std::thread::spawn(move || {
        // SAFETY: unshare(CLONE_NEWNET) moves only this thread into a new namespace.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            panic!("unshare(CLONE_NEWNET): {}", std::io::Error::last_os_error());
        }
        let ok = Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status();
        assert!(ok.is_ok_and(|s| s.success()), "ip link set lo up");
        f()
    })
    .join()
    .map_err(|e| std::panic::resume_unwind(e))
    .ok()
}

fn ip(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().expect("ip");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn addrs() -> Vec<(std::net::IpAddr, u8)> {
    vec![
        ("198.18.0.1".parse().unwrap(), 30),
        ("fd00:b1d::1".parse().unwrap(), 64),
    ]
}

/// The next packet from the device within `wait`.
fn next_packet(dev: &TunDevice, wait: Duration) -> Option<Vec<u8>> {
    let end = StdInstant::now() + wait;
    let mut buf = vec![0u8; 65_536];
    while StdInstant::now() < end {
        match dev.recv(&mut buf) {
            Ok(n) => return Some(buf[..n].to_vec()),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(e) => panic!("reading the TUN device: {e}"),
        }
    }
    None
}

#[test]
fn the_tunnel_takes_every_destination_but_braids_own_marked_sockets() {
    in_fresh_netns("the_tunnel_takes_every_destination", || {
        let cfg = RoutingConfig::default();
        let dev = TunDevice::create("bt0", 1400, &addrs()).expect("TUN device");
        let routing = Routing::install(dev.index(), cfg.clone()).expect("routing");
        // Per family: main's specific routes, the tunnel, DNS over UDP and over TCP.
        assert_eq!(installed(&cfg).unwrap(), (8, 2), "{}", ip(&["rule"]));
        let rules = ip(&["rule"]);
        assert!(rules.contains("ipproto tcp dport 53"), "{rules}");
        assert!(ip(&["route", "get", "1.1.1.1"]).contains("dev bt0"));
        assert!(ip(&["-6", "route", "get", "2001:db8::1"]).contains("dev bt0"));

        // An ordinary socket's datagram enters the device.
        let app = UdpSocket::bind("0.0.0.0:0").unwrap();
        app.send_to(b"hello", "1.1.1.1:53").unwrap();
        let mut s = TunStack::new(StackConfig::default(), Instant::ZERO);
        // The kernel may send the new device its own IPv6 chatter first (router
        // solicitations, MLD reports): skip to the first datagram.
        let event = loop {
            let p = next_packet(&dev, Duration::from_secs(2)).expect("a packet in the tunnel");
            let _ = s.handle_packet(Instant::ZERO, &p);
            if let Some(e) = s.poll_event() {
                break Some(e);
            }
        };
        while s.poll_transmit().is_some() {}
        match event {
            Some(Event::UdpDatagram { dst, payload, .. }) => {
                assert_eq!(dst, "1.1.1.1:53".parse::<SocketAddr>().unwrap());
                assert_eq!(payload, b"hello");
            }
            e => panic!("{e:?}"),
        }
        // A socket with braid's mark does not: this namespace has no other route.
        let own = UdpSocket::bind("0.0.0.0:0").unwrap();
        let mark = cfg.fwmark;
        // SAFETY: a valid socket and a u32 option value of the right size.
        let rc = unsafe {
            libc::setsockopt(
                own.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_MARK,
                &mark as *const u32 as *const libc::c_void,
                4,
            )
        };
        assert_eq!(rc, 0);
        let sent = own.send_to(b"braid", "1.1.1.1:53");
        assert!(
            sent.is_err(),
            "a marked socket must not be routed into the tunnel"
        );
        let leaked = std::iter::from_fn(|| next_packet(&dev, Duration::from_millis(200)))
            .any(|p| p.first().is_some_and(|b| b >> 4 == 4));
        assert!(!leaked, "no IPv4 packet of the marked socket in the tunnel");

        drop(routing);
        assert_eq!(installed(&cfg).unwrap(), (0, 0), "{}", ip(&["rule"]));
        drop(dev);
        assert!(
            !ip(&["link"]).contains("bt0"),
            "the device went with its descriptor"
        );
    });
}

#[test]
fn a_killed_agent_leaves_nothing_that_a_restart_does_not_clear() {
    in_fresh_netns("a_killed_agent_leaves_nothing", || {
        let cfg = RoutingConfig {
            exclude: vec!["10.0.0.0/8".parse().unwrap()],
            ..RoutingConfig::default()
        };
        let dev = TunDevice::create("bt0", 1400, &addrs()).expect("TUN device");
        // As after SIGKILL: nothing removed the rules, the device went with the process.
        std::mem::forget(Routing::install(dev.index(), cfg.clone()).unwrap());
        drop(dev);
        let (rules, _) = installed(&cfg).unwrap();
        assert_eq!(rules, 8, "rules outlive a killed agent");
        let dev = TunDevice::create("bt0", 1400, &addrs()).expect("TUN device again");
        let routing = Routing::install(dev.index(), cfg.clone()).expect("routing again");
        assert_eq!(
            installed(&cfg).unwrap(),
            (8, 3),
            "no rule twice: {}",
            ip(&["rule"])
        );
        assert!(ip(&["route", "show", "table", "all"]).contains("throw 10.0.0.0/8"));
        drop(routing);
        drop(dev);
        assert_eq!(installed(&cfg).unwrap(), (0, 0));
    });
}

#[test]
fn a_kernel_tcp_connection_through_the_device_carries_every_byte() {
    in_fresh_netns("a_kernel_tcp_connection_through_the_device", || {
        let dev = TunDevice::create("bt0", 1400, &addrs()).expect("TUN device");
        let _routing = Routing::install(dev.index(), RoutingConfig::default()).expect("routing");
        let total = 4 << 20;
        let client = std::thread::spawn(move || {
            let mut c = TcpStream::connect_timeout(
                &"192.0.2.80:80".parse().unwrap(),
                Duration::from_secs(5),
            )
            .expect("connect through the tunnel");
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let data: Vec<u8> = (0..total).map(|i| (i * 7 % 251) as u8).collect();
            let mut r = c.try_clone().unwrap();
            let reader = std::thread::spawn(move || {
                let mut got = Vec::new();
                r.read_to_end(&mut got).map(|_| got)
            });
            c.write_all(&data).unwrap();
            c.shutdown(std::net::Shutdown::Write).unwrap();
            let got = reader.join().unwrap().expect("read the echo");
            (data, got)
        });
        // The agent's part, reduced to an echo: every byte of the connection goes back.
        let epoch = StdInstant::now();
        let now = || Instant(epoch.elapsed().as_nanos() as u64);
        let mut s = TunStack::new(StackConfig::default(), now());
        let mut buf = vec![0u8; 65_536];
        let mut pending: Vec<u8> = Vec::new();
        let (mut conn, mut eof, mut shut) = (None, false, false);
        let deadline = StdInstant::now() + Duration::from_secs(30);
        while !client.is_finished() && StdInstant::now() < deadline {
            let mut idle = true;
            while let Ok(n) = dev.recv(&mut buf) {
                idle = false;
                let _ = s.handle_packet(now(), &buf[..n]);
            }
            if s.poll_timeout(now()).is_some_and(|t| t <= now()) {
                s.handle_timeout(now());
            }
            while let Some(e) = s.poll_event() {
                match e {
                    Event::TcpOpened { id, dst, .. } => {
                        assert_eq!(dst, "192.0.2.80:80".parse::<SocketAddr>().unwrap());
                        conn = Some(id);
                    }
                    Event::TcpEof { .. } => eof = true,
                    _ => {}
                }
            }
            if let Some(id) = conn {
                while let Ok(n) = s.tcp_recv(now(), id, &mut buf) {
                    if n == 0 {
                        break;
                    }
                    pending.extend_from_slice(&buf[..n]);
                }
                if !pending.is_empty() {
                    let n = s.tcp_send(now(), id, &pending).unwrap_or(0);
                    pending.drain(..n);
                    idle &= n == 0;
                }
                if eof && pending.is_empty() && !shut {
                    s.tcp_shutdown(now(), id).unwrap();
                    shut = true;
                }
            }
            while let Some(p) = s.poll_transmit() {
                idle = false;
                dev.send(&p).expect("write to the TUN device");
            }
            if idle {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        let (sent, got) = client.join().expect("client");
        assert_eq!(got.len(), sent.len(), "bytes echoed");
        assert!(got == sent, "every byte exactly, in order");
    });
}

/// Regression for "TUN device again: Device or resource busy" (a CI run): a device whose
/// descriptor another holder lets go of a moment later (a killed agent's process still
/// exiting, a child forked by another thread before its `exec`) is waited for; one held on
/// is reported busy, by name.
#[test]
fn a_device_still_attached_for_a_moment_is_waited_for() {
    in_fresh_netns("a_device_still_attached", || {
        let dev = TunDevice::create("bt0", 1400, &addrs()).expect("TUN device");
        let t0 = std::time::Instant::now();
        let holder = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(dev);
        });
        let again = TunDevice::create("bt0", 1400, &addrs()).expect("waited for");
        assert!(
            t0.elapsed() >= Duration::from_millis(250),
            "{:?}",
            t0.elapsed()
        );
        holder.join().unwrap();
        let e = TunDevice::create("bt0", 1400, &addrs())
            .map(|_| ())
            .unwrap_err();
        assert!(e.to_string().contains("in use by another process"), "{e}");
        drop(again);
    });
}
