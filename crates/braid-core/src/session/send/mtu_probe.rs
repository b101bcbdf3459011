//! PMTU probes (DPLPMTUD, RFC 8899 and RFC 9000 14.4): a PING padded to the size a path's
//! discovery wants to try, sent outside congestion control and carrying no data, so that
//! its loss costs neither data nor window.
//!
//! Owns: choosing the path whose probe is due and building the probe packet. Must not
//! touch: the search (`path/pmtud.rs` decides the sizes and what an answer means).

use super::{Session, State, Transmit};
use crate::time::Instant;
use crate::wire::frame::emit;

impl Session {
    /// The next PMTU probe, if a path's discovery has one due.
    pub(in crate::session) fn send_mtu_probe(
        &mut self,
        now: Instant,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        if self.state != State::Established {
            return None;
        }
        let (pid, size) = self
            .paths
            .values()
            .filter(|p| !p.abandoned)
            .find_map(|p| p.pmtu_probe_due().map(|s| (p.id, s)))?;
        let size = size.min(buf.len());
        let pn = self.paths.get(&pid)?.next_pn;
        let mut pkt = self.begin_sized(pid, buf, size)?;
        self.write_ack(now, pid, &mut pkt);
        emit::ping(&mut pkt.w)?;
        pkt.ack_eliciting = true;
        pkt.probe = true;
        pkt.pad_to = size - self.cfg.tag_len;
        let t = self.finish(now, pid, pkt)?;
        let mad = self.cfg.max_ack_delay;
        self.paths
            .get_mut(&pid)?
            .on_pmtu_probe_sent(now, pn, t.len, mad);
        Some(t)
    }
}
