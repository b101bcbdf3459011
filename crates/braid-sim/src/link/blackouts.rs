//! The blackout schedule of one direction: a merged list of `[start, end)` intervals plus an
//! optional periodic schedule.
//!
//! Owns: merging the intervals and answering "is `t` in a blackout, until when, and when is
//! the next one". Must not touch: what a blackout does to packets (`direction.rs` and the
//! path in `mod.rs` drop them).

use crate::scenario::LinkSpec;
use crate::time::Nanos;

/// Merged blackout intervals plus the periodic schedule.
#[derive(Debug, Clone)]
pub(super) struct Blackouts {
    pub(super) list: Vec<(Nanos, Nanos)>,
    pub(super) every: Option<(Nanos, Nanos)>,
}

impl Blackouts {
    pub(super) fn new(spec: &LinkSpec) -> Blackouts {
        let mut raw: Vec<(Nanos, Nanos)> = spec
            .blackouts
            .iter()
            .copied()
            .filter(|b| b.1 > b.0)
            .collect();
        raw.sort_unstable();
        let mut list: Vec<(Nanos, Nanos)> = Vec::with_capacity(raw.len());
        for (s, e) in raw {
            match list.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => list.push((s, e)),
            }
        }
        let every = spec.blackout_every.filter(|&(p, d)| p > 0 && d > 0);
        Blackouts { list, every }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.list.is_empty() && self.every.is_none()
    }

    /// End of the single interval of each kind that contains `t`, if any.
    pub(super) fn covering_end(&self, t: Nanos) -> Option<Nanos> {
        let mut end = None;
        let i = self.list.partition_point(|b| b.0 <= t);
        if i > 0 && self.list[i - 1].1 > t {
            end = Some(self.list[i - 1].1);
        }
        if let Some((p, d)) = self.every {
            if t >= p && t % p < d {
                let e = (t - t % p).saturating_add(d);
                end = Some(end.map_or(e, |x: Nanos| x.max(e)));
            }
        }
        end
    }

    #[inline]
    pub(super) fn contains(&self, t: Nanos) -> bool {
        !self.is_empty() && self.covering_end(t).is_some()
    }

    /// End of the (union) blackout containing `t`, if `t` is in one.
    pub(super) fn end_if_in(&self, t: Nanos) -> Option<Nanos> {
        let mut end = self.covering_end(t)?;
        while let Some(e) = self.covering_end(end) {
            if e <= end {
                break;
            }
            end = e;
        }
        Some(end)
    }

    /// The earliest blackout start strictly after `t`.
    pub(super) fn next_start_after(&self, t: Nanos) -> Option<Nanos> {
        let i = self.list.partition_point(|b| b.0 <= t);
        let a = self.list.get(i).map(|b| b.0);
        let b = self.every.and_then(|(p, _)| (t / p + 1).checked_mul(p));
        match (a, b) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        }
    }
}
