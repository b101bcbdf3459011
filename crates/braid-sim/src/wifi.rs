//! 802.11 DCF contention on one path: the access point (down) and the client (up) are two
//! stations that contend for one medium, and every frame, a transport ACK as much as a data
//! packet, pays the distributed coordination function's per-frame cost.
//!
//! Owns: the 802.11b and 802.11g timing constants, the airtime of a frame exchange, each
//! station's backoff counter and contention window, collisions and retry drops. Must not
//! touch: queues, propagation, loss or payloads (`link` owns them and asks this module
//! when a station may send and for how long), or any randomness but its own `Rng`.
//!
//! # The model (IEEE Std 802.11-2007)
//!
//! A successful exchange is `DIFS`, the backoff (slots), the data PPDU, `SIFS` and the
//! link-layer ACK PPDU. The data PPDU carries the IP packet plus 36 bytes of MAC framing
//! (24-byte header, 4-byte FCS, 8-byte LLC/SNAP) at the station's PHY rate; the 14-byte ACK
//! goes at the highest basic rate not above it (9.6), with its own preamble.
//!
//! | | 802.11b (HR/DSSS, clause 18) | 802.11g (ERP-OFDM, clause 19, short slot) |
//! | --- | --- | --- |
//! | slot, SIFS, DIFS = SIFS + 2 slots | 20, 10, 50 us | 9, 10, 28 us |
//! | CWmin, CWmax | 31, 1023 | 15, 1023 |
//! | PLCP preamble + header | 192 us at 1 Mbit/s (long preamble) | 16 + 4 us, then 4 us symbols of 16 service + 8·bytes + 6 tail bits, + 6 us signal extension |
//! | basic rates (ACK) | 1, 2 Mbit/s | 6, 12, 24 Mbit/s |
//!
//! `802.11g-protected` is 802.11g in a BSS that also has 802.11b stations (a campus network
//! of 2009, like paper 000's, whose laptop joined it in 802.11b mode): the slot is the long
//! one (20 us, so DIFS 50 us) and each OFDM data frame follows a CTS-to-self (14 bytes at
//! 11 Mbit/s with the 96 us short preamble, then SIFS) that 802.11b stations can decode
//! (19.2, 9.13). It gives a one-way UDP rate of 19.5 Mbit/s at 54 Mbit/s, the paper's 20;
//! plain `802.11g` gives 30.
//!
//! Backoff: a station draws its counter uniformly in `[0, CW]` after each of its
//! transmissions (post-backoff, which runs down even with nothing queued) and when a frame
//! arrives while the medium is busy and its counter is 0. Counters run down one per idle
//! slot once the medium has been idle for DIFS and freeze while it is busy; a station whose
//! counter is 0 and whose frame arrives at a medium idle for DIFS sends at once. When both
//! counters end in the same slot the frames collide: the medium is busy for the longer
//! frame plus an ACK timeout (SIFS + the ACK + one slot), nothing is delivered, both
//! stations double CW (at most CWmax) and retry; after `dot11ShortRetryLimit` (7) retries
//! the frame is dropped. Not modelled: RTS/CTS, EIFS after a collision (both stations were
//! senders), capture, other stations.
//!
//! Optional, per scenario (both off by default):
//! - Rate control (`rate_control = "arf"`): each station picks its PHY rate with Auto Rate
//!   Fallback (`crate::arf`), at most the configured one; a collision and a corrupted frame
//!   are both failures to it, as to a real card, which cannot tell them apart.
//! - Frame errors (`frame_error`, per station): the receiver loses a station's data frame
//!   with this probability whatever its rate and length (link-layer ACKs always get
//!   through), like a collision for one station: the medium is busy for the frame and an
//!   ACK timeout, the sender doubles CW and retries. It stands for what no rate cures
//!   (interference at the receiver); under ARF it drives the station to its lowest rate.
//!
//! Determinism: draws come from one `Rng` seeded by the path.

use crate::arf::Arf;
use crate::time::Nanos;
use braid_core::Rng;
use serde::Serialize;

/// Bytes of MAC framing around an IP packet: 24 header + 4 FCS + 8 LLC/SNAP.
pub const MAC_OVERHEAD: u64 = 36;
/// Bytes of a link-layer ACK frame.
pub const ACK_BYTES: u64 = 14;
/// dot11ShortRetryLimit.
pub const RETRY_LIMIT: u32 = 7;
/// Size of the IP packets whose one-way rate is a DCF path's capacity (a UDP flood's).
pub const FULL_FRAME: u64 = 1500;

