//! How values are kept in cells: u64s as the SQLite integer with the same bits, NaN as
//! NULL, sample series as BLOBs of little-endian f64s, and non-finite floats in the paths'
//! JSON as strings.
//!
//! Owns: the encodings (both directions). Must not touch: SQL or the schema.

use serde::{Deserialize, Serialize};

/// A float in JSON: a number when finite, else "NaN", "inf" or "-inf" (JSON has no such
/// numbers).
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
pub(super) enum JsonF64 {
    Num(f64),
    Text(String),
}

impl JsonF64 {
    pub(super) fn from_f64(v: f64) -> Self {
        if v.is_finite() {
            JsonF64::Num(v)
        } else if v.is_nan() {
            JsonF64::Text("NaN".into())
        } else if v > 0.0 {
            JsonF64::Text("inf".into())
        } else {
            JsonF64::Text("-inf".into())
        }
    }
    pub(super) fn to_f64(&self) -> Option<f64> {
        match self {
            JsonF64::Num(v) => Some(*v),
            JsonF64::Text(t) => match t.as_str() {
                "NaN" => Some(f64::NAN),
                "inf" => Some(f64::INFINITY),
                "-inf" => Some(f64::NEG_INFINITY),
                _ => None,
            },
        }
    }
}

#[derive(Serialize, Deserialize)]
pub(super) struct PathJson {
    pub(super) name: String,
    pub(super) bytes: u64,
    pub(super) energy_j: JsonF64,
}

/// NULL reads back as NaN.
pub(super) fn nan_if_null(v: Option<f64>) -> f64 {
    v.unwrap_or(f64::NAN)
}

/// Bits of a u64 as the SQLite integer.
pub(super) fn u64_bits(v: u64) -> i64 {
    v as i64
}

/// The u64 with the bits of a stored integer.
pub(super) fn bits_u64(v: i64) -> u64 {
    v as u64
}

/// Samples as a BLOB of little-endian f64s.
pub(super) fn encode_samples(values: &[f64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

pub(super) fn decode_samples(blob: &[u8]) -> Option<Vec<f64>> {
    let chunks = blob.chunks_exact(8);
    if !chunks.remainder().is_empty() {
        return None;
    }
    Some(
        chunks
            .map(|c| {
                let mut b = [0u8; 8];
                b.copy_from_slice(c);
                f64::from_le_bytes(b)
            })
            .collect(),
    )
}
