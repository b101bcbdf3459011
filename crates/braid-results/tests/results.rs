//! Database round trips, refusal of foreign files, plots and the HTML page.

use braid_results::plot::{plot_run, FigureKind};
use braid_results::{write_report, Error, ResultFilter, RunSamples, Store, SCHEMA_VERSION};
use braid_sim::{Latency, PathResult, Report, RunResult};

fn result(variant: &str, rep: u32, size: u64, goodput: f64) -> RunResult {
    let mut r = RunResult::new(variant, rep, 1000 + u64::from(rep), size);
    r.verified = true;
    r.goodput_bps = goodput;
    r.completion_s = size as f64 * 8.0 / goodput;
    r.capacity_bps = 100e6;
    r.efficiency = goodput / 100e6;
    r.energy_j = 1.5;
    r.retransmitted_bytes = 1234;
    r.paths = vec![
        PathResult {
            name: "wifi".into(),
            bytes: size / 2,
            energy_j: 0.5,
            ..Default::default()
        },
        PathResult {
            name: "lte".into(),
            bytes: size / 2,
            energy_j: 1.0,
            ..Default::default()
        },
    ];
    // Latency as the testbed fills it; no RPM on odd repetitions (as `braid sim` leaves it).
    let base = 20.0 + f64::from(rep);
    r.latency = Latency {
        latency_idle_p50_ms: Some(base),
        latency_load_p50_ms: Some(base * 4.0),
        latency_load_p95_ms: Some(base * 6.0),
        latency_load_p99_ms: Some(base * 7.5),
        probe_loss: Some(0.01 * f64::from(rep)),
        rpm: rep.is_multiple_of(2).then_some(600.0 + f64::from(rep)),
    };
    r
}

fn report(name: &str) -> Report {
    let mut results = Vec::new();
    for (vi, v) in ["wifi", "lte", "both"].iter().enumerate() {
        for size in [1_000_000u64, 10_000_000] {
            for rep in 0..4 {
                let g = 20e6 * (vi + 1) as f64 + 1e6 * rep as f64 + size as f64 / 1e6;
                results.push(result(v, rep, size, g));
            }
        }
    }
    Report {
        scenario: name.into(),
        mode: "sim".into(),
        handshake_s: Some(0.042),
        results,
        virtual_s: 12.5,
        wall_s: 0.8,
    }
}

fn samples() -> Vec<RunSamples> {
    let mut out = Vec::new();
    for (vi, v) in ["wifi", "both"].into_iter().enumerate() {
        for rep in 0..2 {
            out.push(RunSamples {
                variant: v.into(),
                repetition: rep,
                size_bytes: 10_000_000,
                interval_s: 0.1,
                throughput_bps: (0..20)
                    .map(|i| {
                        10e6 * (1.0 + vi as f64 + (i as f64 / 3.0).sin().abs()) + 1e6 * rep as f64
                    })
                    .collect(),
                // Loaded probe round trips, one lost (infinite); none for the second variant.
                probe_rtt_s: if vi == 0 {
                    (0..100)
                        .map(|i| {
                            if i == 37 {
                                f64::INFINITY
                            } else {
                                0.02 + 0.001 * f64::from(i) * f64::from(rep + 1)
                            }
                        })
                        .collect()
                } else {
                    Vec::new()
                },
            });
        }
    }
    out
}

#[test]
fn creates_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.sqlite");
    let store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    assert!(store.runs().unwrap().is_empty());
    drop(store);
    // Opening again keeps the version and the data.
    let store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let mut tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    tables.sort();
    assert_eq!(tables, ["results", "runs", "samples", "schema_version"]);
}

