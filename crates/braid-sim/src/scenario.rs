//! Scenario files: the TOML format, its validation, and the resolved model the simulator runs.
//!
//! Owns: the scenario file format (see `docs/scenarios.md`), `ScenarioError` with its
//! file/key/line context, and the resolved types (`Scenario`, `PathSpec`, `LinkSpec`, ...).
//! Must not touch: link behaviour (`link.rs`), the event loop or the runner (which validate
//! scheduler and congestion-controller names themselves and may add errors through
//! `ScenarioError::new`). Nothing here panics on any input.

use crate::connlevel::{ConnWorkload, RawConnections};
pub use crate::energy::EnergySpec;
use crate::link::Nanos;
pub use crate::trace::RateSpec;
use crate::trace::{Trace, TraceFormat};
use crate::units::{parse_duration, parse_rate, parse_size};
use crate::wifi::{Standard, WifiSpec};
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The most paths a scenario may have.
pub const MAX_PATHS: usize = 8;
/// The smallest queue a queue given as time converts to.
pub const MIN_QUEUE_BYTES: u64 = 3000;
/// The shortest allowed `blackout_every`.
pub const MIN_BLACKOUT_EVERY: Nanos = 1_000_000;

/// A scenario problem: which file, which key, what was expected and what was found.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct ScenarioError {
    /// The scenario file (or `<built-in>`).
    pub file: PathBuf,
    /// The key path, like `path[1].rate`; empty when the problem is not about one key.
    pub key: String,
    /// The 1-based line in the file, when known.
    pub line: Option<usize>,
    /// What was expected and what was found.
    pub message: String,
}

impl ScenarioError {
    /// An error about `key` in `file`.
    pub fn new(
        file: impl Into<PathBuf>,
        key: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        ScenarioError {
            file: file.into(),
            key: key.into(),
            line: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, "line {line}: ")?;
        }
        if !self.key.is_empty() {
            write!(f, "key `{}`: ", self.key)?;
        }
        f.write_str(&self.message)
    }
}

/// A fully resolved and validated scenario.
#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    pub name: String,
    pub seed: u64,
    /// Virtual-time limit per transfer.
    pub time_limit: Nanos,
    /// The session fails when no path has been usable for this long.
    pub path_timeout: Nanos,
    pub paths: Vec<PathSpec>,
    pub workload: Workload,
    pub variants: Vec<VariantSpec>,
    /// The file it came from, or `<built-in>`.
    pub file: PathBuf,
}

/// One path: two directions plus the properties they share.
#[derive(Debug, Clone, Serialize)]
pub struct PathSpec {
    pub name: String,
    /// Client -> server.
    pub up: LinkSpec,
    /// Server -> client.
    pub down: LinkSpec,
    /// Both directions share one medium whose rate is `down.rate`.
    pub half_duplex: bool,
    /// Extra airtime per frame on a half-duplex medium.
    pub frame_overhead: Nanos,
    /// Both directions are 802.11 stations contending for one medium (`wifi.rs`); each
    /// direction's `rate` is its PHY rate.
    pub wifi: Option<WifiSpec>,
    pub energy: EnergySpec,
    /// The rate the agent tells the scheduler the path has (bits per second, PATH_COST's
    /// rate hint); `None`: the scheduler estimates it.
    pub rate_hint: Option<u64>,
}

/// One direction of a path.
#[derive(Debug, Clone, Serialize)]
pub struct LinkSpec {
    pub rate: RateSpec,
    /// One-way propagation delay.
    pub delay: Nanos,
    /// Extra per-packet delay, uniform in `[0, jitter]`.
    pub jitter: Nanos,
    /// Per-packet loss probability (the good-state loss when `burst` is set).
    pub loss: f64,
    pub burst: Option<BurstSpec>,
    pub duplicate: f64,
    /// Drop-tail buffer size in bytes (excluding the frame on the air).
    pub queue_bytes: u64,
    /// `[start, end)` intervals during which nothing crosses the link.
    pub blackouts: Vec<(Nanos, Nanos)>,
    /// Periodic blackouts `(period, duration)`: `[k*period, k*period+duration)`, k >= 1.
    pub blackout_every: Option<(Nanos, Nanos)>,
}

/// Gilbert–Elliott burst loss: per packet, good->bad with `p`, bad->good with `r`; loss in
/// the bad state is `loss_bad` (in the good state it is the link's `loss`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BurstSpec {
    pub p: f64,
    pub r: f64,
    #[serde(default = "one")]
    pub loss_bad: f64,
}

fn one() -> f64 {
    1.0
}

