const MS_NS: Nanos = 1_000_000;

#[test]
fn mahimahi_one_packet_per_millisecond_is_12_mbit_forever() {
    // Mahimahi's own example: a file holding just "1".
    let t = Trace::parse_mahimahi("1\n", "one").unwrap();
    assert_eq!(t.period(), Some(MS_NS));
    assert_eq!(t.mean_rate(), 12_000_000);
    assert_eq!(t.rate_at(5_000_000_123), 12_000_000);
    // 1500 bytes take one millisecond, wherever they start.
    assert_eq!(
        t.time_to_send(7 * MS_NS + 300, 12_000.0),
        Some(8 * MS_NS + 300)
    );
}

#[test]
fn mahimahi_counts_repeated_timestamps_and_loops_at_the_last_one() {
    // ms 0: 2 packets, ms 1: none, ms 2: 1, then at 4 (the period) the loop starts.
    let t = Trace::parse_mahimahi("0\n0\n2\n4\n", "t").unwrap();
    assert_eq!(t.period(), Some(4 * MS_NS));
    // The opportunity at 4 ms is time 0 of the next round: 3 at ms 0.
    assert_eq!(t.rate_at(0), 36_000_000);
    assert_eq!(t.rate_at(MS_NS), 0);
    assert_eq!(t.rate_at(2 * MS_NS), 12_000_000);
    assert_eq!(t.rate_at(3 * MS_NS), 0);
    assert_eq!(t.rate_at(4 * MS_NS + 10), 36_000_000);
    // 4 packets of 1500 bytes per 4 ms.
    assert_eq!(t.mean_rate(), 12_000_000);
    assert_eq!(t.bits_between(0, 400 * MS_NS), 100.0 * 4.0 * 12_000.0);
    // ms 3..9: 0 + 3 (ms 4 = 0) + 0 + 1 (ms 6 = 2) + 0 + 3 (ms 8 = 0).
    assert_eq!(t.bits_between(3 * MS_NS, 9 * MS_NS), 12_000.0 * 7.0);
}

#[test]
fn a_looping_trace_sends_across_its_end_and_many_periods() {
    let t = Trace::parse_mahimahi("0\n2\n4\n", "t").unwrap();
    // 1 packet at ms 0 (2 with the wrap) and 1 at ms 2: 3 per 4 ms... the last line is
    // the next round's first: ms 0 has 2, ms 2 has 1.
    assert_eq!(t.bits_between(0, 4 * MS_NS), 3.0 * 12_000.0);
    // From inside ms 3 (rate 0), 1500 bytes need the next round's ms 0, half of it.
    let end = t.time_to_send(3 * MS_NS, 12_000.0).unwrap();
    assert_eq!(end, 4 * MS_NS + MS_NS / 2);
    // 1000 rounds later, exactly.
    let bits = 1000.0 * 3.0 * 12_000.0;
    let end = t.time_to_send(0, bits).unwrap();
    assert_eq!(t.bits_between(0, end), bits);
    assert!(t.bits_between(0, end - 1) < bits);
}

#[test]
fn the_format_is_detected_from_the_content() {
    assert_eq!(detect_format("0\n1\n1\n"), TraceFormat::Mahimahi);
    assert_eq!(detect_format("time_s,rate_mbit\n0,1\n"), TraceFormat::Csv);
    assert_eq!(detect_format("0,1\n"), TraceFormat::Csv);
}

#[test]
fn bad_mahimahi_traces_are_refused_with_the_line() {
    let e = Trace::parse_mahimahi("0\n5\n3\n", "f.down").unwrap_err();
    assert!(
        e.contains("f.down: line 3") && e.contains("never decrease"),
        "{e}"
    );
    let e = Trace::parse_mahimahi("0\n1.5\n", "f.down").unwrap_err();
    assert!(
        e.contains("line 2") && e.contains("whole milliseconds"),
        "{e}"
    );
    assert!(Trace::parse_mahimahi("\n", "f")
        .unwrap_err()
        .contains("no timestamps"));
}

#[test]
fn the_shipped_mahimahi_traces_have_the_mean_rates_their_readme_gives() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/traces/mahimahi");
    for (f, mbit) in [
        ("Verizon-LTE-short.down", 5.0),
        ("ATT-LTE-driving-2016.down", 4.6),
    ] {
        let t = Trace::load(&dir.join(f), None).unwrap();
        assert!(t.period().is_some(), "{f} loops");
        let m = t.mean_rate() as f64 / 1e6;
        assert!((m - mbit).abs() < 0.15, "{f}: {m} Mbit/s");
    }
}

use super::*;
use std::path::Path;

const S: Nanos = 1_000_000_000;

fn example() -> Trace {
    // 0-1 s: 10 Mbit, 1-3 s: 0, from 3 s: 20 Mbit.
    Trace::parse("time_s,rate_mbit\n0,10\n1,0\n3,20\n", "t.csv").unwrap()
}

