//! How numbers are written in the report: shared by the Markdown tables
//! and the SVG chart's labels, so both show the same figures.

/// Milliseconds, with fewer decimals as they grow (`–` when not measured),
/// so a column of sub-millisecond and stalled calls stays readable.
pub(super) fn ms(v: f64) -> String {
    if v.is_nan() {
        "–".into()
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// A ratio against direct (`–` when there is no direct row to compare
/// with), with three decimals near zero where two would read as `0.00×`.
pub(super) fn ratio(v: Option<f64>) -> String {
    match v {
        None => "–".into(),
        Some(v) if v.abs() < 0.1 => format!("{v:.3}×"),
        Some(v) => format!("{v:.2}×"),
    }
}

/// Calls per second, whole (`–` when not measured).
pub(super) fn rps(v: f64) -> String {
    if v.is_nan() {
        "–".into()
    } else {
        format!("{v:.0}")
    }
}
