//! Issue 24, item 4: inbound ports. The agent publishes an echo service of its namespace
//! through the server (`--forward`); clients in the server's namespace connect to the
//! server's public ports. The rig of `live_paths.rs` (root, network namespaces, two links);
//! the braid server runs in-process with a `[forward]` policy for the agent's key. Each
//! side's log is captured (a thread-local subscriber on its thread) to check what a
//! refused port logs.

use crate::nsrig;

use braid_crypto::StaticKeypair;
use braid_net::agent::{Agent, AgentConfig, Forward};
use braid_net::server::{Server, ServerBoard, ServerConfig};
use braid_proxy::inbound::Proto;
use nsrig::{agent_cfg, skip, spawn_in, Net, Stop, SERVER};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

const TCP_PORT: u16 = 18080;
const UDP_PORT: u16 = 15000;
/// Asked for by the agent, not allowed by the server.
const REFUSED_PORT: u16 = 18081;
/// Forwarded to a sink that answers with the SHA-256 of what it read.
const SINK_PORT: u16 = 18082;
/// Forwarded with `,proxy-protocol` to a service that answers with the client address its
/// PROXY v2 header names (issue 38 item 13).
const PROXY_PORT: u16 = 18083;

/// A log captured from one thread's tracing events (also the egress tests').
#[derive(Clone, Default)]
pub(crate) struct Log(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Log {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Log {
    /// Route this thread's events here until the guard is dropped.
    pub(crate) fn capture(&self) -> tracing::subscriber::DefaultGuard {
        let me = self.clone();
        let sub = tracing_subscriber::fmt()
            .with_env_filter("braid_net=info")
            .with_ansi(false)
            .with_writer(move || me.clone())
            .finish();
        tracing::subscriber::set_default(sub)
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// Wait until `n` lines contain `what` (panics after `limit`).
    fn wait_lines(&self, what: &str, n: usize, limit: Duration) {
        let t = Instant::now();
        while self.text().lines().filter(|l| l.contains(what)).count() < n {
            assert!(
                t.elapsed() < limit,
                "no {n} lines {what:?} in {limit:?}:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The braid server in the server namespace, allowing `agent` the TCP and UDP ports.
fn server(
    net: &Net,
    agent: braid_crypto::PublicKey,
    log: Log,
) -> (braid_crypto::PublicKey, Arc<ServerBoard>, Stop) {
    let key = StaticKeypair::generate().unwrap();
    let public = key.public();
    let (board, stop) = spawn_in(&net.s, move |ready| async move {
        let _log = log.capture();
        let mut cfg = ServerConfig::new(SERVER.parse().unwrap(), key, vec![agent]);
        let specs = [
            format!("tcp:{TCP_PORT}"),
            format!("udp:{UDP_PORT}"),
            format!("tcp:{SINK_PORT}"),
            format!("tcp:{PROXY_PORT}"),
        ];
        cfg.forward.allow_specs(&agent.to_base64(), &specs).unwrap();
        braid_testkit::loopback::allow_targets(&mut cfg, &[]);
        let server = Server::bind(cfg).await.unwrap();
        ready.send(server.status()).unwrap();
        let _ = server.run().await;
    });
    (public, board, stop)
}

/// A TCP service that reads to the end and answers with the SHA-256 (hex) of what it read.
async fn sink_service() -> SocketAddr {
    tcp_service(|mut s| async move {
        let mut got = Vec::new();
        if s.read_to_end(&mut got).await.is_ok() {
            let _ = s.write_all(crate::common::sha(&got).as_bytes()).await;
            let _ = s.shutdown().await;
        }
    })
    .await
}

/// A TCP service on the agent's loopback that runs `serve` for each connection.
async fn tcp_service<F, Fut>(serve: F) -> SocketAddr
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(serve(s));
        }
    });
    addr
}

/// A TCP service behind a PROXY v2 header: it reads the header and answers with the client
/// address it names (or what was wrong), as nginx with `proxy_protocol` would log it.
async fn whois_service() -> SocketAddr {
    tcp_service(|mut s| async move {
        let mut got = Vec::new();
        let mut buf = [0u8; 128];
        let said = loop {
            match braid_proxy::proxy_v2::parse(&got) {
                Ok((client, _, _)) => break client.to_string(),
                Err(braid_proxy::proxy_v2::ProxyHeaderError::Incomplete(_)) => {}
                Err(e) => break e.to_string(),
            }
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break "no PROXY header".to_string(),
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        };
        let _ = s.write_all(said.as_bytes()).await;
        let _ = s.shutdown().await;
    })
    .await
}

/// TCP and UDP echo services on the agent's loopback.
async fn echo_services() -> (SocketAddr, SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let tcp = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    let u = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let udp = u.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok((n, from)) = u.recv_from(&mut buf).await {
            let _ = u.send_to(&buf[..n], from).await;
        }
    });
    (tcp, udp)
}

/// A payload unique to `i`, of 1 to 16 KiB.
fn payload(i: usize) -> Vec<u8> {
    let len = 1024 + (i * 7919) % (15 * 1024);
    (0..len).map(|j| (i * 31 + j * 7) as u8).collect()
}

/// Connection `i`: send its payload, read the echo to the end, compare.
async fn tcp_echo(to: SocketAddr, i: usize) -> Result<(), String> {
    let want = payload(i);
    let mut s = TcpStream::connect(to)
        .await
        .map_err(|e| format!("{i}: {e}"))?;
    s.write_all(&want).await.map_err(|e| format!("{i}: {e}"))?;
    s.shutdown().await.map_err(|e| format!("{i}: {e}"))?;
    let mut got = Vec::new();
    s.read_to_end(&mut got)
        .await
        .map_err(|e| format!("{i}: {e}"))?;
    (got == want)
        .then_some(())
        .ok_or_else(|| format!("connection {i}: {} bytes back of {}", got.len(), want.len()))
}

/// `n` requests from one socket, one at a time, each answered within 2 s with its content.
async fn udp_echo(to: SocketAddr, first: usize, n: usize) -> Result<(), String> {
    let s = UdpSocket::bind("0.0.0.0:0").await.unwrap();
    let mut buf = vec![0u8; 2048];
    for i in first..first + n {
        let want = format!("request {i} {}", "x".repeat(i % 900)).into_bytes();
        s.send_to(&want, to).await.map_err(|e| e.to_string())?;
        let (len, from) = tokio::time::timeout(Duration::from_secs(2), s.recv_from(&mut buf))
            .await
            .map_err(|_| format!("request {i}: no answer in 2 s"))?
            .map_err(|e| e.to_string())?;
        if from != to || buf[..len] != want[..] {
            return Err(format!("request {i}: a wrong answer from {from}"));
        }
    }
    Ok(())
}

/// The public TCP port accepts once the agent's session asked for it.
async fn wait_open(to: SocketAddr, limit: Duration) -> Duration {
    let t = Instant::now();
    loop {
        if TcpStream::connect(to).await.is_ok() {
            return t.elapsed();
        }
        assert!(t.elapsed() < limit, "{to} not open after {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An agent in the client namespace, with echo services and forwards for `ports`, until
/// `stop` is sent `true` (clean shutdown: the server gets a CLOSE) or `false` (the agent
/// vanishes: its tasks stop, the server hears nothing).
struct AgentRun {
    stop: Option<tokio::sync::oneshot::Sender<bool>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl AgentRun {
    /// Returns once the server answered the agent's forward request (both its answers
    /// logged: the agent's own log is the only place that tells when ports moved to a new
    /// session; until then a reconnecting agent's old session still serves them).
    fn start(net: &Net, mut cfg: AgentConfig, ports: &[(Proto, u16)]) -> (AgentRun, Log) {
        let log = Log::default();
        let answers = log.clone();
        let n = ports.len();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<bool>();
        let (c, ports) = (net.c.clone(), ports.to_vec());
        cfg.socks = None;
        let thread = std::thread::spawn(move || {
            braid_testbed::netns::enter(&c).unwrap();
            let _log = log.capture();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let (tcp, udp) = echo_services().await;
                let sink = sink_service().await;
                let whois = whois_service().await;
                for (proto, port) in ports {
                    let spec = match proto {
                        Proto::Tcp if port == SINK_PORT => format!("tcp:{port}={sink}"),
                        Proto::Tcp if port == PROXY_PORT => {
                            format!("tcp:{port}={whois},proxy-protocol")
                        }
                        Proto::Tcp => format!("tcp:{port}={tcp}"),
                        Proto::Udp => format!("udp:{port}={udp}"),
                    };
                    cfg.forwards.push(Forward::parse(&spec).unwrap());
                }
                let mut agent = Agent::start(cfg).await.unwrap();
                assert!(agent.wait_established(Duration::from_secs(5)).await);
                ready_tx.send(()).unwrap();
                if stop_rx.await.unwrap_or(true) {
                    agent.shutdown(Duration::from_secs(1)).await;
                }
            });
        });
        ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        answers.wait_lines("inbound port", n, Duration::from_secs(5));
        let run = AgentRun {
            stop: Some(stop),
            thread: Some(thread),
        };
        (run, answers)
    }

    fn stop(mut self, clean: bool) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(clean);
        }
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

impl Drop for AgentRun {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(true);
        }
    }
}

/// Run `f` in the server namespace on a fresh runtime (where a client on the Internet
/// would connect: the server's public address).
fn from_server_side<T: Send + 'static, Fut: std::future::Future<Output = T>>(
    net: &Net,
    f: impl FnOnce() -> Fut + Send + 'static,
) -> T {
    let s = net.s.clone();
    std::thread::spawn(move || {
        braid_testbed::netns::enter(&s).unwrap();
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f())
    })
    .join()
    .expect("the server side panicked")
}

