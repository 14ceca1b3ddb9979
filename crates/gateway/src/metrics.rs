//! Prometheus metrics for `/metrics`: calls, errors and latency per upstream
//! and tool, and whether each upstream is up. Hand-rolled text exposition
//! (format 0.0.4) — a few counters do not justify a metrics framework on
//! the hot path. Labels carry upstream and tool names only, never
//! arguments.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

/// Upper bounds (seconds) of the latency histogram buckets.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// How a forwarded call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// The upstream answered a result with `isError` false.
    Ok,
    /// The upstream answered a result with `isError` true.
    ToolError,
    /// The upstream answered a JSON-RPC error.
    RpcError,
    /// No answer: transport failure, upstream down, cancelled.
    Failed,
    /// plangate refused the call before it reached the upstream.
    Refused,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::ToolError => "tool_error",
            Outcome::RpcError => "rpc_error",
            Outcome::Failed => "failed",
            Outcome::Refused => "refused",
        }
    }
}

#[derive(Default)]
struct Latency {
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// The gateway's counters. Cheap to update: one short lock per call.
#[derive(Default)]
pub struct Metrics {
    calls: Mutex<BTreeMap<(String, String, Outcome), u64>>,
    latency: Mutex<BTreeMap<(String, String), Latency>>,
}

fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Metrics {
    /// Counts one call and, when it reached the upstream, its latency.
    pub fn record(&self, upstream: &str, tool: &str, outcome: Outcome, elapsed: Option<Duration>) {
        *self
            .calls
            .lock()
            .entry((upstream.to_owned(), tool.to_owned(), outcome))
            .or_default() += 1;
        if let Some(elapsed) = elapsed {
            let secs = elapsed.as_secs_f64();
            let mut latency = self.latency.lock();
            let l = latency
                .entry((upstream.to_owned(), tool.to_owned()))
                .or_default();
            for (i, bound) in BUCKETS.iter().enumerate() {
                if secs <= *bound {
                    l.buckets[i] += 1;
                }
            }
            l.count += 1;
            l.sum += secs;
        }
    }

    /// The text exposition, with `up` telling which upstreams are connected.
    pub fn render(&self, up: &BTreeMap<String, bool>) -> String {
        let mut out = String::new();
        out.push_str(
            "# HELP plangate_upstream_up Whether an upstream is connected (1) or not (0).\n",
        );
        out.push_str("# TYPE plangate_upstream_up gauge\n");
        for (name, is_up) in up {
            let _ = writeln!(
                out,
                "plangate_upstream_up{{upstream=\"{}\"}} {}",
                escape(name),
                u8::from(*is_up)
            );
        }
        out.push_str(
            "# HELP plangate_tool_calls_total Tool calls by upstream, tool and outcome.\n",
        );
        out.push_str("# TYPE plangate_tool_calls_total counter\n");
        for ((upstream, tool, outcome), n) in self.calls.lock().iter() {
            let _ = writeln!(
                out,
                "plangate_tool_calls_total{{upstream=\"{}\",tool=\"{}\",outcome=\"{}\"}} {n}",
                escape(upstream),
                escape(tool),
                outcome.as_str()
            );
        }
        out.push_str("# HELP plangate_tool_call_duration_seconds Latency of tool calls forwarded to upstreams.\n");
        out.push_str("# TYPE plangate_tool_call_duration_seconds histogram\n");
        for ((upstream, tool), l) in self.latency.lock().iter() {
            let labels = format!(
                "upstream=\"{}\",tool=\"{}\"",
                escape(upstream),
                escape(tool)
            );
            for (bound, n) in BUCKETS.iter().zip(l.buckets) {
                let _ = writeln!(
                    out,
                    "plangate_tool_call_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {n}"
                );
            }
            let _ = writeln!(
                out,
                "plangate_tool_call_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}",
                l.count
            );
            let _ = writeln!(
                out,
                "plangate_tool_call_duration_seconds_sum{{{labels}}} {}",
                l.sum
            );
            let _ = writeln!(
                out,
                "plangate_tool_call_duration_seconds_count{{{labels}}} {}",
                l.count
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_and_latency_are_exposed_per_upstream_and_tool() {
        let m = Metrics::default();
        m.record(
            "site",
            "get_page",
            Outcome::Ok,
            Some(Duration::from_millis(2)),
        );
        m.record(
            "site",
            "get_page",
            Outcome::ToolError,
            Some(Duration::from_millis(20)),
        );
        m.record("site", "delete_page", Outcome::Refused, None);
        let text = m.render(&BTreeMap::from([("site".to_owned(), true)]));
        assert!(text.contains("plangate_upstream_up{upstream=\"site\"} 1"));
        assert!(text.contains(
            "plangate_tool_calls_total{upstream=\"site\",tool=\"get_page\",outcome=\"ok\"} 1"
        ));
        assert!(text.contains("outcome=\"refused\"} 1"));
        assert!(text.contains("plangate_tool_call_duration_seconds_bucket{upstream=\"site\",tool=\"get_page\",le=\"0.0025\"} 1"));
        assert!(text.contains(
            "plangate_tool_call_duration_seconds_count{upstream=\"site\",tool=\"get_page\"} 2"
        ));
    }
}
