//! `braid agent`: its flags (and config file keys), the per-destination rules, the checked
//! settings (also for `braid check-config`) and the run until SIGTERM or Ctrl-C.
//!
//! Owns: the agent's flags and settings. Must not touch: what the server does (`server.rs`).

use super::*;

/// `braid agent`.
#[derive(Args, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentArgs {
    /// TOML file with any of these settings (flags take precedence); file paths in it are
    /// relative to its folder.
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// The server, HOST:PORT (a name with IPv4 and IPv6 addresses, or both addresses as
    /// ADDR,ADDR, lets paths of either family join the session). Repeat for several servers (sharing one key): the agent
    /// handshakes with all at once, keeps its session with the first that answers (the
    /// lowest RTT), and moves to another when its server stops answering. Without a server
    /// the agent runs in direct mode: each connection whole on one path.
    #[arg(long = "server", value_name = "HOST:PORT")]
    #[serde(default, rename = "server", deserialize_with = "one_or_many")]
    pub servers: Vec<String>,
    /// The server's public key file (from `braid keygen` on the server), or the key itself
    /// (the base64 line of that file).
    #[arg(long, value_name = "FILE")]
    pub server_pub: Option<PathBuf>,
    /// This agent's private key file.
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// A path: NAME=INTERFACE or NAME=LOCAL_IP, then options: `backup` (carries data only
    /// while no other path works), `cap=SIZE/day` or `cap=SIZE/month` (bytes both ways; over
    /// it the path is a backup), `power=WATTS` (for --scheduler operetta). Repeat for each
    /// path, 1 to 8, like --path wifi=wlan0 --path lte=wwan0,backup,cap=10GB/month. Paths
    /// that are absent are used when they appear. `--path auto` (once; `backup` and
    /// `power` allowed, not `cap`) uses every interface with a default route except
    /// loopback and braid's own devices, as many as the other paths leave room for.
    #[arg(
        long = "path",
        value_name = "NAME=IFACE_OR_LOCAL_IP[,OPTION...] | auto"
    )]
    #[serde(default, rename = "path")]
    pub paths: Vec<String>,
    /// SOCKS5 proxy listen address, like 127.0.0.1:1080.
    #[arg(long, value_name = "ADDR:PORT")]
    pub socks: Option<SocketAddr>,
    /// HTTP proxy listen address, like 127.0.0.1:8080: CONNECT (https and any TCP) and plain
    /// http:// requests (`curl -x`).
    #[arg(long, value_name = "ADDR:PORT")]
    pub http: Option<SocketAddr>,
    /// TUN mode: create this device and carry every application through it, no proxy
    /// setting needed (needs CAP_NET_ADMIN). All IPv4 and IPv6 traffic unless --tun-route
    /// says otherwise; braid's own packets stay off it.
    #[arg(long, value_name = "NAME")]
    pub tun: Option<String>,
    /// Accept TCP connections that nftables redirected to this address (`redirect to
    /// :PORT`), and UDP it handed to the same port (`tproxy to :PORT`, needs
    /// CAP_NET_ADMIN), and carry each to its original destination (rules in
    /// docs/deployment.md).
    #[arg(long, value_name = "ADDR:PORT")]
    pub redirect: Option<SocketAddr>,
    /// Answer DNS (UDP and TCP) on this address, like 192.168.1.1:53, through the
    /// server's resolver (its --resolver): hosts of a LAN resolve over the bonded link.
    #[arg(long, value_name = "ADDR:PORT")]
    pub dns: Option<SocketAddr>,
    /// With --tun: carry only this prefix (repeat for several), like 10.0.0.0/8.
    #[arg(long = "tun-route", value_name = "CIDR")]
    #[serde(default, rename = "tun_route")]
    pub tun_routes: Vec<String>,
    /// With --tun: leave this prefix out of the tunnel (repeat for several).
    #[arg(long = "tun-exclude", value_name = "CIDR")]
    #[serde(default)]
    pub tun_exclude: Vec<String>,
    /// Require this SOCKS5 username (with --socks-pass).
    #[arg(long)]
    pub socks_user: Option<String>,
    /// Require this SOCKS5 password (with --socks-user).
    #[arg(long)]
    pub socks_pass: Option<String>,
    /// Packet scheduler: minrtt, rr, wrr, ecf, blest, super (minrtt with ACK offload,
    /// blackout freeze and random-loss recovery), operetta (energy-aware, see --alpha and
    /// power=) or redundant.
    #[arg(long)]
    pub scheduler: Option<String>,
    /// OPERETTA's utility for --scheduler operetta: 0 (least energy per bit) to 1 (most
    /// throughput) [default: 1].
    #[arg(long)]
    pub alpha: Option<f64>,
    /// How UDP (datagrams) uses the paths, both directions: auto (default: each UDP flow,
    /// per application socket and destination, is real-time while it sends at most 200
    /// packets and 300 kbit a second — calls, games, DNS — and goes at once on the
    /// lowest-delay path with a copy on the second-lowest, copies within 5 % of the bytes
    /// sent plus 128 kbit/s; faster flows are spread), spread (every flow over the paths by
    /// delay and capacity, arrivals in order) or redundant (every datagram on the two
    /// fastest paths, no budget). Duplicates are dropped at the far end.
    #[arg(long, value_name = "MODE")]
    pub udp: Option<String>,
    /// File that keeps the bytes counted against path caps, and the path rates direct
    /// mode measured, across restarts [default: braid-agent-caps.state in the working
    /// directory, when a path has a cap].
    #[arg(long, value_name = "FILE")]
    pub state_file: Option<PathBuf>,
    /// How long a proxied connection waits for a session when none is up, in seconds
    /// [default: 10].
    #[arg(long, value_name = "SECONDS")]
    pub session_wait: Option<u64>,
    /// The captive-portal check: an http:// URL that answers 204 No Content, asked from a
    /// path that does not validate; a login page or redirect instead shows the path as
    /// `captive` with the portal's URL. `off`: no checks
    /// [default: http://connectivitycheck.gstatic.com/generate_204].
    #[arg(long, value_name = "URL")]
    pub captive_check: Option<String>,
    /// The NAT64 prefix of IPv6-only links (like 64:ff9b::/96), or `auto`: the one the
    /// AAAA records of ipv4only.arpa reveal (RFC 7050). An IPv4-only server is then
    /// reached from IPv6-only paths at its address synthesized in the prefix
    /// [default: none].
    #[arg(long, value_name = "PREFIX")]
    pub nat64_prefix: Option<String>,
    /// Congestion controller for both directions: bbrq (default: BBR whose window keeps the
    /// path's standing queue to a few milliseconds), cubic, bbr, reno, lia, olia or balia.
    #[arg(long)]
    pub cc: Option<String>,
    /// The control socket `braid status` asks (mode 0600) [default: /run/braid-agent/agent.sock
    /// as root, else $XDG_RUNTIME_DIR/braid/agent.sock].
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics (off by default; no
    /// authentication: keep it on localhost or a management network).
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<SocketAddr>,
    /// Direct mode: `fallback` (default: while no server answers, each new connection goes
    /// straight to its destination, whole on one path) or `off` (connections wait for a
    /// session, then fail).
    #[arg(long, value_name = "fallback|off")]
    pub direct: Option<String>,
    /// Serve a live web dashboard at http://ADDR:PORT/ (off by default). An address other
    /// than loopback needs --dashboard-token or --dashboard-public.
    #[arg(long, value_name = "ADDR:PORT")]
    pub dashboard: Option<SocketAddr>,
    /// The dashboard asks for this token (?token=TOKEN or Authorization: Bearer TOKEN). Put
    /// it in the config file (`dashboard_token`) to keep it out of `ps`.
    #[arg(long, value_name = "TOKEN")]
    pub dashboard_token: Option<String>,
    /// Serve the dashboard on a non-loopback address without a token.
    #[arg(long)]
    #[serde(default)]
    pub dashboard_public: bool,
    /// The packet cipher: auto (AES-256-GCM first where the CPU has AES instructions, else
    /// ChaCha20-Poly1305 first; the server picks by its own order among what the agent
    /// offers), aes-256-gcm or chacha20-poly1305 (only that one) [default: auto].
    #[arg(long, value_name = "auto|aes-256-gcm|chacha20-poly1305")]
    pub cipher: Option<String>,
    /// Publish a service behind the agent on a port of the server: tcp:PORT=HOST:PORT or
    /// udp:PORT=HOST:PORT, like tcp:8080=127.0.0.1:80 (connections to the server's port
    /// 8080 reach 127.0.0.1:80 here). Repeat for several. The server opens only ports its
    /// configuration allows this agent's key (its --allow-forward or [forward] table).
    /// `,proxy-protocol` after a tcp: one starts each connection to the service with a
    /// PROXY protocol v2 header naming the real client (nginx `proxy_protocol`, HAProxy
    /// `accept-proxy`).
    #[arg(
        long = "forward",
        value_name = "tcp|udp:PORT=HOST:PORT[,proxy-protocol]"
    )]
    #[serde(default)]
    pub forward: Vec<String>,
    /// Log level: error, warn, info, debug or trace.
    #[arg(long)]
    pub log_level: Option<String>,
    /// Send connections and UDP to DEST straight to it over one path (chosen as direct
    /// mode chooses), never through the server, even while a session is up. DEST is a
    /// CIDR (10.0.0.0/8), an address (192.0.2.7) or a domain (example.com: it and every
    /// name under it; domains match SOCKS5 and HTTP requests by name, TUN mode by the
    /// names in the DNS answers it carried). Repeat for several. In the config file:
    /// `bypass = ["10.0.0.0/8", "example.com"]`.
    #[arg(long = "bypass", value_name = "CIDR|IP|DOMAIN")]
    #[serde(default)]
    pub bypass: Vec<String>,
    /// DEST=PATH: connections and UDP to DEST go straight to it over path PATH only (from
    /// that link's own address, never through the server); while PATH is down they fail.
    /// DEST as for --bypass. Repeat for several. In the config file:
    /// `pin = { "sip.example.com" = "dsl" }`.
    #[arg(long = "pin", value_name = "DEST=PATH")]
    #[serde(default, deserialize_with = "pin_table")]
    pub pin: Vec<String>,
}