const US: Nanos = 1_000;

/// Which 802.11 PHY.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Standard {
    /// 802.11b, HR/DSSS with the long preamble.
    #[serde(rename = "802.11b")]
    B,
    /// 802.11g, ERP-OFDM in a BSS of ERP stations only (short slot).
    #[serde(rename = "802.11g")]
    G,
    /// 802.11g in a BSS with 802.11b stations (19.2, 9.13): long slot, and every OFDM frame
    /// but the ACK after a CTS-to-self at 11 Mbit/s with the short preamble.
    #[serde(rename = "802.11g-protected")]
    GProtected,
}

impl Standard {
    /// Parses a scenario's `wifi` value.
    pub fn parse(s: &str) -> Option<Standard> {
        match s {
            "802.11b" | "b" => Some(Standard::B),
            "802.11g" | "g" => Some(Standard::G),
            "802.11g-protected" => Some(Standard::GProtected),
            _ => None,
        }
    }

    /// The PHY rates (bit/s) a station may use.
    pub fn rates(self) -> &'static [u64] {
        match self {
            Standard::B => &[1_000_000, 2_000_000, 5_500_000, 11_000_000],
            Standard::G | Standard::GProtected => &[
                6_000_000, 9_000_000, 12_000_000, 18_000_000, 24_000_000, 36_000_000, 48_000_000,
                54_000_000,
            ],
        }
    }

    fn basic_rates(self) -> &'static [u64] {
        match self {
            Standard::B => &[1_000_000, 2_000_000],
            Standard::G | Standard::GProtected => &[6_000_000, 12_000_000, 24_000_000],
        }
    }

    /// Slot time.
    pub fn slot(self) -> Nanos {
        match self {
            Standard::B | Standard::GProtected => 20 * US,
            Standard::G => 9 * US,
        }
    }

    /// SIFS.
    pub fn sifs(self) -> Nanos {
        10 * US
    }

    /// DIFS = SIFS + 2 slots.
    pub fn difs(self) -> Nanos {
        self.sifs() + 2 * self.slot()
    }

    /// CWmin.
    pub fn cw_min(self) -> u32 {
        match self {
            Standard::B => 31,
            Standard::G | Standard::GProtected => 15,
        }
    }

    /// CWmax.
    pub fn cw_max(self) -> u32 {
        1023
    }

    /// Airtime of a PPDU carrying `bytes` of MPDU at `rate` bit/s.
    pub fn ppdu(self, bytes: u64, rate: u64) -> Nanos {
        let rate = rate.max(1);
        match self {
            Standard::B => 192 * US + (bytes * 8 * 1_000_000_000).div_ceil(rate),
            Standard::G | Standard::GProtected => {
                // Data bits per 4 us symbol.
                let per_symbol = (rate * 4 / 1_000_000).max(1);
                let symbols = (16 + 8 * bytes + 6).div_ceil(per_symbol);
                20 * US + 4 * US * symbols + 6 * US
            }
        }
    }

    /// The rate of the ACK answering a frame sent at `rate`: the highest basic rate not
    /// above it (the lowest basic rate when all are above it).
    pub fn ack_rate(self, rate: u64) -> u64 {
        let basic = self.basic_rates();
        basic
            .iter()
            .copied()
            .filter(|&b| b <= rate)
            .max()
            .unwrap_or(basic[0])
    }

    /// Airtime of the ACK answering a frame sent at `rate`.
    pub fn ack(self, rate: u64) -> Nanos {
        self.ppdu(ACK_BYTES, self.ack_rate(rate))
    }

    /// The data PPDU of an IP packet of `ip_bytes` at `rate`, after its protection.
    pub fn data(self, ip_bytes: u64, rate: u64) -> Nanos {
        self.protection() + self.ppdu(ip_bytes + MAC_OVERHEAD, rate)
    }

    /// CTS-to-self and SIFS before a data frame (802.11g with 802.11b stations): a 14-byte
    /// CTS at 11 Mbit/s after the 96 us short DSSS preamble.
    pub fn protection(self) -> Nanos {
        match self {
            Standard::GProtected => {
                96 * US + (ACK_BYTES * 8 * 1_000_000_000).div_ceil(11_000_000) + self.sifs()
            }
            _ => 0,
        }
    }

    /// Data PPDU, SIFS and ACK: the medium time of a successful exchange after its backoff.
    pub fn exchange(self, ip_bytes: u64, rate: u64) -> Nanos {
        self.data(ip_bytes, rate) + self.sifs() + self.ack(rate)
    }

    /// The IP-layer rate (bit/s) of one station sending `ip_bytes` packets back to back
    /// alone on the medium, with the mean backoff (CWmin / 2 slots): a UDP flood's rate.
    pub fn saturation_bps(self, ip_bytes: u64, rate: u64) -> f64 {
        let per = self.difs() as f64
            + self.cw_min() as f64 / 2.0 * self.slot() as f64
            + self.exchange(ip_bytes, rate) as f64;
        ip_bytes as f64 * 8.0 * 1e9 / per
    }
}

