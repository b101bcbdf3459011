//! The session's side of datagram sending: queueing a flow's datagram (auto mode: in the
//! real-time or the shared queue, by its flow's class), which paths may carry datagrams (the
//! views the plans in `session/dgram.rs` work on), writing the datagrams a path may carry
//! into its packet (real-time ones first, their copies within the duplicate budget), and
//! giving a path the scheduler did not pick its turn when a datagram is due on it.

use super::{Packet, Session, State, Transmit};
use crate::flows::FlowClass;
use crate::ids::PathId;
use crate::session::dgram::{Role, View};
use crate::session::{DatagramError, DatagramMode};
use crate::time::Instant;
use crate::wire::frame::emit;
use crate::wire::PathState;
use bytes::Bytes;
use smallvec::SmallVec;

impl Session {
    /// Queue an unreliable datagram of `flow` (the application's name for a conversation:
    /// a call, a game, a DNS exchange; any number). It is dropped (and counted) if the peer
    /// does not accept datagrams of this size; the oldest queued datagram is dropped when
    /// the queue is full, and one that waits too long is dropped when the session next
    /// sends (see [`DatagramMode`] and `Config::datagram_max_wait`). In auto mode the
    /// flow's rate decides its treatment (`crate::flows`).
    pub fn send_flow_datagram(
        &mut self,
        now: Instant,
        flow: u64,
        data: Bytes,
    ) -> Result<(), DatagramError> {
        // Before the peer's HELLO its limit is unknown: hold the datagram to our own (both
        // ends default to the same; a receiver drops one larger than it takes). With 0
        // here, the first datagrams of a session were dropped ("limit of 0").
        let max = self
            .peer_params
            .map_or(self.cfg.max_datagram_payload as u64, |p| p.max_datagram)
            as usize;
        // Header, frame type, sequence number and length at their largest.
        let fits = self
            .cfg
            .max_datagram_size
            .saturating_sub(self.cfg.tag_len + 19 + 1 + 8 + 8);
        if data.len() > max.min(fits) {
            self.stats.datagrams_dropped += 1;
            return Err(DatagramError::TooLarge {
                len: data.len(),
                max: max.min(fits),
            });
        }
        let realtime = self.cfg.datagram_mode == DatagramMode::Auto
            && self.flows.observe(now, flow, data.len()) == FlowClass::RealTime;
        let full = if realtime {
            let seq = self.datagrams_out.take_seq();
            self.realtime_out.push(now, data, seq)
        } else {
            self.datagrams_out.push(now, data)
        };
        if full {
            self.stats.datagrams_dropped += 1;
        }
        Ok(())
    }

    /// The class auto mode gives `flow` now (a flow not seen lately is real-time).
    pub fn flow_class(&self, flow: u64) -> FlowClass {
        self.flows.class(flow)
    }

    /// Paths that may carry datagrams, fastest first: usable, not failing, not kept out by
    /// the scheduler, and active (standby paths only when no path is active).
    pub(in crate::session) fn datagram_views(&self) -> SmallVec<[View; 8]> {
        let ok = |p: &&crate::path::Path| p.usable() && p.pto_count == 0 && p.rate_cap() != Some(0);
        let any_active = self
            .paths
            .values()
            .filter(ok)
            .any(|p| p.state() == PathState::Active);
        let mut v: SmallVec<[View; 8]> = self
            .paths
            .values()
            .filter(ok)
            .filter(|p| !any_active || p.state() == PathState::Active)
            .map(|p| View {
                id: p.id,
                owd: p.rtt.latest() / 2,
            })
            .collect();
        v.sort_by_key(|x| (x.owd, x.id));
        v
    }

    /// Writes the datagrams `pid` may carry now into `pkt`.
    pub(super) fn write_datagrams(&mut self, now: Instant, pid: PathId, pkt: &mut Packet<'_>) {
        if self.datagrams_out.is_empty() && self.realtime_out.is_empty() {
            return;
        }
        let views = self.datagram_views();
        if !self.realtime_out.is_empty() {
            self.write_realtime(now, pid, &views, pkt);
        }
        if self.datagrams_out.is_empty() {
            return;
        }
        let mode = self.cfg.datagram_mode.bulk();
        let max_wait = self.cfg.datagram_max_wait;
        self.stats.datagrams_dropped += self.datagrams_out.maintain(now, mode, &views, max_wait);
        while let Some(pick) = self.datagrams_out.pick(now, mode, &views, pid) {
            let (d, seq) = self.datagrams_out.data(pick);
            let wrote = match mode {
                DatagramMode::Redundant => emit::datagram_seq(&mut pkt.w, seq, d),
                _ => emit::datagram(&mut pkt.w, d),
            };
            if wrote.is_none() {
                break;
            }
            self.datagrams_out.sent(mode, &views, pick, pid);
            pkt.ack_eliciting = true;
        }
    }

