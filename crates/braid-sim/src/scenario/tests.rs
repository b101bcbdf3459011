use super::*;
use proptest::prelude::*;
use std::path::Path;

fn parse(text: &str) -> Result<Scenario, ScenarioError> {
    Scenario::from_toml_str(text, Path::new("s.toml"))
}

const FULL: &str = r#"
name = "full"
seed = 7
time_limit = "60s"
path_timeout = "5s"
[[path]]
name = "wifi"
rate = "50Mbit"
delay = "10ms"
jitter = "1ms"
loss = 0.001
duplicate = 0.0001
queue = "64KB"
half_duplex = true
frame_overhead = "60us"
blackouts = [{ at = "20s", duration = "2s" }]
blackout_every = "20s"
blackout_duration = "1s"
[path.burst]
p = 0.01
r = 0.3
[path.up]
rate = "5Mbit"
delay = "12ms"
[path.energy]
active_w = 1.25
idle_w = 0.075
[[path]]
name = "lte"
rate = "20Mbit"
delay = "40ms"
[path.energy]
active_w = 1.0
ramp_j = 2.5
tail_s = 6.0
[workload]
kind = "sizes"
direction = "up"
sizes = ["8KB", "128KB", "4MB"]
repetitions = 3
[[variant]]
name = "minrtt"
[[variant]]
name = "tcp-lte"
kind = "tcp"
scheduler = "rr"
cc = "reno"
paths = ["lte"]
"#;

#[test]
fn full_example_resolves() {
    let s = parse(FULL).unwrap();
    assert_eq!(
        (s.seed, s.time_limit, s.path_timeout),
        (7, 60_000_000_000, 5_000_000_000)
    );
    let w = &s.paths[0];
    assert!(w.half_duplex && w.frame_overhead == 60_000);
    assert_eq!(
        (w.up.delay, w.down.delay, w.up.jitter),
        (12_000_000, 10_000_000, 1_000_000)
    );
    assert!(matches!(w.up.rate, RateSpec::Constant(5_000_000)));
    assert_eq!(
        w.up.burst,
        Some(BurstSpec {
            p: 0.01,
            r: 0.3,
            loss_bad: 1.0
        })
    );
    assert_eq!((w.up.queue_bytes, w.down.duplicate), (64_000, 0.0001));
    assert_eq!(w.down.blackout_every, Some((20_000_000_000, 1_000_000_000)));
    assert_eq!(s.paths[1].energy.tail_s, 6.0);
    assert_eq!(s.paths[1].down.queue_bytes, 250_000);
    assert_eq!(s.variants[1].paths, vec![1]);
    assert_eq!(s.variants[1].kind, VariantKind::Tcp);
    assert_eq!(s.workload.sizes, vec![8_000, 128_000, 4_000_000]);
    let json = serde_json::to_string(&s).unwrap();
    assert!(json.contains("\"constant\":5000000"), "{json}");
}

#[test]
fn rate_hint_is_a_rate() {
    let base = "name = \"t\"\n[[path]]\nname = \"a\"\nrate = \"1Mbit\"\n";
    let tail = "[workload]\nsize = \"1MB\"\n[[variant]]\nname = \"v\"\n";
    let ok = parse(&format!("{base}rate_hint = \"0.7Mbit\"\n{tail}")).unwrap();
    assert_eq!(ok.paths[0].rate_hint, Some(700_000));
    assert_eq!(
        parse(&format!("{base}{tail}")).unwrap().paths[0].rate_hint,
        None
    );
    let e = parse(&format!("{base}rate_hint = \"0Mbit\"\n{tail}")).unwrap_err();
    assert_eq!(e.key, "path[0].rate_hint");
    assert!(e.message.contains("greater than 0"), "{e}");
    let e = parse(&format!("{base}rate_hint = \"fast\"\n{tail}")).unwrap_err();
    assert_eq!(e.key, "path[0].rate_hint");
}

#[test]
fn messages_read_well() {
    let cases = [
        ("name = \"t\"\ncolour = 3\n", "s.toml: line 2: key `colour`: unknown field `colour`, expected one of `name`"),
        ("name = \"t\"\n[[path]]\nname = \"a\"\ndelay = 10\n", "s.toml: line 4: key `path[0].delay`: invalid type: integer `10`, expected a quoted value"),
        ("name = [\n", "s.toml: line 2: TOML syntax error: invalid array; expected `]`"),
    ];
    for (text, start) in cases {
        let e = parse(text).unwrap_err().to_string();
        assert!(e.starts_with(start), "{e}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn never_panics_on_arbitrary_text(text in "\\PC{0,200}") {
        let _ = parse(&text);
    }

    #[test]
    fn never_panics_on_mutated_scenarios(pos in 0usize..1200, junk in "[\\[\\]{}=\",.a-z0-9 \n#-]{0,12}") {
        let mut text = FULL.to_string();
        let mut at = pos.min(text.len());
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.insert_str(at, &junk);
        let _ = parse(&text);
    }

    #[test]
    fn never_panics_on_odd_values(rate in "\\PC{0,12}", loss in proptest::num::f64::ANY, seed in any::<i64>()) {
        let text = format!(
            "name = \"x\"\nseed = {seed}\n[[path]]\nname = \"a\"\nrate = {rate:?}\nloss = {loss:?}\nqueue = {rate:?}\n[workload]\nsize = {rate:?}\n[[variant]]\nname = \"v\"\n"
        );
        let _ = parse(&text);
    }
}