/// How a station picks its PHY rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum RateControl {
    /// Always the configured rate.
    #[serde(rename = "fixed")]
    Fixed,
    /// Auto Rate Fallback (`crate::arf`), at most the configured rate.
    #[serde(rename = "arf")]
    Arf,
}

/// A path's 802.11 medium as a scenario gives it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct WifiSpec {
    pub standard: Standard,
    pub rate_control: RateControl,
    /// Per station (Up, Down): the probability that the other station loses one of its
    /// data frames, whatever its rate and length (link-layer ACKs always get through): an
    /// impairment no rate cures, such as interference at the receiver.
    pub frame_error: [f64; 2],
}

impl WifiSpec {
    /// `standard` at fixed rates on an error-free channel.
    pub fn new(standard: Standard) -> WifiSpec {
        WifiSpec {
            standard,
            rate_control: RateControl::Fixed,
            frame_error: [0.0; 2],
        }
    }
}

/// One station's DCF state.
#[derive(Debug, Clone, Copy)]
struct Station {
    /// Backoff slots left, counted from `Dcf::countdown`.
    counter: u32,
    cw: u32,
    retries: u32,
    /// When the head frame became ready to send.
    ready: Nanos,
}

/// What a collision did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Collision {
    /// The medium is busy until then.
    pub busy_until: Nanos,
    /// Per station (Up, Down): its head frame reached the retry limit and is dropped.
    pub drop: [bool; 2],
}

/// The two stations' contention (see the module documentation). Index 0 is the client
/// (Up), 1 the access point (Down).
pub struct Dcf {
    std: Standard,
    spec: WifiSpec,
    /// Configured PHY rates (Up, Down): the rates with fixed rate control, the ceilings
    /// with ARF.
    rates: [u64; 2],
    arf: Option<[Arf; 2]>,
    sta: [Station; 2],
    /// When backoff counters start to run down (the medium's last busy end + DIFS).
    countdown: Nanos,
    /// End of the last collision's busy time.
    busy_until: Nanos,
    rng: Rng,
}

impl Dcf {
    /// Two idle stations sending at `rates` (Up, Down).
    pub fn new(spec: WifiSpec, rates: [u64; 2], seed: u64) -> Dcf {
        let cw = spec.standard.cw_min();
        let sta = Station {
            counter: 0,
            cw,
            retries: 0,
            ready: 0,
        };
        let arf = (spec.rate_control == RateControl::Arf)
            .then(|| rates.map(|r| Arf::new(spec.standard.rates(), r)));
        Dcf {
            std: spec.standard,
            spec,
            rates,
            arf,
            sta: [sta; 2],
            countdown: 0,
            busy_until: 0,
            rng: Rng::new(seed),
        }
    }

    /// The PHY.
    pub fn standard(&self) -> Standard {
        self.std
    }

    /// Station `d` got a frame at `now` with nothing queued before it; `busy`: the medium
    /// is carrying a frame now.
    pub fn frame_ready(&mut self, d: usize, now: Nanos, busy: bool) {
        let busy = busy || now < self.busy_until;
        let s = &mut self.sta[d];
        s.ready = now;
        if busy && s.counter == 0 {
            s.counter = self.rng.below(s.cw as u64 + 1) as u32;
        }
    }

    /// When station `d` would start sending its head frame if nothing else happens first.
    pub fn access_time(&self, d: usize) -> Nanos {
        let s = &self.sta[d];
        (self.countdown + s.counter as Nanos * self.std.slot()).max(s.ready)
    }

    /// Station `d`'s PHY rate for its next transmission.
    pub fn rate(&self, d: usize) -> u64 {
        self.arf.map_or(self.rates[d], |a| a[d].rate())
    }

    /// Times station `d`'s rate control has dropped its rate.
    pub fn rate_drops(&self, d: usize) -> u64 {
        self.arf.map_or(0, |a| a[d].drops)
    }