#[test]
fn record_and_query_round_trip() {
    let store = Store::open_in_memory().unwrap();
    let mut rep = report("two-paths");
    // Odd values: NaN and infinite goodput, a seed above 2^63, quotes in an error.
    rep.results[0].goodput_bps = f64::NAN;
    rep.results[0].efficiency = f64::NAN;
    rep.results[1].goodput_bps = f64::INFINITY;
    rep.results[1].completion_s = 0.0;
    rep.results[2].seed = u64::MAX - 5;
    rep.results[2].paths[0].energy_j = f64::NAN;
    rep.results[3].verified = false;
    rep.results[3].error = Some("timed out after 'ack' \"frame\"; O'Brien said \u{1F600}".into());
    let text = "name = \"two-paths\"\n# a 'quoted' comment\n";
    let s = samples();
    let id = store
        .record_at(&rep, text, "abc1234-dirty", &s, 1_700_000_000)
        .unwrap();

    let runs = store.runs().unwrap();
    assert_eq!(runs.len(), 1);
    let run = &runs[0];
    assert_eq!(run.id, id);
    assert_eq!(run.created_unix, 1_700_000_000);
    assert_eq!(run.scenario, "two-paths");
    assert_eq!(run.mode, "sim");
    assert_eq!(run.scenario_text, text);
    assert_eq!(run.git_rev, "abc1234-dirty");
    assert_eq!(run.handshake_s, Some(0.042));
    assert_eq!(run.virtual_s, 12.5);

    let back = store.results(&ResultFilter::run(id)).unwrap();
    assert_eq!(back.len(), rep.results.len());
    assert!(back.iter().all(|r| r.run_id == id));
    assert!(back[0].result.goodput_bps.is_nan());
    assert!(back[0].result.efficiency.is_nan());
    assert_eq!(back[1].result.goodput_bps, f64::INFINITY);
    assert_eq!(back[2].result.seed, u64::MAX - 5);
    assert!(back[2].result.paths[0].energy_j.is_nan());
    assert_eq!(back[3].result.error, rep.results[3].error);
    assert!(!back[3].result.verified);
    // Everything else is exactly what was recorded, latency included.
    for (a, b) in rep.results.iter().zip(&back).skip(4) {
        assert_eq!(a, &b.result);
    }
    assert_eq!(back[5].result.latency.rpm, None);
    assert_eq!(back[6].result.latency.rpm, Some(602.0));
    assert_eq!(back[6].result.latency.probe_loss, Some(0.02));

    let back_samples = store.samples(id).unwrap();
    assert_eq!(back_samples, s);
    assert_eq!(back_samples[0].probe_rtt_s.len(), 100);
    assert_eq!(back_samples[0].probe_rtt_s[37], f64::INFINITY);
    assert!(back_samples[2].probe_rtt_s.is_empty());
    assert!(store.samples(id + 1).unwrap().is_empty());

    // Filters.
    let id2 = store.record(&report("other"), "", "unknown", &[]).unwrap();
    assert!(id2 > id);
    assert_eq!(
        store
            .results(&ResultFilter::scenario("other"))
            .unwrap()
            .len(),
        rep.results.len()
    );
    assert_eq!(
        store.results(&ResultFilter::all()).unwrap().len(),
        2 * rep.results.len()
    );
    assert!(store
        .results(&ResultFilter::scenario("none"))
        .unwrap()
        .is_empty());
    let latest: Vec<i64> = store.latest_runs().unwrap().iter().map(|r| r.id).collect();
    assert_eq!(latest, [id2, id]); // "other" < "two-paths"
    assert!(store.delete_run(id).unwrap());
    assert!(store.samples(id).unwrap().is_empty());
    assert_eq!(store.runs().unwrap().len(), 1);
}

/// A database as braid wrote it before latency was recorded (schema version 1).
const SCHEMA_V1: &str = "PRAGMA application_id = 1651663954;
     CREATE TABLE schema_version (version INTEGER NOT NULL);
     INSERT INTO schema_version (version) VALUES (1);
     CREATE TABLE runs (id INTEGER PRIMARY KEY, created_unix INTEGER NOT NULL,
         scenario TEXT NOT NULL, mode TEXT NOT NULL, scenario_text TEXT NOT NULL,
         git_rev TEXT NOT NULL, handshake_s REAL, virtual_s REAL, wall_s REAL);
     CREATE TABLE results (id INTEGER PRIMARY KEY,
         run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
         variant TEXT NOT NULL, repetition INTEGER NOT NULL, seed INTEGER NOT NULL,
         size_bytes INTEGER NOT NULL, verified INTEGER NOT NULL, completion_s REAL,
         goodput_bps REAL, capacity_bps REAL, efficiency REAL, energy_j REAL,
         retransmitted_bytes INTEGER NOT NULL, error TEXT, paths TEXT NOT NULL);
     CREATE INDEX results_run ON results(run_id);
     CREATE TABLE samples (id INTEGER PRIMARY KEY,
         run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
         variant TEXT NOT NULL, repetition INTEGER NOT NULL, size_bytes INTEGER NOT NULL,
         interval_s REAL, throughput_bps BLOB NOT NULL);
     CREATE INDEX samples_run ON samples(run_id);
     INSERT INTO runs VALUES (1, 1700000000, 'old', 'testbed', '', 'abc', NULL, 1.0, 1.0);
     INSERT INTO results VALUES (1, 1, 'tcp', 0, 7, 1000, 1, 1.0, 8000.0, 1e4, 0.8, 0.0, 0,
         NULL, '[]');
     INSERT INTO samples VALUES (1, 1, 'tcp', 0, 1000, 0.1, x'0000000000408f40');";

