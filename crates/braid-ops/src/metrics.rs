//! Prometheus exposition of a status snapshot (`--metrics ADDR:PORT` serves it at
//! `/metrics`, see [`crate::http`]). Each scrape takes a fresh snapshot and encodes it with
//! prometheus-client as OpenMetrics text. Names and units follow Prometheus conventions
//! (base units: seconds, bytes, joules; counters end in `_total`); the list is in
//! docs/status.md.
//!
//! Owns: the metric names, labels, help texts and the mapping from snapshot fields.
//! Must not touch: how snapshots are made (braid-net) or served (`http`).

use braid_net::status::{
    AgentStatus, DatagramReport, PathReport, ServerStatus, ShownState, Status,
};
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

type FGauge = Gauge<f64, AtomicU64>;
type FCounter = Counter<f64, AtomicU64>;

/// Labels of a path: its name (agent) or id (server), and on the server the agent's key
/// fingerprint.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PathLabels {
    agent: String,
    path: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirLabels {
    agent: String,
    path: String,
    direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    agent: String,
    path: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AgentLabels {
    agent: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: String,
}

/// An egress refusal count's labels: the agent key's fingerprint and what was refused.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EgressLabels {
    agent: String,
    kind: String,
}

const STATES: [ShownState; 7] = [
    ShownState::Validating,
    ShownState::Active,
    ShownState::Backup,
    ShownState::Frozen,
    ShownState::Down,
    ShownState::Capped,
    ShownState::Captive,
];

fn state_name(s: ShownState) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The per-path families.
struct PathFamilies {
    state: Family<StateLabels, FGauge>,
    rtt: Family<PathLabels, FGauge>,
    min_rtt: Family<PathLabels, FGauge>,
    cwnd: Family<PathLabels, FGauge>,
    in_flight: Family<PathLabels, FGauge>,
    pacing: Family<PathLabels, FGauge>,
    delivery: Family<PathLabels, FGauge>,
    packet_size: Family<PathLabels, FGauge>,
    bytes: Family<DirLabels, FCounter>,
    packets: Family<DirLabels, FCounter>,
    lost: Family<PathLabels, FCounter>,
    retransmitted: Family<PathLabels, FCounter>,
    cap: Family<PathLabels, FGauge>,
    cap_used: Family<PathLabels, FGauge>,
    energy: Family<PathLabels, FCounter>,
}

impl PathFamilies {
    fn register(r: &mut Registry) -> PathFamilies {
        let f = PathFamilies {
            state: Family::default(),
            rtt: Family::default(),
            min_rtt: Family::default(),
            cwnd: Family::default(),
            in_flight: Family::default(),
            pacing: Family::default(),
            delivery: Family::default(),
            packet_size: Family::default(),
            bytes: Family::default(),
            packets: Family::default(),
            lost: Family::default(),
            retransmitted: Family::default(),
            cap: Family::default(),
            cap_used: Family::default(),
            energy: Family::default(),
        };
        r.register(
            "braid_path_state",
            "1 for the path's current state (validating, active, backup, frozen, down, capped), else 0",
            f.state.clone(),
        );
        r.register("braid_path_rtt_seconds", "Smoothed RTT", f.rtt.clone());
        r.register(
            "braid_path_min_rtt_seconds",
            "Minimum RTT",
            f.min_rtt.clone(),
        );
        r.register("braid_path_cwnd_bytes", "Congestion window", f.cwnd.clone());
        r.register(
            "braid_path_bytes_in_flight",
            "Bytes sent and not yet acknowledged or lost",
            f.in_flight.clone(),
        );
        r.register(
            "braid_path_pacing_rate_bytes_per_second",
            "Pacing rate",
            f.pacing.clone(),
        );
        r.register(
            "braid_path_delivery_rate_bytes_per_second",
            "Latest delivery-rate sample",
            f.delivery.clone(),
        );
        r.register(
            "braid_path_packet_size_bytes",
            "Largest IP packet the path carries now, as its datagram-size discovery found it",
            f.packet_size.clone(),
        );
        r.register(
            "braid_path_bytes",
            "UDP payload bytes of braid packets on the path, per direction (current session)",
            f.bytes.clone(),
        );
        r.register(
            "braid_path_packets",
            "Packets on the path, per direction (current session)",
            f.packets.clone(),
        );
        r.register(
            "braid_path_packets_lost",
            "Packets declared lost (current session)",
            f.lost.clone(),
        );
        r.register(
            "braid_path_retransmitted_bytes",
            "Stream bytes sent again on the path (current session)",
            f.retransmitted.clone(),
        );
        r.register("braid_path_cap_bytes", "Data cap per period", f.cap.clone());
        r.register(
            "braid_path_cap_used_bytes",
            "Bytes counted against the cap this period",
            f.cap_used.clone(),
        );
        r.register(
            "braid_path_energy_joules",
            "Energy estimate: power= W x time the path carried packets + nj_per_byte= x bytes",
            f.energy.clone(),
        );
        f
    }

