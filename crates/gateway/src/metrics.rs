//! Prometheus metrics for `/metrics`: calls, errors and latency per upstream
//! and tool, and whether each upstream is up. Hand-rolled text exposition
//! (format 0.0.4): one family of counters and one histogram, updated under
//! one short lock with no allocation once a tool has been seen — a metrics
//! framework would add a dependency and a registry for less. Labels carry
//! upstream and tool names only, never arguments.

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

/// One tool's counters: calls by outcome (in [`Outcome`] order) and the
/// latency of those that reached the upstream.
#[derive(Default)]
struct ToolStats {
    calls: [u64; OUTCOMES.len()],
    latency: Latency,
}

/// Every outcome, in the order they are exposed.
const OUTCOMES: [Outcome; 5] = [
    Outcome::Ok,
    Outcome::ToolError,
    Outcome::RpcError,
    Outcome::Failed,
    Outcome::Refused,
];

/// The gateway's counters. Cheap to update: one short lock per call, and
/// no allocation once the upstream and tool have been seen.
#[derive(Default)]
pub struct Metrics {
    /// Upstream → tool → counters, sorted for a stable exposition.
    tools: Mutex<BTreeMap<String, BTreeMap<String, ToolStats>>>,
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
        let mut tools = self.tools.lock();
        let by_tool = match tools.get_mut(upstream) {
            Some(by_tool) => by_tool,
            None => tools.entry(upstream.to_owned()).or_default(),
        };
        let stats = match by_tool.get_mut(tool) {
            Some(stats) => stats,
            None => by_tool.entry(tool.to_owned()).or_default(),
        };
        stats.calls[outcome as usize] += 1;
        if let Some(elapsed) = elapsed {
            let secs = elapsed.as_secs_f64();
            let l = &mut stats.latency;
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
        let tools = self.tools.lock();
        let each = || {
            tools
                .iter()
                .flat_map(|(upstream, by_tool)| by_tool.iter().map(move |(t, s)| (upstream, t, s)))
        };
        for (upstream, tool, stats) in each() {
            for (outcome, n) in OUTCOMES.iter().zip(stats.calls) {
                if n > 0 {
                    let _ = writeln!(
                        out,
                        "plangate_tool_calls_total{{upstream=\"{}\",tool=\"{}\",outcome=\"{}\"}} {n}",
                        escape(upstream),
                        escape(tool),
                        outcome.as_str()
                    );
                }
            }
        }
        out.push_str("# HELP plangate_tool_call_duration_seconds Latency of tool calls forwarded to upstreams.\n");
        out.push_str("# TYPE plangate_tool_call_duration_seconds histogram\n");
        for (upstream, tool, stats) in each() {
            let l = &stats.latency;
            if l.count == 0 {
                continue;
            }
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
    fn every_outcome_counts_in_its_own_slot() {
        for (i, outcome) in OUTCOMES.iter().enumerate() {
            assert_eq!(*outcome as usize, i, "{outcome:?}");
        }
    }

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
