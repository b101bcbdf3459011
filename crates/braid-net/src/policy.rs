//! Per-path policy of the agent: `backup`, data caps and interface power, and the ledger
//! that counts each capped path's bytes across restarts.
//!
//! Owns: parsing `NAME=IFACE_OR_IP[,backup][,cap=SIZE/day|month][,power=WATTS][,nj_per_byte=NJ]`, the cap
//! periods (UTC days and months), the state file, and deciding when a path is over (or at
//! 80 % of) its cap. Must not touch: sockets or the session (the agent applies the result:
//! a backup or over-cap path is put on standby).
//!
//! State file: one line per capped path, `NAME PERIOD BYTES` (`PERIOD` is `2026-11-23` for a
//! daily cap, `2026-11` for a monthly one); a new period starts from zero. Direct mode adds
//! one line per path it measured, `rate:NAME BYTES_PER_S UNIX_SECS`: the path's delivery
//! rate and when it was saved, the first assumption of the next run (rates older than
//! [`RATE_MAX_AGE`] are not used). Three words like the cap lines, so an older agent still
//! reads the file. It is written atomically (temporary file, then rename). The ledger is a
//! handle: its clones share one state (the session's caps and direct mode's rates and caps
//! write one file).

use crate::udp::PathBind;
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// Remembered rates older than this (seconds) are not used: 7 days.
pub const RATE_MAX_AGE: u64 = 7 * 86_400;

/// How often a cap starts over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Period {
    /// Every UTC day.
    Day,
    /// Every UTC calendar month.
    Month,
}

/// A data cap: bytes in both directions per period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cap {
    /// Bytes allowed per period.
    pub bytes: u64,
    /// The period.
    pub period: Period,
}

/// What the user says about one path.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PathPolicy {
    /// Carries data only while no non-backup path works.
    pub backup: bool,
    /// Over this, the path behaves as a backup until the period ends.
    pub cap: Option<Cap>,
    /// The interface's power when active, watts (for `--scheduler operetta`, and the
    /// energy estimate of `braid status`).
    pub power_w: Option<f64>,
    /// Energy per byte carried (both ways), nanojoules (the energy estimate only).
    pub nj_per_byte: Option<f64>,
    /// When the path, if it fell back to TCP, tries UDP again (`None`: the default of
    /// [`crate::pathmgr::Recheck`], 30 s doubling to 8 minutes).
    pub udp_recheck: Option<crate::pathmgr::Recheck>,
}

/// Parse a size like `500MB`, `10GB`, `1.5GB`, `2GiB` or `1000` (bytes; SI and binary units).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size like 500MB or 10GB"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" | "k" => 1e3,
        "mb" | "m" => 1e6,
        "gb" | "g" => 1e9,
        "tb" | "t" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        u => {
            return Err(format!(
                "{s:?}: unknown unit {u:?} (use B, KB, MB, GB, TB or KiB...TiB)"
            ))
        }
    };
    Ok((n * mult) as u64)
}

impl std::str::FromStr for Cap {
    type Err = String;
    fn from_str(s: &str) -> Result<Cap, String> {
        let (size, period) = s.split_once('/').ok_or_else(|| {
            format!("cap={s:?}: expected SIZE/day or SIZE/month, like 10GB/month")
        })?;
        let period = match period {
            "day" => Period::Day,
            "month" => Period::Month,
            p => {
                return Err(format!(
                    "cap={s:?}: the period {p:?} is neither day nor month"
                ))
            }
        };
        let bytes = parse_size(size).map_err(|e| format!("cap={s:?}: {e}"))?;
        if bytes == 0 {
            return Err(format!("cap={s:?}: a cap must be more than 0 bytes"));
        }
        Ok(Cap { bytes, period })
    }
}

/// A path as given on the command line or in the config file.
#[derive(Debug, Clone, PartialEq)]
pub struct PathSpec {
    /// Its name.
    pub name: String,
    /// Interface or local address.
    pub bind: PathBind,
    /// Its policy.
    pub policy: PathPolicy,
}

