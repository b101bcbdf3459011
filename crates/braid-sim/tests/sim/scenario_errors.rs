//! Scenario validation: every error a user can make gets a message naming the file, the
//! key and what was expected; the shipped example scenarios load.
//!
//! Owns: black-box tests of `braid_sim::scenario`. Must not touch: the simulator itself.

use braid_sim::scenario::{Direction, RateSpec, Scenario, ScenarioError, VariantKind};
use std::path::{Path, PathBuf};

const BASE: &str = r#"
name = "t"
[[path]]
name = "a"
rate = "50Mbit"
delay = "10ms"
[[path]]
name = "b"
rate = "10Mbit"
[workload]
kind = "bulk"
size = "1MB"
[[variant]]
name = "v"
"#;

fn file() -> PathBuf {
    PathBuf::from("scenarios/x.toml")
}

fn parse(text: &str) -> Result<Scenario, ScenarioError> {
    Scenario::from_toml_str(text, &file())
}

/// Parses `text`, expects an error at `key` whose message contains every one of `needles`.
#[track_caller]
fn expect_err(text: &str, key: &str, needles: &[&str]) -> ScenarioError {
    let e = match parse(text) {
        Ok(s) => panic!("expected an error at {key}, got {s:?}"),
        Err(e) => e,
    };
    assert_eq!(e.key, key, "wrong key in: {e}");
    assert_eq!(e.file, file());
    let shown = e.to_string();
    assert!(shown.starts_with("scenarios/x.toml: "), "{shown}");
    for n in needles {
        assert!(shown.contains(n), "{shown:?} lacks {n:?}");
    }
    e
}

/// BASE with `from` replaced by `to` (which must occur).
fn base_with(from: &str, to: &str) -> String {
    assert!(BASE.contains(from), "{from}");
    BASE.replacen(from, to, 1)
}

#[test]
fn base_is_valid_and_defaults_apply() {
    let s = parse(BASE).unwrap();
    assert_eq!((s.name.as_str(), s.seed), ("t", 1));
    assert_eq!(s.time_limit, 600_000_000_000);
    assert_eq!(s.path_timeout, 15_000_000_000);
    let a = &s.paths[0];
    assert!(matches!(a.up.rate, RateSpec::Constant(50_000_000)));
    assert_eq!(
        (a.down.delay, a.down.jitter, a.down.loss),
        (10_000_000, 0, 0.0)
    );
    // 100 ms at 50 Mbit/s; 100 ms at 10 Mbit/s.
    assert_eq!(
        (a.up.queue_bytes, s.paths[1].down.queue_bytes),
        (625_000, 125_000)
    );
    assert!(!a.half_duplex && a.frame_overhead == 0);
    assert_eq!(s.workload.sizes, vec![1_000_000]);
    assert_eq!(
        (s.workload.direction, s.workload.repetitions),
        (Direction::Down, 1)
    );
    let v = &s.variants[0];
    assert_eq!(
        (v.kind, v.scheduler.as_str(), v.cc.as_str()),
        (VariantKind::Braid, "minrtt", "bbrq")
    );
    assert_eq!(v.paths, vec![0, 1]);
    assert_eq!(s.path_index("b"), Some(1));
}

#[test]
fn unknown_keys_list_the_expected_ones() {
    expect_err(
        &format!("colour = 1\n{BASE}"),
        "colour",
        &["unknown field `colour`", "`seed`"],
    );
    expect_err(
        &base_with("delay = \"10ms\"", "dealy = \"10ms\""),
        "path[0].dealy",
        &["`delay`", "`jitter`"],
    );
    expect_err(
        &base_with("name = \"v\"", "name = \"v\"\nshceduler = \"x\""),
        "variant[0].shceduler",
        &["`scheduler`"],
    );
    expect_err(
        &base_with("size = \"1MB\"", "size = \"1MB\"\nbytes = 3"),
        "workload.bytes",
        &["`repetitions`"],
    );
    expect_err(
        &base_with(
            "rate = \"10Mbit\"",
            "rate = \"10Mbit\"\n[path.up]\nrat = \"1Mbit\"",
        ),
        "path[1].up.rat",
        &["`rate`"],
    );
    expect_err(
        &base_with(
            "rate = \"10Mbit\"",
            "rate = \"10Mbit\"\n[path.energy]\nactive = 1",
        ),
        "path[1].energy.active",
        &["`active_w`"],
    );
}

