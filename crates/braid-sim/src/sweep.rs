//! Scenario sweeps: one file that stands for many scenarios differing in a few keys.
//!
//! Owns: the `[[sweep]]` tables (which keys, which values or numeric range), their checks,
//! and expanding a file into one scenario per combination (the product of all sweeps).
//! Must not touch: what the keys mean (each point is validated by the ordinary scenario
//! loader) or running them (`runner`).
//!
//! ```toml
//! [[sweep]]
//! key = "path[0].loss"                 # or keys = [...]: set together to each value
//! values = [0.005, 0.01, 0.02]         # or from = 0.005, to = 0.03, step = 0.005
//!
//! [[sweep]]                            # a list per value gives each key its own
//! keys = ["path[0].delay", "path[0].queue"]
//! values = [["25ms", "125KB"], ["50ms", "250KB"]]
//! ```

use crate::scenario::{Scenario, ScenarioError};
use std::path::Path;
use toml::{Table, Value};

/// Most scenarios one file may expand to.
pub const MAX_POINTS: usize = 1000;

/// One scenario of a sweep.
#[derive(Debug, Clone)]
pub struct SweepPoint {
    /// `key=value` for each sweep (keys set together are named by the first), e.g.
    /// `path[0].loss=0.01`; empty without sweeps.
    pub label: String,
    /// The scenario with those values set.
    pub scenario: Scenario,
}

/// One `[[sweep]]` table, checked.
struct Sweep {
    keys: Vec<String>,
    values: Vec<Value>,
}

/// Reads a scenario file and expands its sweeps (one point, unlabelled, without any).
pub fn load(path: &Path) -> Result<Vec<SweepPoint>, ScenarioError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ScenarioError::new(path, "", format!("cannot read the scenario file: {e}")))?;
    expand(&text, path)
}

/// Expands scenario text; the file as written (sweeps left out) must be a valid scenario
/// itself, so errors there carry line numbers.
pub fn expand(text: &str, file: &Path) -> Result<Vec<SweepPoint>, ScenarioError> {
    let base = Scenario::from_toml_str(text, file)?;
    let mut table: Table = text
        .parse()
        .map_err(|e| ScenarioError::new(file, "", format!("TOML syntax error: {e}")))?;
    let Some(raw) = table.remove("sweep") else {
        return Ok(vec![SweepPoint {
            label: String::new(),
            scenario: base,
        }]);
    };
    let sweeps = parse_sweeps(&raw, file)?;
    let total = sweeps
        .iter()
        .try_fold(1usize, |n, s| n.checked_mul(s.values.len()))
        .filter(|&n| n <= MAX_POINTS)
        .ok_or_else(|| {
            ScenarioError::new(
                file,
                "sweep",
                format!("the sweeps expand to more than {MAX_POINTS} scenarios; sweep fewer keys or values"),
            )
        })?;
    let mut points = Vec::with_capacity(total);
    for n in 0..total {
        let mut t = table.clone();
        let mut labels = Vec::new();
        let mut rest = n;
        for (i, s) in sweeps.iter().enumerate() {
            let v = &s.values[rest % s.values.len()];
            rest /= s.values.len();
            for (ki, k) in s.keys.iter().enumerate() {
                set(&mut t, k, per_key(v, ki, s.keys.len()).clone())
                    .map_err(|m| ScenarioError::new(file, format!("sweep[{i}].key"), m))?;
            }
            // Keys set together are named by the first.
            labels.push(format!(
                "{}={}",
                s.keys[0],
                show(per_key(v, 0, s.keys.len()))
            ));
        }
        let label = labels.join(" ");
        let scenario = Scenario::from_toml_value(Value::Table(t), file).map_err(|mut e| {
            e.message = format!("{} (sweep point {label})", e.message);
            e
        })?;
        points.push(SweepPoint { label, scenario });
    }
    Ok(points)
}