/// Which way the transfers go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Server -> client.
    Down,
    /// Client -> server.
    Up,
}

/// What to transfer.
#[derive(Debug, Clone, Serialize)]
pub struct Workload {
    pub direction: Direction,
    /// One transfer per entry, in bytes.
    pub sizes: Vec<u64>,
    /// How often the whole list runs, each time with its own seed.
    pub repetitions: u32,
    /// Run every transfer of a variant one after the other on one session (as the agent
    /// keeps it: windows and RTT estimates carry over), instead of a fresh session each.
    pub shared_session: bool,
    /// Idle time between transfers on a shared session.
    pub gap: Nanos,
    /// Run the sparse latency probe (`latency.rs`) idle before each transfer and beside it
    /// (`probe = false` turns it off where its packets would disturb what is measured).
    pub probe: bool,
    /// Bytes of a bulk transfer the other way, beside each measured one (0: none): an
    /// upload beside a download fills the queue the download's acknowledgements cross.
    pub reverse: u64,
    /// `kind = "connections"`: connection-level runs (`connlevel.rs`) instead of transfers
    /// (`sizes` is then empty).
    pub connections: Option<ConnWorkload>,
}

/// Which system a variant runs. Only `Braid` runs in the simulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VariantKind {
    #[default]
    Braid,
    Tcp,
    Mptcp,
    SsMptcp,
    Bond,
}

impl VariantKind {
    /// The name used in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            VariantKind::Braid => "braid",
            VariantKind::Tcp => "tcp",
            VariantKind::Mptcp => "mptcp",
            VariantKind::SsMptcp => "ss-mptcp",
            VariantKind::Bond => "bond",
        }
    }
}

/// One configuration to compare.
#[derive(Debug, Clone, Serialize)]
pub struct VariantSpec {
    pub name: String,
    pub kind: VariantKind,
    /// Scheduler name; the runner validates it.
    pub scheduler: String,
    /// Congestion-controller name; the runner validates it.
    pub cc: String,
    /// Indices into `Scenario::paths`.
    pub paths: Vec<usize>,
    /// Copy data in flight on slow paths onto a fast one at the end of a transfer
    /// (default true; false gives Linux MPTCP's plain behaviour).
    pub tail_reinjection: bool,
    /// OPERETTA's utility alpha, 0..=1 (default 1: most throughput).
    pub alpha: f64,
    /// Super-aggregation mechanisms; each defaults to true under the `super` scheduler, to
    /// false under every other named one, and to the agent's default when the variant names
    /// neither a scheduler nor a controller.
    pub ack_offload: bool,
    pub blackout_freeze: bool,
    pub loss_recovery: bool,
    /// Indices into `Scenario::paths` of the variant's paths the client sets to standby
    /// after the handshake (used only when no active path works), e.g. "WiFi first, 3G as
    /// fallback".
    pub standby: Vec<usize>,
    /// Keepalive interval of idle paths, both ends (default: the core's default).
    pub keepalive: Option<Nanos>,
}

// ---------------------------------------------------------------------------------------
// The raw file format.

/// A string that carries a unit, like "10ms"; converted with `units.rs` during resolution.
#[derive(Debug, Clone)]
struct UnitStr(String);

impl<'de> Deserialize<'de> for UnitStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = UnitStr;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(r#"a quoted value with a unit, such as "10ms", "50Mbit" or "64KB""#)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<UnitStr, E> {
                Ok(UnitStr(v.to_string()))
            }
        }
        d.deserialize_str(V)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename = "Scenario")]
struct RawScenario {
    name: Option<String>,
    seed: Option<u64>,
    time_limit: Option<UnitStr>,
    path_timeout: Option<UnitStr>,
    #[serde(default)]
    path: Vec<RawPath>,
    workload: Option<RawWorkload>,
    #[serde(default)]
    variant: Vec<RawVariant>,
    /// Sweeps: checked and expanded by `sweep.rs`, ignored here.
    #[allow(dead_code)]
    sweep: Option<toml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename = "PathTable")]
struct RawPath {
    name: Option<String>,
    rate: Option<UnitStr>,
    delay: Option<UnitStr>,
    jitter: Option<UnitStr>,
    loss: Option<f64>,
    duplicate: Option<f64>,
    queue: Option<UnitStr>,
    trace: Option<String>,
    trace_format: Option<String>,
    burst: Option<BurstSpec>,
    half_duplex: Option<bool>,
    frame_overhead: Option<UnitStr>,
    wifi: Option<String>,
    #[serde(default)]
    blackouts: Vec<RawBlackout>,
    blackout_every: Option<UnitStr>,
    blackout_duration: Option<UnitStr>,
    up: Option<RawDir>,
    down: Option<RawDir>,
    energy: Option<EnergySpec>,
    rate_hint: Option<UnitStr>,
}

