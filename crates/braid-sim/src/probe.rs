//! The sparse latency probe in the simulator: the agent sends a small datagram 50 times a
//! second (`latency.rs` says the shape), the server's application echoes each one at once,
//! and the agent records the round trip, idle before a transfer and while it runs.
//!
//! Owns: the probe application (sequence numbers, send times, echo, samples per phase) and
//! [`Probed`], which runs it beside another application. Must not touch: the transfer or the
//! protocol (it only calls the sessions' datagram API).

use crate::latency::{probe_interval, Latency, PROBE_PAYLOAD};
use crate::time::Nanos;
use crate::world::{App, Endpoints};
use braid_core::Instant;
use bytes::Bytes;

/// The flow id the probe's datagrams (and their echoes) carry: one flow, as TUN mode gives
/// one UDP conversation, so the session classes it as a real-time flow would be.
pub const PROBE_FLOW: u64 = 0x9b0be;

/// Which samples a probe sent now counts towards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Nothing else runs on the session.
    Idle,
    /// A transfer runs beside the probe.
    Loaded,
    /// Not sending; answers to earlier probes are still recorded.
    Off,
}

/// The probe: what it sent and what came back.
#[derive(Debug)]
pub struct Probe {
    phase: Phase,
    next_send: Option<Nanos>,
    seq: u32,
    /// Per sequence number: when it was sent and in which phase.
    sent: Vec<(Nanos, Phase)>,
    answered: Vec<bool>,
    idle: Vec<f64>,
    loaded: Vec<f64>,
    /// (send time, round trip) of every answered loaded probe, in send order once sorted.
    loaded_times: Vec<(Nanos, f64)>,
}

impl Default for Probe {
    fn default() -> Self {
        Probe {
            phase: Phase::Off,
            next_send: None,
            seq: 0,
            sent: Vec::new(),
            answered: Vec::new(),
            idle: Vec::new(),
            loaded: Vec::new(),
            loaded_times: Vec::new(),
        }
    }
}

impl Probe {
    /// Start sending in `phase` at `now` (or stop, with [`Phase::Off`]).
    pub fn set_phase(&mut self, now: Nanos, phase: Phase) {
        self.phase = phase;
        self.next_send = (phase != Phase::Off).then_some(now);
    }

    /// Probes sent in `phase` not answered yet.
    pub fn outstanding(&self, phase: Phase) -> usize {
        self.sent
            .iter()
            .zip(&self.answered)
            .filter(|((_, p), a)| *p == phase && !**a)
            .count()
    }

    /// The summary of everything recorded so far.
    pub fn latency(&self) -> Latency {
        let loaded_sent = self
            .sent
            .iter()
            .filter(|(_, p)| *p == Phase::Loaded)
            .count();
        Latency::from_samples(&self.idle, &self.loaded, loaded_sent)
    }

    /// The longest time between two answered loaded probes' send times, in seconds: how
    /// long a call beside the transfer heard nothing (0 with fewer than two answers).
    pub fn longest_gap_s(&self) -> f64 {
        let mut t: Vec<Nanos> = self.loaded_times.iter().map(|x| x.0).collect();
        t.sort_unstable();
        t.windows(2)
            .map(|w| (w[1] - w[0]) as f64 / 1e9)
            .fold(0.0, f64::max)
    }

    /// Send what is due, echo at the server, record answers at the client.
    pub fn tick(&mut self, now: Nanos, w: &mut Endpoints<'_>) {
        while let Some(d) = w.server.recv_datagram() {
            let _ = w.server.send_flow_datagram(Instant(now), PROBE_FLOW, d);
        }
        while let Some(d) = w.client.recv_datagram() {
            self.record(now, &d);
        }
        let every = probe_interval().as_nanos() as Nanos;
        while let Some(t) = self.next_send.filter(|&t| t <= now) {
            let mut p = vec![0u8; PROBE_PAYLOAD];
            p[..4].copy_from_slice(&self.seq.to_le_bytes());
            p[4..12].copy_from_slice(&now.to_le_bytes());
            // A probe the session refuses (queue full) counts as sent and lost.
            let _ = w
                .client
                .send_flow_datagram(Instant(now), PROBE_FLOW, Bytes::from(p));
            self.sent.push((now, self.phase));
            self.answered.push(false);
            self.seq += 1;
            self.next_send = Some(t + every);
        }
    }

    fn record(&mut self, now: Nanos, d: &[u8]) {
        if d.len() < 12 {
            return;
        }
        let seq = u32::from_le_bytes([d[0], d[1], d[2], d[3]]) as usize;
        let Some((sent_at, phase)) = self.sent.get(seq).copied() else {
            return;
        };
        if std::mem::replace(&mut self.answered[seq], true) {
            return; // a duplicate
        }
        let rtt = (now - sent_at) as f64 / 1e9;
        match phase {
            Phase::Idle => self.idle.push(rtt),
            Phase::Loaded => {
                self.loaded.push(rtt);
                self.loaded_times.push((sent_at, rtt));
            }
            Phase::Off => {}
        }
    }

    /// When the probe next wants to send.
    pub fn next_wake(&self) -> Option<Nanos> {
        self.next_send
    }
}

/// Another application with the probe beside it.
pub struct Probed<'a, A: App> {
    /// The probe.
    pub probe: &'a mut Probe,
    /// The application whose completion ends the run.
    pub inner: &'a mut A,
}

impl<A: App> App for Probed<'_, A> {
    fn on_wake(&mut self, now: Nanos, w: &mut Endpoints<'_>) -> bool {
        self.probe.tick(now, w);
        self.inner.on_wake(now, w)
    }

    fn next_wake(&self) -> Option<Nanos> {
        match (self.probe.next_wake(), self.inner.next_wake()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The probe alone: runs until the time limit, or with `until_answered` until no probe of
/// that phase is outstanding.
pub struct ProbeOnly<'a> {
    /// The probe.
    pub probe: &'a mut Probe,
    /// Stop once every probe of this phase was answered.
    pub until_answered: Option<Phase>,
}

impl App for ProbeOnly<'_> {
    fn on_wake(&mut self, now: Nanos, w: &mut Endpoints<'_>) -> bool {
        self.probe.tick(now, w);
        while w.client.poll_event().is_some() {}
        while w.server.poll_event().is_some() {}
        self.until_answered
            .is_some_and(|p| self.probe.outstanding(p) == 0)
    }

    fn next_wake(&self) -> Option<Nanos> {
        self.probe.next_wake()
    }
}