/// `pin` in the config file: a table `{ "DEST" = "PATH" }` (or a list of "DEST=PATH"), as
/// the `--pin` values.
fn pin_table<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Pins {
        Table(std::collections::BTreeMap<String, String>),
        List(Vec<String>),
    }
    Ok(match Pins::deserialize(d)? {
        Pins::Table(t) => t.into_iter().map(|(k, v)| format!("{k}={v}")).collect(),
        Pins::List(v) => v,
    })
}

/// `--bypass` and `--pin` (flags replace the file's), checked against the path names.
fn agent_rules(
    (bypass, f_bypass): (Vec<String>, Vec<String>),
    (pin, f_pin): (Vec<String>, Vec<String>),
    paths: &[AgentPath],
) -> Result<braid_net::rules::Rules> {
    let pick = |x: Vec<String>, y| if x.is_empty() { y } else { x };
    let (bypass, pin) = (pick(bypass, f_bypass), pick(pin, f_pin));
    let named: Vec<&str> = paths
        .iter()
        .filter(|p| p.bind != braid_net::udp::PathBind::Auto)
        .map(|p| p.name.as_str())
        .collect();
    // A bypass takes any path, `auto` slots too (as direct mode does); a pin names one.
    braid_net::rules::Rules::parse(&bypass, &pin, &named).map_err(|e| anyhow::anyhow!("{e}"))
}

