//! A set of `u64` values stored as sorted, disjoint, non-adjacent half-open ranges.
//!
//! Owns: the range arithmetic used for acknowledgement ranges, received stream bytes,
//! acknowledged stream bytes and bytes to retransmit. Must not touch: anything protocol
//! specific. All operations are O(log n + k) in the number of ranges k touched.

use std::collections::BTreeMap;
use std::ops::Range;

/// Sorted disjoint half-open ranges; adjacent ranges are merged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeSet {
    // start -> end
    map: BTreeMap<u64, u64>,
}

impl RangeSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// True when no value is in the set.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Number of disjoint ranges.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Insert `r`; returns true when at least one value was new.
    pub fn insert(&mut self, r: Range<u64>) -> bool {
        if r.start >= r.end {
            return false;
        }
        let (mut start, mut end) = (r.start, r.end);
        // The common case, data arriving in order: `r` reaches or follows the last range.
        // One lookup, no removal and re-insertion.
        if let Some(mut last) = self.map.last_entry() {
            let (s, e) = (*last.key(), *last.get());
            if start > e {
                self.map.insert(start, end);
                return true;
            }
            if start >= s {
                if end <= e {
                    return false;
                }
                *last.get_mut() = end;
                return true;
            }
        }
        // A range starting at or before `start` that reaches it.
        if let Some((&s, &e)) = self.map.range(..=start).next_back() {
            if e >= end {
                return false;
            }
            if e >= start {
                start = s;
                end = end.max(e);
                self.map.remove(&s);
            }
        }
        // Ranges starting inside [start, end] are absorbed.
        while let Some((&s, &e)) = self.map.range(start..=end).next() {
            end = end.max(e);
            self.map.remove(&s);
        }
        self.map.insert(start, end);
        true
    }

    /// Remove `r` from the set.
    pub fn remove(&mut self, r: Range<u64>) {
        if r.start >= r.end {
            return;
        }
        if let Some((&s, &e)) = self.map.range(..r.start).next_back() {
            if e > r.start {
                self.map.insert(s, r.start);
                if e > r.end {
                    self.map.insert(r.end, e);
                    return;
                }
            }
        }
        while let Some((&s, &e)) = self.map.range(r.start..r.end).next() {
            self.map.remove(&s);
            if e > r.end {
                self.map.insert(r.end, e);
                break;
            }
        }
    }

    /// True when `v` is in the set.
    pub fn contains(&self, v: u64) -> bool {
        matches!(self.map.range(..=v).next_back(), Some((_, &e)) if e > v)
    }

    /// True when every value of `r` is in the set.
    pub fn contains_range(&self, r: Range<u64>) -> bool {
        if r.start >= r.end {
            return true;
        }
        matches!(self.map.range(..=r.start).next_back(), Some((_, &e)) if e >= r.end)
    }

    /// The lowest range.
    pub fn first(&self) -> Option<Range<u64>> {
        self.map.iter().next().map(|(&s, &e)| s..e)
    }

    /// The highest range.
    pub fn last(&self) -> Option<Range<u64>> {
        self.map.iter().next_back().map(|(&s, &e)| s..e)
    }

    /// Remove and return the lowest range.
    pub fn pop_first(&mut self) -> Option<Range<u64>> {
        self.map.pop_first().map(|(s, e)| s..e)
    }

    /// Remove and return the highest range.
    pub fn pop_last(&mut self) -> Option<Range<u64>> {
        self.map.pop_last().map(|(s, e)| s..e)
    }

    /// Ranges from lowest to highest.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = Range<u64>> + '_ {
        self.map.iter().map(|(&s, &e)| s..e)
    }

    /// Parts of `r` that are not in the set, lowest first.
    pub fn gaps_in(&self, r: Range<u64>) -> Vec<Range<u64>> {
        let mut out = Vec::new();
        if r.start >= r.end {
            return out;
        }
        let mut cur = r.start;
        if let Some((_, &e)) = self.map.range(..=r.start).next_back() {
            cur = cur.max(e);
        }
        for (&s, &e) in self.map.range(r.start..r.end) {
            if s > cur {
                out.push(cur..s.min(r.end));
            }
            cur = cur.max(e);
            if cur >= r.end {
                break;
            }
        }
        if cur < r.end {
            out.push(cur..r.end);
        }
        out
    }

    /// Drop every value below `v`.
    pub fn remove_below(&mut self, v: u64) {
        self.remove(0..v);
    }

    /// Total number of values in the set.
    pub fn total(&self) -> u64 {
        self.map.iter().map(|(s, e)| e - s).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn merges_and_splits() {
        let mut s = RangeSet::new();
        assert!(s.insert(0..5));
        assert!(s.insert(10..15));
        assert!(s.insert(5..10));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0..15]);
        assert!(!s.insert(3..7));
        s.remove(4..6);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0..4, 6..15]);
        assert_eq!(s.gaps_in(2..20), vec![4..6, 15..20]);
        assert!(s.contains_range(6..15));
        assert!(!s.contains_range(3..7));
        s.remove_below(8);
        assert_eq!(s.first(), Some(8..15));
    }

    #[test]
    fn gaps_in_an_inverted_range_is_empty_not_a_panic() {
        // Regression: a lost frame wholly below the acknowledged prefix produced an
        // inverted range (start > end) and BTreeMap::range panicked.
        let mut s = RangeSet::new();
        s.insert(0..10);
        let (hi, lo) = (20u64, 5u64);
        assert!(s.gaps_in(hi..lo).is_empty());
        assert!(s.gaps_in(lo..lo).is_empty());
        assert!(s.contains_range(hi..lo));
    }

    proptest! {
        #[test]
        fn behaves_like_a_set(ops in proptest::collection::vec((any::<bool>(), 0u64..200, 0u64..30), 1..60)) {
            let mut s = RangeSet::new();
            let mut model = BTreeSet::new();
            for (ins, start, len) in ops {
                let r = start..start + len;
                if ins {
                    let fresh = r.clone().any(|v| !model.contains(&v));
                    prop_assert_eq!(s.insert(r.clone()), fresh);
                    model.extend(r.clone());
                } else {
                    s.remove(r.clone());
                    for v in r.clone() { model.remove(&v); }
                }
                let flat: BTreeSet<u64> = s.iter().flatten().collect();
                prop_assert_eq!(&flat, &model);
                let ranges: Vec<_> = s.iter().collect();
                for w in ranges.windows(2) { prop_assert!(w[0].end < w[1].start); }
                let gaps: BTreeSet<u64> = s.gaps_in(50..120).into_iter().flatten().collect();
                let expect: BTreeSet<u64> = (50..120).filter(|v| !model.contains(v)).collect();
                prop_assert_eq!(gaps, expect);
            }
        }
    }
}