#[test]
fn bad_units_name_the_key() {
    let e = expect_err(
        &base_with("\"10Mbit\"", "\"fast\""),
        "path[1].rate",
        &[r#"expected a rate such as "50Mbit""#, r#"got "fast""#],
    );
    assert_eq!(
        e.to_string(),
        r#"scenarios/x.toml: key `path[1].rate`: expected a rate such as "50Mbit", "420Kbit" or "1Gbit", got "fast""#
    );
    expect_err(
        &base_with("\"10ms\"", "\"10 parsecs\""),
        "path[0].delay",
        &["expected a duration"],
    );
    expect_err(
        &base_with("\"1MB\"", "\"lots\""),
        "workload.size",
        &["expected a size"],
    );
    expect_err(
        &base_with("\"10ms\"", "10"),
        "path[0].delay",
        &["a quoted value with a unit"],
    );
    expect_err(
        &format!("time_limit = \"-1s\"\n{BASE}"),
        "time_limit",
        &["expected a duration"],
    );
    expect_err(
        &base_with("\"10Mbit\"", "\"0Mbit\""),
        "path[1].rate",
        &["greater than 0"],
    );
    expect_err(
        &base_with("\"10ms\"", "\"10ms\"\nqueue = \"deep\""),
        "path[0].queue",
        &["\"64KB\"", "\"100ms\""],
    );
}

#[test]
fn wrong_types_and_syntax_errors() {
    expect_err(
        &format!("seed = \"one\"\n{BASE}"),
        "seed",
        &["invalid type"],
    );
    expect_err(&format!("seed = -1\n{BASE}"), "seed", &[]);
    let e = expect_err(
        &format!("{BASE}\nthis is not toml\n"),
        "",
        &["TOML syntax error", "line 16"],
    );
    assert_eq!(e.line, Some(16));
    expect_err(
        &base_with("kind = \"bulk\"", "kind = \"heap\""),
        "workload.kind",
        &["`bulk`", "`sizes`"],
    );
    expect_err(
        &base_with("name = \"v\"", "name = \"v\"\nkind = \"quic\""),
        "variant[0].kind",
        &["`mptcp`", "`ss-mptcp`"],
    );
    expect_err(
        &base_with(
            "kind = \"bulk\"",
            "kind = \"bulk\"\ndirection = \"sideways\"",
        ),
        "workload.direction",
        &["`down`", "`up`"],
    );
}

#[test]
fn missing_names() {
    expect_err(
        &BASE.replacen("name = \"t\"", "", 1),
        "name",
        &["missing required key `name`"],
    );
    expect_err(&base_with("name = \"a\"", ""), "path[0].name", &["missing"]);
    expect_err(
        &base_with("name = \"a\"", "name = \" \""),
        "path[0].name",
        &["empty"],
    );
    expect_err(
        &base_with("name = \"v\"", ""),
        "variant[0].name",
        &["missing"],
    );
}

#[test]
fn path_count_limits() {
    let none = "name = \"t\"\n[workload]\nsize = \"1MB\"\n[[variant]]\nname = \"v\"\n";
    expect_err(none, "path", &["1 to 8", "found none"]);
    let mut many = String::from("name = \"t\"\n");
    for i in 0..9 {
        many.push_str(&format!("[[path]]\nname = \"p{i}\"\nrate = \"1Mbit\"\n"));
    }
    many.push_str("[workload]\nsize = \"1MB\"\n[[variant]]\nname = \"v\"\n");
    expect_err(&many, "path", &["1 to 8", "found 9"]);
}

#[test]
fn duplicate_path_and_variant_names() {
    expect_err(
        &base_with("name = \"b\"", "name = \"a\""),
        "path[1].name",
        &["duplicate path name \"a\""],
    );
    expect_err(
        &format!("{BASE}[[variant]]\nname = \"v\"\n"),
        "variant[1].name",
        &["duplicate variant name \"v\""],
    );
}

#[test]
fn rates_and_traces_per_direction() {
    expect_err(
        &base_with("rate = \"10Mbit\"", ""),
        "path[1].rate",
        &["`rate` or `trace`"],
    );
    // Only one direction given: the other has no rate.
    let t = base_with("rate = \"10Mbit\"", "[path.down]\nrate = \"10Mbit\"");
    expect_err(&t, "path[1].rate", &["up direction"]);
    let t = base_with(
        "rate = \"10Mbit\"",
        "[path.down]\nrate = \"10Mbit\"\n[path.up]\nrate = \"1Mbit\"\nqueue = \"20KB\"",
    );
    let s = parse(&t).unwrap();
    assert!(matches!(s.paths[1].up.rate, RateSpec::Constant(1_000_000)));
    assert_eq!(s.paths[1].up.queue_bytes, 20_000);
    // 100 ms at 1 Mbit/s = 12500 B; a tiny queue time gives the 3000 B minimum.
    let t = base_with(
        "rate = \"10Mbit\"",
        "rate = \"10Mbit\"\nqueue = \"1ms\"\n[path.up]\nrate = \"1Mbit\"",
    );
    let s = parse(&t).unwrap();
    assert_eq!(
        (s.paths[1].up.queue_bytes, s.paths[1].down.queue_bytes),
        (3000, 3000)
    );
}

#[test]
fn variant_path_references() {
    let e = expect_err(
        &base_with("name = \"v\"", "name = \"v\"\npaths = [\"a\", \"wifi\"]"),
        "variant[0].paths",
        &["no path named \"wifi\"", "\"a\", \"b\""],
    );
    assert!(e.message.contains("\"b\""));
    expect_err(
        &base_with("name = \"v\"", "name = \"v\"\npaths = []"),
        "variant[0].paths",
        &["at least one"],
    );
    expect_err(
        &base_with("name = \"v\"", "name = \"v\"\npaths = [\"a\", \"a\"]"),
        "variant[0].paths",
        &["twice"],
    );
    let s = parse(&base_with(
        "name = \"v\"",
        "name = \"v\"\npaths = [\"b\"]\nkind = \"ss-mptcp\"",
    ))
    .unwrap();
    assert_eq!(
        (s.variants[0].paths.clone(), s.variants[0].kind),
        (vec![1], VariantKind::SsMptcp)
    );
    let no_variants = BASE.replacen("[[variant]]\nname = \"v\"\n", "", 1);
    expect_err(&no_variants, "variant", &["at least one [[variant]]"]);
}

#[test]
fn probabilities_must_be_in_range() {
    expect_err(
        &base_with("\"10ms\"", "\"10ms\"\nloss = 1.5"),
        "path[0].loss",
        &["between 0 and 1", "1.5"],
    );
    expect_err(
        &base_with("\"10ms\"", "\"10ms\"\nloss = -0.1"),
        "path[0].loss",
        &["between 0 and 1"],
    );
    expect_err(
        &base_with("\"10ms\"", "\"10ms\"\nloss = nan"),
        "path[0].loss",
        &["between 0 and 1"],
    );
    expect_err(
        &base_with("\"10ms\"", "\"10ms\"\nduplicate = 2"),
        "path[0].duplicate",
        &[],
    );
    expect_err(
        &base_with("\"10ms\"", "\"10ms\"\n[path.down]\nloss = 3.0"),
        "path[0].down.loss",
        &[],
    );
    expect_err(
        &base_with("\"10ms\"", "\"10ms\"\nburst = { p = 0.1, r = 7 }"),
        "path[0].burst.r",
        &[],
    );
    let s = parse(&base_with(
        "\"10ms\"",
        "\"10ms\"\nloss = 1\nburst = { p = 0.1, r = 0.5 }",
    ))
    .unwrap();
    let b = s.paths[0].up.burst.unwrap();
    assert_eq!(
        (b.p, b.r, b.loss_bad, s.paths[0].up.loss),
        (0.1, 0.5, 1.0, 1.0)
    );
}

#[test]
fn workload_errors() {
    expect_err(
        &base_with("size = \"1MB\"", ""),
        "workload.size",
        &["needs `size`"],
    );
    expect_err(
        &base_with("kind = \"bulk\"\nsize = \"1MB\"", "kind = \"sizes\""),
        "workload.sizes",
        &["needs `sizes`"],
    );
    expect_err(
        &base_with(
            "kind = \"bulk\"\nsize = \"1MB\"",
            "kind = \"sizes\"\nsizes = []",
        ),
        "workload.sizes",
        &["empty"],
    );
    expect_err(
        &base_with("size = \"1MB\"", "size = \"1MB\"\nrepetitions = 0"),
        "workload.repetitions",
        &["at least 1"],
    );
    expect_err(
        &base_with(
            "kind = \"bulk\"\nsize = \"1MB\"",
            "sizes = [\"1KB\", \"x\"]",
        ),
        "workload.sizes[1]",
        &["expected a size"],
    );
    expect_err(
        &base_with("kind = \"bulk\"\nsize = \"1MB\"", "direction = \"up\""),
        "workload.kind",
        &["missing `kind`"],
    );
    expect_err(
        &BASE.replacen("[workload]\nkind = \"bulk\"\nsize = \"1MB\"\n", "", 1),
        "workload",
        &["missing the [workload] table"],
    );
    let s = parse(&base_with(
        "kind = \"bulk\"\nsize = \"1MB\"",
        "sizes = [\"8KB\", \"4MiB\"]\nrepetitions = 3\ndirection = \"up\"",
    ))
    .unwrap();
    assert_eq!(s.workload.sizes, vec![8_000, 4 * 1024 * 1024]);
    assert_eq!(
        (s.workload.repetitions, s.workload.direction),
        (3, Direction::Up)
    );
}

#[test]
fn blackout_errors_and_resolution() {
    expect_err(
        &base_with("\"10ms\"", "\"10ms\"\nblackout_every = \"20s\""),
        "path[0].blackout_every",
        &["needs `blackout_duration`"],
    );
    expect_err(
        &base_with("\"10ms\"", "\"10ms\"\nblackout_duration = \"2s\""),
        "path[0].blackout_duration",
        &["needs `blackout_every`"],
    );
    expect_err(
        &base_with(
            "\"10ms\"",
            "\"10ms\"\nblackout_every = \"2s\"\nblackout_duration = \"2s\"",
        ),
        "path[0].blackout_duration",
        &["less than"],
    );
    expect_err(
        &base_with("\"10ms\"", "\"10ms\"\nblackouts = [{ at = \"1s\" }]"),
        "path[0].blackouts[0].duration",
        &["missing"],
    );
    expect_err(
        &base_with(
            "\"10ms\"",
            "\"10ms\"\nblackouts = [{ at = \"1s\", duration = \"1s\", x = 1 }]",
        ),
        "path[0].blackouts[0].x",
        &["unknown field"],
    );
    let t = base_with("\"10ms\"", "\"10ms\"\nblackouts = [{ at = \"20s\", duration = \"2s\" }, { at = \"1s\", duration = \"1ms\" }]\nblackout_every = \"20s\"\nblackout_duration = \"2s\"");
    let s = parse(&t).unwrap();
    for l in [&s.paths[0].up, &s.paths[0].down] {
        assert_eq!(
            l.blackouts,
            vec![
                (1_000_000_000, 1_001_000_000),
                (20_000_000_000, 22_000_000_000)
            ]
        );
        assert_eq!(l.blackout_every, Some((20_000_000_000, 2_000_000_000)));
    }
}

#[test]
fn half_duplex_with_different_rates_is_allowed() {
    let t = base_with("rate = \"10Mbit\"", "rate = \"10Mbit\"\nhalf_duplex = true\nframe_overhead = \"50us\"\n[path.up]\nrate = \"2Mbit\"");
    let s = parse(&t).unwrap();
    let p = &s.paths[1];
    assert!(p.half_duplex);
    assert_eq!(p.frame_overhead, 50_000);
    // Queues given as time use the medium (down) rate.
    assert_eq!((p.up.queue_bytes, p.down.queue_bytes), (125_000, 125_000));
}

fn repo_scenarios() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios")
}