fn parse_path(s: &str) -> Result<AgentPath> {
    let spec = braid_net::policy::parse_path_spec(s).map_err(|e| anyhow::anyhow!("--path {e}"))?;
    Ok(AgentPath {
        name: spec.name,
        bind: spec.bind,
        via: None,
        policy: spec.policy,
    })
}

/// A repeatable flag's values, else the config file's (flags replace the file's list).
fn either(flag: Vec<String>, file: Vec<String>) -> Vec<String> {
    if flag.is_empty() {
        file
    } else {
        flag
    }
}

/// `--direct`: `fallback` (the default) or `off` (which needs a server).
fn direct_mode(flag: Option<String>, direct_only: bool) -> Result<braid_net::agent::DirectMode> {
    Ok(match flag.as_deref() {
        None | Some("fallback") => braid_net::agent::DirectMode::Fallback,
        Some("off") if direct_only => {
            bail!("--direct off needs a --server: without one, direct mode is all the agent can do")
        }
        Some("off") => braid_net::agent::DirectMode::Off,
        Some(x) => bail!("--direct {x:?}: expected fallback or off"),
    })
}

/// `--path`: 1 to 8, each parsed, every name once.
fn agent_paths(paths: Vec<String>) -> Result<Vec<AgentPath>> {
    if paths.is_empty() || paths.len() > 8 {
        bail!(
            "give 1 to 8 paths with --path NAME=IFACE_OR_LOCAL_IP (got {})",
            paths.len()
        );
    }
    let paths = paths
        .iter()
        .map(|p| parse_path(p))
        .collect::<Result<Vec<_>>>()?;
    for (i, p) in paths.iter().enumerate() {
        if paths[..i].iter().any(|q| q.name == p.name) {
            bail!(
                "--path: the name {:?} is used twice; give each path its own name",
                p.name
            );
        }
    }
    Ok(paths)
}