#[test]
fn a_version_1_database_opens_and_gains_the_latency_columns() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.sqlite");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(SCHEMA_V1)
        .unwrap();
    let store = Store::open_existing(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    let old = store.results(&ResultFilter::run(1)).unwrap();
    assert_eq!(old.len(), 1);
    assert_eq!(old[0].result.goodput_bps, 8000.0);
    assert_eq!(old[0].result.latency, Latency::default());
    let old_samples = store.samples(1).unwrap();
    assert_eq!(old_samples[0].throughput_bps, [1000.0]);
    assert!(old_samples[0].probe_rtt_s.is_empty());
    // New runs go into the migrated file with their latency.
    let s = samples();
    let id = store.record(&report("new"), "", "r", &s).unwrap();
    let back = store.results(&ResultFilter::run(id)).unwrap();
    assert_eq!(back[0].result.latency, report("new").results[0].latency);
    assert_eq!(store.samples(id).unwrap(), s);
    drop(store);
    // And the migrated file opens again as it is.
    assert_eq!(
        Store::open_existing(&path)
            .unwrap()
            .schema_version()
            .unwrap(),
        SCHEMA_VERSION
    );
}

#[test]
fn refuses_a_file_that_is_not_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.sqlite");
    std::fs::write(&path, "this is a text file, not a database\n".repeat(40)).unwrap();
    let e = Store::open(&path).unwrap_err();
    assert!(matches!(e, Error::NotADatabase { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("notes.sqlite"), "{msg}");
    assert!(msg.contains("is not an SQLite database"), "{msg}");
    // The file was left alone.
    assert!(std::fs::read_to_string(&path)
        .unwrap()
        .starts_with("this is a text file"));
}

#[test]
fn refuses_another_programs_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);")
        .unwrap();
    drop(conn);
    let e = Store::open(&path).unwrap_err();
    assert!(matches!(e, Error::ForeignDatabase { .. }), "{e:?}");
    assert!(e.to_string().contains("customers"), "{e}");
}

#[test]
fn refuses_a_future_schema_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("future.sqlite");
    drop(Store::open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute(
        "UPDATE schema_version SET version = ?1",
        [SCHEMA_VERSION + 1],
    )
    .unwrap();
    drop(conn);
    let e = Store::open(&path).unwrap_err();
    assert!(
        matches!(e, Error::FutureSchema { found, .. } if found == SCHEMA_VERSION + 1),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("future.sqlite") && msg.contains("newer braid"),
        "{msg}"
    );
}

#[test]
fn damaged_rows_give_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("damaged.sqlite");
    let store = Store::open(&path).unwrap();
    let id = store.record(&report("x"), "", "r", &samples()).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "UPDATE results SET paths = 'not json' WHERE id = 1;
         UPDATE samples SET throughput_bps = x'0102' WHERE id = 1;",
    )
    .unwrap();
    let e = store.results(&ResultFilter::run(id)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::CorruptRow {
                table: "results",
                row: 1,
                ..
            }
        ),
        "{e:?}"
    );
    let e = store.samples(id).unwrap_err();
    assert!(e.to_string().contains("not a multiple of 8"), "{e}");
    conn.execute_batch("UPDATE results SET paths = '[]', goodput_bps = 'fast' WHERE id = 1;")
        .unwrap();
    let e = store.results(&ResultFilter::run(id)).unwrap_err();
    assert!(e.to_string().contains("goodput_bps"), "{e}");
}

