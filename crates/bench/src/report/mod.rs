//! The report: one JSON document ([`Report`]), rendered as Markdown tables
//! and a hand-written SVG chart, and the targets read off it.
//!
//! This module holds the document's types; reading the targets off it,
//! the Markdown and the SVG are each a submodule.

use serde::{Deserialize, Serialize};

use crate::stats::Measured;

mod format;
mod markdown;
mod svg;
mod targets;

pub use markdown::markdown;
pub use svg::svg;
pub use targets::targets;

/// Everything one run measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Report {
    pub meta: Meta,
    pub passthrough: Vec<PassRow>,
    /// The same calls from the official Python SDK ("real agent" figures).
    pub sdk: Vec<PassRow>,
    /// The cross-check with `server-everything` as the upstream.
    pub everything: Vec<PassRow>,
    pub planning: Vec<PlanRow>,
    pub apply: Vec<ApplyRow>,
    pub scale: Option<Scale>,
    /// What operators' rules (`[[rules]]`) cost: evaluating 100 of them
    /// for a call that none matches, in process.
    #[serde(default)]
    pub rules: Vec<RulesRow>,
    /// Parts (peers, stores) that could not be measured, and why.
    pub not_measured: Vec<NotMeasured>,
    pub targets: Vec<TargetRow>,
}

/// When, where and how the run was made.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Meta {
    pub started: String,
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub duration_s: f64,
    pub quick: bool,
    pub git_commit: Option<String>,
    pub plangate_binary: String,
    pub machine: Machine,
    pub settings: Settings,
    pub durability: Vec<String>,
    /// The p50 of a 4 KiB write + fsync in the run dir, in ms: what one
    /// durable commit costs at least on this disk.
    #[serde(default)]
    pub fsync_ms: Option<f64>,
    pub peers: Vec<Peer>,
    pub notes: Vec<String>,
}

/// The machine, and how busy it was.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Machine {
    pub cores: usize,
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub memory_gib: f64,
    pub cpu: String,
    pub kernel: String,
    pub load_avg_start: String,
    pub load_avg_end: String,
}

/// Sizes of the run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Settings {
    pub rounds: usize,
    pub seq_calls: usize,
    pub concurrent_clients: usize,
    pub calls_per_client: usize,
    /// The many-clients row's clients (0 in reports from before it).
    #[serde(default)]
    pub many_clients: usize,
    #[serde(default)]
    pub many_calls_per_client: usize,
    pub warmup_calls: usize,
    pub planned_writes_per_key: usize,
    pub apply_steps: usize,
    pub scale_keys: Vec<usize>,
    pub scale_steps_per_plan: usize,
    pub get_plan_calls: usize,
}

/// A peer bridge: what was asked for and whether it ran.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Peer {
    pub id: String,
    pub name: String,
    pub version: String,
    pub available: bool,
    pub note: String,
}

/// One passthrough configuration at one concurrency.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PassRow {
    pub id: String,
    pub label: String,
    /// How the client reaches it: `stdio` or `http`.
    pub client: String,
    /// How it reaches the upstream: `stdio` or `http`.
    pub upstream: String,
    /// `direct`, `plangate` or a peer's id.
    pub via: String,
    /// Concurrent clients.
    pub clients: usize,
    pub m: Measured,
    /// p50 minus the direct p50 (same client transport and concurrency).
    pub added_p50_ms: Option<f64>,
    pub ratio_p50: Option<f64>,
    pub ratio_p99: Option<f64>,
    pub ratio_throughput: Option<f64>,
    /// The serving process's own peak resident set while these clients
    /// called it (sampled every 20 ms; HTTP rows with many clients only),
    /// KiB: what holding that many sessions costs the bridge itself, not
    /// its upstream.
    #[serde(default)]
    pub peak_rss_kib: Option<u64>,
}

/// Evaluating a set of rules for one passthrough call none of them
/// matches (`plangate_policy::Policy::decide`), in process.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RulesRow {
    /// What kind of rules.
    pub case: String,
    /// How many.
    pub rules: usize,
    /// Calls evaluated.
    pub samples: usize,
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub p50_us: f64,
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub p99_us: f64,
}

/// Planned writes on one store with some concurrent keys.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PlanRow {
    pub store: String,
    /// `main`, or the candidate build's label.
    pub build: String,
    pub keys: usize,
    pub write: Measured,
    /// Passthrough reads on the same gateway, same sessions, same rounds.
    pub read: Measured,
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub ratio_p50: f64,
}

/// Applying a plan of `steps` steps on one store.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ApplyRow {
    pub store: String,
    /// `main`, or the candidate build's label.
    pub build: String,
    pub steps: usize,
    /// One sample per round: the whole `apply_plan` call.
    pub apply: Measured,
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub per_step_ms: f64,
    /// p50 of the same write sent straight to the upstream over stdio.
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub upstream_put_ms: f64,
    /// p50 of the same write run through plangate without planning.
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub passthrough_put_ms: f64,
    /// per_step − upstream_put.
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub overhead_per_step_ms: f64,
    /// per_step − passthrough_put.
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub overhead_vs_passthrough_ms: f64,
}