    /// Writes the real-time datagrams `pid` may carry now (first copies and second copies)
    /// into `pkt`; a first copy gets a second when another path may carry one and the
    /// budget allows.
    fn write_realtime(&mut self, now: Instant, pid: PathId, views: &[View], pkt: &mut Packet<'_>) {
        let max_wait = self.cfg.datagram_max_wait;
        self.stats.datagrams_dropped += self.realtime_out.maintain(now, views, max_wait);
        while let Some(pick) = self.realtime_out.pick(now, views, pid) {
            let (d, seq) = self.realtime_out.data(pick);
            let len = d.len();
            if emit::datagram_seq(&mut pkt.w, seq, d).is_none() {
                break;
            }
            pkt.ack_eliciting = true;
            let copy = match pick.role {
                Role::Copy => {
                    self.stats.duplicates_sent += 1;
                    self.stats.duplicate_bytes += len as u64;
                    false
                }
                Role::First => {
                    self.stats.realtime_datagrams += 1;
                    let second = views.iter().take(2).any(|v| v.id != pid);
                    let granted = second && self.dup_budget.take(now, len);
                    if second && !granted {
                        self.stats.duplicates_refused += 1;
                    }
                    granted
                }
            };
            self.realtime_out.sent(pick, pid, copy);
        }
    }

    /// A real-time datagram due on a path leaves at once, before anything else queued and
    /// even when the path's window is full (with its ACK, nothing else): a call's packet
    /// must not wait for a bulk flow's acknowledgements. The classifier bounds what this
    /// lets through (a real-time flow stays under its packet and bit rates, copies under
    /// their budget), and the packet counts in flight like any other, so the window makes
    /// room for it afterwards.
    pub(super) fn send_realtime_first(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if self.realtime_out.is_empty() || self.state != State::Established {
            return None;
        }
        let views = self.datagram_views();
        let pid = views
            .iter()
            .map(|v| v.id)
            .find(|&id| self.realtime_out.pick(now, &views, id).is_some())?;
        let mut pkt = self.begin(pid, buf)?;
        self.write_ack(now, pid, &mut pkt);
        self.write_realtime(now, pid, &views, &mut pkt);
        if !pkt.ack_eliciting && pkt.frames.is_empty() {
            return None;
        }
        self.finish(now, pid, pkt)
    }

    /// A packet on a ready path other than `tried` that has a datagram due (and nothing
    /// else but its ACK).
    pub(super) fn send_datagrams_elsewhere(
        &mut self,
        now: Instant,
        tried: Option<PathId>,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let none = self.datagrams_out.is_empty() && self.realtime_out.is_empty();
        if none || self.state != State::Established {
            return None;
        }
        let views = self.datagram_views();
        let mode = self.cfg.datagram_mode.bulk();
        let pid = self
            .scratch_infos
            .iter()
            .filter(|i| i.send_ready && Some(i.id) != tried)
            .map(|i| i.id)
            .find(|&id| {
                self.realtime_out.pick(now, &views, id).is_some()
                    || self.datagrams_out.pick(now, mode, &views, id).is_some()
            })?;
        // Its due ACK and datagrams only: stream data goes where the scheduler says (a
        // copy on a slow path must not take stream data there, ahead of a faster path).
        let mut pkt = self.begin(pid, buf)?;
        self.write_ack(now, pid, &mut pkt);
        self.write_datagrams(now, pid, &mut pkt);
        if !pkt.ack_eliciting && pkt.frames.is_empty() {
            return None;
        }
        self.finish(now, pid, pkt)
    }

    /// When a datagram held back for arrival order becomes due (spread mode), or a
    /// real-time one the fastest path did not send may go on the second (auto mode).
    pub(in crate::session) fn datagram_due(&self) -> Option<Instant> {
        if self.datagrams_out.is_empty() && self.realtime_out.is_empty() {
            return None;
        }
        let views = self.datagram_views();
        let bulk = self
            .datagrams_out
            .next_due(self.cfg.datagram_mode.bulk(), &views);
        let rt = self.realtime_out.next_due(&views);
        bulk.into_iter().chain(rt).min()
    }
}

#[cfg(test)]
#[path = "datagrams_tests.rs"]
mod tests;