#[test]
fn open_existing_does_not_create() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing.sqlite");
    let e = Store::open_existing(&path).unwrap_err();
    assert!(matches!(e, Error::NoDatabase { .. }), "{e:?}");
    assert!(e.to_string().contains("braid sim"), "{e}");
    assert!(!path.exists());
    // A directory is no database either.
    let e = Store::open(dir.path()).unwrap_err();
    assert!(
        e.to_string().contains(&dir.path().display().to_string()),
        "{e}"
    );
}

#[test]
fn git_revision_outside_a_repository_is_unknown() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(braid_results::git_revision(dir.path()), "unknown");
}

#[test]
fn plots_are_written_and_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let rep = report("plots");
    let s = samples();
    let figs = plot_run(&rep.results, &s, dir.path(), "t", "plots (sim)").unwrap();
    let kinds: Vec<FigureKind> = figs.iter().map(|f| f.kind).collect();
    assert_eq!(
        kinds,
        [
            FigureKind::Goodput,
            FigureKind::Completion,
            FigureKind::Throughput,
            FigureKind::LatencyCdf
        ]
    );
    for f in &figs {
        let png = std::fs::read(&f.png).unwrap();
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "{}", f.png.display());
        let svg = std::fs::read_to_string(&f.svg).unwrap();
        assert!(
            svg.trim_start().starts_with("<svg"),
            "{}",
            &svg[..80.min(svg.len())]
        );
        assert!(svg.trim_end().ends_with("</svg>"));
    }
    let first: Vec<Vec<u8>> = figs
        .iter()
        .map(|f| std::fs::read(&f.svg).unwrap())
        .collect();
    let first_png = std::fs::read(&figs[0].png).unwrap();
    let dir2 = tempfile::tempdir().unwrap();
    let again = plot_run(&rep.results, &s, dir2.path(), "t", "plots (sim)").unwrap();
    for (f, bytes) in again.iter().zip(&first) {
        assert_eq!(&std::fs::read(&f.svg).unwrap(), bytes);
    }
    assert_eq!(std::fs::read(&again[0].png).unwrap(), first_png);
}

#[test]
fn plots_survive_degenerate_data() {
    let dir = tempfile::tempdir().unwrap();
    // All goodputs NaN or infinite, zero completion times, an empty and a NaN sample set.
    let mut a = result("a", 0, 1000, f64::NAN);
    a.completion_s = 0.0;
    let mut b = result("b", 0, 1000, f64::INFINITY);
    b.completion_s = f64::NAN;
    let s = vec![
        RunSamples {
            variant: "a".into(),
            repetition: 0,
            size_bytes: 1000,
            interval_s: 0.1,
            throughput_bps: vec![],
            probe_rtt_s: vec![f64::INFINITY, f64::NAN],
        },
        RunSamples {
            variant: "b".into(),
            repetition: 0,
            size_bytes: 1000,
            interval_s: f64::NAN,
            throughput_bps: vec![1.0, f64::NAN],
            probe_rtt_s: vec![],
        },
    ];
    let figs = plot_run(&[a, b], &s, dir.path(), "d", "degenerate").unwrap();
    assert!(figs.is_empty(), "{figs:?}");
    // One value only, and an empty report.
    let figs = plot_run(&[result("one", 0, 5, 1e6)], &[], dir.path(), "o", "one").unwrap();
    assert_eq!(figs.len(), 2);
    assert!(plot_run(&[], &[], dir.path(), "e", "empty")
        .unwrap()
        .is_empty());
}