/// Many keys with open plans.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Scale {
    /// The plangate build measured: `main`, or the candidate's label.
    pub build: String,
    pub steps_per_plan: usize,
    pub points: Vec<ScalePoint>,
    /// RSS right after the gateway became ready (no call yet), KiB.
    pub idle_rss_kib: u64,
    /// RSS after a first session made calls and closed, KiB.
    pub idle_after_calls_rss_kib: u64,
    /// (RSS with the most plans − idle-after-calls RSS) / plans.
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub bytes_per_plan: f64,
    /// The slope between the two largest points.
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub bytes_per_plan_marginal: f64,
    /// Spawn to `/readyz` 200 (HTTP), fresh data dir.
    pub startup_empty: Measured,
    /// The same with the store holding the largest point's plans.
    pub startup_full: Measured,
    /// Spawn to the `initialize` answer over stdio, fresh data dir.
    pub startup_stdio: Measured,
    /// Keys seeded per second (each: session, begin_session, the steps).
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub seed_keys_per_s: f64,
}

/// `get_plan` on a gateway holding `keys` keys with open plans.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ScalePoint {
    pub keys: usize,
    pub get_plan: Measured,
    pub rss_kib: u64,
}

/// Something the run could not measure.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NotMeasured {
    pub what: String,
    pub why: String,
}

/// A target of the benchmark issue, as this run shows it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TargetRow {
    /// The plangate build: `main`, or the candidate's label.
    pub build: String,
    pub target: String,
    pub measured: String,
    /// `None`: not measured.
    pub met: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pass(via: &str, client: &str, p50: f64, added: Option<f64>) -> PassRow {
        PassRow {
            id: format!("{client}-{via}"),
            label: via.into(),
            client: client.into(),
            upstream: "stdio".into(),
            via: via.into(),
            clients: 1,
            m: Measured {
                p50_ms: p50,
                p99_ms: p50 * 2.0,
                throughput_rps: 1000.0 / p50,
                ..Measured::default()
            },
            added_p50_ms: added,
            ratio_p50: added.map(|a| p50 / (p50 - a)),
            ..PassRow::default()
        }
    }

    #[test]
    fn targets_are_read_off_the_rows_and_rendered() {
        let report = Report {
            passthrough: vec![
                pass("direct", "http", 0.5, None),
                pass("plangate", "http", 0.54, Some(0.04)),
                pass("rust-mcp-proxy", "http", 0.9, Some(0.4)),
                pass("supergateway", "http", 2.0, Some(1.5)),
            ],
            planning: vec![PlanRow {
                store: "sqlite".into(),
                build: "main".into(),
                keys: 1,
                write: Measured {
                    p50_ms: 1.0,
                    ..Measured::default()
                },
                read: Measured {
                    p50_ms: 0.5,
                    ..Measured::default()
                },
                ratio_p50: 2.0,
            }],
            meta: Meta {
                fsync_ms: Some(0.25),
                ..Meta::default()
            },
            ..Report::default()
        };
        let t = targets(&report);
        let get = |prefix: &str| {
            t.iter()
                .find(|r| r.target.starts_with(prefix))
                .unwrap_or_else(|| panic!("{prefix}: {t:?}"))
        };
        let added = get("added p50 ≤ the fastest peer bridge's (http → stdio, 1 client)");
        assert_eq!(added.met, Some(true), "{added:?}");
        assert!(
            added
                .measured
                .contains("+0.040 ms vs rust-mcp-proxy +0.400 ms"),
            "{added:?}"
        );
        let rps = get("throughput ≥ the fastest peer bridge's (http → stdio, 1 client)");
        assert_eq!(rps.met, Some(true), "{rps:?}");
        assert_eq!(
            get("added p50 ≤ the fastest peer bridge's (stdio → http, 1 client)").met,
            None
        );
        // 1.0 ms planned vs 0.5 read + 0.25 fsync + 0.2 = 0.95 ms.
        let planned = get("planned write ≤ a passthrough read + one fsync + 0.2 ms");
        assert_eq!(planned.met, Some(false), "{planned:?}");
        assert!(planned.measured.contains("0.950 ms"), "{planned:?}");
        assert_eq!(get("idle RSS").met, None);

        let full = Report {
            targets: t,
            ..report
        };
        let md = markdown(&full);
        assert!(md.contains("| main | planned write ≤ a passthrough read + one fsync + 0.2 ms (sqlite, 1 key) | 1.000 ms vs 0.950 ms (read 0.500 + fsync 0.250 + 0.2) | **no** |"), "{md}");
        let chart = svg(&full);
        assert!(chart.starts_with("<svg") && chart.trim_end().ends_with("</svg>"));
        assert!(chart.contains("http → plangate → stdio"));
    }
}