#[test]
fn parse_skips_header_comments_blank_lines() {
    let t = Trace::parse(
        "# a comment\n\ntime_s, rate_mbit\n0.5, 1.5 # trailing\n\n2,0\n",
        "x",
    )
    .unwrap();
    assert_eq!(t.points(), &[(S / 2, 1_500_000), (2 * S, 0)]);
    let t = Trace::parse("0,5\n", "x").unwrap();
    assert_eq!(t.points(), &[(0, 5_000_000)]);
}

#[test]
fn parse_errors_name_file_and_line() {
    let e = Trace::parse("t,r\n0,10\n1,abc\n", "walk.csv").unwrap_err();
    assert!(e.starts_with("walk.csv: line 3: "), "{e}");
    assert!(e.contains("abc"));
    let e = Trace::parse("0,10\n0,5\n", "w").unwrap_err();
    assert!(
        e.contains("line 2") && e.contains("strictly increasing"),
        "{e}"
    );
    let e = Trace::parse("0,10\n-1,5\n", "w").unwrap_err();
    assert!(e.contains("line 2"), "{e}");
    let e = Trace::parse("0,-10\n", "w").unwrap_err();
    assert!(e.contains("line 1") && e.contains(">= 0"), "{e}");
    let e = Trace::parse("0,10,3\n", "w").unwrap_err();
    assert!(e.contains("two comma-separated"), "{e}");
    assert!(Trace::parse("# nothing\n", "w")
        .unwrap_err()
        .contains("no data rows"));
    assert!(Trace::parse("0,nan\n", "w").is_err());
    assert!(Trace::parse("inf,1\n", "w").is_err());
    assert!(Trace::parse("1e30,1\n", "w").is_err());
    let e = Trace::load(Path::new("/nonexistent/trace.csv"), None).unwrap_err();
    assert!(e.contains("/nonexistent/trace.csv"), "{e}");
}

#[test]
fn rate_is_piecewise_constant() {
    let t = Trace::parse("1,10\n2,20\n", "x").unwrap();
    assert_eq!(t.rate_at(0), 10_000_000); // before the first row
    assert_eq!(t.rate_at(S), 10_000_000);
    assert_eq!(t.rate_at(2 * S - 1), 10_000_000);
    assert_eq!(t.rate_at(2 * S), 20_000_000);
    assert_eq!(t.rate_at(u64::MAX), 20_000_000);
}

#[test]
fn integrals() {
    let t = example();
    assert_eq!(t.bits_between(0, S), 10e6);
    assert_eq!(t.bits_between(0, 4 * S), 10e6 + 20e6);
    assert_eq!(t.bits_between(S / 2, 3 * S + S / 2), 5e6 + 10e6);
    assert_eq!(t.bits_between(2 * S, S), 0.0);
    assert_eq!(t.bits_between(S, 3 * S), 0.0);
}

#[test]
fn time_to_send_crosses_segments() {
    let t = example();
    // 12000 bits at 10 Mbit/s: 1.2 ms.
    assert_eq!(t.time_to_send(0, 12_000.0), Some(1_200_000));
    // Starting 0.6 ms before the gap: 6000 bits before, then wait 2 s, then 6000 at 20M.
    let start = S - 600_000;
    assert_eq!(t.time_to_send(start, 12_000.0), Some(3 * S + 300_000));
    assert_eq!(t.time_to_send(5, 0.0), Some(5));
    // Rounds up to whole nanoseconds: 1 bit at 10 Mbit/s = 100 ns; 1 bit at 3 bit/s.
    assert_eq!(t.time_to_send(0, 1.0), Some(100));
    let slow = Trace::constant(3);
    assert_eq!(slow.time_to_send(0, 1.0), Some(333_333_334));
    let dead = Trace::parse("0,10\n1,0\n", "x").unwrap();
    assert_eq!(dead.time_to_send(0, 20e6), None);
    assert_eq!(dead.time_to_send(0, f64::NAN), None);
    assert_eq!(dead.time_to_send(0, f64::INFINITY), None);
    assert_eq!(Trace::constant(1).time_to_send(u64::MAX - 1, 1e9), None);
}

#[test]
fn mean_rate_is_time_weighted() {
    assert_eq!(example().mean_rate(), 10_000_000 / 3);
    assert_eq!(Trace::constant(7).mean_rate(), 7);
    let t = Trace::parse("0,10\n1,30\n2,0\n", "x").unwrap();
    assert_eq!(t.mean_rate(), 20_000_000);
}

#[test]
fn new_validates() {
    assert!(Trace::new(vec![]).is_err());
    assert!(Trace::new(vec![(5, 1), (5, 2)]).is_err());
    assert!(Trace::new(vec![(5, 1), (6, 2)]).is_ok());
}
