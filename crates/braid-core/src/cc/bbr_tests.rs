//! `bbr.rs`'s tests: the controller driven by hand-made acknowledgements (a file of its
//! own so that the controller stays one sitting long).

use super::bbr::Bbr;
use super::{AckEvent, CongestionController, LossEvent};
use crate::cc::RateSample;
use crate::rtt::RttEstimator;
use crate::time::Instant;
use std::time::Duration;

/// A rate sample of `delivery_rate` bytes/s, not application-limited.
fn rate(delivery_rate: f64, prior_delivered: u64, delivered: u64) -> RateSample {
    RateSample {
        delivery_rate,
        is_app_limited: false,
        prior_delivered,
        delivered,
    }
}

/// An acknowledgement at `now` of `acked` bytes sent at `sent`, with RTT sample `sample`,
/// in flight `(before, after)`.
fn ack(
    est: &RttEstimator,
    now: Instant,
    sent: Instant,
    sample: Duration,
    acked: u64,
    (prior_in_flight, in_flight): (u64, u64),
    rate: RateSample,
) -> AckEvent<'_> {
    AckEvent {
        now,
        acked_bytes: acked,
        largest_acked_sent: sent,
        prior_in_flight,
        in_flight,
        rtt: est,
        rtt_sample: Some(sample),
        fwd_queue: None,
        rate,
        coupling: Default::default(),
    }
}

#[test]
fn converges_on_the_bottleneck_and_ignores_random_loss() {
    // A 10 MB/s pipe with 50 ms RTT: BDP 500 kB.
    let mss = 1200;
    let mut b = Bbr::new(mss, 12_000, Instant(0));
    let rtt = RttEstimator::new(Duration::from_millis(50));
    let mut delivered = 0u64;
    let mut now = Instant(0);
    for _ in 0..400 {
        now += Duration::from_millis(5);
        let acked = 50_000; // 10 MB/s over 5 ms
        let prior = delivered;
        delivered += acked;
        let cw = b.window();
        // The pacer keeps the pipe at about one BDP.
        b.on_ack(&ack(
            &rtt,
            now,
            now - Duration::from_millis(50),
            Duration::from_millis(50),
            acked,
            (cw, cw.min(450_000)),
            rate(10e6, prior.saturating_sub(500_000), delivered),
        ));
        b.on_loss(&LossEvent {
            now,
            lost_bytes: mss,
            largest_lost_sent: now,
            persistent: false,
            in_flight: 0,
            coupling: Default::default(),
        });
    }
    let w = b.window();
    assert!((900_000..=1_100_000).contains(&w), "window {w}");
    let pacing = b.pacing_rate(&rtt) as f64;
    assert!((7.4e6..=12.6e6).contains(&pacing), "pacing {pacing}");
    assert!(!b.in_slow_start());
}

/// Startup on a 2 ms path whose queue grows by 1 ms a round while the delivery rate
/// still grows by 30 % a round (so the bandwidth exit never fires): the rounds still in
/// startup after `rounds`.
fn startup_rounds_with_a_growing_queue(mut b: Bbr, rounds: u64) -> Option<u64> {
    let est = RttEstimator::new(Duration::from_millis(2));
    let (mut now, mut delivered, mut rate_now) = (Instant(0), 0u64, 1e6);
    for i in 0..rounds {
        now += Duration::from_millis(2 + i);
        let acked = (rate_now * 0.002) as u64;
        let prior = delivered;
        delivered += acked;
        let cw = b.window();
        b.on_ack(&ack(
            &est,
            now,
            now - Duration::from_millis(2),
            Duration::from_millis(2 + i),
            acked,
            (cw, cw),
            rate(rate_now, prior, delivered),
        ));
        if !b.in_slow_start() {
            return Some(i);
        }
        rate_now *= 1.3;
    }
    None
}

/// A call beside an upload that was starting waited 50-100 ms for 0.2 s (the testbed's
/// `responsive_*`): startup filled a home router's 80 ms buffer before the bandwidth
/// stopped growing. `bbrq` ends startup once a whole round stood above the queue target.
#[test]
fn bbrq_startup_ends_when_a_whole_round_stands_above_the_queue_target() {
    let q = Bbr::with_queue_bound(1200, 12_000, Instant(0));
    let ended = startup_rounds_with_a_growing_queue(q, 20);
    // The target on a 2 ms path is 4.25 ms: the round with 5 ms of queue ends it.
    assert!(
        matches!(ended, Some(4..=6)),
        "bbrq left startup at {ended:?}"
    );
    let plain = Bbr::new(1200, 12_000, Instant(0));
    assert_eq!(
        startup_rounds_with_a_growing_queue(plain, 20),
        None,
        "plain BBR"
    );
}

/// A closed loop of a 10 MB/s bottleneck with 50 ms RTT: each 5 ms step delivers what
/// the window allows (at most the bottleneck's share); the sample of step `odd` is
/// `odd_rtt` instead of 50 ms. Returns the rate delivered over the last second.
fn closed_loop(mut b: Bbr, odd: usize, odd_rtt: Duration) -> f64 {
    let (bw, rtt, step) = (10e6, Duration::from_millis(50), Duration::from_millis(5));
    let est = RttEstimator::new(rtt);
    let mut now = Instant(0);
    // Delivered bytes at each past step, to find what was delivered when a packet left.
    let mut history: Vec<u64> = vec![0; 10];
    let mut delivered = 0u64;
    let steps = 1000;
    let mut last_second = 0u64;
    for i in 0..steps {
        now += step;
        let window_rate = b.window() as f64 / rtt.as_secs_f64();
        let through = window_rate.min(bw);
        let acked = (through * step.as_secs_f64()) as u64;
        let prior = history[history.len() - 10];
        delivered += acked;
        history.push(delivered);
        if i >= steps - 200 {
            last_second += acked;
        }
        let delivery_rate = (delivered - prior) as f64 / rtt.as_secs_f64();
        b.on_ack(&ack(
            &est,
            now,
            now - rtt,
            if i == odd { odd_rtt } else { rtt },
            acked,
            (b.window(), b.window().saturating_sub(acked)),
            rate(delivery_rate, prior, delivered),
        ));
    }
    last_second as f64
}

/// Noted when `bbrq` was built: one RTT sample far below the path's (here 2 ms on a
/// 50 ms path) became the propagation RTT, the window shrank to a twenty-fifth of the
/// bandwidth-delay product, what the path delivered and with it the bandwidth estimate
/// followed, and the path stayed collapsed, without a loss, until the minimum expired
/// ten seconds later.
#[test]
fn window_does_not_collapse_after_one_too_small_min_rtt_sample() {
    for b in [
        Bbr::new(1200, 12_000, Instant(0)),
        Bbr::with_queue_bound(1200, 12_000, Instant(0)),
    ] {
        let name = b.name();
        let clean = closed_loop(b.clone(), usize::MAX, Duration::ZERO);
        let odd = closed_loop(b, 300, Duration::from_millis(2));
        assert!(
            clean >= 0.9 * 10e6,
            "{name}: {clean} B/s without the outlier"
        );
        assert!(
            odd >= 0.9 * clean,
            "{name}: {odd} B/s after the outlier, {clean} without"
        );
    }
}