    fn add(&self, agent: &str, p: &PathReport) {
        let l = PathLabels {
            agent: agent.to_string(),
            path: p.name.clone(),
        };
        for s in STATES {
            self.state
                .get_or_create(&StateLabels {
                    agent: agent.to_string(),
                    path: p.name.clone(),
                    state: state_name(s),
                })
                .set(if p.state == Some(s) { 1.0 } else { 0.0 });
        }
        if let Some(v) = p.srtt_ms {
            self.rtt.get_or_create(&l).set(v / 1000.0);
        }
        if let Some(v) = p.min_rtt_ms {
            self.min_rtt.get_or_create(&l).set(v / 1000.0);
        }
        self.cwnd.get_or_create(&l).set(p.cwnd_bytes as f64);
        self.in_flight
            .get_or_create(&l)
            .set(p.bytes_in_flight as f64);
        self.pacing
            .get_or_create(&l)
            .set(p.pacing_rate_bps as f64 / 8.0);
        if let Some(v) = p.delivery_rate_bps {
            self.delivery.get_or_create(&l).set(v as f64 / 8.0);
        }
        if let Some(v) = p.packet_bytes {
            self.packet_size.get_or_create(&l).set(v as f64);
        }
        for (dir, b, n) in [
            ("sent", p.bytes_sent, p.packets_sent),
            ("received", p.bytes_received, p.packets_received),
        ] {
            let d = DirLabels {
                agent: agent.to_string(),
                path: p.name.clone(),
                direction: dir.to_string(),
            };
            self.bytes.get_or_create(&d).inc_by(b as f64);
            self.packets.get_or_create(&d).inc_by(n as f64);
        }
        self.lost.get_or_create(&l).inc_by(p.packets_lost as f64);
        self.retransmitted
            .get_or_create(&l)
            .inc_by(p.retransmitted_bytes as f64);
        if let Some(c) = p.cap_bytes {
            self.cap.get_or_create(&l).set(c as f64);
        }
        if let Some(u) = p.cap_used_bytes {
            self.cap_used.get_or_create(&l).set(u as f64);
        }
        if let Some(e) = p.energy_j {
            self.energy.get_or_create(&l).inc_by(e);
        }
    }
}

/// The sessions' datagram counters (real-time datagrams and their copies: auto mode).
struct DatagramFamilies(Vec<Family<AgentLabels, FCounter>>);

const DATAGRAM_METRICS: [(&str, &str); 6] = [
    (
        "braid_datagrams_realtime",
        "Datagrams of real-time flows sent (first copies)",
    ),
    (
        "braid_datagrams_duplicates",
        "Copies of real-time datagrams sent",
    ),
    (
        "braid_datagrams_duplicate_bytes",
        "Payload bytes of those copies",
    ),
    (
        "braid_datagrams_duplicates_refused",
        "Copies the duplicate budget refused",
    ),
    (
        "braid_datagrams_duplicates_received",
        "Copies that arrived second and were dropped",
    ),
    (
        "braid_datagrams_dropped",
        "Datagrams dropped: too large, queue full or waited too long",
    ),
];

impl DatagramFamilies {
    fn register(r: &mut Registry) -> DatagramFamilies {
        DatagramFamilies(
            DATAGRAM_METRICS
                .iter()
                .map(|(name, help)| {
                    let f = Family::default();
                    r.register(*name, *help, f.clone());
                    f
                })
                .collect(),
        )
    }

    fn add(&self, agent: &str, d: &DatagramReport) {
        let values = [
            d.realtime_sent,
            d.duplicates_sent,
            d.duplicate_bytes,
            d.duplicates_refused,
            d.duplicates_received,
            d.dropped,
        ];
        let l = AgentLabels {
            agent: agent.to_string(),
        };
        for (f, v) in self.0.iter().zip(values) {
            f.get_or_create(&l).inc_by(v as f64);
        }
    }
}

fn gauge(r: &mut Registry, name: &str, help: &str, v: f64) {
    let g = FGauge::default();
    g.set(v);
    r.register(name, help, g);
}

fn agent(r: &mut Registry, a: &AgentStatus) {
    gauge(
        r,
        "braid_uptime_seconds",
        "Seconds since the process started",
        a.uptime_s,
    );
    gauge(
        r,
        "braid_session_up",
        "1 while the agent has a session to a server",
        if a.session.is_some() { 1.0 } else { 0.0 },
    );
    gauge(
        r,
        "braid_streams",
        "Open proxied TCP connections",
        a.streams.len() as f64,
    );
    gauge(
        r,
        "braid_flows",
        "Open SOCKS5 UDP associations",
        a.flows.len() as f64,
    );
    let f = PathFamilies::register(r);
    for p in &a.paths {
        f.add("", p);
    }
    if let Some(s) = &a.session {
        DatagramFamilies::register(r).add("", &s.datagrams);
    }
}