fn parse_sweeps(raw: &Value, file: &Path) -> Result<Vec<Sweep>, ScenarioError> {
    let err = |k: String, m: String| ScenarioError::new(file, k, m);
    let Value::Array(list) = raw else {
        return Err(err(
            "sweep".into(),
            "expected [[sweep]] tables, each with `key` (or `keys`) and `values` (or `from`, `to`, `step`)".into(),
        ));
    };
    let mut out = Vec::new();
    for (i, item) in list.iter().enumerate() {
        let k = |name: &str| format!("sweep[{i}].{name}");
        let Value::Table(t) = item else {
            return Err(err(format!("sweep[{i}]"), "expected a table".into()));
        };
        if let Some(unknown) = t
            .keys()
            .find(|n| !["key", "keys", "values", "from", "to", "step"].contains(&n.as_str()))
        {
            return Err(err(
                k(unknown),
                format!("unknown field `{unknown}`, expected one of `key`, `keys`, `values`, `from`, `to`, `step`"),
            ));
        }
        let keys: Vec<String> = match (t.get("key"), t.get("keys")) {
            (Some(Value::String(s)), None) => vec![s.clone()],
            (None, Some(Value::Array(a))) if !a.is_empty() => a
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or_else(|| err(k("keys"), "expected a list of key names".into()))?,
            _ => {
                return Err(err(
                    k("key"),
                    "give the key to sweep as `key = \"path[0].loss\"` or several set together as `keys = [...]`".into(),
                ))
            }
        };
        let values =
            match (t.get("values"), t.get("from"), t.get("to"), t.get("step")) {
                (Some(Value::Array(a)), None, None, None) if !a.is_empty() => a.clone(),
                (None, Some(from), Some(to), Some(step)) => {
                    range(from, to, step).map_err(|m| err(k("from"), m))?
                }
                _ => return Err(err(
                    k("values"),
                    "give a non-empty list `values = [...]`, or numbers `from`, `to` and `step`"
                        .into(),
                )),
            };
        for key in &keys {
            if key == "name" || key.starts_with("sweep") || key.starts_with("variant") {
                return Err(err(
                    k("key"),
                    format!(
                        "{key:?} cannot be swept (sweep the network, the workload or the seed)"
                    ),
                ));
            }
        }
        out.push(Sweep { keys, values });
    }
    Ok(out)
}

/// `from`, `from + step`, ... up to `to` (included, with a tolerance of a thousandth of a step).
fn range(from: &Value, to: &Value, step: &Value) -> Result<Vec<Value>, String> {
    let num = |v: &Value| v.as_float().or_else(|| v.as_integer().map(|i| i as f64));
    let (Some(a), Some(b), Some(s)) = (num(from), num(to), num(step)) else {
        return Err(
            "`from`, `to` and `step` must be numbers (use `values` for quantities with units)"
                .into(),
        );
    };
    if s.is_nan() || s <= 0.0 || !a.is_finite() || !b.is_finite() || b < a {
        return Err(format!(
            "expected from <= to and step > 0, got from {a}, to {b}, step {s}"
        ));
    }
    let n = ((b - a) / s + 1e-3).floor() as usize + 1;
    if n > MAX_POINTS {
        return Err(format!("the range has {n} values; at most {MAX_POINTS}"));
    }
    let ints = [from, to, step].iter().all(|v| v.is_integer());
    Ok((0..n)
        .map(|i| {
            if ints {
                Value::Integer(a as i64 + i as i64 * s as i64)
            } else {
                // Rounded to 12 digits so 0.1 + 2 * 0.1 is 0.3.
                Value::Float(((a + i as f64 * s) * 1e12).round() / 1e12)
            }
        })
        .collect())
}

/// Sets `key` (`path[1].down.rate`, `workload.size`, `seed`) in `t`; the tables and array
/// entries on the way must exist.
fn set(t: &mut Table, key: &str, v: Value) -> Result<(), String> {
    let parts: Vec<&str> = key.split('.').collect();
    let mut cur = t;
    for (n, part) in parts.iter().enumerate() {
        let (name, index) = match part.split_once('[') {
            Some((name, rest)) => {
                let idx = rest
                    .strip_suffix(']')
                    .and_then(|i| i.parse::<usize>().ok())
                    .ok_or_else(|| format!("{key:?}: expected `name[index]`, got {part:?}"))?;
                (name, Some(idx))
            }
            None => (*part, None),
        };
        let last = n + 1 == parts.len();
        if last && index.is_none() {
            cur.insert(name.to_string(), v);
            return Ok(());
        }
        let entry = cur
            .get_mut(name)
            .ok_or_else(|| format!("{key:?}: the scenario has no `{name}`"))?;
        let next = match (entry, index) {
            (Value::Array(a), Some(i)) => {
                let len = a.len();
                let e = a
                    .get_mut(i)
                    .ok_or_else(|| format!("{key:?}: `{name}` has {len} entries, no [{i}]"))?;
                if last {
                    *e = v;
                    return Ok(());
                }
                e
            }
            (e @ Value::Table(_), None) => e,
            _ => return Err(format!("{key:?}: `{name}` is not what the key says")),
        };
        cur = match next {
            Value::Table(t) => t,
            _ => return Err(format!("{key:?}: `{part}` is not a table")),
        };
    }
    Err(format!("{key:?}: empty key"))
}