/// Parse `NAME=IFACE_OR_IP[,backup][,cap=SIZE/day|month][,power=WATTS][,nj_per_byte=NJ]`.
pub fn parse_path_spec(s: &str) -> Result<PathSpec, String> {
    let mut parts = s.split(',');
    let first = parts.next().unwrap_or_default();
    // `auto`: every interface with a default route (NAME=auto names them).
    let first = if first == "auto" { "auto=auto" } else { first };
    let (name, bind) = first.split_once('=').ok_or_else(|| {
        format!("{s:?}: expected NAME=INTERFACE, NAME=LOCAL_IP or auto, like wifi=wlan0")
    })?;
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Err(format!(
            "{s:?}: the path needs a name (no spaces) before '='"
        ));
    }
    let bind: PathBind = bind.parse().map_err(|e: String| format!("{s:?}: {e}"))?;
    let mut policy = PathPolicy::default();
    for opt in parts {
        match opt.split_once('=') {
            None if opt == "backup" => policy.backup = true,
            Some(("cap", v)) => policy.cap = Some(v.parse().map_err(|e| format!("{s:?}: {e}"))?),
            Some(("power", v)) => {
                let w: f64 = v
                    .parse()
                    .ok()
                    .filter(|w: &f64| w.is_finite() && *w >= 0.0 && *w < 1000.0)
                    .ok_or_else(|| format!("{s:?}: power={v:?} is not a power in watts like 1.5"))?;
                policy.power_w = Some(w);
            }
            Some(("nj_per_byte", v)) => {
                let e: f64 = v
                    .parse()
                    .ok()
                    .filter(|e: &f64| e.is_finite() && *e >= 0.0 && *e < 1e6)
                    .ok_or_else(|| {
                        format!("{s:?}: nj_per_byte={v:?} is not an energy per byte in nanojoules like 50")
                    })?;
                policy.nj_per_byte = Some(e);
            }
            _ => {
                return Err(format!(
                    "{s:?}: unknown option {opt:?}; options are backup, cap=SIZE/day|month, power=WATTS and nj_per_byte=NANOJOULES"
                ))
            }
        }
    }
    if bind == PathBind::Auto && policy.cap.is_some() {
        return Err(format!(
            "{s:?}: a cap needs a path that is always the same link; name the interface \
             instead of auto"
        ));
    }
    Ok(PathSpec {
        name: name.to_string(),
        bind,
        policy,
    })
}