    /// Medium time of station `d`'s successful exchange of an `ip_bytes` packet.
    pub fn exchange(&self, d: usize, ip_bytes: u64) -> Nanos {
        self.std.exchange(ip_bytes, self.rate(d))
    }

    /// Draws whether the channel corrupts station `d`'s frame, sent alone now.
    pub fn corrupted(&mut self, d: usize) -> bool {
        let p = self.spec.frame_error[d];
        p > 0.0 && self.rng.chance(p)
    }

    /// Runs every counter down to the medium going busy at `at`.
    fn freeze(&mut self, at: Nanos) {
        let slots = (at.saturating_sub(self.countdown) / self.std.slot()) as u32;
        for s in &mut self.sta {
            s.counter = s.counter.saturating_sub(slots);
        }
    }

    fn draw(&mut self, d: usize) {
        let cw = self.sta[d].cw;
        self.sta[d].counter = self.rng.below(cw as u64 + 1) as u32;
    }

    /// Station `d` sent alone from `at`; the exchange ends at `end`.
    pub fn success(&mut self, d: usize, at: Nanos, end: Nanos) {
        self.freeze(at);
        self.countdown = end + self.std.difs();
        let s = &mut self.sta[d];
        s.cw = self.std.cw_min();
        s.retries = 0;
        s.ready = end;
        self.draw(d);
        if let Some(a) = self.arf.as_mut() {
            a[d].on_success();
        }
    }

    /// Both stations sent from `at` (head frames of `ip_bytes`).
    pub fn collide(&mut self, at: Nanos, ip_bytes: [u64; 2]) -> Collision {
        self.failed(at, [true, true], ip_bytes)
    }

    /// Station `d` sent alone from `at` and the channel corrupted its `ip_bytes` frame:
    /// no link-layer ACK, as after a collision.
    pub fn corrupt(&mut self, d: usize, at: Nanos, ip_bytes: u64) -> Collision {
        let mut who = [false; 2];
        who[d] = true;
        let mut bytes = [0; 2];
        bytes[d] = ip_bytes;
        self.failed(at, who, bytes)
    }

    /// The stations in `who` sent from `at` and got no ACK: the medium is busy for the
    /// longest frame and an ACK timeout; each of them doubles CW and retries (or drops).
    fn failed(&mut self, at: Nanos, who: [bool; 2], ip_bytes: [u64; 2]) -> Collision {
        self.freeze(at);
        let longest = (0..2)
            .filter(|&d| who[d])
            .map(|d| self.std.data(ip_bytes[d], self.rate(d)) + self.std.ack(self.rate(d)))
            .max()
            .unwrap_or(0);
        let busy_until = at + longest + self.std.sifs() + self.std.slot();
        self.busy_until = busy_until;
        self.countdown = busy_until + self.std.difs();
        let mut drop = [false; 2];
        for (d, dropped) in drop.iter_mut().enumerate() {
            if !who[d] {
                continue;
            }
            if let Some(a) = self.arf.as_mut() {
                a[d].on_failure();
            }
            let (min, max) = (self.std.cw_min(), self.std.cw_max());
            let s = &mut self.sta[d];
            s.retries += 1;
            s.ready = busy_until;
            if s.retries > RETRY_LIMIT {
                *dropped = true;
                s.retries = 0;
                s.cw = min;
            } else {
                s.cw = (2 * s.cw + 1).min(max);
            }
            self.draw(d);
        }
        Collision { busy_until, drop }
    }