#[test]
fn trace_files() {
    let file = repo_scenarios().join("virtual.toml");
    let t = base_with(
        "rate = \"10Mbit\"",
        "trace = \"traces/example.csv\"\n[path.up]\nrate = \"1Mbit\"",
    );
    let s = Scenario::from_toml_str(&t, &file).unwrap();
    let RateSpec::Trace(tr) = &s.paths[1].down.rate else {
        panic!("no trace")
    };
    assert_eq!(tr.rate_at(0), 50_000_000);
    assert!(matches!(s.paths[1].up.rate, RateSpec::Constant(1_000_000)));
    let t = base_with("rate = \"10Mbit\"", "trace = \"traces/missing.csv\"");
    let e = Scenario::from_toml_str(&t, &file).unwrap_err();
    assert_eq!(e.key, "path[1].trace");
    assert!(
        e.message.contains("cannot read trace file") && e.message.contains("missing.csv"),
        "{e}"
    );
    // An invalid trace names the trace file and line.
    let dir = std::env::temp_dir().join(format!("braid-scenario-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("bad.csv"), "time_s,rate_mbit\n0,10\n1,fast\n").unwrap();
    let t = base_with(
        "rate = \"10Mbit\"",
        "rate = \"1Mbit\"\n[path.down]\ntrace = \"bad.csv\"",
    );
    let e = Scenario::from_toml_str(&t, &dir.join("s.toml")).unwrap_err();
    assert_eq!(e.key, "path[1].down.trace");
    assert!(e.message.contains("bad.csv: line 3"), "{e}");
    std::fs::write(dir.join("zero.csv"), "0,0\n5,0\n").unwrap();
    let t = base_with("rate = \"10Mbit\"", "trace = \"zero.csv\"");
    let e = Scenario::from_toml_str(&t, &dir.join("s.toml")).unwrap_err();
    assert_eq!(e.key, "path[1].trace");
    assert!(e.message.contains("every row is 0"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn energy_values_are_checked() {
    expect_err(
        &base_with("\"10ms\"", "\"10ms\"\nenergy = { active_w = -1.0 }"),
        "path[0].energy.active_w",
        &[">= 0"],
    );
    let s = parse(&base_with(
        "\"10ms\"",
        "\"10ms\"\n[path.energy]\nactive_w = 1.25\nidle_w = 0.075",
    ))
    .unwrap();
    assert_eq!(
        (s.paths[0].energy.active_w, s.paths[0].energy.tail_s),
        (1.25, 0.0)
    );
}

#[test]
fn runner_can_add_its_own_errors() {
    let e = ScenarioError::new(
        "s.toml",
        "variant[0].scheduler",
        "unknown scheduler \"fastest\"",
    );
    assert_eq!(
        e.to_string(),
        "s.toml: key `variant[0].scheduler`: unknown scheduler \"fastest\""
    );
    let e = Scenario::load(Path::new("/nonexistent/s.toml")).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("/nonexistent/s.toml: cannot read"),
        "{e}"
    );
}

#[test]
fn shipped_scenarios_load() {
    let dir = repo_scenarios();
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "toml") {
            let s = Scenario::load(&p).unwrap_or_else(|e| panic!("{e}"));
            assert!(!s.variants.is_empty());
            n += 1;
        }
    }
    assert!(n >= 4);
    let s = Scenario::load(&dir.join("two-paths.toml")).unwrap();
    assert_eq!(
        (s.paths[0].down.queue_bytes, s.paths[1].down.queue_bytes),
        (125_000, 150_000)
    );
    let s = Scenario::load(&dir.join("two-paths-loss.toml")).unwrap();
    assert_eq!((s.paths[0].down.loss, s.variants.len()), (0.01, 2));
    let s = Scenario::load(&dir.join("short-transfer.toml")).unwrap();
    assert_eq!(
        (s.workload.sizes.clone(), s.workload.repetitions),
        (vec![8_000], 5)
    );
    let s = Scenario::load(&dir.join("four-paths.toml")).unwrap();
    assert_eq!(s.paths.len(), 4);
}

#[test]
fn documented_example_loads() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let doc = std::fs::read_to_string(root.join("docs/scenarios.md")).unwrap();
    let start = doc.find("```toml\n").expect("a toml block") + "```toml\n".len();
    let len = doc[start..].find("```").unwrap();
    let s = Scenario::from_toml_str(&doc[start..start + len], &root.join("scenarios/doc.toml"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (s.name.as_str(), s.paths.len(), s.variants.len()),
        ("commute", 2, 2)
    );
    assert!(matches!(s.paths[1].up.rate, RateSpec::Trace(_)));
    assert_eq!(
        s.paths[1].down.blackout_every,
        Some((30_000_000_000, 2_000_000_000))
    );
}

#[test]
fn standby_names_only_the_variants_own_paths_and_leaves_one_active() {
    let ok = parse(&format!("{BASE}standby = [\"b\"]\n")).expect("valid standby");
    assert_eq!(ok.variants[0].standby, vec![1]);
    assert!(parse(BASE).expect("valid").variants[0].standby.is_empty());
    expect_err(
        &format!("{BASE}standby = [\"c\"]\n"),
        "variant[0].standby",
        &["\"c\"", "not one of this variant's paths", "\"a\", \"b\""],
    );
    expect_err(
        &format!("{BASE}paths = [\"a\"]\nstandby = [\"b\"]\n"),
        "variant[0].standby",
        &["\"b\"", "\"a\""],
    );
    expect_err(
        &format!("{BASE}standby = [\"b\", \"b\"]\n"),
        "variant[0].standby",
        &["listed twice"],
    );
    expect_err(
        &format!("{BASE}standby = [\"a\", \"b\"]\n"),
        "variant[0].standby",
        &["every path", "at least one active"],
    );
}

#[test]
fn wifi_paths_need_a_known_standard_and_its_phy_rates() {
    let with = |extra: &str| base_with("rate = \"10Mbit\"", extra);
    let s = parse(&with("rate = \"11Mbit\"\nwifi = \"802.11b\"")).unwrap();
    assert_eq!(
        s.paths[1].wifi.map(|w| w.standard),
        Some(braid_sim::wifi::Standard::B)
    );
    expect_err(
        &with("rate = \"54Mbit\"\nwifi = \"802.11n\""),
        "path[1].wifi",
        &["802.11b", "802.11g-protected", "802.11n"],
    );
    expect_err(
        &with("rate = \"10Mbit\"\nwifi = \"802.11b\""),
        "path[1].rate",
        &["PHY rates", "1, 2, 5.5, 11"],
    );
    expect_err(
        &with("rate = \"54Mbit\"\nwifi = \"802.11g\"\n[path.up]\nrate = \"11Mbit\""),
        "path[1].rate",
        &["up rate", "54"],
    );
    expect_err(
        &with("rate = \"11Mbit\"\nwifi = \"802.11b\"\nhalf_duplex = true"),
        "path[1].wifi",
        &["remove `half_duplex`"],
    );
}

#[test]
fn wifi_rate_control_and_frame_errors_are_checked() {
    use braid_sim::wifi::RateControl;
    let with = |extra: &str| base_with("rate = \"10Mbit\"", extra);
    let b = "rate = \"11Mbit\"\nwifi = \"802.11b\"";
    let s = parse(&with(&format!(
        "{b}\nrate_control = \"arf\"\nframe_error = 0.1\n[path.up]\nframe_error = 0.28"
    )))
    .unwrap();
    let w = s.paths[1].wifi.unwrap();
    assert_eq!(w.rate_control, RateControl::Arf);
    assert_eq!(w.frame_error, [0.28, 0.1], "a direction's own value wins");
    let w = parse(&with(b)).unwrap().paths[1].wifi.unwrap();
    assert_eq!(
        (w.rate_control, w.frame_error),
        (RateControl::Fixed, [0.0; 2])
    );
    expect_err(
        &with(&format!("{b}\nrate_control = \"minstrel\"")),
        "path[1].rate_control",
        &["\"fixed\" or \"arf\"", "minstrel"],
    );
    expect_err(
        &with(&format!("{b}\n[path.down]\nframe_error = 1.5")),
        "path[1].down.frame_error",
        &["probability in [0, 1)", "1.5"],
    );
    expect_err(
        &with("rate = \"10Mbit\"\nrate_control = \"arf\""),
        "path[1].rate_control",
        &["802.11 path", "add `wifi`"],
    );
    expect_err(
        &with("rate = \"10Mbit\"\n[path.up]\nframe_error = 0.1"),
        "path[1].frame_error",
        &["add `wifi`"],
    );
}

#[test]
fn connection_workloads_need_their_table_and_a_placement_they_know() {
    let conn = |extra: &str| {
        base_with(
            "kind = \"bulk\"\nsize = \"1MB\"",
            &format!("kind = \"connections\"\n{extra}"),
        )
    };
    expect_err(
        &conn(""),
        "workload.connections",
        &["[workload.connections]"],
    );
    expect_err(
        &conn("[workload.connections]\narrivals_for = \"10s\""),
        "workload.connections.class",
        &["at least one"],
    );
    expect_err(
        &conn(
            "[workload.connections]\n[[workload.connections.class]]\nsize = \"10KB\"\nper_s = 0.0",
        ),
        "workload.connections.class[0].per_s",
        &["(0, 10000]"],
    );
    expect_err(
        &conn(
            "[workload.connections]\ngamma = 25.0\n[[workload.connections.class]]\nsize = \"10KB\"\nper_s = 1.0",
        ),
        "workload.connections.gamma",
        &["[0, 1]", "0.25"],
    );
    let ok = conn("[workload.connections]\narrivals_for = \"5s\"\n[[workload.connections.class]]\nsize = \"10KB\"\nper_s = 2.0");
    let s = parse(&ok).unwrap();
    let c = s.workload.connections.as_ref().unwrap();
    assert_eq!((c.arrivals_for, c.classes[0].size), (5_000_000_000, 10e3));
    // Packet schedulers other than rr, wrr, operetta and minrtt place no connections.
    let ecf = ok.replace("name = \"v\"", "name = \"v\"\nscheduler = \"ecf\"");
    let e = braid_sim::run_scenario(&parse(&ecf).unwrap(), |_, _| {}).unwrap_err();
    assert_eq!(e.key, "variant[0].scheduler", "{e}");
}