/// `--tun NAME` with its `--tun-route` and `--tun-exclude` prefixes.
fn tun_settings(
    tun: Option<String>,
    routes: Vec<String>,
    exclude: Vec<String>,
) -> Result<Option<braid_net::agent::TunSettings>> {
    let cidrs = |flag: &str, v: Vec<String>| -> Result<Vec<braid_tun::routing::Cidr>> {
        v.iter()
            .map(|c| {
                c.parse()
                    .map_err(|e: String| anyhow::anyhow!("--{flag}: {e}"))
            })
            .collect()
    };
    let routes = cidrs("tun-route", routes)?;
    let exclude = cidrs("tun-exclude", exclude)?;
    if tun.is_none() && !(routes.is_empty() && exclude.is_empty()) {
        bail!("--tun-route and --tun-exclude need --tun NAME");
    }
    Ok(tun.map(|name| braid_net::agent::TunSettings {
        name,
        routes,
        exclude,
    }))
}

/// The transport: braid's one default stack (`Config::default`, docs/results.md "One
/// default") with the agent's idle timeout (see braid_net::agent::agent_transport), then
/// `--scheduler`, `--cc`, `--alpha` and `--udp`. The simulator's variants that name no
/// scheduler or controller run the same stack.
fn transport(
    scheduler: Option<String>,
    cc: Option<String>,
    alpha: Option<f64>,
    udp: Option<String>,
) -> Result<braid_core::Config> {
    let mut transport = braid_net::agent::agent_transport();
    if let Some(s) = scheduler {
        let kind = s
            .parse()
            .map_err(|e: String| anyhow::anyhow!("--scheduler: {e}"))?;
        transport = transport.with_scheduler(kind);
    }
    if let Some(c) = cc {
        transport.cc = c
            .parse()
            .map_err(|e: String| anyhow::anyhow!("--cc: {e}"))?;
    }
    if let Some(alpha) = alpha {
        if !(0.0..=1.0).contains(&alpha) {
            bail!(
                "--alpha {alpha}: expected a number from 0 (least energy) to 1 (most throughput)"
            );
        }
        if transport.scheduler != braid_core::SchedulerKind::Operetta {
            bail!("--alpha only applies to --scheduler operetta");
        }
        transport.alpha = alpha;
    }
    if let Some(u) = udp {
        transport.datagram_mode = braid_core::session::DatagramMode::ALL
            .iter()
            .find(|(n, _)| *n == u)
            .map(|(_, m)| *m)
            .ok_or_else(|| anyhow::anyhow!("--udp {u:?}: expected auto, spread or redundant"))?;
    }
    Ok(transport)
}

/// Everything `braid agent` needs, checked (also `braid check-config`).
pub(crate) struct AgentSettings {
    pub cfg: AgentConfig,
    pub control: Option<PathBuf>,
    pub metrics: Option<SocketAddr>,
    pub dashboard: Option<braid_ops::dashboard::DashboardConfig>,
    pub log_level: Option<String>,
}

/// `--nat64-prefix`: the IPv4 servers' synthesized IPv6 addresses added to `other_family`
/// (the prefix given, or found with `auto`; said on stderr either way).
fn nat64(
    given: Option<String>,
    addrs: &[std::net::SocketAddr],
    other_family: &mut Vec<(std::net::SocketAddr, std::net::SocketAddr)>,
) -> Result<()> {
    let Some(given) = given else { return Ok(()) };
    let mut lookup = |h: &str| std::net::ToSocketAddrs::to_socket_addrs(h).map(Vec::from_iter);
    match crate::server_addrs::nat64_prefix(&given, &mut lookup)? {
        Some(p) => {
            eprintln!("braid: NAT64 prefix {p}: IPv6-only paths reach IPv4 servers through it");
            crate::server_addrs::with_nat64(addrs, other_family, &p);
        }
        None => eprintln!(
            "braid: --nat64-prefix auto: ipv4only.arpa has no AAAA record of a NAT64 \
             prefix here (no DNS64 on this network); IPv6-only paths reach only servers \
             with an IPv6 address"
        ),
    }
    Ok(())
}