fn public(port: u16) -> SocketAddr {
    SocketAddr::new(SERVER.parse::<SocketAddr>().unwrap().ip(), port)
}

/// From the server's namespace, 100 TCP connections (20 at a time) and 1000 UDP requests
/// (10 senders) to the forwarded ports reach the echo services in the agent's namespace,
/// all answered with their content; the port the server does not allow is not opened, and
/// both ends log the refusal with what to configure.
#[test]
fn forwarded_ports_reach_the_agents_services_and_a_port_not_allowed_is_refused() {
    if skip() {
        return;
    }
    let net = Arc::new(Net::new());
    let key = Arc::new(StaticKeypair::generate().unwrap());
    let agent_pub = key.public();
    let server_log = Log::default();
    let (server_pub, board, _stop) = server(&net, agent_pub, server_log.clone());
    let cfg = agent_cfg(&["a=p0", "b=p1"], key, server_pub);
    let ports = [
        (Proto::Tcp, TCP_PORT),
        (Proto::Udp, UDP_PORT),
        (Proto::Tcp, REFUSED_PORT),
        (Proto::Tcp, PROXY_PORT),
    ];
    let (agent, agent_log) = AgentRun::start(&net, cfg, &ports);
    let (tcp_to, udp_to, refused_to) = (public(TCP_PORT), public(UDP_PORT), public(REFUSED_PORT));
    let (opened, tcp_time, udp_time, refused) = from_server_side(&net, move || async move {
        let opened = wait_open(tcp_to, Duration::from_secs(5)).await;
        let t = Instant::now();
        for batch in 0..5 {
            let conns = (0..20).map(|i| tcp_echo(tcp_to, batch * 20 + i));
            for r in futures_join(conns).await {
                r.unwrap();
            }
        }
        let tcp_time = t.elapsed();
        let t = Instant::now();
        let senders = (0..10).map(|k| udp_echo(udp_to, k * 100, 100));
        for r in futures_join(senders).await {
            r.unwrap();
        }
        let udp_time = t.elapsed();
        let refused = TcpStream::connect(refused_to).await.is_err();
        // Issue 38 item 13: the service behind `,proxy-protocol` learns the real client's
        // address (this socket's), not the agent's own.
        let mut c = TcpStream::connect(public(PROXY_PORT)).await.unwrap();
        let me = c.local_addr().unwrap().to_string();
        let mut said = String::new();
        c.read_to_string(&mut said).await.unwrap();
        assert_eq!(said, me, "the client the PROXY header names");
        let held: Vec<Vec<String>> = (board.snapshot().await.sessions.into_iter())
            .map(|s| s.inbound_ports)
            .collect();
        assert_eq!(
            held,
            vec![vec![
                format!("tcp:{TCP_PORT}"),
                format!("tcp:{PROXY_PORT}"),
                format!("udp:{UDP_PORT}")
            ]],
            "the server's status lists the session's ports, not the refused one"
        );
        (opened, tcp_time, udp_time, refused)
    });
    agent.stop(true);
    eprintln!(
        "public port open {} ms after the session; 100 TCP echoes in {} ms, 1000 UDP echoes in {} ms",
        opened.as_millis(),
        tcp_time.as_millis(),
        udp_time.as_millis()
    );
    assert!(
        refused,
        "tcp:{REFUSED_PORT} is not allowed, yet it accepts connections"
    );
    let (slog, alog) = (server_log.text(), agent_log.text());
    // The advice is the key's whole [forward] line with the refused port added (a second
    // line for the key would be a duplicate key in the file).
    let (key, port) = (
        format!("\"{agent_pub}\" = ["),
        format!("\"tcp:{REFUSED_PORT}\"]"),
    );
    assert!(
        slog.lines().any(|l| l.contains("inbound port refused")
            && l.contains("[forward]")
            && l.contains(&key)
            && l.contains(&port)),
        "the server's log names neither the refused port nor what to configure:\n{slog}"
    );
    assert!(
        alog.lines()
            .any(|l| l.contains("inbound port refused by the server")
                && l.contains(&format!("tcp:{REFUSED_PORT}"))),
        "the agent's log does not say the server refused tcp:{REFUSED_PORT}:\n{alog}"
    );
}

