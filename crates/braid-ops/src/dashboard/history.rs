//! The dashboard's history: a sampler that reads the status snapshot every
//! [`SAMPLE_EVERY`], turns counter differences into rates (per path: bits per second each
//! way and loss, over the last [`RATE_OVER`] intervals; RTTs as they are), keeps the last [`HISTORY`] samples in a ring so a page
//! opened later draws the last 5 minutes at once, and broadcasts each tick to the open
//! event streams.
//!
//! Owns: [`Sample`], the rate arithmetic ([`Sampler`]), the ring and the broadcast channel
//! ([`Hub`]). Must not touch: HTTP (`dashboard::mod`), how snapshots are made (braid-net).

use braid_net::status::{PathReport, Status};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast;

/// How often the snapshot is sampled and a tick is sent to every open page.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(500);
/// Samples kept: 5 minutes.
pub const HISTORY: usize = 600;

/// One path's figures over one sampling interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SeriesPoint {
    /// Received on the path, bits per second (UDP payload).
    pub rx_bps: f64,
    /// Sent on the path, bits per second (UDP payload).
    pub tx_bps: f64,
    /// Smoothed RTT, milliseconds.
    pub srtt_ms: Option<f64>,
    /// Minimum RTT, milliseconds.
    pub min_rtt_ms: Option<f64>,
    /// Packets declared lost / packets sent over the rate window (`null`: nothing sent).
    pub loss: Option<f64>,
}

/// One tick: the time (seconds of the agent's or server's uptime) and every path's point,
/// keyed by the path's name (agent) or `SESSION/PATH` (server: the session id's first 8
/// hex digits and the path's name in the server's status: the agent's, or the path id).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Sample {
    /// Uptime, seconds.
    pub t: f64,
    /// Per path.
    pub series: BTreeMap<String, SeriesPoint>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    rx: u64,
    tx: u64,
    sent: u64,
    lost: u64,
}

/// Rates are taken over this many sampling intervals (2 s): the agent's snapshot is
/// refreshed every 200 ms, so a single 500 ms interval holds 400 or 600 ms of counts (±20 %).
pub const RATE_OVER: usize = 4;

/// Turns successive snapshots into samples (pure: the caller passes each snapshot).
#[derive(Debug, Default)]
pub struct Sampler {
    prev: VecDeque<(f64, HashMap<String, Counts>)>,
}

/// Every path of a snapshot with its series key.
fn paths(s: &Status) -> Vec<(String, &PathReport)> {
    match s {
        Status::Agent(a) => a.paths.iter().map(|p| (p.name.clone(), p)).collect(),
        Status::Server(v) => v
            .sessions
            .iter()
            .flat_map(|x| {
                let sid: String = x.id.chars().take(8).collect();
                x.paths
                    .iter()
                    .map(move |p| (format!("{sid}/{}", p.name), p))
            })
            .collect(),
    }
}

fn uptime(s: &Status) -> f64 {
    match s {
        Status::Agent(a) => a.uptime_s,
        Status::Server(v) => v.uptime_s,
    }
}

impl Sampler {
    /// The sample of `s` against the snapshot [`RATE_OVER`] ticks back, or the oldest kept
    /// (rates are 0 on the first one; a counter that went down counts from 0).
    pub fn sample(&mut self, s: &Status) -> Sample {
        let t = uptime(s);
        let mut now = HashMap::new();
        let mut series = BTreeMap::new();
        for (key, p) in paths(s) {
            let c = Counts {
                rx: p.bytes_received,
                tx: p.bytes_sent,
                sent: p.packets_sent,
                lost: p.packets_lost,
            };
            let mut pt = SeriesPoint {
                srtt_ms: p.srtt_ms,
                min_rtt_ms: p.min_rtt_ms,
                ..Default::default()
            };
            if let Some((t0, prev)) = self.prev.front() {
                let dt = t - t0;
                let b = prev.get(&key).copied().unwrap_or_default();
                let d = |now: u64, before: u64| now.checked_sub(before).unwrap_or(now);
                if dt > 0.0 {
                    pt.rx_bps = d(c.rx, b.rx) as f64 * 8.0 / dt;
                    pt.tx_bps = d(c.tx, b.tx) as f64 * 8.0 / dt;
                }
                let sent = d(c.sent, b.sent);
                pt.loss = (sent > 0).then(|| (d(c.lost, b.lost) as f64 / sent as f64).min(1.0));
            }
            now.insert(key.clone(), c);
            series.insert(key, pt);
        }
        if self.prev.len() == RATE_OVER {
            self.prev.pop_front();
        }
        self.prev.push_back((t, now));
        Sample { t, series }
    }
}

