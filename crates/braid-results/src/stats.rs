//! Order statistics for the box plots and the report tables.
//!
//! Owns: quantiles, box-plot summaries, medians. Must not touch: drawing, formatting, the
//! database. Non-finite values (NaN, ±inf) are left out of every statistic; callers count them
//! separately if they matter.

/// A box-plot summary of some values (Tukey's: whiskers at the most extreme values within
/// 1.5 × IQR of the box, points beyond them as outliers).
#[derive(Debug, Clone, PartialEq)]
pub struct BoxStats {
    /// Number of finite values summarised.
    pub n: usize,
    /// Smallest value.
    pub min: f64,
    /// First quartile.
    pub q1: f64,
    /// Median.
    pub median: f64,
    /// Third quartile.
    pub q3: f64,
    /// Largest value.
    pub max: f64,
    /// Lower whisker end: the smallest value ≥ q1 − 1.5 IQR.
    pub whisker_lo: f64,
    /// Upper whisker end: the largest value ≤ q3 + 1.5 IQR.
    pub whisker_hi: f64,
    /// Values outside the whiskers, ascending.
    pub outliers: Vec<f64>,
}

/// The finite values, sorted ascending.
pub fn sorted_finite(values: impl IntoIterator<Item = f64>) -> Vec<f64> {
    let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    v
}

/// Quantile `p` in [0, 1] of sorted values, interpolating linearly between order statistics
/// (Hyndman and Fan type 7, as R's and NumPy's defaults). `None` for no values.
pub fn quantile_sorted(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let p = if p.is_nan() { 0.5 } else { p.clamp(0.0, 1.0) };
    let h = (sorted.len() - 1) as f64 * p;
    let lo = h.floor() as usize;
    let hi = h.ceil() as usize;
    let (a, b) = (sorted[lo], sorted[hi.min(sorted.len() - 1)]);
    Some(a + (b - a) * (h - lo as f64))
}

/// Median of the finite values; `None` when there are none.
pub fn median(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    quantile_sorted(&sorted_finite(values), 0.5)
}

impl BoxStats {
    /// Summary of the finite values; `None` when there are none.
    pub fn new(values: impl IntoIterator<Item = f64>) -> Option<BoxStats> {
        let v = sorted_finite(values);
        let q1 = quantile_sorted(&v, 0.25)?;
        let median = quantile_sorted(&v, 0.5)?;
        let q3 = quantile_sorted(&v, 0.75)?;
        let iqr = q3 - q1;
        let (lo_fence, hi_fence) = (q1 - 1.5 * iqr, q3 + 1.5 * iqr);
        let whisker_lo = v.iter().copied().find(|&x| x >= lo_fence).unwrap_or(q1);
        let whisker_hi = v
            .iter()
            .rev()
            .copied()
            .find(|&x| x <= hi_fence)
            .unwrap_or(q3);
        let outliers = v
            .iter()
            .copied()
            .filter(|&x| x < whisker_lo || x > whisker_hi)
            .collect();
        Some(BoxStats {
            n: v.len(),
            min: v[0],
            q1,
            median,
            q3,
            max: v[v.len() - 1],
            whisker_lo,
            whisker_hi,
            outliers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quartiles_and_whiskers() {
        let b = BoxStats::new([1.0, 2.0, 3.0, 4.0, 5.0, 100.0, f64::NAN, f64::INFINITY]).unwrap();
        assert_eq!(b.n, 6);
        assert_eq!(b.median, 3.5);
        assert_eq!(b.q1, 2.25);
        assert_eq!(b.q3, 4.75);
        assert_eq!(b.whisker_lo, 1.0);
        assert_eq!(b.whisker_hi, 5.0);
        assert_eq!(b.outliers, vec![100.0]);
        assert_eq!(b.max, 100.0);
    }

    #[test]
    fn empty_and_single() {
        assert!(BoxStats::new([f64::NAN]).is_none());
        let b = BoxStats::new([7.0]).unwrap();
        assert_eq!(
            (b.min, b.q1, b.median, b.q3, b.max),
            (7.0, 7.0, 7.0, 7.0, 7.0)
        );
        assert_eq!(median([]), None);
    }
}
