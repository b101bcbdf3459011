//! `braid server`: its flags (and config file keys), the checked settings (also for
//! `braid check-config`) and the run until SIGTERM or Ctrl-C (SIGHUP reloads the keys).
//!
//! Owns: the server's flags and settings. Must not touch: what the agent does (`agent.rs`).

use super::*;

/// `braid server`.
#[derive(Args, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerArgs {
    /// TOML file with any of these settings (flags take precedence); file paths in it are
    /// relative to its folder.
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// UDP address to listen on, like 0.0.0.0:4433.
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<String>,
    /// The server's private key file (from `braid keygen`).
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// File of agent public keys allowed to connect, one per line, `#` comments allowed.
    #[arg(long, value_name = "FILE")]
    pub authorized: Option<PathBuf>,
    /// Where the newest handshake timestamp of each agent is kept across restarts, so a
    /// captured handshake cannot be replayed after one (default: the authorized file's
    /// path with `.state` appended; the server must be able to write it).
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,
    /// Most sessions at once.
    #[arg(long)]
    pub max_sessions: Option<usize>,
    /// Worker threads, each with its own UDP socket and sessions (the kernel steers every
    /// packet to its session's worker) [default: 0, one per core].
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Most proxied connections per session at once.
    #[arg(long)]
    pub max_streams: Option<u64>,
    /// Most bytes buffered per session.
    #[arg(long)]
    pub max_buffered: Option<u64>,
    /// The control socket `braid status` asks (mode 0600) [default: /run/braid-server/server.sock
    /// as root, else $XDG_RUNTIME_DIR/braid/server.sock].
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics (off by default; no
    /// authentication: keep it on localhost or a management network).
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<SocketAddr>,
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
    /// This machine's own unicast address, ADDR:PORT, for several servers behind one DNS
    /// name, anycast address or UDP load balancer: every agent is told it in the handshake
    /// answer and sends every path of its session there (docs/deployment.md).
    #[arg(long, value_name = "ADDR:PORT")]
    pub unicast: Option<String>,
    /// The DNS resolver agents' queries go to, over UDP and TCP (the port-53 traffic of
    /// agents in TUN mode, the queries to an agent's --dns port) [default: the first
    /// nameserver in /etc/resolv.conf].
    #[arg(long, value_name = "ADDR:PORT")]
    pub resolver: Option<SocketAddr>,
    /// The packet cipher: auto (AES-256-GCM first where the CPU has AES instructions, else
    /// ChaCha20-Poly1305 first; the server picks by its own order among what the agent
    /// offers), aes-256-gcm or chacha20-poly1305 (only that one) [default: auto].
    #[arg(long, value_name = "auto|aes-256-gcm|chacha20-poly1305")]
    pub cipher: Option<String>,
    /// Allow the agent with public key KEY (base64, as in the authorized file) to have
    /// these ports of this server opened for it (`braid agent --forward`), like
    /// KEY=tcp:8080,udp:5000-5010. Repeat for several keys. In the config file: a
    /// `[forward]` table, "KEY" = ["tcp:8080", "udp:5000-5010"]. None by default.
    #[arg(long = "allow-forward", value_name = "KEY=PORTS")]
    #[serde(skip)]
    pub allow_forward: Vec<String>,
    /// The config file's `[forward]` table (see --allow-forward).
    #[arg(skip)]
    #[serde(default)]
    pub forward: std::collections::BTreeMap<String, Vec<String>>,
    /// Let agents reach CIDR[:PORTS] (like 127.0.0.0/8, 10.0.0.5:80,443 or
    /// [fd00::/8]:443), which the defaults or a broader rule refuse; KEY=CIDR[:PORTS] for
    /// the agent with that public key only. Repeatable. The most specific rule decides. In
    /// the config file: `[egress]` allow = [...], `[egress.agent."KEY"]` allow = [...].
    #[arg(long = "egress-allow", value_name = "[KEY=]CIDR[:PORTS]")]
    #[serde(skip)]
    pub egress_allow: Vec<String>,
    /// Refuse agents CIDR[:PORTS] (like 0.0.0.0/0:25); KEY=CIDR[:PORTS] for one agent.
    /// Repeatable. In the config file: `[egress]` deny = [...]. Refused by default: this
    /// server's addresses, loopback, link-local (169.254.0.0/16, fe80::/10), unspecified,
    /// multicast and broadcast addresses.
    #[arg(long = "egress-deny", value_name = "[KEY=]CIDR[:PORTS]")]
    #[serde(skip)]
    pub egress_deny: Vec<String>,
    /// Also refuse the private and unique-local ranges (10/8, 172.16/12, 192.168/16,
    /// 100.64/10, fc00::/7): recommended on a server several people share. In the config
    /// file: `[egress]` deny_private = true.
    #[arg(long)]
    #[serde(skip)]
    pub deny_private: bool,
    /// The config file's `[egress]` table (see --egress-allow).
    #[arg(skip)]
    #[serde(default)]
    pub egress: super::egress::EgressFile,
    /// The config file's `[limits]` table: fair shares, rate limits and quotas per agent
    /// key.
    #[arg(skip)]
    #[serde(default)]
    pub limits: super::limits::LimitsFile,
    /// Log level: error, warn, info, debug or trace.
    #[arg(long)]
    pub log_level: Option<String>,
}

/// Everything `braid server` needs, checked (also `braid check-config`).
pub(crate) struct ServerSettings {
    pub cfg: ServerConfig,
    /// The authorized-keys file (read again on SIGHUP).
    pub authorized: PathBuf,
    pub control: Option<PathBuf>,
    pub metrics: Option<SocketAddr>,
    pub dashboard: Option<braid_ops::dashboard::DashboardConfig>,
    pub log_level: Option<String>,
}