/// `--captive-check`: the URL, the default's, or none (`off`).
fn captive_check(s: Option<String>) -> Result<Option<braid_net::pathmgr::captive::CheckUrl>> {
    use braid_net::pathmgr::captive::{CheckUrl, DEFAULT_CHECK_URL};
    match s.as_deref() {
        Some("off") => Ok(None),
        s => Ok(Some(CheckUrl::parse(s.unwrap_or(DEFAULT_CHECK_URL))?)),
    }
}

/// Turn flags and the config file into an agent configuration, reading the key files; a
/// server name that does not resolve fails (`check-config`).
pub(crate) fn agent_settings(a: AgentArgs) -> Result<AgentSettings> {
    settings(a, Unresolved::Fail)
}

/// [`agent_settings`], with what to do when a server name does not resolve (yet).
fn settings(a: AgentArgs, unresolved: Unresolved) -> Result<AgentSettings> {
    let f = agent_file(a.config.as_deref())?;
    let servers = either(a.servers, f.servers);
    // A name with A and AAAA records, or `ADDR,ADDR`: one server reachable over both
    // families (paths of either family join its session).
    let (addrs, mut other_family) = crate::server_addrs::resolve(&servers, unresolved)?;
    nat64(a.nat64_prefix.or(f.nat64_prefix), &addrs, &mut other_family)?;
    let direct_only = servers.is_empty();
    let server_pub = a.server_pub.or(f.server_pub);
    let key = a.key.or(f.key);
    if !direct_only {
        if server_pub.is_none() {
            bail!("--server-pub FILE is required with --server");
        }
        if key.is_none() {
            bail!("--key FILE is required with --server (make one with `braid keygen`)");
        }
    }
    let direct = direct_mode(a.direct.or(f.direct), direct_only)?;
    let paths = agent_paths(either(a.paths, f.paths))?;
    let rules = agent_rules((a.bypass, f.bypass), (a.pin, f.pin), &paths)?;
    let socks = a.socks.or(f.socks);
    let http = a.http.or(f.http);
    let tun = a.tun.or(f.tun);
    let redirect = a.redirect.or(f.redirect);
    let dns = a.dns.or(f.dns);
    let publishes = !(a.forward.is_empty() && f.forward.is_empty());
    let ways_in = [socks, http, redirect, dns].iter().any(Option::is_some) || tun.is_some();
    if !ways_in && !publishes {
        bail!(
            "give at least one way in for applications: --socks ADDR:PORT, --http ADDR:PORT, \
             --tun NAME, --redirect ADDR:PORT or --dns ADDR:PORT (or publish a service with \
             --forward)"
        );
    }
    let tun = tun_settings(
        tun,
        either(a.tun_routes, f.tun_routes),
        either(a.tun_exclude, f.tun_exclude),
    )?;
    let socks_auth = socks_auth(a.socks_user.or(f.socks_user), a.socks_pass.or(f.socks_pass))?;
    let transport = transport(
        a.scheduler.or(f.scheduler),
        a.cc.or(f.cc),
        a.alpha.or(f.alpha),
        a.udp.or(f.udp),
    )?;
    let state_file = a.state_file.or(f.state_file).or_else(|| {
        paths
            .iter()
            .any(|p| p.policy.cap.is_some())
            .then(|| PathBuf::from("braid-agent-caps.state"))
    });
    let session_wait = Duration::from_secs(a.session_wait.or(f.session_wait).unwrap_or(10));
    let log_level = a.log_level.or(f.log_level);
    check_log_level(log_level.as_deref())?;
    let policy = if transport.scheduler == braid_core::SchedulerKind::Operetta {
        braid_net::agent::ConnPolicy::Operetta {
            alpha: transport.alpha,
        }
    } else {
        braid_net::agent::ConnPolicy::Throughput
    };
    let base = with_keys(&addrs, server_pub, key)?;
    let cfg = AgentConfig {
        servers: addrs,
        server_other_family: other_family,
        server_pub: base.server_pub,
        key: base.key,
        direct: braid_net::agent::DirectSettings {
            mode: direct,
            policy,
        },
        paths,
        socks,
        http,
        socks_auth,
        http_limits: HttpLimits::default(),
        proxy_limits: Default::default(),
        open_timeout: Duration::from_secs(15),
        session_wait,
        state_file,
        transport,
        tun,
        redirect,
        dns,
        rekey: Default::default(),
        ciphers: ciphers(a.cipher.or(f.cipher))?,
        rules,
        captive_check: captive_check(a.captive_check.or(f.captive_check))?,
        forwards: either(a.forward, f.forward)
            .iter()
            .map(|s| braid_net::agent::Forward::parse(s))
            .collect::<Result<_, _>>()
            .map_err(anyhow::Error::msg)?,
    };
    Ok(AgentSettings {
        cfg,
        control: a.control.or(f.control),
        metrics: a.metrics.or(f.metrics),
        dashboard: dashboard_config(
            a.dashboard.or(f.dashboard),
            a.dashboard_token.or(f.dashboard_token),
            a.dashboard_public || f.dashboard_public,
        )?,
        log_level,
    })
}

