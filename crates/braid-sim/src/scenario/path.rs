//! Resolving a `[[path]]` table: its two directions (the direction's own keys win over the
//! path's), blackouts, energy, rate hint and the 802.11 medium.
//!
//! Owns: the path and direction rules and the default queue size. Must not touch: the other
//! tables, or what the link model does with the result (`link`).

use super::raw::{RawBlackout, RawDir, RawPath, UnitStr};
use super::resolve::{Resolver, R};
use super::{LinkSpec, PathSpec, RateSpec, MIN_BLACKOUT_EVERY, MIN_QUEUE_BYTES};
use crate::time::Nanos;
use crate::units::{parse_duration, parse_size};
use crate::wifi::{RateControl, Standard, WifiSpec};

/// Blackout intervals and the periodic schedule `(every, duration)`.
type Blackouts = (Vec<(Nanos, Nanos)>, Option<(Nanos, Nanos)>);

impl Resolver<'_> {
    pub(super) fn path(&mut self, i: usize, mut rp: RawPath) -> R<PathSpec> {
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
        let (blackouts, blackout_every) = self.blackouts(&k, &rp)?;
        let up_raw = rp.up.take().unwrap_or_default();
        let down_raw = rp.down.take().unwrap_or_default();
        let mut down = self.direction(&k, "down", &rp, &down_raw, None)?;
        let medium = if half_duplex {
            Some(down.rate.clone())
        } else {
            None
        };
        let mut up = self.direction(&k, "up", &rp, &up_raw, medium.as_ref())?;
        for (l, raw, dir) in [(&mut up, &up_raw, "up"), (&mut down, &down_raw, "down")] {
            let own = self.blackout_list(&format!("{k}.{dir}"), &raw.blackouts)?;
            l.blackouts = merged(blackouts.iter().chain(&own).copied());
            l.blackout_every = blackout_every;
        }
        let own_errors = [up_raw.frame_error, down_raw.frame_error];
        let wifi = self.wifi(&k, &rp, [&up, &down], own_errors)?;
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

    /// A direction's drop-tail buffer in bytes: a size, or a time at `rate` (the medium's on
    /// a half-duplex path); 100 ms when not given.
    fn queue(&self, queue_key: String, queue: Option<&UnitStr>, rate: &RateSpec) -> R<u64> {
        let queue_bytes = match queue {
            None => time_to_bytes(100_000_000, rate),
            Some(q) => match (parse_size(&q.0), parse_duration(&q.0)) {
                (Ok(b), _) => b,
                (_, Ok(t)) => time_to_bytes(t, rate),
                _ => {
                    return Err(self.err(
                        queue_key,
                        format!(r#"expected a queue size such as "64KB" or a time such as "100ms", got {:?}"#, q.0),
                    ))
                }
            },
        };
        Ok(queue_bytes)
    }

    /// A path's `[[path.blackouts]]` (sorted) and its periodic `blackout_every` with
    /// `blackout_duration`.
    fn blackouts(&self, k: &str, rp: &RawPath) -> R<Blackouts> {
        let blackouts = self.blackout_list(k, &rp.blackouts)?;
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
        Ok((blackouts, blackout_every))
    }

    /// A `blackouts` list (`k` is its table's key), sorted.
    fn blackout_list(&self, k: &str, list: &[RawBlackout]) -> R<Vec<(Nanos, Nanos)>> {
        let mut blackouts = Vec::with_capacity(list.len());
        for (j, b) in list.iter().enumerate() {
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
        Ok(blackouts)
    }

    /// The `wifi` key: a standard, on a path that is not also `half_duplex`, whose
    /// directions' rates are constant PHY rates of that standard.
    pub(super) fn wifi(
        &self,
        k: &str,
        rp: &RawPath,
        dirs: [&LinkSpec; 2],
        own_errors: [Option<f64>; 2],
    ) -> R<Option<WifiSpec>> {
        let Some(w) = &rp.wifi else {
            let errors = rp.frame_error.is_some() || own_errors.iter().any(Option::is_some);
            if rp.rate_control.is_some() || errors {
                let key = if rp.rate_control.is_some() {
                    "rate_control"
                } else {
                    "frame_error"
                };
                return Err(self.err(
                    format!("{k}.{key}"),
                    "`rate_control` and `frame_error` describe an 802.11 path: add `wifi`",
                ));
            }
            return Ok(None);
        };
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
        let rate_control = match rp.rate_control.as_deref() {
            None | Some("fixed") => RateControl::Fixed,
            Some("arf") => RateControl::Arf,
            Some(other) => {
                return Err(self.err(
                    format!("{k}.rate_control"),
                    format!(r#"expected "fixed" or "arf", got {other:?}"#),
                ))
            }
        };
        let mut frame_error = [0.0; 2];
        for (i, (dir, own)) in ["up", "down"].into_iter().zip(own_errors).enumerate() {
            let key = match own {
                Some(_) => format!("{k}.{dir}.frame_error"),
                None => format!("{k}.frame_error"),
            };
            let p = own.or(rp.frame_error).unwrap_or(0.0);
            if !(0.0..1.0).contains(&p) {
                return Err(self.err(key, format!("expected a probability in [0, 1), got {p}")));
            }
            frame_error[i] = p;
        }
        Ok(Some(WifiSpec {
            standard,
            rate_control,
            frame_error,
        }))
    }

    /// Resolves one direction: the direction's own keys win over the path's.
    pub(super) fn direction(
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
        let queue_bytes = self.queue(
            queue_key,
            d.queue.as_ref().or(p.queue.as_ref()),
            medium.unwrap_or(&rate),
        )?;
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
}

/// Bytes a queue of `t` holds at `rate` (a trace's mean rate), at least `MIN_QUEUE_BYTES`.
fn time_to_bytes(t: Nanos, rate: &RateSpec) -> u64 {
    let bytes = rate.mean_rate() as u128 * t as u128 / 8_000_000_000;
    u64::try_from(bytes)
        .unwrap_or(u64::MAX)
        .max(MIN_QUEUE_BYTES)
}

/// Blackout intervals sorted, overlapping ones joined (a path's and a direction's own).
fn merged(list: impl Iterator<Item = (Nanos, Nanos)>) -> Vec<(Nanos, Nanos)> {
    let mut all: Vec<(Nanos, Nanos)> = list.collect();
    all.sort_unstable();
    let mut out: Vec<(Nanos, Nanos)> = Vec::with_capacity(all.len());
    for (a, b) in all {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}