/// `[path.up]` / `[path.down]`: the per-direction keys.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename = "DirectionTable")]
struct RawDir {
    rate: Option<UnitStr>,
    delay: Option<UnitStr>,
    jitter: Option<UnitStr>,
    loss: Option<f64>,
    duplicate: Option<f64>,
    queue: Option<UnitStr>,
    trace: Option<String>,
    trace_format: Option<String>,
    burst: Option<BurstSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename = "Blackout")]
struct RawBlackout {
    at: Option<UnitStr>,
    duration: Option<UnitStr>,
}

#[derive(Deserialize, Clone, Copy, PartialEq)]
#[serde(rename_all = "lowercase")]
enum WorkloadKind {
    Bulk,
    Sizes,
    Connections,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename = "WorkloadTable")]
struct RawWorkload {
    kind: Option<WorkloadKind>,
    direction: Option<Direction>,
    size: Option<UnitStr>,
    sizes: Option<Vec<UnitStr>>,
    repetitions: Option<u32>,
    session: Option<String>,
    gap: Option<UnitStr>,
    probe: Option<bool>,
    reverse: Option<UnitStr>,
    connections: Option<RawConnections>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename = "VariantTable")]
struct RawVariant {
    name: Option<String>,
    kind: Option<VariantKind>,
    scheduler: Option<String>,
    cc: Option<String>,
    paths: Option<Vec<String>>,
    tail_reinjection: Option<bool>,
    alpha: Option<f64>,
    ack_offload: Option<bool>,
    blackout_freeze: Option<bool>,
    loss_recovery: Option<bool>,
    standby: Option<Vec<String>>,
    keepalive: Option<UnitStr>,
}

// ---------------------------------------------------------------------------------------
// Loading and resolution.

impl Scenario {
    /// Reads and validates a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ScenarioError::new(path, "", format!("cannot read the scenario file: {e}"))
        })?;
        Scenario::from_toml_str(&text, path)
    }

    /// Parses and validates scenario text; `file` is used in messages and trace paths are
    /// resolved relative to its directory.
    pub fn from_toml_str(text: &str, file: &Path) -> Result<Scenario, ScenarioError> {
        let de = toml::Deserializer::new(text);
        Scenario::from_deserializer(de, text, file)
    }

    /// Validates an already parsed scenario table (a sweep point); errors name keys but no
    /// lines.
    pub fn from_toml_value(value: toml::Value, file: &Path) -> Result<Scenario, ScenarioError> {
        Scenario::from_deserializer(value, "", file)
    }

    fn from_deserializer<'de, D: serde::Deserializer<'de>>(
        de: D,
        text: &str,
        file: &Path,
    ) -> Result<Scenario, ScenarioError>
    where
        D::Error: SpannedError,
    {
        let raw: RawScenario = serde_path_to_error::deserialize(de).map_err(|err| {
            let path = err.path().to_string();
            let inner = err.into_inner();
            let line = inner
                .span()
                .filter(|_| !text.is_empty())
                .map(|s| text.get(..s.start).map_or(0, |p| p.matches('\n').count()) + 1);
            let key = if path == "." || path == "?" {
                String::new()
            } else {
                path
            };
            let full = inner.message();
            let message: Vec<&str> = full.lines().map(str::trim).collect();
            let message = message.join("; ");
            let syntax = key.is_empty()
                && !message.starts_with("unknown field")
                && !message.starts_with("missing");
            let message = if syntax {
                format!("TOML syntax error: {message}")
            } else {
                message
            };
            ScenarioError {
                file: file.to_path_buf(),
                key,
                line,
                message,
            }
        })?;
        Resolver {
            file,
            traces: HashMap::new(),
        }
        .scenario(raw)
    }

    /// The index of the path called `name`.
    pub fn path_index(&self, name: &str) -> Option<usize> {
        self.paths.iter().position(|p| p.name == name)
    }
}

/// What the scenario loader needs of a deserializer's error: where it was and what it says.
trait SpannedError: serde::de::Error {
    fn span(&self) -> Option<std::ops::Range<usize>>;
    fn message(&self) -> String;
}

impl SpannedError for toml::de::Error {
    fn span(&self) -> Option<std::ops::Range<usize>> {
        toml::de::Error::span(self)
    }
    fn message(&self) -> String {
        toml::de::Error::message(self).to_string()
    }
}