/// The UTC civil date (year, month, day) of a unix time.
fn civil(unix_secs: u64) -> (i64, u32, u32) {
    // Howard Hinnant's days-to-civil algorithm.
    let z = (unix_secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The name of the period `unix_secs` falls in.
pub fn period_key(p: Period, unix_secs: u64) -> String {
    let (y, m, d) = civil(unix_secs);
    match p {
        Period::Day => format!("{y:04}-{m:02}-{d:02}"),
        Period::Month => format!("{y:04}-{m:02}"),
    }
}

/// Where a capped path stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapStatus {
    /// Below 80 %.
    Under,
    /// At 80 % or more, below the cap.
    Near,
    /// At or over the cap: the path is a backup until the period ends.
    Over,
}

/// Bytes used by each capped path in its current period, and the rates direct mode
/// measured, kept in a state file. Clones share one state.
#[derive(Debug, Default, Clone)]
pub struct CapLedger {
    file: Option<PathBuf>,
    state: Arc<Mutex<LedgerState>>,
}

#[derive(Debug, Default)]
struct LedgerState {
    /// name -> (period, bytes)
    used: BTreeMap<String, (String, u64)>,
    /// name -> (bytes/s, unix seconds when saved)
    rates: BTreeMap<String, (f64, u64)>,
}

const RATE_PREFIX: &str = "rate:";

impl CapLedger {
    /// Read the state file (a missing file is an empty ledger). `None`: keep counts in
    /// memory only.
    pub fn load(file: Option<&Path>) -> Result<CapLedger, String> {
        let l = CapLedger {
            file: file.map(Path::to_path_buf),
            state: Arc::default(),
        };
        let Some(f) = file else { return Ok(l) };
        let text = match std::fs::read_to_string(f) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(l),
            Err(e) => return Err(format!("reading the cap state file {}: {e}", f.display())),
        };
        let bad = |i: usize, what: String| {
            format!(
                "cap state file {} line {}: {what}; fix or delete the file",
                f.display(),
                i + 1
            )
        };
        let mut st = l.lock();
        for (i, line) in text.lines().enumerate() {
            let w: Vec<&str> = line.split_whitespace().collect();
            match w[..] {
                [] => {}
                [name, rate, at] if name.starts_with(RATE_PREFIX) => {
                    let r: f64 = rate
                        .parse()
                        .ok()
                        .filter(|r: &f64| r.is_finite() && *r >= 0.0)
                        .ok_or_else(|| bad(i, format!("{rate:?} is not a rate in bytes/s")))?;
                    let at = at
                        .parse()
                        .map_err(|_| bad(i, format!("{at:?} is not a unix time")))?;
                    st.rates
                        .insert(name[RATE_PREFIX.len()..].to_string(), (r, at));
                }
                [name, period, bytes] => {
                    let b = bytes
                        .parse()
                        .map_err(|_| bad(i, format!("{bytes:?} is not a byte count")))?;
                    st.used.insert(name.to_string(), (period.to_string(), b));
                }
                _ => return Err(bad(i, "expected NAME PERIOD BYTES".into())),
            }
        }
        drop(st);
        Ok(l)
    }

    fn lock(&self) -> MutexGuard<'_, LedgerState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes `name` used in the current period.
    pub fn used(&self, name: &str, cap: &Cap, unix_secs: u64) -> u64 {
        let key = period_key(cap.period, unix_secs);
        match self.lock().used.get(name) {
            Some((p, b)) if *p == key => *b,
            _ => 0,
        }
    }

    /// Where `name` stands against `cap` now.
    pub fn status(&self, name: &str, cap: &Cap, unix_secs: u64) -> CapStatus {
        let u = self.used(name, cap, unix_secs);
        if u >= cap.bytes {
            CapStatus::Over
        } else if u.saturating_mul(5) >= cap.bytes.saturating_mul(4) {
            CapStatus::Near
        } else {
            CapStatus::Under
        }
    }

    /// Count `bytes` more for `name`; returns its status afterwards.
    pub fn add(&self, name: &str, cap: &Cap, unix_secs: u64, bytes: u64) -> CapStatus {
        let key = period_key(cap.period, unix_secs);
        {
            let mut st = self.lock();
            let e = st.used.entry(name.to_string()).or_insert((key.clone(), 0));
            if e.0 != key {
                *e = (key, 0);
            }
            e.1 = e.1.saturating_add(bytes);
        }
        self.status(name, cap, unix_secs)
    }

    /// The rate (bytes/s) remembered for path `name`, unless older than [`RATE_MAX_AGE`].
    pub fn rate(&self, name: &str, unix_secs: u64) -> Option<f64> {
        let (r, at) = *self.lock().rates.get(name)?;
        (unix_secs.saturating_sub(at) <= RATE_MAX_AGE && r > 0.0).then_some(r)
    }

    /// Remember path `name`'s rate (bytes/s) as of `unix_secs` (saved with the next
    /// [`CapLedger::save`]).
    pub fn set_rate(&self, name: &str, rate: f64, unix_secs: u64) {
        if rate.is_finite() && rate > 0.0 {
            self.lock()
                .rates
                .insert(name.to_string(), (rate, unix_secs));
        }
    }

    /// Write the state file (if any).
    pub fn save(&self) -> Result<(), String> {
        let Some(f) = &self.file else { return Ok(()) };
        let mut text = String::new();
        {
            let st = self.lock();
            for (name, (p, b)) in &st.used {
                text.push_str(&format!("{name} {p} {b}\n"));
            }
            for (name, (r, at)) in &st.rates {
                text.push_str(&format!("{RATE_PREFIX}{name} {r:.0} {at}\n"));
            }
        }
        let tmp = f.with_extension("tmp");
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, f))
            .map_err(|e| format!("writing the cap state file {}: {e}", f.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_parses_with_options_but_not_with_a_cap() {
        let p = parse_path_spec("auto").unwrap();
        assert_eq!((p.name.as_str(), &p.bind), ("auto", &PathBind::Auto));
        let p = parse_path_spec("any=auto,backup").unwrap();
        assert_eq!((p.name.as_str(), p.policy.backup), ("any", true));
        let e = parse_path_spec("auto,cap=1GB/day").unwrap_err();
        assert!(e.contains("name the interface"), "{e}");
    }

    #[test]
    fn path_specs_with_options_parse_and_bad_ones_say_why() {
        let p = parse_path_spec("lte=wwan0,backup,cap=10GB/month,power=2.5").unwrap();
        assert_eq!(p.name, "lte");
        assert_eq!(p.bind, PathBind::Interface("wwan0".into()));
        assert!(p.policy.backup);
        assert_eq!(
            p.policy.cap,
            Some(Cap {
                bytes: 10_000_000_000,
                period: Period::Month
            })
        );
        assert_eq!(p.policy.power_w, Some(2.5));
        let e = parse_path_spec("lte=wwan0,power=1.2,nj_per_byte=80").unwrap();
        assert_eq!(e.policy.nj_per_byte, Some(80.0));
        assert!(parse_path_spec("lte=wwan0,nj_per_byte=-1").is_err());
        let p = parse_path_spec("wifi=192.0.2.55").unwrap();
        assert_eq!(p.policy, PathPolicy::default());
        for (bad, why) in [
            ("wifi", "NAME=INTERFACE"),
            ("=eth0", "needs a name"),
            ("a=eth0,fast", "unknown option"),
            ("a=eth0,cap=10GB", "SIZE/day"),
            ("a=eth0,cap=10GB/week", "neither day nor month"),
            ("a=eth0,cap=lots/day", "not a size"),
            ("a=eth0,cap=0/day", "more than 0"),
            ("a=eth0,power=-1", "watts"),
        ] {
            let e = parse_path_spec(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn periods_follow_the_utc_calendar() {
        // 2026-11-23 06:00 UTC
        let t = 1_795_413_600;
        assert_eq!(period_key(Period::Day, t), "2026-11-23");
        assert_eq!(period_key(Period::Month, t), "2026-11");
        assert_eq!(period_key(Period::Day, 951_782_400), "2000-02-29");
        assert_eq!(period_key(Period::Month, 0), "1970-01");
    }

    #[test]
    fn the_ledger_warns_at_80_percent_stops_at_the_cap_and_survives_a_restart() {
        let dir = std::env::temp_dir().join(format!("braid-ledger-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("caps");
        let _ = std::fs::remove_file(&file);
        let cap: Cap = "1000/day".parse().unwrap();
        let t = 1_795_413_600;
        let l = CapLedger::load(Some(&file)).unwrap();
        assert_eq!(l.add("lte", &cap, t, 799), CapStatus::Under);
        assert_eq!(l.add("lte", &cap, t, 1), CapStatus::Near);
        l.save().unwrap();
        let l = CapLedger::load(Some(&file)).unwrap();
        assert_eq!(l.used("lte", &cap, t), 800);
        assert_eq!(l.add("lte", &cap, t, 200), CapStatus::Over);
        // The next day starts from zero.
        assert_eq!(l.status("lte", &cap, t + 86_400), CapStatus::Under);
        assert_eq!(l.add("lte", &cap, t + 86_400, 10), CapStatus::Under);
        std::fs::write(&file, "lte 2026-11-23 many\n").unwrap();
        assert!(CapLedger::load(Some(&file)).unwrap_err().contains("line 1"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Direct mode's rates survive a restart beside the caps, clones share them, and a
    /// rate older than a week is not used.
    #[test]
    fn rates_are_remembered_in_the_state_file_beside_the_caps() {
        let dir = std::env::temp_dir().join(format!("braid-rates-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("state");
        let _ = std::fs::remove_file(&file);
        let cap: Cap = "1000/day".parse().unwrap();
        let t = 1_795_413_600;
        let l = CapLedger::load(Some(&file)).unwrap();
        let other = l.clone();
        other.set_rate("wifi", 2_000_000.0, t);
        l.add("lte", &cap, t, 5);
        l.save().unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.contains("rate:wifi 2000000 "), "{text}");
        assert!(
            text.lines().all(|l| l.split_whitespace().count() == 3),
            "{text}"
        );
        let l = CapLedger::load(Some(&file)).unwrap();
        assert_eq!(l.rate("wifi", t + 60), Some(2e6));
        assert_eq!(l.used("lte", &cap, t), 5);
        assert_eq!(l.rate("wifi", t + RATE_MAX_AGE + 1), None, "too old");
        assert_eq!(l.rate("lte", t), None);
        std::fs::write(&file, "rate:wifi fast 1\n").unwrap();
        let e = CapLedger::load(Some(&file)).unwrap_err();
        assert!(e.contains("line 1") && e.contains("rate"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