#[test]
fn html_report_escapes_database_strings() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("r.sqlite")).unwrap();
    let mut rep = report("<b>bold</b> scenario");
    for r in &mut rep.results {
        if r.variant == "both" {
            r.variant = "<script>alert('x')</script>".into();
        }
    }
    rep.results[0].error = Some("bad \"quote\" <tag>".into());
    rep.results[0].verified = false;
    store
        .record(&rep, "name = \"</pre><script>\"", "<rev>", &samples())
        .unwrap();
    let out = dir.path().join("report");
    let w = write_report(&store, &out).unwrap();
    assert_eq!(w.sections, 1);
    assert_eq!(w.figures, 4);
    let html = std::fs::read_to_string(&w.index).unwrap();
    assert!(!html.contains("<script>"), "unescaped script tag");
    assert!(!html.contains("<b>bold"));
    assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"));
    assert!(html.contains("bad &quot;quote&quot; &lt;tag&gt;"));
    assert!(html.contains("&lt;rev&gt;"));
    // Plots are linked by relative paths that exist.
    let mut links = 0;
    for part in html.split("src=\"").skip(1) {
        let link = &part[..part.find('"').unwrap()];
        assert!(
            link.starts_with("plots/") && link.ends_with(".svg"),
            "{link}"
        );
        assert!(out.join(link).is_file(), "{link}");
        links += 1;
    }
    assert_eq!(links, 4);
}

#[test]
fn latency_in_the_tables_and_a_cdf_per_variant() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("r.sqlite")).unwrap();
    let mut s = samples();
    // A second variant with probe samples: its round trips twice as long, a tenth lost.
    s[2].probe_rtt_s = (0..100)
        .map(|i| if i % 10 == 0 { f64::INFINITY } else { 0.05 })
        .collect();
    store.record(&report("lat"), "", "r", &s).unwrap();
    let w = write_report(&store, &dir.path().join("out")).unwrap();
    let html = std::fs::read_to_string(&w.index).unwrap();
    // "wifi", 1 MB: idle p50 20..23 ms (median 21.5), loaded p99 150..172.5 ms (median
    // 161.25), loss 0..3 % (median 1.5 %), RPM 600 and 602 (median 601).
    for text in [&html, &w.text] {
        for cell in ["21.5 ms", "86.0 ms", "161 ms", "1.50 %", "601"] {
            assert!(text.contains(cell), "{cell} missing from {text}");
        }
    }
    for head in ["idle p50", "loaded p95", "loaded p99", "probe loss", "RPM"] {
        assert!(html.contains(head), "{head}");
    }
    assert!(
        w.text.contains("load p99") && w.text.contains("wifi"),
        "{}",
        w.text
    );
    // The CDF: one curve per variant with samples, ending at 1 - its loss.
    let cdf = std::fs::read_to_string(dir.path().join("out/plots/run-1-lat-latency-cdf.svg"))
        .expect("the CDF figure");
    // Curves are the only lines drawn 2 px wide, in each variant's colour.
    let curves: Vec<&str> = cdf
        .split("<polyline")
        .skip(1)
        .filter(|p| p.contains("stroke-width=\"2\""))
        .collect();
    assert_eq!(curves.len(), 2, "two curves");
    assert!(curves[0].contains("#4E79A7") && curves[1].contains("#E15759"));
    let pts = braid_results::plot_lines::cdf_points(s[2].probe_rtt_s.iter().copied()).unwrap();
    assert_eq!(pts.first(), Some(&(50.0, 0.0)));
    assert_eq!(pts.last(), Some(&(50.0, 0.9)));
    let pts = braid_results::plot_lines::cdf_points([0.03, f64::NAN, 0.01, 0.02]).unwrap();
    assert_eq!(
        pts,
        [
            (10.0, 0.0),
            (10.0, 1.0 / 3.0),
            (20.0, 2.0 / 3.0),
            (30.0, 1.0)
        ]
    );
    assert!(braid_results::plot_lines::cdf_points([f64::INFINITY]).is_none());
}

/// Writes a report to $BRAID_RESULTS_DEMO_DIR for looking at by eye (skipped when unset).
#[test]
fn demo_report_for_eyes() {
    let Some(out) = std::env::var_os("BRAID_RESULTS_DEMO_DIR") else {
        return;
    };
    let out = std::path::PathBuf::from(out);
    std::fs::create_dir_all(&out).unwrap();
    let store = Store::open(out.join("demo.sqlite")).unwrap();
    let mut rep = report("two-paths");
    rep.results[5].goodput_bps = 5e6;
    rep.results[5].completion_s = 1.6;
    store
        .record(&rep, "name = \"two-paths\"\n", "abc1234", &samples())
        .unwrap();
    let w = write_report(&store, &out.join("report")).unwrap();
    eprintln!("{}", w.index.display());
}