/// The config file `file` (none: every setting unset), its file names taken as relative
/// to its folder; `server_pub` stays as it is when it is the key itself.
fn agent_file(file: Option<&Path>) -> Result<AgentArgs> {
    let mut f: AgentArgs = load(file)?;
    f.server_pub = match f.server_pub {
        Some(k) if inline_key(&k).is_some() => Some(k),
        p => beside(file, p),
    };
    f.key = beside(file, f.key);
    f.state_file = beside(file, f.state_file);
    f.control = beside(file, f.control);
    Ok(f)
}

/// `--socks-user` and `--socks-pass`: both or neither.
fn socks_auth(user: Option<String>, pass: Option<String>) -> Result<AuthPolicy> {
    Ok(match (user, pass) {
        (Some(u), Some(p)) => {
            AuthPolicy::user_pass(u, p).map_err(|e| anyhow::anyhow!("SOCKS5 credentials: {e}"))?
        }
        (None, None) => AuthPolicy::NoAuth,
        _ => bail!("--socks-user and --socks-pass go together"),
    })
}

use super::key_role::KeySetting::{AgentKey, ServerPub};
use crate::server_addrs::Unresolved;

/// An agent configuration with the server's public key and this agent's key read (from
/// their files, or `server_pub` as the key itself), for the first server address; with
/// neither key, a direct-only one.
fn with_keys(
    addrs: &[SocketAddr],
    server_pub: Option<PathBuf>,
    key: Option<PathBuf>,
) -> Result<AgentConfig> {
    Ok(match (server_pub, key) {
        (Some(p), Some(k)) => AgentConfig::new(
            addrs.first().copied().unwrap_or(([127, 0, 0, 1], 0).into()),
            match inline_key(&p) {
                Some(k) if !p.exists() => k,
                _ => braid_crypto::read_public_key(&p).map_err(|e| ServerPub.explain(e))?,
            },
            Arc::new(braid_crypto::read_private_key(&k).map_err(|e| AgentKey.explain(e))?),
            Vec::new(),
        ),
        _ => AgentConfig::direct_only(Vec::new())?,
    })
}

/// `braid agent`: runs until SIGTERM or Ctrl-C, then closes its session (the server gets a
/// CLOSE), its proxy ports and its control socket.
pub fn agent(a: AgentArgs) -> Result<()> {
    // At boot the resolver may not answer yet: the agent waits for the server's name.
    let st = settings(a, Unresolved::Retry)?;
    init_logging(st.log_level.as_deref())?;
    let (control, metrics, dashboard) = (st.control, st.metrics, st.dashboard);
    runtime()?.block_on(async move {
        let agent = Agent::start(st.cfg).await?;
        let source = braid_ops::Source::Agent(agent.status());
        let _ctl = control_socket(control, "agent", source.clone())?;
        let _metrics = match metrics {
            Some(m) => Some(braid_ops::http::serve_metrics(m, source.clone()).await?),
            None => None,
        };
        let _dashboard = match dashboard {
            Some(d) => Some(braid_ops::dashboard::serve(d, source).await?),
            None => None,
        };
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("installing the SIGTERM handler")?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r.context("waiting for Ctrl-C")?,
            _ = term.recv() => {}
        }
        tracing::info!("shutting down: closing the session and the proxy ports");
        if !agent.shutdown(SHUTDOWN_WAIT).await {
            tracing::warn!("the session did not close within {SHUTDOWN_WAIT:?}; exiting anyway");
        }
        Ok(())
    })
}
