//! The timer table: every deadline of the session in one place, with one next deadline.

use super::{close_code, Session, SessionError, Side, State};
use crate::ids::PathId;
use crate::path::SentFrame;
use crate::time::Instant;

/// What a deadline is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timer {
    /// No packet from the peer for the idle timeout.
    Idle,
    /// Loss detection or probe timeout of a path.
    Loss(PathId),
    /// Delayed acknowledgement of a path.
    Ack(PathId),
    /// A path's pacer releases the next packet.
    Pacing(PathId),
    /// A path should send a keepalive.
    Keepalive(PathId),
    /// A path's blackout watch: probe a silent path, confirm a blackout, re-probe.
    Blackout(PathId),
    /// A CLOSE frame is waiting to be sent.
    Close,
    /// A datagram held back so that arrivals keep their order becomes due.
    Datagram,
    /// A path's datagram-size discovery: send a probe, judge one unanswered, or search
    /// upward again (`path/pmtud.rs`).
    Pmtu(PathId),
}

/// All armed timers and the earliest of them.
///
/// Rebuilt lazily: every input marks it stale (with its `now`), and the next read rebuilds
/// it once. A batch of packets handled back to back costs one rebuild, not one per packet.
#[derive(Debug, Default)]
pub struct TimerTable {
    entries: Vec<(Timer, Instant)>,
    next: Option<Instant>,
    /// The table no longer matches the session: rebuild it as of this instant (the `now`
    /// of the latest input) before it is read.
    stale: Option<Instant>,
}

impl TimerTable {
    fn clear(&mut self) {
        self.entries.clear();
        self.next = None;
    }

    fn arm(&mut self, t: Timer, at: Instant) {
        self.entries.push((t, at));
        self.next = Some(self.next.map_or(at, |n| n.min(at)));
    }

    /// The earliest deadline.
    pub fn next(&self) -> Option<Instant> {
        self.next
    }

    /// Armed timers.
    pub fn entries(&self) -> &[(Timer, Instant)] {
        &self.entries
    }
}