/// Turn flags and the config file into a server configuration, reading the key files.
pub(crate) fn server_settings(a: ServerArgs) -> Result<ServerSettings> {
    let mut f: ServerArgs = load(a.config.as_deref())?;
    let file = a.config.as_deref();
    f.key = beside(file, f.key);
    f.authorized = beside(file, f.authorized);
    f.state = beside(file, f.state);
    f.control = beside(file, f.control);
    let listen = a
        .listen
        .or(f.listen)
        .context("--listen ADDR:PORT is required (or `listen` in --config)")?;
    let listen: SocketAddr = listen
        .parse()
        .with_context(|| format!("--listen {listen:?}: expected ADDR:PORT like 0.0.0.0:4433"))?;
    let key = a
        .key
        .or(f.key)
        .context("--key FILE is required (make one with `braid keygen`)")?;
    let authorized = a
        .authorized
        .or(f.authorized)
        .context("--authorized FILE is required: the agent public keys allowed to connect")?;
    let log_level = a.log_level.or(f.log_level);
    check_log_level(log_level.as_deref())?;
    let key = braid_crypto::read_private_key(&key)
        .map_err(|e| super::key_role::KeySetting::ServerKey.explain(e))?;
    let state = a.state.or(f.state).unwrap_or_else(|| {
        let mut p = authorized.clone().into_os_string();
        p.push(".state");
        PathBuf::from(p)
    });
    let authorized_path = authorized;
    let keys = braid_crypto::read_authorized(&authorized_path)?;
    let mut cfg = ServerConfig::new(listen, key, keys);
    // Re-read when it changes: a removed key gets no new session and no key rotation.
    cfg.authorized_file = Some(authorized_path.clone());
    cfg.state_file = Some(state);
    if let Some(n) = a.max_sessions.or(f.max_sessions) {
        cfg.max_sessions = n;
    }
    cfg.threads = a.threads.or(f.threads).unwrap_or(0);
    if let Some(n) = a.max_streams.or(f.max_streams) {
        cfg.max_streams = n;
    }
    if let Some(n) = a.max_buffered.or(f.max_buffered) {
        cfg.max_buffered = n;
    }
    cfg.resolver = a.resolver.or(f.resolver);
    cfg.ciphers = ciphers(a.cipher.or(f.cipher))?;
    if let Some(u) = a.unicast.or(f.unicast) {
        let addr: SocketAddr = u.parse().with_context(|| {
            format!("--unicast {u:?}: expected this machine's own ADDR:PORT like 198.51.100.7:4433")
        })?;
        if addr.ip().is_unspecified() || addr.port() == 0 || addr.is_ipv4() != listen.is_ipv4() {
            bail!(
                "--unicast {u}: give an address agents can reach this machine at, with a port, \
                 of the same family as --listen {listen}"
            );
        }
        cfg.unicast = Some(addr);
    }
    for (key, specs) in &f.forward {
        cfg.forward
            .allow_specs(key, specs)
            .map_err(anyhow::Error::msg)?;
    }
    for a in &a.allow_forward {
        let (key, specs) = a.rsplit_once('=').with_context(|| {
            format!("--allow-forward {a:?}: expected KEY=PORTS like KEY=tcp:8080,udp:5000-5010")
        })?;
        let specs: Vec<&str> = specs.split(',').collect();
        cfg.forward
            .allow_specs(key, &specs)
            .map_err(anyhow::Error::msg)?;
    }
    let flags = super::egress::EgressFlags {
        allow: &a.egress_allow,
        deny: &a.egress_deny,
        deny_private: a.deny_private,
    };
    cfg.egress = super::egress::egress_policy(&f.egress, flags)?;
    cfg.shares = super::limits::shares_policy(&f.limits)?;
    Ok(ServerSettings {
        cfg,
        authorized: authorized_path,
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

/// `braid server`: runs until SIGTERM or Ctrl-C (every session is closed first: agents get
/// a CLOSE); SIGHUP reloads the authorized keys (sessions of removed keys end).
pub fn server(a: ServerArgs) -> Result<()> {
    let st = server_settings(a)?;
    init_logging(st.log_level.as_deref())?;
    let (control, metrics, dashboard, auth_path) =
        (st.control, st.metrics, st.dashboard, st.authorized);
    runtime()?.block_on(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let server = Server::bind(st.cfg).await?;
        let source = braid_ops::Source::Server(server.status());
        let _ctl = control_socket(control, "server", source.clone())?;
        let _metrics = match metrics {
            Some(m) => Some(braid_ops::http::serve_metrics(m, source.clone()).await?),
            None => None,
        };
        let _dashboard = match dashboard {
            Some(d) => Some(braid_ops::dashboard::serve(d, source).await?),
            None => None,
        };
        let ops = server.control();
        let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
        let mut hup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
        let run = server.run();
        tokio::pin!(run);
        loop {
            tokio::select! {
                r = &mut run => return r.context("server failed"),
                _ = tokio::signal::ctrl_c() => break,
                _ = term.recv() => break,
                _ = hup.recv() => match braid_crypto::read_authorized(&auth_path) {
                    Ok(keys) => {
                        let r = ops.reload_authorized(keys);
                        tracing::info!(keys = r.keys, kept = r.kept, ended = r.ended, file = %auth_path.display(), "SIGHUP: authorized keys reloaded");
                    }
                    Err(e) => tracing::warn!("SIGHUP: {e}; keeping the authorized keys loaded before"),
                },
            }
        }
        tracing::info!("shutting down: closing every session");
        let left = ops.shutdown(SHUTDOWN_WAIT).await;
        if left > 0 {
            tracing::warn!(left, "sessions still open after {SHUTDOWN_WAIT:?}; exiting anyway");
        }
        Ok(())
    })
}
