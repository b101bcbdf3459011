//! A transfer measured for latency: the probe alone first (idle), then the transfer with
//! the probe and the RPM probes beside it (loaded).
//!
//! Owns: the order of one measured transfer, the routes of the UDP probe and the RPM probes
//! (derived from the transfer's own: its SOCKS5 proxy, else its source address, target
//! address and transport), the responders of a variant's stack ([`Responders`]) and the
//! summary into `braid_sim::Latency`. Must not touch: how packets and requests are sent
//! (`probe`, `rpm`, `traffic`), the report's other fields (`runner`).
//!
//! Order: the probe warms its route up, runs alone for `braid_sim::latency::IDLE_PROBE`
//! (idle samples), then the transfer starts with the RPM probes (loaded samples: probe
//! packets sent between the transfer's start and its end), then the probe collects its last
//! answers (at most `probe::ANSWER_WITHIN`).

use crate::error::Result;
use crate::probe::{EchoServer, Probe, ProbeRoute};
use crate::rpm::{RpmProbe, RpmServer};
use crate::traffic::{self, Proto, TransferOutcome, TransferSpec};
use braid_sim::latency::IDLE_PROBE;
use braid_sim::Latency;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

/// The echo and RPM responders of one variant, in the server namespace.
pub struct Responders {
    echo: EchoServer,
    rpm: RpmServer,
}

impl Responders {
    /// Starts both in namespace `ns`; the RPM responder with `proto` sockets (the variant's
    /// transport on the server side).
    pub fn start(ns: &str, proto: Proto) -> Result<Responders> {
        let any = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0);
        Ok(Responders {
            echo: EchoServer::start(ns, any)?,
            rpm: RpmServer::start(ns, any, proto)?,
        })
    }

    /// The probe's route for a transfer: through the transfer's proxy to the responder on
    /// the proxy's far end (the loopback address there), else from the transfer's source
    /// address to the responder at the transfer's target address.
    pub fn probe_route(&self, spec: &TransferSpec) -> ProbeRoute {
        let port = self.echo.addr.port();
        match spec.socks {
            Some(s) => ProbeRoute::Socks {
                proxy: s.proxy,
                target: SocketAddrV4::new(*s.target.ip(), port),
            },
            None => ProbeRoute::Direct {
                bind: spec.bind,
                target: SocketAddrV4::new(*spec.target.ip(), port),
            },
        }
    }

    /// The transfer's route, leading to the RPM responder instead of the traffic server.
    pub fn rpm_spec(&self, spec: &TransferSpec) -> TransferSpec {
        let port = self.rpm.addr.port();
        let mut sp = spec.clone();
        match &mut sp.socks {
            Some(s) => s.target.set_port(port),
            None => sp.target.set_port(port),
        }
        sp
    }
}

/// A transfer with what it did to latency.
#[derive(Debug, Clone)]
pub struct Measured {
    /// The transfer.
    pub outcome: TransferOutcome,
    /// The probe's idle and loaded percentiles, loss and RPM.
    pub latency: Latency,
    /// Every probe packet sent while loaded, in send order: its send time from the
    /// transfer's start and its round trip, in seconds (`f64::INFINITY` when no answer
    /// came).
    pub loaded: Vec<(f64, f64)>,
    /// Why the probe or RPM measured nothing, if so (the transfer itself is in `outcome`).
    pub warning: Option<String>,
}

/// Runs `spec` with the probe before and beside it and RPM during it; `at_start` runs just
/// before the transfer connects, after the idle probe (the runner starts fresh link models
/// there, so blackouts and traces count from the transfer's start), and its value is
/// returned. Only a signal (or not being able to start a thread or enter the namespace) is
/// an `Err`.
pub fn transfer<T>(
    spec: &TransferSpec,
    responders: &Responders,
    at_start: impl FnOnce() -> T,
) -> Result<(Measured, T)> {
    let limit = IDLE_PROBE + spec.timeout + Duration::from_secs(5);
    let probe = Probe::start(&spec.ns, responders.probe_route(spec), limit)?;
    sleep_checked(IDLE_PROBE)?;
    let started = at_start();
    let load_from = Instant::now();
    let rpm = RpmProbe::start(&responders.rpm_spec(spec))?;
    let outcome = traffic::transfer(spec);
    let load_to = Instant::now();
    let rpm = rpm.finish();
    let run = probe.finish();
    let outcome = outcome?;
    let idle_from = run.measuring_from.unwrap_or(load_from);
    let (idle, _) = run.window(idle_from, load_from);
    let (loaded, sent) = run.window(load_from, load_to);
    let mut latency = Latency::from_samples(&idle, &loaded, sent);
    latency.rpm = rpm.rpm();
    let warning = match (&run.error, run.warmed_up) {
        (Some(e), _) => Some(format!("the latency probe failed: {e}")),
        (None, false) => Some(format!(
            "no latency probe packet came back during the warm-up ({:?})",
            responders.probe_route(spec)
        )),
        _ if latency.rpm.is_none()
            && outcome.completion_s > crate::rpm::RPM_DELAY.as_secs_f64() =>
        {
            Some(format!(
                "no RPM probe was answered ({} failed or timed out)",
                rpm.timeouts
            ))
        }
        _ => None,
    };
    let measured = Measured {
        outcome,
        latency,
        loaded: run.window_with_losses(load_from, load_to),
        warning,
    };
    Ok((measured, started))
}

fn sleep_checked(d: Duration) -> Result<()> {
    let end = Instant::now() + d;
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        crate::signal::check()?;
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
    crate::signal::check()
}
