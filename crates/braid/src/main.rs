//! The `braid` command: the simulator (`sim`, `demo`) and the real thing (`keygen`,
//! `server`, `agent`, `status`, `check-config`).

#[macro_use]
mod out;
mod bench;
mod check_cmd;
mod demo;
mod net;
mod report_cmd;
mod server_addrs;
mod status_cmd;
#[cfg(test)]
mod synopsis;
mod testbed_cmd;

use anyhow::{Context, Result};

use clap::{Parser, Subcommand};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

/// braid: use every network path at once.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a scenario file in the simulator (every variant, size and repetition).
    Sim {
        /// The scenario file (TOML; see docs/scenarios.md).
        scenario: PathBuf,
        /// Print one JSON object on stdout instead of a table.
        #[arg(long)]
        json: bool,
        /// Also record the results (with the scenario file and git revision) into this
        /// SQLite database.
        #[arg(long, value_name = "FILE")]
        db: Option<PathBuf>,
    },
    /// Write an HTML report with plots from the results database.
    Report {
        /// The results database [default: braid-results.sqlite].
        #[arg(long, value_name = "FILE")]
        db: Option<PathBuf>,
        /// Directory for index.html and the plots [default: braid-report].
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Run the built-in two-path demonstration in the simulator.
    Demo {
        /// Print one JSON object on stdout instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Make a key pair for a server or an agent.
    Keygen(net::KeygenArgs),
    /// Run the server proxy: accepts agents, talks plain TCP to legacy servers.
    Server(Box<net::ServerArgs>),
    /// Run the agent on the multi-homed device: SOCKS5 and an HTTP proxy over every path.
    Agent(Box<net::AgentArgs>),
    /// Show what a running agent or server does: paths, sessions, streams (its control
    /// socket).
    Status(status_cmd::StatusArgs),
    /// Check an agent or server TOML configuration file without starting anything.
    CheckConfig {
        /// The file (as given to `braid agent --config` or `braid server --config`).
        file: PathBuf,
        /// agent or server [default: told from the keys in the file].
        #[arg(long)]
        role: Option<String>,
    },
    /// Run a scenario on the namespace testbed (root; real kernels, emulated links).
    #[command(subcommand)]
    Testbed(testbed_cmd::TestbedCommand),
    /// Benchmark braid's data path on loopback against plain TCP and kernel MPTCP.
    Bench(Box<BenchArgs>),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Sim { scenario, json, db } => sim(&scenario, json, db.as_deref()),
        Command::Report { db, out } => report_cmd::run(db, out).map(|()| true),
        Command::Demo { json } => demo::run(json),
        Command::Keygen(a) => net::keygen(a).map(|()| true),
        Command::Server(a) => net::server(*a).map(|()| true),
        Command::Agent(a) => net::agent(*a).map(|()| true),
        Command::Status(a) => status_cmd::run(a).map(|()| true),
        Command::CheckConfig { file, role } => {
            check_cmd::run(&file, role.as_deref()).map(|()| true)
        }
        Command::Bench(a) => bench_cmd(*a),
        Command::Testbed(c) => testbed_cmd::dispatch(c),
    };
    match r {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            // The chain of causes, each once (many errors already quote their source).
            let mut msg = e.to_string();
            for cause in e.chain().skip(1) {
                let c = cause.to_string();
                if !msg.contains(&c) {
                    msg.push_str(": ");
                    msg.push_str(&c);
                }
            }
            eprintln!("braid: {msg}");
            ExitCode::from(2)
        }
    }
}

/// A progress bar with ETA on stderr (hidden when stderr is not a terminal).
pub(crate) fn progress_printer(label: &str) -> impl FnMut(usize, usize) {
    let bar = indicatif::ProgressBar::hidden();
    if std::io::stderr().is_terminal() {
        bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    }
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{prefix} [{bar:30}] {pos}/{len} runs, {elapsed} elapsed, ETA {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("#>-"),
    );
    bar.set_prefix(label.to_string());
    move |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
        if done == total {
            bar.finish_and_clear();
        }
    }
}

fn sim(path: &std::path::Path, json: bool, db: Option<&std::path::Path>) -> Result<bool> {
    let points = braid_sim::sweep::load(path)?;
    let scn = &points[0].scenario;
    let kernel = braid_sim::runner::kernel_variants(scn);
    let report = braid_sim::run_sweep(&points, progress_printer(&scn.name))?;
    if !kernel.is_empty() {
        // On stderr, so that --json stays one object on stdout.
        eprintln!(
            "left out (real kernel stacks; run them with `braid testbed run`): {}",
            kernel.join(", ")
        );
    }
    if let Some(db) = db {
        let id = report_cmd::store_report(db, &report, path)?;
        // On stderr, so that --json stays one object on stdout.
        eprintln!("recorded run {id} in {}", db.display());
    }
    print_report(&report, json)?;
    Ok(report.all_verified())
}

