//! Latency under load (issue 23) in the simulator: the sparse probe beside a download, with
//! braid's default controller (`bbrq`) against CUBIC, which fills every queue it crosses.

use crate::common::run_shipped;
use braid_sim::{Report, RunResult};

fn get<'a>(r: &'a Report, variant: &str) -> &'a RunResult {
    r.results
        .iter()
        .find(|x| x.variant == variant)
        .unwrap_or_else(|| panic!("no variant {variant}"))
}

/// Issue 23's home: 16/8 + 8/4 Mbit/s behind 80 ms router queues, two paths' download.
#[test]
fn at_home_the_default_adds_at_most_5_ms_to_a_call_beside_a_download() {
    let r = run_shipped("latency-home.toml", &["default", "cubic"]);
    let d = get(&r, "default");
    let l = d.latency;
    let (p50, p95) = (l.added_p50_ms().unwrap(), l.added_p95_ms().unwrap());
    eprintln!(
        "default: idle {:?} ms, added p50 {p50:.1} ms, p95 {p95:.1} ms, {:.3} of the sum",
        l.latency_idle_p50_ms, d.efficiency
    );
    assert!(p50 <= 5.0, "added p50 {p50} ms");
    assert!(p95 <= 15.0, "added p95 {p95} ms");
    assert_eq!(l.probe_loss, Some(0.0));
    assert!(d.efficiency >= 0.90, "efficiency {}", d.efficiency);
    // The contrast that makes this a test: CUBIC keeps the router's queue full.
    let c = get(&r, "cubic").latency;
    let cubic_p50 = c.added_p50_ms().unwrap();
    assert!(cubic_p50 >= 40.0, "cubic added p50 {cubic_p50} ms");
    assert!(get(&r, "cubic").efficiency <= d.efficiency + 0.01);
}

/// The same home with a 64 MB upload beside the download: the download's acknowledgements
/// wait in the up queues the upload fills. Before the peer's receive timestamps (ACK_TS)
/// the download read that wait as its own queue and its rate samples from bunched
/// acknowledgements as bandwidth (0.70 of the sum, the call +13 ms at p50 and +35 at p95).
#[test]
fn an_upload_beside_the_download_keeps_its_rate_and_the_call_fast() {
    let r = run_shipped("latency-home-upload.toml", &["default"]);
    let d = get(&r, "default");
    let l = d.latency;
    let (p50, p95) = (l.added_p50_ms().unwrap(), l.added_p95_ms().unwrap());
    eprintln!(
        "default: added p50 {p50:.1} ms, p95 {p95:.1} ms, {:.3} of the sum",
        d.efficiency
    );
    assert!(d.efficiency >= 0.88, "efficiency {}", d.efficiency);
    assert!(p50 <= 6.0, "added p50 {p50} ms");
    assert!(p95 <= 15.0, "added p95 {p95} ms");
    assert_eq!(l.probe_loss, Some(0.0));
}