/// An agent that vanishes (no CLOSE: its old session lives on at the server until its
/// idle timeout) and comes back with the same key gets its ports at once, served by the
/// new session; when it stops cleanly, its ports close.
#[test]
fn a_reconnecting_agent_gets_its_ports_back_and_they_close_with_its_session() {
    if skip() {
        return;
    }
    let net = Arc::new(Net::new());
    let key = Arc::new(StaticKeypair::generate().unwrap());
    let (server_pub, _board, _stop) = server(&net, key.public(), Log::default());
    let ports = [(Proto::Tcp, TCP_PORT), (Proto::Udp, UDP_PORT)];
    let (tcp_to, udp_to) = (public(TCP_PORT), public(UDP_PORT));
    let echo_all = move |round: usize| async move {
        wait_open(tcp_to, Duration::from_secs(5)).await;
        let conns = (0..10).map(|i| tcp_echo(tcp_to, round * 100 + i));
        for r in futures_join(conns).await {
            r.unwrap();
        }
        udp_echo(udp_to, round * 100, 20).await.unwrap();
    };
    let cfg = || agent_cfg(&["a=p0", "b=p1"], key.clone(), server_pub);
    let (first, _) = AgentRun::start(&net, cfg(), &ports);
    from_server_side(&net, move || echo_all(0));
    first.stop(false);
    let t = Instant::now();
    let (second, _) = AgentRun::start(&net, cfg(), &ports);
    from_server_side(&net, move || echo_all(1));
    let back = t.elapsed();
    second.stop(true);
    let closed = from_server_side(&net, move || async move {
        let t = Instant::now();
        while TcpStream::connect(tcp_to).await.is_ok() {
            assert!(
                t.elapsed() < Duration::from_secs(3),
                "{tcp_to} still open 3 s after the agent stopped"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        t.elapsed()
    });
    eprintln!(
        "ports served by the new session {} ms after the agent came back; closed {} ms after it stopped",
        back.as_millis(),
        closed.as_millis()
    );
}

/// One connection to a forwarded port carries 16 MB towards the agent's namespace over
/// both links (each shaped to 40 Mbit/s at the server): what arrives is exact, at more than
/// one link's rate, and each link carried at least a quarter of it.
#[test]
fn an_inbound_connection_is_carried_over_both_paths() {
    if skip() {
        return;
    }
    let net = Arc::new(Net::new());
    let key = Arc::new(StaticKeypair::generate().unwrap());
    let (server_pub, _board, _stop) = server(&net, key.public(), Log::default());
    let cfg = agent_cfg(&["a=p0", "b=p1"], key, server_pub);
    let (agent, _) = AgentRun::start(&net, cfg, &[(Proto::Tcp, SINK_PORT)]);
    let data = Arc::new(crate::common::body(16 << 20));
    let want = crate::common::sha(&data);
    let before = [net.rx_bytes(0), net.rx_bytes(1)];
    let to = public(SINK_PORT);
    let (answer, took) = from_server_side(&net, move || async move {
        let t = Instant::now();
        let mut s = TcpStream::connect(to).await.unwrap();
        s.write_all(&data).await.unwrap();
        s.shutdown().await.unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).await.unwrap();
        (answer, t.elapsed())
    });
    agent.stop(true);
    let links = [net.rx_bytes(0) - before[0], net.rx_bytes(1) - before[1]];
    let mbps = (16u64 << 20) as f64 * 8.0 / took.as_secs_f64() / 1e6;
    eprintln!(
        "16 MiB into the agent's namespace through a public port: {mbps:.1} Mbit/s over two \
         40 Mbit/s links; link bytes {links:?}"
    );
    assert_eq!(answer, want, "the service did not get the bytes sent");
    assert!(mbps > 48.0, "{mbps:.1} Mbit/s: not more than one link's 40");
    let total = links[0] + links[1];
    assert!(
        links.iter().all(|&b| b * 4 > total),
        "one link carried less than a quarter: {links:?}"
    );
}

/// Run futures side by side on this thread.
async fn futures_join<F>(fs: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let mut set = tokio::task::JoinSet::new();
    let fs: Vec<_> = fs.enumerate().collect();
    let n = fs.len();
    for (i, f) in fs {
        set.spawn(async move { (i, f.await) });
    }
    let mut out: Vec<Option<F::Output>> = (0..n).map(|_| None).collect();
    while let Some(r) = set.join_next().await {
        let (i, v) = r.unwrap();
        out[i] = Some(v);
    }
    out.into_iter().map(|v| v.unwrap()).collect()
}