struct Resolver<'a> {
    file: &'a Path,
    traces: HashMap<PathBuf, Arc<Trace>>,
}

type R<T> = Result<T, ScenarioError>;

impl Resolver<'_> {
    fn err(&self, key: impl Into<String>, message: impl Into<String>) -> ScenarioError {
        ScenarioError::new(self.file, key, message)
    }

    fn duration(&self, key: &str, v: &UnitStr) -> R<Nanos> {
        parse_duration(&v.0).map_err(|m| self.err(key, m))
    }

    fn opt_duration(&self, key: &str, v: Option<&UnitStr>, default: Nanos) -> R<Nanos> {
        v.map_or(Ok(default), |v| self.duration(key, v))
    }

    fn probability(&self, key: &str, v: f64) -> R<f64> {
        if (0.0..=1.0).contains(&v) {
            Ok(v)
        } else {
            Err(self.err(
                key,
                format!("expected a probability between 0 and 1, got {v}"),
            ))
        }
    }

    fn name(&self, key: &str, v: Option<String>, what: &str) -> R<String> {
        match v {
            Some(n) if !n.trim().is_empty() => Ok(n),
            Some(_) => Err(self.err(key, format!("{what} name must not be empty"))),
            None => Err(self.err(key, format!("missing required key `name` ({what} name)"))),
        }
    }

    fn trace(&mut self, key: &str, rel: &str, format: Option<(&str, &str)>) -> R<Arc<Trace>> {
        let format = match format {
            None => None,
            Some((_, "csv")) => Some(TraceFormat::Csv),
            Some((_, "mahimahi")) => Some(TraceFormat::Mahimahi),
            Some((fkey, other)) => {
                return Err(self.err(
                    fkey,
                    format!("unknown trace format {other:?}; expected \"csv\" (time_s,rate_mbit rows) or \"mahimahi\" (one millisecond timestamp per 1500-byte delivery opportunity); leave it out to detect it"),
                ))
            }
        };
        let base = self.file.parent().unwrap_or(Path::new(""));
        let full = base.join(rel);
        let cache_key = full.join(format!("{format:?}"));
        if let Some(t) = self.traces.get(&cache_key) {
            return Ok(t.clone());
        }
        let t = Arc::new(Trace::load(&full, format).map_err(|m| self.err(key, m))?);
        if t.points().iter().all(|p| p.1 == 0) {
            let msg = format!(
                "{}: expected some rate above 0, but every row is 0",
                full.display()
            );
            return Err(self.err(key, msg));
        }
        self.traces.insert(cache_key, t.clone());
        Ok(t)
    }

    fn scenario(mut self, raw: RawScenario) -> R<Scenario> {
        let name = self.name("name", raw.name, "scenario")?;
        let time_limit =
            self.opt_duration("time_limit", raw.time_limit.as_ref(), 600_000_000_000)?;
        if time_limit == 0 {
            return Err(self.err("time_limit", "must be greater than 0"));
        }
        let path_timeout =
            self.opt_duration("path_timeout", raw.path_timeout.as_ref(), 15_000_000_000)?;
        if path_timeout == 0 {
            return Err(self.err("path_timeout", "must be greater than 0"));
        }
        let n = raw.path.len();
        if n == 0 {
            return Err(self.err("path", "expected 1 to 8 [[path]] tables, found none"));
        }
        if n > MAX_PATHS {
            return Err(self.err(
                "path",
                format!("expected 1 to {MAX_PATHS} [[path]] tables, found {n}"),
            ));
        }
        let mut paths: Vec<PathSpec> = Vec::with_capacity(n);
        for (i, rp) in raw.path.into_iter().enumerate() {
            let p = self.path(i, rp)?;
            if let Some(j) = paths.iter().position(|q| q.name == p.name) {
                return Err(self.err(
                    format!("path[{i}].name"),
                    format!("duplicate path name {:?} (also path[{j}])", p.name),
                ));
            }
            paths.push(p);
        }
        let workload = self.workload(raw.workload)?;
        if raw.variant.is_empty() {
            return Err(self.err(
                "variant",
                "expected at least one [[variant]] table, found none",
            ));
        }
        let mut variants: Vec<VariantSpec> = Vec::with_capacity(raw.variant.len());
        for (i, rv) in raw.variant.into_iter().enumerate() {
            let v = self.variant(i, rv, &paths)?;
            if let Some(j) = variants.iter().position(|w| w.name == v.name) {
                return Err(self.err(
                    format!("variant[{i}].name"),
                    format!("duplicate variant name {:?} (also variant[{j}])", v.name),
                ));
            }
            variants.push(v);
        }
        Ok(Scenario {
            name,
            seed: raw.seed.unwrap_or(1),
            time_limit,
            path_timeout,
            paths,
            workload,
            variants,
            file: self.file.to_path_buf(),
        })
    }

    fn path(&mut self, i: usize, mut rp: RawPath) -> R<PathSpec> {
        let k = format!("path[{i}]");
        let name = self.name(&format!("{k}.name"), rp.name.take(), "path")?;
        let half_duplex = rp.half_duplex.unwrap_or(false);
        let frame_overhead = self.opt_duration(
            &format!("{k}.frame_overhead"),
            rp.frame_overhead.as_ref(),
            0,
        )?;
        let energy = rp.energy.unwrap_or_default();
        let rate_hint = rp
            .rate_hint
            .as_ref()
            .map(|r| self.rate(&format!("{k}.rate_hint"), r))
            .transpose()?;
        for (field, v) in [
            ("active_w", energy.active_w),
            ("idle_w", energy.idle_w),
            ("ramp_j", energy.ramp_j),
            ("tail_s", energy.tail_s),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(self.err(
                    format!("{k}.energy.{field}"),
                    format!("expected a finite number >= 0, got {v}"),
                ));
            }
        }
        // Blackouts, shared by both directions.
        let mut blackouts = Vec::with_capacity(rp.blackouts.len());
        for (j, b) in rp.blackouts.iter().enumerate() {
            let bk = format!("{k}.blackouts[{j}]");
            let at =
                b.at.as_ref()
                    .ok_or_else(|| self.err(format!("{bk}.at"), "missing required key `at`"))?;
            let dur = b.duration.as_ref().ok_or_else(|| {
                self.err(format!("{bk}.duration"), "missing required key `duration`")
            })?;
            let at = self.duration(&format!("{bk}.at"), at)?;
            let dur = self.duration(&format!("{bk}.duration"), dur)?;
            blackouts.push((at, at.saturating_add(dur)));
        }
        blackouts.sort_unstable();
        let blackout_every = match (&rp.blackout_every, &rp.blackout_duration) {
            (None, None) => None,
            (Some(_), None) => {
                return Err(self.err(
                    format!("{k}.blackout_every"),
                    "`blackout_every` needs `blackout_duration` as well",
                ))
            }
            (None, Some(_)) => {
                return Err(self.err(
                    format!("{k}.blackout_duration"),
                    "`blackout_duration` needs `blackout_every` as well",
                ))
            }
            (Some(e), Some(d)) => {
                let every = self.duration(&format!("{k}.blackout_every"), e)?;
                let dur = self.duration(&format!("{k}.blackout_duration"), d)?;
                if every < MIN_BLACKOUT_EVERY {
                    return Err(self.err(
                        format!("{k}.blackout_every"),
                        format!("expected at least 1ms, got {:?}", e.0),
                    ));
                }
                if dur >= every {
                    return Err(self.err(
                        format!("{k}.blackout_duration"),
                        format!(
                            "expected less than blackout_every ({:?}), got {:?}",
                            e.0, d.0
                        ),
                    ));
                }
                Some((every, dur))
            }
        };
        let up_raw = rp.up.take().unwrap_or_default();
        let down_raw = rp.down.take().unwrap_or_default();
        let mut down = self.direction(&k, "down", &rp, &down_raw, None)?;
        let medium = if half_duplex {
            Some(down.rate.clone())
        } else {
            None
        };
        let mut up = self.direction(&k, "up", &rp, &up_raw, medium.as_ref())?;
        for l in [&mut up, &mut down] {
            l.blackouts.clone_from(&blackouts);
            l.blackout_every = blackout_every;
        }
        let wifi = self.wifi(&k, &rp, [&up, &down])?;
        Ok(PathSpec {
            name,
            up,
            down,
            half_duplex,
            frame_overhead,
            wifi,
            energy,
            rate_hint,
        })
    }

    /// The `wifi` key: a standard, on a path that is not also `half_duplex`, whose
    /// directions' rates are constant PHY rates of that standard.
    fn wifi(&self, k: &str, rp: &RawPath, dirs: [&LinkSpec; 2]) -> R<Option<WifiSpec>> {
        let Some(w) = &rp.wifi else { return Ok(None) };
        let key = format!("{k}.wifi");
        let standard = Standard::parse(w).ok_or_else(|| {
            self.err(
                &key,
                format!(r#"expected "802.11b", "802.11g" or "802.11g-protected", got {w:?}"#),
            )
        })?;
        if rp.half_duplex == Some(true) || rp.frame_overhead.is_some() {
            return Err(self.err(
                &key,
                "`wifi` models the shared medium itself: remove `half_duplex` and `frame_overhead`",
            ));
        }
        let rates: Vec<String> = standard
            .rates()
            .iter()
            .map(|r| format!("{}", *r as f64 / 1e6))
            .collect();
        for (dir, l) in ["up", "down"].iter().zip(dirs) {
            let ok = matches!(l.rate, RateSpec::Constant(r) if standard.rates().contains(&r));
            if !ok {
                return Err(self.err(
                    format!("{k}.rate"),
                    format!(
                        "a {w} path's {dir} rate must be one of its PHY rates ({} Mbit/s), not a trace or another rate",
                        rates.join(", ")
                    ),
                ));
            }
        }
        Ok(Some(WifiSpec { standard }))
    }

    /// Resolves one direction: the direction's own keys win over the path's.
    fn direction(
        &mut self,
        k: &str,
        dir: &str,
        p: &RawPath,
        d: &RawDir,
        medium: Option<&RateSpec>,
    ) -> R<LinkSpec> {
        let pick = |dk: bool, key: &str| {
            if dk {
                format!("{k}.{dir}.{key}")
            } else {
                format!("{k}.{key}")
            }
        };
        // A direction's own `trace_format`, else the path's.
        let fmt_key = if d.trace_format.is_some() {
            pick(true, "trace_format")
        } else {
            pick(false, "trace_format")
        };
        let fmt = d
            .trace_format
            .as_deref()
            .or(p.trace_format.as_deref())
            .map(|f| (fmt_key.as_str(), f));
        let rate = if let Some(t) = &d.trace {
            RateSpec::Trace(self.trace(&pick(true, "trace"), t, fmt)?)
        } else if let Some(r) = &d.rate {
            RateSpec::Constant(self.rate(&pick(true, "rate"), r)?)
        } else if let Some(t) = &p.trace {
            RateSpec::Trace(self.trace(&pick(false, "trace"), t, fmt)?)
        } else if let Some(r) = &p.rate {
            RateSpec::Constant(self.rate(&pick(false, "rate"), r)?)
        } else {
            return Err(self.err(
                format!("{k}.rate"),
                format!("missing `rate` or `trace` for the {dir} direction (set it on the path or in [path.{dir}])"),
            ));
        };
        let delay_key = pick(d.delay.is_some(), "delay");
        let delay = self.opt_duration(&delay_key, d.delay.as_ref().or(p.delay.as_ref()), 0)?;
        let jitter_key = pick(d.jitter.is_some(), "jitter");
        let jitter = self.opt_duration(&jitter_key, d.jitter.as_ref().or(p.jitter.as_ref()), 0)?;
        let loss = self.probability(
            &pick(d.loss.is_some(), "loss"),
            d.loss.or(p.loss).unwrap_or(0.0),
        )?;
        let duplicate = self.probability(
            &pick(d.duplicate.is_some(), "duplicate"),
            d.duplicate.or(p.duplicate).unwrap_or(0.0),
        )?;
        let burst = d.burst.or(p.burst);
        if let Some(b) = burst {
            let bk = pick(d.burst.is_some(), "burst");
            self.probability(&format!("{bk}.p"), b.p)?;
            self.probability(&format!("{bk}.r"), b.r)?;
            self.probability(&format!("{bk}.loss_bad"), b.loss_bad)?;
        }
        let queue_key = pick(d.queue.is_some(), "queue");
        let queue_bytes = match d.queue.as_ref().or(p.queue.as_ref()) {
            None => time_to_bytes(100_000_000, medium.unwrap_or(&rate)),
            Some(q) => match (parse_size(&q.0), parse_duration(&q.0)) {
                (Ok(b), _) => b,
                (_, Ok(t)) => time_to_bytes(t, medium.unwrap_or(&rate)),
                _ => {
                    return Err(self.err(
                        queue_key,
                        format!(r#"expected a queue size such as "64KB" or a time such as "100ms", got {:?}"#, q.0),
                    ))
                }
            },
        };
        Ok(LinkSpec {
            rate,
            delay,
            jitter,
            loss,
            burst,
            duplicate,
            queue_bytes,
            blackouts: Vec::new(),
            blackout_every: None,
        })
    }

    fn rate(&self, key: &str, v: &UnitStr) -> R<u64> {
        match parse_rate(&v.0) {
            Ok(0) => Err(self.err(
                key,
                format!("expected a rate greater than 0, got {:?}", v.0),
            )),
            Ok(r) => Ok(r),
            Err(m) => Err(self.err(key, m)),
        }
    }

    fn workload(&self, w: Option<RawWorkload>) -> R<Workload> {
        let mut w = w.ok_or_else(|| self.err("workload", "missing the [workload] table"))?;
        let connections = match (w.kind, w.connections.take()) {
            (Some(WorkloadKind::Connections), Some(c)) => {
                Some(c.resolve(self.file, "workload.connections")?)
            }
            (Some(WorkloadKind::Connections), None) => {
                return Err(self.err(
                    "workload.connections",
                    r#"kind = "connections" needs a [workload.connections] table with [[workload.connections.class]] entries"#,
                ))
            }
            (_, Some(_)) => {
                return Err(self.err(
                    "workload.connections",
                    r#"[workload.connections] is only used with kind = "connections""#,
                ))
            }
            (_, None) => None,
        };
        let kind =
            match (w.kind, &w.size, &w.sizes) {
                (Some(k), _, _) => k,
                (None, Some(_), None) => WorkloadKind::Bulk,
                (None, None, Some(_)) => WorkloadKind::Sizes,
                _ => return Err(self.err(
                    "workload.kind",
                    r#"missing `kind`: expected "bulk" (with `size`) or "sizes" (with `sizes`)"#,
                )),
            };
        let sizes = match kind {
            WorkloadKind::Connections => {
                if w.size.is_some() || w.sizes.is_some() {
                    return Err(self.err(
                        "workload.size",
                        r#"kind = "connections" takes its sizes from [[workload.connections.class]]"#,
                    ));
                }
                Vec::new()
            }
            WorkloadKind::Bulk => {
                if w.sizes.is_some() {
                    return Err(self.err(
                        "workload.sizes",
                        r#"`sizes` is only used with kind = "sizes""#,
                    ));
                }
                let s = w.size.as_ref().ok_or_else(|| {
                    self.err(
                        "workload.size",
                        r#"kind = "bulk" needs `size`, such as size = "64MB""#,
                    )
                })?;
                vec![self.size("workload.size", s)?]
            }
            WorkloadKind::Sizes => {
                if w.size.is_some() {
                    return Err(
                        self.err("workload.size", r#"`size` is only used with kind = "bulk""#)
                    );
                }
                let list = w.sizes.as_ref().ok_or_else(|| {
                    self.err(
                        "workload.sizes",
                        r#"kind = "sizes" needs `sizes`, such as sizes = ["8KB", "4MB"]"#,
                    )
                })?;
                if list.is_empty() {
                    return Err(self.err(
                        "workload.sizes",
                        "expected at least one size, got an empty list",
                    ));
                }
                list.iter()
                    .enumerate()
                    .map(|(i, s)| self.size(&format!("workload.sizes[{i}]"), s))
                    .collect::<R<Vec<u64>>>()?
            }
        };
        let repetitions = w.repetitions.unwrap_or(1);
        if repetitions == 0 {
            return Err(self.err("workload.repetitions", "expected at least 1, got 0"));
        }
        let shared_session = match w.session.as_deref() {
            None | Some("fresh") => false,
            Some("shared") => true,
            Some(other) => {
                return Err(self.err(
                    "workload.session",
                    format!("expected \"fresh\" or \"shared\", got {other:?}"),
                ))
            }
        };
        let gap = match &w.gap {
            None => 0,
            Some(g) if shared_session => {
                parse_duration(&g.0).map_err(|m| self.err("workload.gap", m))?
            }
            Some(_) => {
                return Err(self.err(
                    "workload.gap",
                    "a gap between transfers needs session = \"shared\"",
                ))
            }
        };
        Ok(Workload {
            direction: w.direction.unwrap_or(Direction::Down),
            sizes,
            repetitions,
            shared_session,
            gap,
            probe: w.probe.unwrap_or(true),
            reverse: match &w.reverse {
                Some(v) => self.size("workload.reverse", v)?,
                None => 0,
            },
            connections,
        })
    }

    fn size(&self, key: &str, v: &UnitStr) -> R<u64> {
        match parse_size(&v.0) {
            Ok(0) => Err(self.err(
                key,
                format!("expected a size greater than 0, got {:?}", v.0),
            )),
            Ok(b) => Ok(b),
            Err(m) => Err(self.err(key, m)),
        }
    }

    fn variant(&self, i: usize, v: RawVariant, paths: &[PathSpec]) -> R<VariantSpec> {
        let k = format!("variant[{i}]");
        let name = self.name(&format!("{k}.name"), v.name, "variant")?;
        let idx = match v.paths {
            None => (0..paths.len()).collect(),
            Some(list) => {
                if list.is_empty() {
                    return Err(self.err(
                        format!("{k}.paths"),
                        "expected at least one path name, got an empty list",
                    ));
                }
                let mut idx: Vec<usize> = Vec::with_capacity(list.len());
                for n in &list {
                    let Some(j) = paths.iter().position(|p| &p.name == n) else {
                        let known: Vec<String> =
                            paths.iter().map(|p| format!("{:?}", p.name)).collect();
                        return Err(self.err(
                            format!("{k}.paths"),
                            format!("no path named {n:?}; the paths are {}", known.join(", ")),
                        ));
                    };
                    if idx.contains(&j) {
                        return Err(
                            self.err(format!("{k}.paths"), format!("path {n:?} is listed twice"))
                        );
                    }
                    idx.push(j);
                }
                idx
            }
        };
        let alpha = match v.alpha {
            None => 1.0,
            Some(a) if (0.0..=1.0).contains(&a) => a,
            Some(a) => {
                return Err(self.err(
                    format!("{k}.alpha"),
                    format!(
                        "expected a number from 0 (least energy) to 1 (most throughput), got {a}"
                    ),
                ))
            }
        };
        let mut standby: Vec<usize> = Vec::new();
        for n in v.standby.unwrap_or_default() {
            let Some(j) = paths
                .iter()
                .position(|p| p.name == n)
                .filter(|j| idx.contains(j))
            else {
                let mine: Vec<String> = idx
                    .iter()
                    .map(|&j| format!("{:?}", paths[j].name))
                    .collect();
                return Err(self.err(
                    format!("{k}.standby"),
                    format!(
                        "{n:?} is not one of this variant's paths ({}); list only paths the variant uses",
                        mine.join(", ")
                    ),
                ));
            };
            if standby.contains(&j) {
                return Err(self.err(
                    format!("{k}.standby"),
                    format!("path {n:?} is listed twice"),
                ));
            }
            standby.push(j);
        }
        if standby.len() == idx.len() {
            return Err(self.err(
                format!("{k}.standby"),
                "every path of the variant is on standby; leave at least one active (standby \
                 paths carry data only when no active path works)",
            ));
        }
        let keepalive = match &v.keepalive {
            Some(u) => {
                let d = self.duration(&format!("{k}.keepalive"), u)?;
                if d == 0 {
                    return Err(self.err(
                        format!("{k}.keepalive"),
                        "a keepalive interval must be more than 0".to_string(),
                    ));
                }
                Some(d)
            }
            None => None,
        };
        // A variant that names neither a scheduler nor a controller runs what `braid agent`
        // runs by default (`Config::default()`, switches included); one that names either
        // gets exactly that, with the super-aggregation switches off unless it sets them or
        // names `super`.
        let default = braid_core::Config::default();
        let named = v.scheduler.is_some() || v.cc.is_some();
        let scheduler = v.scheduler.unwrap_or_else(|| default.scheduler.to_string());
        let all_on = scheduler == "super";
        let switch = |set: Option<bool>, agent_default: bool| {
            set.unwrap_or(if named { all_on } else { agent_default })
        };
        let kind = v.kind.unwrap_or_default();
        // A kernel stack left unnamed runs the kernel's own default, CUBIC; braid's default
        // controller exists only in braid.
        let default_cc = match kind {
            VariantKind::Braid => default.cc.to_string(),
            _ => "cubic".to_string(),
        };
        Ok(VariantSpec {
            name,
            kind,
            scheduler,
            cc: v.cc.unwrap_or(default_cc),
            paths: idx,
            tail_reinjection: v.tail_reinjection.unwrap_or(default.tail_reinjection),
            alpha,
            ack_offload: switch(v.ack_offload, default.ack_offload),
            blackout_freeze: switch(v.blackout_freeze, default.blackout_freeze),
            loss_recovery: switch(v.loss_recovery, default.loss_recovery),
            standby,
            keepalive,
        })
    }
}

/// Bytes a queue of `t` holds at `rate` (a trace's mean rate), at least `MIN_QUEUE_BYTES`.
fn time_to_bytes(t: Nanos, rate: &RateSpec) -> u64 {
    let bytes = rate.mean_rate() as u128 * t as u128 / 8_000_000_000;
    u64::try_from(bytes)
        .unwrap_or(u64::MAX)
        .max(MIN_QUEUE_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
}