/// `braid bench`.
#[derive(clap::Args, Debug)]
struct BenchArgs {
    /// Bytes to move in each row (like 1GB or 500MB), split over all streams.
    #[arg(long, default_value = "1GB")]
    size: String,
    /// Agent sessions on the one server.
    #[arg(long, default_value_t = 1)]
    agents: usize,
    /// Concurrent streams per agent (the TCP and MPTCP rows open as many connections).
    #[arg(long, default_value_t = 1)]
    streams: usize,
    /// Paths per agent (loopback addresses 127.0.0.1, 127.0.0.2, ...; 1 to 8).
    #[arg(long, default_value_t = 1)]
    paths: usize,
    /// The server's worker threads (0: one per core).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// The packet cipher of agents and server.
    #[arg(
        long,
        default_value = "auto",
        value_name = "auto|aes-256-gcm|chacha20-poly1305"
    )]
    cipher: String,
    /// Also send a flow of 200-byte UDP datagrams through SOCKS5 UDP ASSOCIATE.
    #[arg(long)]
    udp: bool,
    /// Datagrams of the --udp flow.
    #[arg(long, default_value_t = 300_000)]
    udp_datagrams: u64,
    /// Datagrams a second the --udp flow's sender offers (0: as fast as it can).
    #[arg(long, default_value_t = 300_000)]
    udp_rate: u64,
    /// Also open N idle sessions on a server and report its memory per session.
    #[arg(long, value_name = "N")]
    idle_sessions: Option<usize>,
    /// Also run N fresh handshakes from 64 source ports against a server of --threads
    /// workers and report its CPU per handshake next to this CPU's X25519 speed.
    #[arg(long, value_name = "N")]
    handshakes: Option<usize>,
    /// The congestion controllers of braid's rows, comma-separated (like `bbrq,cubic`): one
    /// row each, measured one after the other in this run; default the agent's default.
    #[arg(long, value_name = "NAME[,NAME...]", value_delimiter = ',')]
    cc: Vec<String>,
    /// Print one JSON object on stdout instead of a table.
    #[arg(long)]
    json: bool,
    /// Internal: run the --idle-sessions server for the agent keys in FILE.
    #[arg(long, hide = true, value_name = "FILE")]
    idle_server_child: Option<PathBuf>,
    /// Internal: run a share of the --idle-sessions agents (ADDR,KEY,SEED,START,COUNT).
    #[arg(long, hide = true, value_name = "SPEC")]
    idle_agents_child: Option<String>,
}

fn bench_cmd(a: BenchArgs) -> Result<bool> {
    if let Some(file) = a.idle_server_child {
        bench::idle::serve_child(&file)?;
        return Ok(true);
    }
    if let Some(spec) = a.idle_agents_child {
        bench::idle_agents::serve_child(&spec)?;
        return Ok(true);
    }
    let size = braid_sim::units::parse_size(&a.size).map_err(|e| anyhow::anyhow!("--size: {e}"))?;
    let ciphers =
        braid_crypto::Ciphers::parse(&a.cipher).map_err(|e| anyhow::anyhow!("--cipher: {e}"))?;
    let o = bench::Options {
        size,
        agents: a.agents,
        streams: a.streams,
        paths: a.paths,
        threads: a.threads,
        ciphers,
        udp: a.udp.then_some(a.udp_datagrams),
        udp_rate: a.udp_rate,
        idle_sessions: a.idle_sessions,
        handshakes: a.handshakes,
        progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        aead_time: std::time::Duration::from_millis(300),
        ccs: a
            .cc
            .iter()
            .map(|c| c.parse().map_err(|e: String| anyhow::anyhow!("--cc: {e}")))
            .collect::<Result<_>>()?,
    };
    let r = bench::run(&o)?;
    if a.json {
        outln!(
            "{}",
            serde_json::to_string(&r).context("encoding the report as JSON")?
        );
    } else {
        bench::print(&r);
    }
    Ok(true)
}

/// One JSON object on stdout, or the readable table.
pub(crate) fn print_report(report: &braid_sim::Report, json: bool) -> Result<()> {
    if json {
        let text = serde_json::to_string(report).context("encoding the report as JSON")?;
        outln!("{text}");
    } else {
        out!("{}", report.table());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;
    use std::collections::BTreeSet;

    /// Issue 24: `braid server --resolver`'s help named an agent `--dns` flag that does not
    /// exist. Every `--flag` a help text names must be a flag of some braid command.
    #[test]
    fn help_texts_name_only_flags_that_exist() {
        let cli = Cli::command();
        let mut commands = vec![cli.clone()];
        let mut all = Vec::new();
        while let Some(c) = commands.pop() {
            commands.extend(c.get_subcommands().cloned());
            all.push(c);
        }
        let flags: BTreeSet<String> = all
            .iter()
            .flat_map(|c| c.get_arguments())
            .filter_map(|a| a.get_long().map(str::to_string))
            .chain(["help", "version"].map(String::from))
            .collect();
        let mut unknown = Vec::new();
        for c in &all {
            for a in c.get_arguments() {
                let help = [a.get_help(), a.get_long_help()]
                    .into_iter()
                    .flatten()
                    .map(|h| h.to_string())
                    .collect::<Vec<_>>()
                    .join(" ");
                for (i, _) in help.match_indices("--") {
                    let name: String = help[i + 2..]
                        .chars()
                        .take_while(|ch| ch.is_ascii_alphanumeric() || *ch == '-')
                        .collect();
                    let name = name.trim_end_matches('-');
                    if !name.is_empty() && !flags.contains(name) {
                        unknown.push(format!(
                            "{} --{}: --{name}",
                            c.get_name(),
                            a.get_long().unwrap_or("?")
                        ));
                    }
                }
            }
        }
        assert!(
            unknown.is_empty(),
            "help names flags that do not exist: {unknown:?}"
        );
    }
}
