//! Delivery-rate estimation of one path, as BBR uses it (draft-cheng-iccrg-delivery-rate-
//! estimation): every packet sent carries a stamp of how much had been delivered when it
//! left; when it is acknowledged, the data delivered since, over the longer of the send and
//! the acknowledgement intervals, is a rate sample. Where the peer timestamps its
//! acknowledgements (ACK_TS), the acknowledgement interval is taken in the peer's clock, so
//! a congested return path that bunches acknowledgements does not inflate the sample.
//!
//! Owns: the delivered counter, the stamps, the application-limited mark and the latest
//! sample. Must not touch: the packets in flight, loss detection or the controller (the
//! path hands the sample to the controller in its `AckEvent`).

use crate::cc::RateSample;
use crate::time::Instant;
use std::time::Duration;

/// What a packet remembers of the path's delivery state when it was sent.
#[derive(Debug, Clone)]
pub(crate) struct Stamp {
    delivered: u64,
    delivered_time: Instant,
    /// The peer's receive time of the newest delivered packet when this one was sent.
    delivered_peer_us: Option<u64>,
    first_sent_time: Instant,
    /// Sent while the application left the path idle: its sample does not measure the path.
    pub(crate) is_app_limited: bool,
}

/// The newest-delivered packet's stamp among those one ACK frame acknowledges.
#[derive(Debug, Default)]
pub(crate) struct Sampler {
    prior_delivered: u64,
    prior_time: Option<Instant>,
    prior_peer_us: Option<u64>,
    app_limited: bool,
    send_elapsed: Duration,
}

/// The delivery-rate state of one path.
#[derive(Debug)]
pub(crate) struct DeliveryRate {
    delivered: u64,
    delivered_time: Instant,
    /// The peer's clock (ACK_TS, microseconds) when the newest delivered packet arrived.
    delivered_peer_us: Option<u64>,
    first_sent_time: Instant,
    /// Packets stamped while `delivered` is below it are application-limited (0: none).
    app_limited_until: u64,
    /// Latest sample: when, bytes per second, application-limited.
    last_rate: Option<(Instant, u64, bool)>,
}

impl DeliveryRate {
    pub(crate) fn new(now: Instant) -> Self {
        DeliveryRate {
            delivered: 0,
            delivered_time: now,
            delivered_peer_us: None,
            first_sent_time: now,
            // Application-limited until data flows: the first packets (validation, the
            // handshake) are a trickle, not a measure of the path.
            app_limited_until: 1,
            last_rate: None,
        }
    }

    /// The latest sample: when, bytes per second, application-limited.
    pub(crate) fn last_rate(&self) -> Option<(Instant, u64, bool)> {
        self.last_rate
    }

    /// The stamp of a packet sent now, with `in_flight` bytes in flight before it.
    pub(crate) fn on_sent(&mut self, now: Instant, in_flight: u64) -> Stamp {
        if in_flight == 0 {
            self.first_sent_time = now;
            self.delivered_time = now;
            self.delivered_peer_us = None;
        }
        Stamp {
            delivered: self.delivered,
            delivered_time: self.delivered_time,
            delivered_peer_us: self.delivered_peer_us,
            first_sent_time: self.first_sent_time,
            // Sent while the application left the path idle: until the mark ends, and also a
            // packet that leaves an empty pipe once the mark's own packets were delivered
            // (a call's packets, each acknowledged before the next; see the regression test
            // `sparse_packets_sent_from_an_idle_path_are_app_limited`).
            is_app_limited: self.app_limited_until > self.delivered
                || (self.app_limited_until != 0 && in_flight == 0),
        }
    }

    /// The sender had nothing to send while the path had window space.
    pub(crate) fn mark_app_limited(&mut self, in_flight: u64) {
        self.app_limited_until = (self.delivered + in_flight).max(1);
    }

    /// A packet declared lost was acknowledged after all: its bytes were delivered.
    pub(crate) fn on_late_delivery(&mut self, size: u64) {
        self.delivered += size;
    }

    /// A packet in flight, sent at `time_sent` with `stamp`, was acknowledged now.
    pub(crate) fn on_delivered(
        &mut self,
        now: Instant,
        size: u64,
        time_sent: Instant,
        stamp: &Stamp,
        s: &mut Sampler,
    ) {
        self.delivered += size;
        self.delivered_time = now;
        if stamp.delivered >= s.prior_delivered {
            s.prior_delivered = stamp.delivered;
            s.prior_time = Some(stamp.delivered_time);
            s.prior_peer_us = stamp.delivered_peer_us;
            s.app_limited = stamp.is_app_limited;
            s.send_elapsed = time_sent - stamp.first_sent_time;
            self.first_sent_time = time_sent;
        }
    }

    /// The rate sample of one ACK frame. `peer_now` is the peer's receive time of the
    /// largest packet it acknowledges, when that is ours and newly acknowledged; intervals
    /// shorter than half of `min_rtt` give no rate.
    pub(crate) fn sample(
        &mut self,
        now: Instant,
        s: &Sampler,
        peer_now: Option<u64>,
        min_rtt: Duration,
    ) -> RateSample {
        let mut rate = RateSample {
            delivered: self.delivered,
            prior_delivered: s.prior_delivered,
            is_app_limited: s.app_limited,
            delivery_rate: 0.0,
        };
        if let Some(prior_time) = s.prior_time {
            // Where the peer timestamps its ACKs, the interval over which they arrived is
            // taken at the receiver, in its clock.
            let ack_elapsed = match (peer_now, s.prior_peer_us) {
                (Some(t), Some(p)) => Duration::from_micros(t.saturating_sub(p)),
                _ => self.delivered_time - prior_time,
            };
            let interval = s.send_elapsed.max(ack_elapsed);
            let bytes = self.delivered - s.prior_delivered;
            if interval >= min_rtt / 2 && !interval.is_zero() {
                rate.delivery_rate = bytes as f64 / interval.as_secs_f64();
                self.last_rate = Some((now, rate.delivery_rate as u64, s.app_limited));
            }
        }
        if peer_now.is_some() {
            self.delivered_peer_us = peer_now;
        }
        if self.app_limited_until != 0 && self.delivered > self.app_limited_until {
            self.app_limited_until = 0;
        }
        rate
    }
}
