//! Super-aggregation: using a slow path for what it is good at, so that a fast path does
//! better than it would alone. Three mechanisms, each behind its own `Config` switch:
//!
//! - **ACK offload** (`ack_offload`): acknowledgements of a path that receives a large
//!   window (at least [`OFFLOAD_MIN_WINDOW`] packets per round trip, the paper's slow-start
//!   threshold) travel on a path that receives less per second, as long as that path's congestion
//!   window and pacer have room. The packets carrying them are ack-eliciting, so the
//!   carrier's own congestion controller measures how many its uplink sustains; the rest
//!   stay on the primary path. The ACKs that find room are the first after the carrier's
//!   budget refilled, which favours the front of each window. On a half-duplex medium
//!   (802.11) this gives the data the airtime the ACKs took. The sender's RTT samples
//!   then measure the loop data-out-on-one-path, ACK-back-on-another, which is the loop its
//!   loss recovery and pacing run on (skipping those samples starved the estimator and
//!   misled the random-loss classifier: measured, see docs/results.md).
//! - **Blackout freeze** (`blackout_freeze`): each end watches its paths
//!   ([`crate::blackout`]); a confirmed blackout freezes the path here and is reported to
//!   the peer in PATH_BLACKOUT over another path. A frozen path sends nothing but probes:
//!   its packets in flight are forgotten without a congestion signal (their stream data is
//!   resent on the other paths), its probe timer is not backed off, and the first packet
//!   that arrives on it resumes it with its previous window.
//! - **Random-loss recovery** (`loss_recovery`): the path keeps its window after an
//!   isolated loss without queue build-up (`Path::losses_look_random`), and the lost stream
//!   data is resent on another path that has room right now, ahead of everything else
//!   there; when no other path has room it is resent normally.
//!
//! Owns: the session-level side of the three mechanisms. Must not touch: congestion
//! controller internals, stream reassembly, or the scheduler's choice of data paths.

use super::send::write_stream_range;
use super::{Session, Transmit};
use crate::blackout::Verdict;
use crate::ids::PathId;
use crate::path::{SentFrame, SentPacket};
use crate::stream::StreamId;
use crate::time::Instant;
use crate::wire::frame::emit;
use std::ops::Range;

/// Packets per round trip a path must receive before its ACKs are offloaded.
pub const OFFLOAD_MIN_WINDOW: u32 = 20;

/// Stream data lost at random on `from`, to resend on `to`.
#[derive(Debug, Clone)]
pub(crate) struct Fetch {
    to: PathId,
    id: StreamId,
    range: Range<u64>,
}

impl Session {
    // ---- ACK offload ------------------------------------------------------------------

    /// The path that should carry the acknowledgements of `primary` now instead of
    /// `primary` itself, if any.
    pub(super) fn offload_carrier(&self, now: Instant, primary: PathId) -> Option<PathId> {
        if !self.cfg.ack_offload {
            return None;
        }
        let p = self.paths.get(&primary)?;
        if p.rx_per_rtt(now) < OFFLOAD_MIN_WINDOW {
            return None;
        }
        let rate = p.rx_rate(now);
        self.paths
            .values()
            .filter(|c| c.id != primary && c.usable() && c.rx_rate(now) < rate)
            .filter(|c| c.window_open() && c.pacer_ready_at(now) <= now)
            .filter(|c| self.amplification_ok(c.id, 64))
            .min_by_key(|c| c.rtt.smoothed())
            .map(|c| c.id)
    }

    // ---- Blackout freeze ----------------------------------------------------------------

    /// The blackout watch's next deadline for every path, when the mechanism is on.
    pub(super) fn blackout_deadlines(&self) -> Vec<(PathId, Instant)> {
        if !self.cfg.blackout_freeze {
            return Vec::new();
        }
        let mad = self.cfg.max_ack_delay;
        self.paths
            .values()
            .filter(|p| p.validated && !p.abandoned)
            .filter_map(|p| {
                let at = if p.watch.probe_due() {
                    Some(p.last_heard)
                } else {
                    p.watch.deadline(p.last_heard, p.ack_expected(mad))
                };
                at.map(|t| (p.id, t))
            })
            .collect()
    }

    /// Run the blackout watches whose deadline passed.
    pub(super) fn on_blackout_timers(&mut self, now: Instant) {
        let mad = self.cfg.max_ack_delay;
        let due: Vec<PathId> = self
            .blackout_deadlines()
            .into_iter()
            .filter(|&(_, t)| t <= now)
            .map(|(id, _)| id)
            .collect();
        for pid in due {
            let Some(p) = self.paths.get_mut(&pid) else {
                continue;
            };
            let (last, expected) = (p.last_heard, p.ack_expected(mad));
            let wait = p.blackout_wait(mad);
            if p.watch.on_timer(now, last, expected, wait) == Verdict::Freeze {
                self.freeze_path(now, pid, true);
            }
        }
    }

    /// Freeze `pid`: nothing but probes goes on it until a packet arrives on it; its data
    /// in flight is resent on the other paths; `notify` tells the peer over another path.
    pub(super) fn freeze_path(&mut self, now: Instant, pid: PathId, notify: bool) {
        let mut out = Vec::new();
        let Some(p) = self
            .paths
            .get_mut(&pid)
            .filter(|p| p.validated && !p.abandoned)
        else {
            return;
        };
        // A freeze of our own watch is told to the peer; one the peer reported is ours to
        // end only on an acknowledgement (`BlackoutWatch::freeze_reported`).
        p.freeze(now, !notify, &mut out);
        for pkt in &out {
            self.on_frames_lost(now, &pkt.frames);
        }
        if notify {
            self.pending.path_blackout.insert(pid);
        }
    }

