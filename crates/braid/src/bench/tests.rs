//! A tiny run of the whole benchmark: the report's shape, and that every byte and enough
//! datagrams arrived (speed is never asserted here).
use super::*;

#[test]
fn a_tiny_bench_has_every_row_and_moves_every_byte() {
    let o = Options {
        size: 4 << 20,
        agents: 2,
        streams: 2,
        paths: 2,
        threads: 1,
        ciphers: Ciphers::auto(),
        udp: Some(3000),
        idle_sessions: Some(20),
        progress: false,
    };
    let r = run(&o).unwrap();
    let names: Vec<&str> = r.rows.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(names, ["tcp", "braid", "mptcp"]);
    for x in &r.rows {
        if x.skipped.is_some() {
            assert_eq!(x.name, "mptcp", "only MPTCP may be skipped");
            continue;
        }
        // 4 MiB over 4 streams: every byte counted (the sinks fail on a short stream).
        assert_eq!(x.bytes, 4 << 20, "{}", x.name);
        assert!(x.gbit_per_s > 0.0 && x.cpu_s_per_gb >= 0.0, "{x:?}");
    }
    assert!(r.rows[1].braid_cpu_s_per_gb.is_some());
    assert!(r.goodput_ratio > 0.0 && r.cpu_ratio > 0.0);
    let u = r.udp.as_ref().unwrap();
    assert_eq!(u.sent, 3000);
    assert!(u.delivered > 0 && u.delivered <= u.sent, "{u:?}");
    let i = r.idle.as_ref().unwrap();
    assert_eq!((i.sessions, i.established), (20, 20), "{i:?}");
    assert!(i.rss_after_kib > 0);
    // The JSON keeps the fields scripts read.
    let j = serde_json::to_value(&r).unwrap();
    for k in ["goodput_ratio", "cpu_ratio", "rows", "udp", "idle"] {
        assert!(j.get(k).is_some(), "{k} missing");
    }
    for k in ["name", "gbit_per_s", "cpu_s_per_gb", "bytes"] {
        assert!(j["rows"][1].get(k).is_some(), "rows[].{k} missing");
    }
}

#[test]
fn bad_options_are_refused_with_the_flag_named() {
    let o = Options {
        size: 3,
        agents: 2,
        streams: 2,
        paths: 1,
        threads: 1,
        ciphers: Ciphers::auto(),
        udp: None,
        idle_sessions: None,
        progress: false,
    };
    let e = run(&o).unwrap_err().to_string();
    assert!(e.contains("--size"), "{e}");
    let e = run(&Options { paths: 9, ..o }).unwrap_err().to_string();
    assert!(e.contains("--paths"), "{e}");
}