impl Session {
    /// When [`Session::handle_timeout`] must next be called (`None`: only on new input).
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        if self.stash.is_some() {
            // A datagram left out of a batch waits (`poll_transmit_batch`): due now.
            return Some(Instant(0));
        }
        self.rebuild_timers();
        self.timers.next()
    }

    /// Armed timers, for diagnostics (a copy: the table is rebuilt first if stale).
    pub fn timers(&mut self) -> Vec<(Timer, Instant)> {
        self.rebuild_timers();
        self.timers.entries().to_vec()
    }

    /// The session's state changed at `now`: refresh the paths' congestion coupling (the
    /// next acknowledgement may use it) and mark the timer table stale; the next
    /// [`Session::poll_timeout`] rebuilds it.
    pub(super) fn state_changed(&mut self, now: Instant) {
        self.refresh_coupling();
        self.timers.stale = Some(self.timers.stale.map_or(now, |t| t.max(now)));
    }

    /// Rebuild the timer table from the session's state, if an input changed it.
    fn rebuild_timers(&mut self) {
        let Some(now) = self.timers.stale.take() else {
            return;
        };
        self.timers.clear();
        match self.state {
            State::Closed => return,
            State::Closing => {
                self.timers.arm(Timer::Close, now);
                return;
            }
            _ => {}
        }
        self.timers
            .arm(Timer::Idle, self.last_recv + self.cfg.idle_timeout);
        let has_data = self.state == State::Established && self.has_data();
        for p in self.paths.values().filter(|p| !p.abandoned) {
            if let Some(t) = self.loss_deadline(p) {
                self.timers.arm(Timer::Loss(p.id), t);
            }
            if let Some(t) = p.recv.ack_deadline() {
                self.timers.arm(Timer::Ack(p.id), t);
            }
            if p.usable() && self.state == State::Established {
                self.timers.arm(
                    Timer::Keepalive(p.id),
                    p.last_sent + self.cfg.keepalive_interval(),
                );
                if has_data && p.window_open() && p.pto_count == 0 && p.rate_cap() != Some(0) {
                    let at = p.pacer_ready_at(now);
                    if at > now {
                        self.timers.arm(Timer::Pacing(p.id), at);
                    }
                }
            }
            if (p.probes_due > 0 && self.amplification_ok(p.id, 64)) || self.validation_ready(p) {
                self.timers.arm(Timer::Loss(p.id), now);
            }
            if self.state == State::Established && p.pmtu_probe_due().is_some() {
                self.timers.arm(Timer::Pmtu(p.id), now);
            } else if let Some(t) = p.pmtu_deadline() {
                self.timers.arm(Timer::Pmtu(p.id), t);
            }
        }
        if has_data {
            if let Some(at) = self.datagram_due().filter(|&at| at > now) {
                self.timers.arm(Timer::Datagram, at);
            }
        }
        for (pid, at) in self.blackout_deadlines() {
            self.timers.arm(Timer::Blackout(pid), at.max(now));
        }
    }

    /// A path's loss-detection deadline as the session arms it: the path's own, except a
    /// probe timeout that could send nothing. A server's path not yet validated may send
    /// at most `amplification_factor` times what arrived on it; once that budget is spent,
    /// after its first probe timeout (which moves what it had in flight to the other
    /// paths), its probe timer stays unarmed until datagrams arrive on it (RFC 9002,
    /// 6.2.2.1). Before this, a client's path that went silent after its first packets
    /// woke the server every `max_pto` for the life of the session, and each wake-up sent
    /// nothing.
    fn loss_deadline(&self, p: &crate::path::Path) -> Option<Instant> {
        let t = p.loss_timer(&self.cfg)?;
        if p.pto_count > 0 && p.probe_timer_only() && !self.amplification_ok(p.id, 64) {
            return None;
        }
        Some(t)
    }

    /// Give every path the summary coupled controllers need (all usable paths), with OLIA's
    /// sets: best paths (largest loss interval / srtt²) and largest-window paths.
    fn refresh_coupling(&mut self) {
        let mut c = crate::cc::Coupling::default();
        let (mut best, mut max_w) = (0.0_f64, 0_u64);
        for p in self.paths.values().filter(|p| p.usable()) {
            let cwnd = p.cc.window();
            let rtt = p.rtt.smoothed().as_secs_f64().max(1e-6);
            c.paths += 1;
            c.total_cwnd += cwnd;
            c.sum_rate += cwnd as f64 / rtt;
            c.max_rate = c.max_rate.max(cwnd as f64 / rtt);
            c.max_cwnd_rtt2 = c.max_cwnd_rtt2.max(cwnd as f64 / (rtt * rtt));
            best = best.max(olia_quality(p));
            max_w = max_w.max(cwnd);
        }
        for p in self.paths.values().filter(|p| p.usable()) {
            let is_best = olia_quality(p) >= best;
            let is_max = p.cc.window() >= max_w;
            c.best_paths += u32::from(is_best);
            c.max_window_paths += u32::from(is_max);
            c.collected_paths += u32::from(is_best && !is_max);
        }
        for p in self.paths.values_mut() {
            let usable = p.usable();
            p.coupling = crate::cc::Coupling {
                is_best: usable && olia_quality(p) >= best,
                is_max_window: usable && p.cc.window() >= max_w,
                ..c
            };
        }
    }

    /// Time passed: run whatever timers expired at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.state == State::Closed {
            return;
        }
        if self.state != State::Closing && now >= self.last_recv + self.cfg.idle_timeout {
            let idle = self.cfg.idle_timeout;
            self.fail(
                SessionError::TimedOut(idle),
                close_code::TIMEOUT,
                "idle timeout",
            );
            // Nobody is listening: do not bother sending CLOSE.
            self.state = State::Closed;
            self.state_changed(now);
            return;
        }
        let expired: Vec<PathId> = self
            .paths
            .values()
            .filter(|p| !p.abandoned && self.loss_deadline(p).is_some_and(|t| t <= now))
            .map(|p| p.id)
            .collect();
        for pid in expired {
            let mut lost = std::mem::take(&mut self.scratch_lost);
            let Some(p) = self.paths.get_mut(&pid) else {
                continue;
            };
            let pto = p.on_loss_timer(now, &mut lost);
            self.scratch_lost = lost;
            if pto {
                self.on_pto(now, pid);
            }
        }
        for p in self.paths.values_mut().filter(|p| !p.abandoned) {
            if p.pmtu_deadline().is_some_and(|t| t <= now) {
                p.on_pmtu_timer(now);
            }
        }
        self.on_blackout_timers(now);
        self.process_acked_and_lost(now);
        self.state_changed(now);
    }

    /// A probe timeout on `pid`: re-arm the handshake and validation, and move the path's
    /// stream data in flight onto the other paths if any of them works.
    fn on_pto(&mut self, now: Instant, pid: PathId) {
        if self.side == Side::Client && self.state == State::Handshaking {
            self.pending.hello = true;
        }
        if let Some(p) = self.paths.get_mut(&pid) {
            if !p.validated && p.challenge.is_some() {
                p.challenge_due = true;
                p.probes_due = 0;
            }
        }
        self.reinject_in_flight(now, pid);
    }

    /// Move the stream data in flight on `pid` onto the other paths, if any of them works
    /// (the originals stay in flight; whichever copy is acknowledged first counts).
    pub(super) fn reinject_in_flight(&mut self, now: Instant, pid: PathId) {
        let other_ok = self
            .paths
            .values()
            .any(|p| p.id != pid && p.usable() && p.pto_count == 0);
        if !other_ok {
            return;
        }
        // Everything retransmittable goes: stream data, and control frames such as
        // MAX_STREAM_DATA, which would otherwise wait forever on a dead path (no ACK ever
        // comes back to declare them lost).
        let mut frames = Vec::new();
        if let Some(p) = self.paths.get_mut(&pid) {
            p.take_for_reinjection(Instant::ZERO, &mut frames);
        }
        frames.retain(|f| !matches!(f, SentFrame::PathChallenge(_)));
        self.on_frames_lost(now, &frames);
    }
}

/// OLIA's path quality l / srtt² (bytes delivered between losses over the squared RTT); 0
/// for controllers that do not track loss intervals.
fn olia_quality(p: &crate::path::Path) -> f64 {
    let rtt = p.rtt.smoothed().as_secs_f64().max(1e-6);
    p.cc.loss_interval().unwrap_or(0) as f64 / (rtt * rtt)
}

#[cfg(test)]
#[path = "timers_tests.rs"]
mod tests;