fn server(r: &mut Registry, s: &ServerStatus) {
    gauge(
        r,
        "braid_uptime_seconds",
        "Seconds since the process started",
        s.uptime_s,
    );
    gauge(
        r,
        "braid_sessions",
        "Agent sessions",
        s.sessions.len() as f64,
    );
    gauge(
        r,
        "braid_sessions_max",
        "Most sessions at once (--max-sessions)",
        s.limits.sessions.max as f64,
    );
    gauge(
        r,
        "braid_handshakes_waiting",
        "Handshakes accepted whose agent has sent no packet yet (each holds a session slot)",
        s.handshakes_waiting as f64,
    );
    gauge(
        r,
        "braid_session_streams_max",
        "Most streams per session (--max-streams)",
        s.limits.streams_per_session.max as f64,
    );
    gauge(
        r,
        "braid_streams",
        "Open streams over all sessions",
        s.sessions.iter().map(|x| x.open_streams).sum::<u64>() as f64,
    );
    let hs = Family::<ResultLabels, FCounter>::default();
    r.register("braid_handshakes", "Handshakes by result", hs.clone());
    for (res, n) in [
        ("accepted", s.handshakes_accepted),
        ("refused", s.handshakes_refused),
    ] {
        hs.get_or_create(&ResultLabels {
            result: res.to_string(),
        })
        .inc_by(n as f64);
    }
    let f = PathFamilies::register(r);
    let d = DatagramFamilies::register(r);
    for sess in &s.sessions {
        for p in &sess.paths {
            f.add(&sess.agent_key_fingerprint, p);
        }
        d.add(&sess.agent_key_fingerprint, &sess.datagrams);
    }
    let eg = Family::<EgressLabels, FCounter>::default();
    r.register(
        "braid_server_egress_refused",
        "Connections and UDP datagrams the egress policy refused, per agent key",
        eg.clone(),
    );
    for a in &s.egress.agents {
        for (kind, n) in [
            ("connection", a.refused_connections),
            ("datagram", a.refused_datagrams),
        ] {
            eg.get_or_create(&EgressLabels {
                agent: a.agent_key_fingerprint.clone(),
                kind: kind.to_string(),
            })
            .inc_by(n as f64);
        }
    }
    server_shares(r, &s.shares);
}

/// An agent share's labels: the agent key's fingerprint and which of its figures.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShareLabels {
    agent: String,
    kind: String,
}

/// Each agent's bytes (`braid_server_agent_bytes_total`, kind sent or received), its rate
/// limit and fair-share cap (`braid_server_agent_rate_bytes_per_second`, kind limit or
/// fair_cap, when set) and its quotas (`braid_server_agent_quota_bytes`, kind
/// day_used, day_limit, month_used, month_limit).
fn server_shares(r: &mut Registry, s: &braid_net::status::SharesReport) {
    let bytes = Family::<ShareLabels, FCounter>::default();
    r.register(
        "braid_server_agent_bytes",
        "Stream bytes the server sent to and received from each agent key",
        bytes.clone(),
    );
    let rate = Family::<ShareLabels, FGauge>::default();
    r.register(
        "braid_server_agent_rate_bytes_per_second",
        "Each agent key's rate limit and its fair-share cap now, where set",
        rate.clone(),
    );
    let quota = Family::<ShareLabels, FGauge>::default();
    r.register(
        "braid_server_agent_quota_bytes",
        "Each agent key's bytes this UTC day and month, and its quotas where set",
        quota.clone(),
    );
    let l = |a: &braid_net::status::AgentShare, kind: &str| ShareLabels {
        agent: a.agent_key_fingerprint.clone(),
        kind: kind.to_string(),
    };
    for a in &s.agents {
        bytes
            .get_or_create(&l(a, "sent"))
            .inc_by(a.sent_bytes as f64);
        bytes
            .get_or_create(&l(a, "received"))
            .inc_by(a.received_bytes as f64);
        for (kind, v) in [
            ("limit", a.rate_limit_bytes_per_sec),
            ("fair_cap", a.fair_cap_bytes_per_sec),
        ] {
            if let Some(v) = v {
                rate.get_or_create(&l(a, kind)).set(v as f64);
            }
        }
        for (kind, v) in [
            ("day_used", Some(a.day_bytes)),
            ("day_limit", a.day_quota_bytes),
            ("month_used", Some(a.month_bytes)),
            ("month_limit", a.month_quota_bytes),
        ] {
            if let Some(v) = v {
                quota.get_or_create(&l(a, kind)).set(v as f64);
            }
        }
    }
}

/// The snapshot as OpenMetrics text (ends with `# EOF`).
pub fn render(s: &Status) -> String {
    let mut r = Registry::default();
    match s {
        Status::Agent(a) => agent(&mut r, a),
        Status::Server(x) => server(&mut r, x),
    }
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &r);
    out
}

#[cfg(test)]
mod tests;