/// What every page is sent: the ring of samples and the latest status, as JSON text.
pub struct Hub {
    ring: Mutex<(VecDeque<Arc<str>>, Arc<str>)>,
    tx: broadcast::Sender<Arc<str>>,
}

impl Hub {
    /// An empty hub.
    pub fn new() -> Arc<Hub> {
        Arc::new(Hub {
            ring: Mutex::new((VecDeque::with_capacity(HISTORY), Arc::from("null"))),
            tx: broadcast::channel(16).0,
        })
    }

    /// Record a tick: `sample` goes into the ring, `status` becomes the latest, and every
    /// open page gets `{"sample": ..., "status": ...}`.
    pub fn push(&self, sample: &Sample, status: &Status) {
        let (Ok(sample), Ok(status)) =
            (serde_json::to_string(sample), serde_json::to_string(status))
        else {
            return;
        };
        let tick: Arc<str> = format!("{{\"sample\":{sample},\"status\":{status}}}").into();
        if let Ok(mut r) = self.ring.lock() {
            if r.0.len() == HISTORY {
                r.0.pop_front();
            }
            r.0.push_back(sample.into());
            r.1 = status.into();
        }
        let _ = self.tx.send(tick);
    }

    /// `{"samples": [...], "status": ...}`: what a page gets first.
    pub fn history(&self) -> String {
        let Ok(r) = self.ring.lock() else {
            return "{\"samples\":[],\"status\":null}".into();
        };
        let mut out = String::with_capacity(r.0.iter().map(|s| s.len() + 1).sum::<usize>() + 64);
        out.push_str("{\"samples\":[");
        for (i, s) in r.0.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(s);
        }
        out.push_str("],\"status\":");
        out.push_str(&r.1);
        out.push('}');
        out
    }

    /// Ticks from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        self.tx.subscribe()
    }
}

/// Sample `source` every [`SAMPLE_EVERY`] into `hub`, until the task is dropped.
pub async fn run(source: crate::Source, hub: Arc<Hub>) {
    let mut sampler = Sampler::default();
    let mut every = tokio::time::interval(SAMPLE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        every.tick().await;
        let status = source.snapshot().await;
        let sample = sampler.sample(&status);
        hub.push(&sample, &status);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid_net::status::AgentStatus;

    fn agent(t: f64, rx: u64, sent: u64, lost: u64) -> Status {
        Status::Agent(AgentStatus {
            uptime_s: t,
            paths: vec![PathReport {
                name: "a".into(),
                bytes_received: rx,
                packets_sent: sent,
                packets_lost: lost,
                srtt_ms: Some(30.0),
                ..Default::default()
            }],
            ..Default::default()
        })
    }

    #[test]
    fn rates_come_from_counter_differences_over_the_interval() {
        let mut s = Sampler::default();
        let first = s.sample(&agent(1.0, 1000, 10, 0));
        assert_eq!(first.series["a"].rx_bps, 0.0);
        assert_eq!(first.series["a"].loss, None);
        let x = s.sample(&agent(1.5, 1000 + 62_500, 110, 5));
        assert!((x.series["a"].rx_bps - 1e6).abs() < 1e-6, "{x:?}");
        assert_eq!(x.series["a"].loss, Some(0.05));
        assert_eq!(x.series["a"].srtt_ms, Some(30.0));
        // Over the window: from the first snapshot.
        let y = s.sample(&agent(2.0, 1000 + 2 * 62_500, 210, 5));
        assert!((y.series["a"].rx_bps - 1e6).abs() < 1e-6, "{y:?}");
        assert_eq!(y.series["a"].loss, Some(0.025));
        // Counters that start again (a new session) give no negative rate.
        let z = s.sample(&agent(3.0, 500, 4, 0));
        assert!((z.series["a"].rx_bps - 2000.0).abs() < 1e-6, "{z:?}");
    }

    #[test]
    fn the_ring_keeps_the_last_five_minutes() {
        let hub = Hub::new();
        for i in 0..HISTORY + 5 {
            hub.push(
                &Sample {
                    t: i as f64,
                    ..Default::default()
                },
                &agent(i as f64, 0, 0, 0),
            );
        }
        let h: serde_json::Value = serde_json::from_str(&hub.history()).unwrap();
        let samples = h["samples"].as_array().unwrap();
        assert_eq!(samples.len(), HISTORY);
        assert_eq!(samples[0]["t"], 5.0);
        assert_eq!(h["status"]["role"], "agent");
        let mut rx = hub.subscribe();
        hub.push(&Sample::default(), &agent(0.0, 0, 0, 0));
        let tick: serde_json::Value = serde_json::from_str(&rx.try_recv().unwrap()).unwrap();
        assert!(tick["sample"]["t"].is_number() && tick["status"].is_object());
    }
}