    /// A sign of life of `pid`: a packet arrived on it (`acked` false), or an
    /// acknowledgement of our packets on it came back over any path (`acked` true).
    pub(super) fn on_path_alive(&mut self, now: Instant, pid: PathId, acked: bool) {
        let Some(p) = self.paths.get_mut(&pid) else {
            return;
        };
        let prev = std::mem::replace(&mut p.last_heard, now);
        let unfrozen = if acked {
            p.watch.on_acked(now, prev)
        } else {
            p.watch.on_packet(now, prev)
        };
        if unfrozen {
            p.on_unfrozen(now);
            self.pending.path_blackout.remove(&pid);
        }
    }

    /// The peer reports a blackout of `pid` after it received our packet `largest` there.
    pub(super) fn on_blackout_report(&mut self, now: Instant, pid: PathId, largest: u64) {
        let Some(p) = self.paths.get(&pid) else {
            return;
        };
        // The peer has heard from us on the path since: the report is stale.
        if p.largest_acked().is_some_and(|l| l > largest) || !p.usable() {
            return;
        }
        self.freeze_path(now, pid, false);
    }

    /// A path whose watch wants a probe sent now.
    pub(super) fn blackout_probe_path(&self) -> Option<PathId> {
        self.paths
            .values()
            .find(|p| p.watch.probe_due() && p.validated && !p.abandoned)
            .map(|p| p.id)
    }

    /// Send the blackout probe of `pid`: a PING outside congestion control.
    pub(super) fn send_blackout_probe(
        &mut self,
        now: Instant,
        pid: PathId,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        if let Some(p) = self.paths.get_mut(&pid) {
            p.watch.on_probe_sent(now);
        }
        if !self.amplification_ok(pid, 64) {
            return None;
        }
        let mut pkt = self.begin(pid, buf)?;
        self.write_ack(now, pid, &mut pkt);
        emit::ping(&mut pkt.w)?;
        pkt.ack_eliciting = true;
        pkt.probe = true;
        self.finish(now, pid, pkt)
    }

    // ---- Random-loss recovery -----------------------------------------------------------

    /// A packet lost at random: queue its stream data for another path with room now,
    /// the rest of its frames as any loss.
    pub(super) fn route_random_loss(&mut self, now: Instant, pkt: &SentPacket) {
        let to = self.fetch_target(now, pkt);
        for f in &pkt.frames {
            match (*f, to) {
                (
                    SentFrame::Stream {
                        id,
                        off,
                        len,
                        fin: false,
                    },
                    Some(to),
                ) if len > 0 => self.fetch.push_back(Fetch {
                    to,
                    id,
                    range: off..off + len as u64,
                }),
                _ => self.on_frames_lost(now, std::slice::from_ref(f)),
            }
        }
    }

    /// The fastest other usable path that could send a packet now.
    fn fetch_target(&self, now: Instant, pkt: &SentPacket) -> Option<PathId> {
        self.paths
            .values()
            .filter(|p| p.id != pkt.path && p.usable())
            .filter(|p| p.state() == crate::wire::PathState::Active)
            .filter(|p| p.window_open() && p.pacer_ready_at(now) <= now)
            .min_by_key(|p| p.rtt.smoothed())
            .map(|p| p.id)
    }

    /// Resend queued random losses on their target path, ahead of other data; what the
    /// target cannot take now is resent normally.
    pub(super) fn send_fetch(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let to = self.fetch.front()?.to;
        let ready = self
            .paths
            .get(&to)
            .is_some_and(|p| p.usable() && p.window_open() && p.pacer_ready_at(now) <= now);
        if !ready {
            self.release_fetches(now, to);
            return None;
        }
        let mut pkt = self.begin(to, buf)?;
        self.write_ack(now, to, &mut pkt);
        while pkt.w.remaining() >= 24 {
            let Some(i) = self.fetch.iter().position(|f| f.to == to) else {
                break;
            };
            let f = self.fetch[i].clone();
            let Some(st) = self.streams.get_mut(&f.id) else {
                self.fetch.remove(i);
                continue;
            };
            let s = &mut st.send;
            let Some(gap) = s.unacked_within(f.range.clone()) else {
                self.fetch.remove(i);
                continue;
            };
            let Some((len, _)) = write_stream_range(&mut pkt, s, f.id, gap.clone(), false) else {
                break;
            };
            let end = gap.start + len as u64;
            if end >= f.range.end {
                self.fetch.remove(i);
            } else {
                self.fetch[i].range.start = end;
            }
            if let Some(p) = self.paths.get_mut(&to) {
                p.stats.retransmitted_bytes += len as u64;
            }
        }
        if pkt.frames.is_empty() {
            return None;
        }
        self.finish(now, to, pkt)
    }

    /// Hand the queued random losses meant for `to` back to normal retransmission.
    fn release_fetches(&mut self, now: Instant, to: PathId) {
        let (mine, rest): (Vec<Fetch>, Vec<Fetch>) = self.fetch.drain(..).partition(|f| f.to == to);
        self.fetch = rest.into();
        for f in mine {
            let frame = SentFrame::Stream {
                id: f.id,
                off: f.range.start,
                len: (f.range.end - f.range.start) as u32,
                fin: false,
            };
            self.on_frames_lost(now, &[frame]);
        }
    }
}