/// The value key `ki` of `n` keys set together gets: a list of exactly `n` items gives each
/// key its own (`values = [["25ms", "125KB"], ["50ms", "250KB"]]` for a delay and its queue),
/// anything else goes to every key.
fn per_key(v: &Value, ki: usize, n: usize) -> &Value {
    match v {
        Value::Array(items) if n > 1 && items.len() == n => &items[ki],
        other => other,
    }
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
name = "s"
[[path]]
name = "a"
rate = "10Mbit"
delay = "10ms"
loss = 0.0
[[path]]
name = "b"
rate = "5Mbit"
delay = "20ms"
[workload]
kind = "bulk"
size = "1MB"
[[variant]]
name = "v"
"#;

    fn expand_str(sweeps: &str) -> Result<Vec<SweepPoint>, ScenarioError> {
        expand(&format!("{BASE}{sweeps}"), Path::new("x.toml"))
    }

    #[test]
    fn a_file_without_sweeps_is_one_unlabelled_point() {
        let p = expand_str("").unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].label, "");
    }

    #[test]
    fn two_sweeps_expand_to_their_product_in_order() {
        let p = expand_str(
            "[[sweep]]\nkey = \"path[0].loss\"\nvalues = [0.01, 0.02]\n\
             [[sweep]]\nkeys = [\"path[0].delay\", \"path[1].delay\"]\nvalues = [\"5ms\", \"50ms\", \"100ms\"]\n",
        )
        .unwrap();
        assert_eq!(p.len(), 6);
        assert_eq!(p[0].label, "path[0].loss=0.01 path[0].delay=5ms");
        assert_eq!(p[5].label, "path[0].loss=0.02 path[0].delay=100ms");
        assert_eq!(p[1].scenario.paths[0].down.loss, 0.02);
        assert_eq!(p[5].scenario.paths[1].down.delay, 100_000_000);
        assert_eq!(p[5].scenario.paths[0].down.delay, 100_000_000);
    }

    #[test]
    fn keys_set_together_take_one_item_each_from_a_list_value() {
        let p = expand_str(
            "[[sweep]]\nkeys = [\"path[0].delay\", \"path[0].queue\"]\n\
             values = [[\"25ms\", \"125KB\"], [\"50ms\", \"250KB\"]]\n",
        )
        .unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[1].label, "path[0].delay=50ms");
        assert_eq!(p[1].scenario.paths[0].down.delay, 50_000_000);
        assert_eq!(p[1].scenario.paths[0].down.queue_bytes, 250_000);
    }

    #[test]
    fn a_numeric_range_includes_its_end() {
        let p = expand_str(
            "[[sweep]]\nkey = \"path[0].loss\"\nfrom = 0.005\nto = 0.02\nstep = 0.005\n",
        )
        .unwrap();
        let losses: Vec<f64> = p.iter().map(|x| x.scenario.paths[0].down.loss).collect();
        assert_eq!(losses, vec![0.005, 0.01, 0.015, 0.02]);
        let p = expand_str("[[sweep]]\nkey = \"seed\"\nfrom = 1\nto = 3\nstep = 1\n").unwrap();
        assert_eq!(
            p.iter().map(|x| x.scenario.seed).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
    }

    #[test]
    fn bad_sweeps_are_refused_with_the_key_and_what_to_do() {
        for (sweep, key, says) in [
            (
                "[[sweep]]\nkey = \"path[5].loss\"\nvalues = [0.1]\n",
                "sweep[0].key",
                "2 entries",
            ),
            (
                "[[sweep]]\nkey = \"path[0].loss\"\nvalues = []\n",
                "sweep[0].values",
                "non-empty",
            ),
            (
                "[[sweep]]\nkey = \"path[0].loss\"\nvalues = [2.0]\n",
                "path[0].loss",
                "sweep point",
            ),
            (
                "[[sweep]]\nkey = \"path[0].loss\"\nvalues = [0.1]\nstride = 1\n",
                "sweep[0].stride",
                "unknown",
            ),
            (
                "[[sweep]]\nkey = \"name\"\nvalues = [\"x\"]\n",
                "sweep[0].key",
                "cannot be swept",
            ),
            (
                "[[sweep]]\nkey = \"path[0].loss\"\nfrom = 0.5\nto = 0.1\nstep = 0.1\n",
                "sweep[0].from",
                "from <= to",
            ),
        ] {
            let e = expand_str(sweep).unwrap_err();
            assert_eq!(e.key, key, "{sweep}: {e}");
            assert!(e.to_string().contains(says), "{sweep}: {e}");
        }
    }

    #[test]
    fn errors_in_the_file_itself_keep_their_line() {
        let e = expand(
            &format!("{BASE}[[sweep]]\nkey = \"seed\"\nvalues = [1]\n")
                .replace("delay = \"10ms\"", "dealy = \"10ms\""),
            Path::new("x.toml"),
        )
        .unwrap_err();
        assert!(e.line.is_some(), "{e}");
    }
}
