//! Percentiles and the way rounds are combined.
//!
//! Every measurement is taken in several interleaved rounds. A figure's
//! headline is the **median over rounds** of that round's value (p50,
//! throughput), shown with its **spread** (the smallest and largest round
//! value); p90/p99 come from all rounds' samples pooled, since one round has
//! too few samples for a stable tail.

use serde::{Deserialize, Serialize};

/// The raw outcome of one round: latencies (µs) and the wall time (s) in
/// which they were all taken.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    pub latencies_us: Vec<f64>,
    pub wall_s: f64,
}

/// Reads a number written as `null` (JSON has no NaN) back as NaN.
pub fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

fn pair_nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<[f64; 2], D::Error> {
    let [a, b] = <[Option<f64>; 2]>::deserialize(d)?;
    Ok([a.unwrap_or(f64::NAN), b.unwrap_or(f64::NAN)])
}

fn vec_nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    Ok(Vec::<Option<f64>>::deserialize(d)?
        .into_iter()
        .map(|v| v.unwrap_or(f64::NAN))
        .collect())
}

/// A measurement combined over rounds. Times are milliseconds; a value
/// that could not be computed is NaN (`null` in JSON).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Measured {
    /// Median over rounds of the round's p50.
    #[serde(deserialize_with = "nan_if_null")]
    pub p50_ms: f64,
    /// Smallest and largest round p50.
    #[serde(deserialize_with = "pair_nan_if_null")]
    pub p50_spread_ms: [f64; 2],
    /// p90 of all samples pooled.
    #[serde(deserialize_with = "nan_if_null")]
    pub p90_ms: f64,
    /// p99 of all samples pooled.
    #[serde(deserialize_with = "nan_if_null")]
    pub p99_ms: f64,
    /// Mean of all samples.
    #[serde(deserialize_with = "nan_if_null")]
    pub mean_ms: f64,
    /// Median over rounds of calls per second (all clients together).
    #[serde(deserialize_with = "nan_if_null")]
    pub throughput_rps: f64,
    /// Smallest and largest round throughput.
    #[serde(deserialize_with = "pair_nan_if_null")]
    pub throughput_spread_rps: [f64; 2],
    /// Samples pooled.
    pub samples: usize,
    /// Each round's p50, in the order run.
    #[serde(deserialize_with = "vec_nan_if_null")]
    pub round_p50_ms: Vec<f64>,
}

/// The `q`-quantile (0..=1) of sorted values, linearly interpolated.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    let frac = pos - lo as f64;
    sorted[lo] + (sorted[hi] - sorted[lo]) * frac
}

/// The median of unsorted values.
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    quantile(&v, 0.5)
}

fn spread(values: &[f64]) -> [f64; 2] {
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if values.is_empty() {
        [f64::NAN, f64::NAN]
    } else {
        [min, max]
    }
}

/// Combines rounds as the module docs say.
pub fn combine(rounds: &[Batch]) -> Measured {
    let mut pooled: Vec<f64> = rounds
        .iter()
        .flat_map(|b| b.latencies_us.iter().copied())
        .collect();
    pooled.sort_by(f64::total_cmp);
    let round_p50: Vec<f64> = rounds
        .iter()
        .map(|b| {
            let mut v = b.latencies_us.clone();
            v.sort_by(f64::total_cmp);
            quantile(&v, 0.5) / 1000.0
        })
        .collect();
    let round_rps: Vec<f64> = rounds
        .iter()
        .filter(|b| b.wall_s > 0.0)
        .map(|b| b.latencies_us.len() as f64 / b.wall_s)
        .collect();
    let mean = if pooled.is_empty() {
        f64::NAN
    } else {
        pooled.iter().sum::<f64>() / pooled.len() as f64 / 1000.0
    };
    Measured {
        p50_ms: median(&round_p50),
        p50_spread_ms: spread(&round_p50),
        p90_ms: quantile(&pooled, 0.90) / 1000.0,
        p99_ms: quantile(&pooled, 0.99) / 1000.0,
        mean_ms: mean,
        throughput_rps: median(&round_rps),
        throughput_spread_rps: spread(&round_rps),
        samples: pooled.len(),
        round_p50_ms: round_p50,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_between_ranks() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(quantile(&v, 0.0), 1.0);
        assert_eq!(quantile(&v, 1.0), 4.0);
        assert_eq!(quantile(&v, 0.5), 2.5);
        assert!(quantile(&[], 0.5).is_nan());
        assert_eq!(median(&[5.0, 1.0, 3.0]), 3.0);
    }

    #[test]
    fn rounds_combine_into_median_p50_with_spread_and_pooled_tail() {
        let round = |base: f64| Batch {
            latencies_us: (1..=100).map(|i| base + f64::from(i)).collect(),
            wall_s: 0.1,
        };
        let m = combine(&[round(0.0), round(1000.0), round(2000.0)]);
        // Round p50s are 50.5, 1050.5 and 2050.5 µs.
        assert!((m.p50_ms - 1.0505).abs() < 1e-9, "{m:?}");
        assert_eq!(m.p50_spread_ms, [0.0505, 2.0505]);
        assert_eq!(m.samples, 300);
        assert!((m.throughput_rps - 1000.0).abs() < 1e-9);
        assert!(m.p99_ms > 2.0 && m.p99_ms <= 2.1, "{m:?}");
    }
}
