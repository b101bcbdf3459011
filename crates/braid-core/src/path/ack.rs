//! Acknowledgements received on one path: an ACK frame's ranges matched against the packets
//! in flight, RTT samples (with the one-way-delay probe's timestamps), the congestion
//! controller and the delivery-rate sampler told, and packets handed back as acknowledged or
//! lost.
//!
//! Owns: [`Path::on_ack_frame`] and the steps it is made of. Must not touch: what the
//! packets' frames mean (the session decides), the send side.

use super::*;

impl Path {
    /// Process an ACK frame for this path. Acknowledged packets go to `acked`, packets
    /// declared lost to `lost`.
    pub(crate) fn on_ack_frame(
        &mut self,
        now: Instant,
        ack: &AckFrame<'_>,
        max_ack_delay: Duration,
        carried_elsewhere: bool,
        acked: &mut Vec<SentPacket>,
        lost: &mut Vec<SentPacket>,
    ) -> bool {
        let prior_in_flight = self.in_flight;
        let (first_acked, first_lost) = (acked.len(), lost.len());
        let spurious = self.on_late_acks(now, ack, acked);
        let first_acked_now = acked.len();
        let mut sampler = rate::Sampler::default();
        let Some((largest_new, largest_sent, eliciting)) =
            self.take_acked(now, ack, acked, &mut sampler)
        else {
            if spurious {
                self.refresh_pacer(now);
            }
            return spurious;
        };
        self.loss.on_delivered(largest_sent, now);
        self.largest_acked = Some(
            self.largest_acked
                .map_or(largest_new, |l| l.max(largest_new)),
        );
        // An ACK that came back over another path (ACK offload) gives a sample too: the
        // feedback loop it measures is the one loss recovery and pacing must follow.
        let newest_is_largest = largest_new == ack.largest;
        let (rtt_sample, fwd_queue) = if newest_is_largest && eliciting {
            self.on_rtt_sample(now, ack, largest_sent, max_ack_delay, carried_elsewhere)
        } else {
            (None, None)
        };
        self.pto_count = 0;
        self.pop_front();
        let peer_now = ack.recv_time_us.filter(|_| newest_is_largest);
        let rate = self.rate.sample(now, &sampler, peer_now, self.rtt.min());
        let acked_bytes: u64 = acked[first_acked_now..]
            .iter()
            .filter(|p| p.in_flight)
            .map(|p| p.size as u64)
            .sum();

        self.detect_lost(now, lost);
        if rate.delivery_rate > 0.0 {
            let rtt = capacity::Rtt {
                smoothed: self.rtt.smoothed(),
                min: self.rtt.min(),
            };
            let held = self.cc.holding_back();
            let cap = self.rate_cap;
            let app = rate.is_app_limited;
            self.capacity
                .observe(now, rate.delivery_rate, app, cap, held, rtt);
        }
        self.pmtu_observe(now, &acked[first_acked..], &lost[first_lost..]);
        if acked_bytes > 0 {
            self.cc.on_ack(&AckEvent {
                now,
                acked_bytes,
                largest_acked_sent: largest_sent,
                prior_in_flight,
                in_flight: self.in_flight,
                rtt: &self.rtt,
                rtt_sample,
                fwd_queue,
                rate,
                coupling: self.coupling,
            });
        }
        self.refresh_pacer(now);
        true
    }

    /// Move the packets `ack` newly acknowledges to `acked`, feeding the rate sampler.
    /// Returns the newest of them (packet number, send time, ack-eliciting), if any.
    pub(super) fn take_acked(
        &mut self,
        now: Instant,
        ack: &AckFrame<'_>,
        acked: &mut Vec<SentPacket>,
        sampler: &mut rate::Sampler,
    ) -> Option<(u64, Instant, bool)> {
        let prior_largest = self.largest_acked;
        let end = self.sent_base + self.sent.len() as u64;
        let mut newest: Option<(u64, Instant, bool)> = None;
        for r in ack.ranges() {
            for pn in r.start.max(self.sent_base)..r.end.min(end) {
                let idx = (pn - self.sent_base) as usize;
                let Some(pkt) = self.sent[idx].take() else {
                    continue;
                };
                if newest.is_none_or(|(n, _, _)| pn > n) {
                    newest = Some((pn, pkt.time_sent, pkt.ack_eliciting));
                }
                if let Some(l) = prior_largest.filter(|&l| pn < l) {
                    self.loss.on_reordered(l - pn);
                }
                if pkt.in_flight {
                    self.in_flight -= pkt.size as u64;
                    self.ack_eliciting_in_flight -= 1;
                    self.rate.on_delivered(
                        now,
                        pkt.size as u64,
                        pkt.time_sent,
                        &pkt.stamp,
                        sampler,
                    );
                }
                acked.push(pkt);
            }
        }
        newest
    }

    /// The newest packet acknowledged is the ACK's largest and elicited it: an RTT sample
    /// (and, with the peer's receive time, a forward one-way delay sample). Returns both.
    pub(super) fn on_rtt_sample(
        &mut self,
        now: Instant,
        ack: &AckFrame<'_>,
        largest_sent: Instant,
        max_ack_delay: Duration,
        carried_elsewhere: bool,
    ) -> (Option<Duration>, Option<Duration>) {
        let sample = now - largest_sent;
        let delay = Duration::from_micros(ack.ack_delay_us).min(max_ack_delay);
        self.rtt.update(sample, delay);
        let route = usize::from(carried_elsewhere);
        let m = &mut self.route_min_rtt[route];
        *m = Some(m.map_or(sample, |m| m.min(sample)));
        self.latest_route = route;
        let fwd_queue = ack
            .recv_time_us
            .map(|t| self.owd.on_sample(now, largest_sent, t));
        (Some(sample), fwd_queue)
    }
}