    /// The medium is busy with a collision at `t`.
    pub fn colliding(&self, t: Nanos) -> bool {
        t < self.busy_until
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_times_follow_the_standards() {
        // 802.11b long preamble: 192 us + 1536 bytes at 11 Mbit/s = 1117.1 us.
        assert_eq!(Standard::B.data(1500, 11_000_000), 192_000 + 1_117_091);
        // ACK at 2 Mbit/s: 192 + 56 us.
        assert_eq!(Standard::B.ack(11_000_000), 248_000);
        assert_eq!(Standard::B.ack(1_000_000), 304_000);
        // 802.11g 54 Mbit/s: (16 + 12288 + 6) / 216 = 57 symbols: 20 + 228 + 6 us.
        assert_eq!(Standard::G.data(1500, 54_000_000), 254_000);
        // ACK at 24 Mbit/s: 134 bits / 96 = 2 symbols: 20 + 8 + 6 us.
        assert_eq!(Standard::G.ack(54_000_000), 34_000);
        assert_eq!(Standard::B.difs(), 50_000);
        assert_eq!(Standard::G.difs(), 28_000);
    }

    #[test]
    fn saturation_rates_are_the_textbook_ones() {
        // 802.11b at 11 Mbit/s: about 6.2 Mbit/s of 1500-byte packets; 802.11g at 54: about 30.
        let b = Standard::B.saturation_bps(1500, 11_000_000) / 1e6;
        let g = Standard::G.saturation_bps(1500, 54_000_000) / 1e6;
        assert!((6.0..6.5).contains(&b), "{b}");
        assert!((29.0..31.0).contains(&g), "{g}");
    }

    #[test]
    fn counters_freeze_while_the_other_station_sends() {
        let spec = WifiSpec::new(Standard::B);
        let mut d = Dcf::new(spec, [11_000_000; 2], 1);
        d.sta[0].counter = 10;
        d.sta[1].counter = 4;
        d.countdown = 1_000_000;
        assert_eq!(d.access_time(1), 1_000_000 + 4 * 20_000);
        let at = d.access_time(1);
        d.success(1, at, at + 2_000_000);
        // Station 0 ran down 4 slots and resumes after the exchange and DIFS.
        assert_eq!(d.sta[0].counter, 6);
        assert_eq!(d.access_time(0), at + 2_000_000 + 50_000 + 6 * 20_000);
    }

    #[test]
    fn a_corrupted_frame_costs_its_sender_a_retry_and_leaves_the_other_counter_frozen() {
        let mut spec = WifiSpec::new(Standard::B);
        spec.frame_error = [0.5, 0.0];
        let mut d = Dcf::new(spec, [11_000_000; 2], 3);
        // Only the station with frame errors ever draws one.
        let up = (0..1000).filter(|_| d.corrupted(0)).count();
        assert!((400..600).contains(&up), "{up}");
        assert!((0..1000).all(|_| !d.corrupted(1)));
        d.sta[1].counter = 9;
        d.countdown = 1_000_000;
        let at = d.countdown + 3 * 20_000;
        let c = d.corrupt(0, at, 40);
        assert_eq!(c.drop, [false, false]);
        assert_eq!(d.sta[0].cw, 63, "the sender doubles its window");
        assert_eq!(d.sta[0].retries, 1);
        assert_eq!(
            (d.sta[1].cw, d.sta[1].counter),
            (31, 6),
            "the other only froze"
        );
        // Busy for the data frame, SIFS, the ACK it waited for and a slot.
        let frame = Standard::B.data(40, 11_000_000) + Standard::B.ack(11_000_000);
        assert_eq!(c.busy_until, at + frame + 10_000 + 20_000);
    }

    #[test]
    fn arf_slows_a_station_after_two_failures_and_fixed_rates_never_do() {
        let mut spec = WifiSpec::new(Standard::B);
        let fixed = Dcf::new(spec, [11_000_000; 2], 1);
        spec.rate_control = RateControl::Arf;
        for mut d in [Dcf::new(spec, [11_000_000; 2], 1), fixed] {
            let arf = d.arf.is_some();
            let fast = d.exchange(0, 100);
            d.corrupt(0, 0, 100);
            d.corrupt(0, 10_000_000, 100);
            assert_eq!(d.rate(1), 11_000_000, "the other station keeps its rate");
            if arf {
                assert_eq!((d.rate(0), d.rate_drops(0)), (5_500_000, 1));
                assert!(d.exchange(0, 100) > fast);
                // Ten successes climb back.
                for i in 0..10 {
                    d.success(0, 20_000_000 + i * 1_000_000, 20_500_000 + i * 1_000_000);
                }
                assert_eq!(d.rate(0), 11_000_000);
            } else {
                assert_eq!((d.rate(0), d.rate_drops(0)), (11_000_000, 0));
                assert_eq!(d.exchange(0, 100), fast);
            }
        }
    }

    #[test]
    fn collisions_double_the_window_and_drop_after_the_retry_limit() {
        let spec = WifiSpec::new(Standard::G);
        let mut d = Dcf::new(spec, [54_000_000; 2], 1);
        let mut dropped = 0;
        for i in 0..=RETRY_LIMIT {
            let c = d.collide(i as Nanos * 10_000_000, [1500, 60]);
            if i < RETRY_LIMIT {
                assert_eq!(c.drop, [false, false]);
                assert_eq!(d.sta[0].cw, (16 << (i + 1)).min(1024) - 1);
            } else {
                assert_eq!(c.drop, [true, true]);
                dropped += 1;
            }
        }
        assert_eq!(dropped, 1);
        assert_eq!(d.sta[1].cw, 15);
    }
}
