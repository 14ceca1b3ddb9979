//! The report: one JSON document ([`Report`]), rendered as Markdown tables
//! and a hand-written SVG chart, and the targets read off it.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::stats::Measured;

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

// === targets ===

fn find<'a>(
    rows: &'a [PassRow],
    via: &str,
    client: &str,
    upstream: &str,
    clients: usize,
) -> Option<&'a PassRow> {
    rows.iter().find(|r| {
        r.via == via && r.client == client && r.upstream == upstream && r.clients == clients
    })
}

/// Reads every target off the measurements: for `main`, then for the
/// candidate build when the run had one.
pub fn targets(r: &Report) -> Vec<TargetRow> {
    let mut out = targets_for(r, "plangate", "main");
    let candidate = r
        .passthrough
        .iter()
        .find(|p| p.via == "candidate")
        .map(|p| p.label.clone())
        .or_else(|| {
            r.planning
                .iter()
                .find(|p| p.build != "main")
                .map(|p| p.build.clone())
        });
    if let Some(label) = candidate {
        out.extend(targets_for(r, "candidate", &label));
    }
    out
}

fn targets_for(r: &Report, via: &str, build: &str) -> Vec<TargetRow> {
    let mut out = Vec::new();
    let mut row = |target: &str, measured: String, met: Option<bool>| {
        out.push(TargetRow {
            build: build.to_owned(),
            target: target.to_owned(),
            measured,
            met,
        });
    };

    // 1. Passthrough p50 ≤ 1.10× direct.
    for (client, clients) in [("http", 1), ("stdio", 1), ("http", 16), ("stdio", 16)] {
        let t = format!(
            "passthrough p50 via plangate ≤ 1.10× direct ({client}, {clients} client{})",
            if clients > 1 { "s" } else { "" }
        );
        match find(&r.passthrough, via, client, "stdio", clients) {
            Some(p) if p.ratio_p50.is_some() => {
                let ratio = p.ratio_p50.unwrap_or(f64::NAN);
                row(
                    &t,
                    format!(
                        "{ratio:.2}× ({:.3} ms vs {:.3} ms direct)",
                        p.m.p50_ms,
                        p.m.p50_ms - p.added_p50_ms.unwrap_or(0.0)
                    ),
                    Some(ratio <= 1.10),
                );
            }
            _ => row(&t, "not measured".into(), None),
        }
    }

    // 2. Added latency ≥ 3× smaller than the fastest peer's.
    for clients in [1, 16] {
        let t = format!(
            "added latency ≥ 3× smaller than the fastest peer bridge's (http, {clients} client{})",
            if clients > 1 { "s" } else { "" }
        );
        let ours = find(&r.passthrough, via, "http", "stdio", clients).and_then(|p| p.added_p50_ms);
        let fastest = r
            .passthrough
            .iter()
            .filter(|p| {
                p.client == "http"
                    && p.clients == clients
                    && !matches!(p.via.as_str(), "direct" | "plangate" | "candidate")
            })
            .filter_map(|p| p.added_p50_ms.map(|a| (a, p.label.clone())))
            .min_by(|a, b| a.0.total_cmp(&b.0));
        match (ours, fastest) {
            (Some(ours), Some((peer, name))) => {
                let factor = if ours > 0.0 {
                    peer / ours
                } else {
                    f64::INFINITY
                };
                row(
                    &t,
                    format!(
                        "plangate +{ours:.3} ms vs {name} +{peer:.3} ms ({factor:.1}× smaller)"
                    ),
                    Some(factor >= 3.0),
                );
            }
            _ => row(&t, "not measured".into(), None),
        }
    }

    // 3. Planned write ≤ 1.5× a passthrough read.
    for p in r.planning.iter().filter(|p| p.build == build) {
        row(
            &format!(
                "planned write ≤ 1.5× a passthrough read ({}, {} key{})",
                p.store,
                p.keys,
                if p.keys > 1 { "s" } else { "" }
            ),
            format!(
                "{:.2}× ({:.3} ms vs {:.3} ms)",
                p.ratio_p50, p.write.p50_ms, p.read.p50_ms
            ),
            Some(p.ratio_p50 <= 1.5),
        );
    }

    // 4. Apply overhead ≤ 1 ms per step.
    for a in r.apply.iter().filter(|a| a.build == build) {
        row(
            &format!(
                "apply overhead ≤ 1 ms per step ({}, {} steps)",
                a.store, a.steps
            ),
            format!(
                "{:.3} ms/step beyond the upstream call ({:.3} ms/step in all)",
                a.overhead_per_step_ms, a.per_step_ms
            ),
            Some(a.overhead_per_step_ms <= 1.0),
        );
    }

    // 5–7. Scale.
    // Scale runs once, on the candidate build when there is one: main's
    // rows then show it, marked, since the code measured is the same but
    // for the listener's socket option.
    let scale = r
        .scale
        .as_ref()
        .filter(|s| s.build == build || via == "plangate");
    let mark = match scale {
        Some(s) if s.build != build => format!(" [measured on the {} build]", s.build),
        _ => String::new(),
    };
    let mut row = |target: &str, measured: String, met: Option<bool>| {
        let measured = if met.is_some() {
            format!("{measured}{mark}")
        } else {
            measured
        };
        row(target, measured, met);
    };
    match scale {
        Some(s) => {
            let first = s.points.first();
            let last = s.points.last();
            match (first, last) {
                (Some(f), Some(l)) if s.points.len() > 1 => {
                    let ratio = l.get_plan.p50_ms / f.get_plan.p50_ms;
                    row(
                        &format!(
                            "get_plan p50 at {} keys within 1.2× of {} keys",
                            l.keys, f.keys
                        ),
                        format!(
                            "{ratio:.2}× ({:.3} ms vs {:.3} ms)",
                            l.get_plan.p50_ms, f.get_plan.p50_ms
                        ),
                        Some(ratio <= 1.2),
                    );
                }
                _ => row(
                    "get_plan p50 at 10,000 keys within 1.2× of 10 keys",
                    "not measured".into(),
                    None,
                ),
            }
            row(
                "each open plan adds ≤ 4 KB of RSS",
                format!(
                    "{:.0} B per plan overall, {:.0} B marginal",
                    s.bytes_per_plan, s.bytes_per_plan_marginal
                ),
                Some(s.bytes_per_plan <= 4096.0),
            );
            row(
                "idle RSS ≤ 30 MB with one upstream",
                format!(
                    "{:.1} MB at ready, {:.1} MB after first calls",
                    s.idle_rss_kib as f64 / 1024.0,
                    s.idle_after_calls_rss_kib as f64 / 1024.0
                ),
                Some(s.idle_after_calls_rss_kib.max(s.idle_rss_kib) as f64 / 1024.0 <= 30.0),
            );
        }
        None => {
            for t in [
                "get_plan p50 at 10,000 keys within 1.2× of 10 keys",
                "each open plan adds ≤ 4 KB of RSS",
                "idle RSS ≤ 30 MB with one upstream",
            ] {
                row(t, "not measured".into(), None);
            }
        }
    }
    out
}

// === Markdown ===

fn ms(v: f64) -> String {
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

fn ratio(v: Option<f64>) -> String {
    match v {
        None => "–".into(),
        Some(v) if v.abs() < 0.1 => format!("{v:.3}×"),
        Some(v) => format!("{v:.2}×"),
    }
}

fn rps(v: f64) -> String {
    if v.is_nan() {
        "–".into()
    } else {
        format!("{v:.0}")
    }
}

fn pass_table(out: &mut String, rows: &[PassRow], clients: usize) {
    let _ = writeln!(
        out,
        "| client → | via | → upstream | p50 ms (spread) | p99 ms | calls/s | added p50 ms | p50 × direct | p99 × direct | calls/s × direct |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|");
    for r in rows.iter().filter(|r| r.clients == clients) {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} ({}–{}) | {} | {} | {} | {} | {} | {} |",
            r.client,
            r.label,
            r.upstream,
            ms(r.m.p50_ms),
            ms(r.m.p50_spread_ms[0]),
            ms(r.m.p50_spread_ms[1]),
            ms(r.m.p99_ms),
            rps(r.m.throughput_rps),
            r.added_p50_ms.map_or("–".into(), |a| format!("{a:+.3}")),
            ratio(r.ratio_p50),
            ratio(r.ratio_p99),
            ratio(r.ratio_throughput),
        );
    }
}

/// The results as Markdown (the part of docs/benchmarks.md between the
/// result markers).
pub fn markdown(r: &Report) -> String {
    let mut out = String::new();
    let m = &r.meta;
    let _ = writeln!(
        out,
        "Run {} ({}), {:.0} s, plangate at commit `{}`. Machine: {} cores ({}), {:.0} GiB, Linux {}; load average {} at the start and {} at the end — shared with other work, so absolute numbers are noisy; every comparison below was interleaved (A B A B) on the same machine at the same time.\n",
        m.started,
        if m.quick {
            "**quick**: smoke sizes, not for comparison"
        } else {
            "full"
        },
        m.duration_s,
        m.git_commit.as_deref().unwrap_or("unknown"),
        m.machine.cores,
        m.machine.cpu,
        m.machine.memory_gib,
        m.machine.kernel,
        m.machine.load_avg_start,
        m.machine.load_avg_end,
    );
    let s = &m.settings;
    let _ = writeln!(
        out,
        "Sizes: {} interleaved rounds; sequential batches of {} calls, concurrent batches of {} clients × {} calls, each after {} warm-up calls per client (plus one discarded warm-up round).\n",
        s.rounds, s.seq_calls, s.concurrent_clients, s.calls_per_client, s.warmup_calls
    );
    let _ = writeln!(out, "Durability: {}.\n", m.durability.join("; "));

    let _ = writeln!(out, "### Targets\n");
    let stalled = r
        .passthrough
        .iter()
        .find(|p| p.via == "plangate" && p.client == "http" && p.clients == 1)
        .is_some_and(|p| p.m.p50_ms > 20.0);
    if stalled {
        let _ = writeln!(
            out,
            "**Main's HTTP answers stall ~40 ms per call on a kept-alive connection** (no `TCP_NODELAY` on plangate's listener: see the discussion above). Every HTTP figure of `main` below measures that stall, and ratios of two stalled calls (planned write ÷ read) say nothing; the candidate build's rows show what plangate costs without it.\n"
        );
    }
    let _ = writeln!(out, "| build | target | measured | met |");
    let _ = writeln!(out, "|---|---|---|---|");
    for t in &r.targets {
        let met = match t.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "not measured",
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            t.build, t.target, t.measured, met
        );
    }

    let _ = writeln!(
        out,
        "\n### Passthrough: one client, sequential `echo` calls\n"
    );
    pass_table(&mut out, &r.passthrough, 1);
    let conc = r.passthrough.iter().map(|p| p.clients).max().unwrap_or(16);
    let _ = writeln!(out, "\n### Passthrough: {conc} concurrent clients\n");
    pass_table(&mut out, &r.passthrough, conc);
    let _ = writeln!(
        out,
        "\n`added` and every `× direct` compare with the direct row of the same client transport and concurrency (the upstream's own stdio or HTTP). Through HTTP, each of the {conc} clients has its own MCP session; over stdio, each starts its own process (as each agent window does).\n"
    );

    if !r.sdk.is_empty() {
        let _ = writeln!(
            out,
            "### The same through the official Python SDK (\"real agent\" figures)\n"
        );
        pass_table(&mut out, &r.sdk, 1);
        out.push('\n');
    }
    if !r.everything.is_empty() {
        let _ = writeln!(
            out,
            "### Cross-check: `server-everything` as the upstream\n"
        );
        pass_table(&mut out, &r.everything, 1);
        out.push('\n');
    }

    if !r.planning.is_empty() {
        let _ = writeln!(out, "### Planning: durable planned writes over HTTP\n");
        let _ = writeln!(
            out,
            "| build | store | concurrent keys | planned write p50 ms (spread) | p99 ms | writes/s | read p50 ms (same gateway) | write ÷ read |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
        for p in &r.planning {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} ({}–{}) | {} | {} | {} | {:.2}× |",
                p.build,
                p.store,
                p.keys,
                ms(p.write.p50_ms),
                ms(p.write.p50_spread_ms[0]),
                ms(p.write.p50_spread_ms[1]),
                ms(p.write.p99_ms),
                rps(p.write.throughput_rps),
                ms(p.read.p50_ms),
                p.ratio_p50
            );
        }
        out.push('\n');
    }

    if !r.apply.is_empty() {
        let _ = writeln!(out, "### Apply: a {}-step plan\n", r.apply[0].steps);
        let _ = writeln!(
            out,
            "| build | store | apply_plan ms (spread) | per step ms | upstream `put` ms (direct, stdio) | `put` through plangate ms (not planned) | overhead per step beyond the upstream call | beyond a passthrough write |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
        for a in &r.apply {
            let _ = writeln!(
                out,
                "| {} | {} | {} ({}–{}) | {} | {} | {} | {} | {} |",
                a.build,
                a.store,
                ms(a.apply.p50_ms),
                ms(a.apply.p50_spread_ms[0]),
                ms(a.apply.p50_spread_ms[1]),
                ms(a.per_step_ms),
                ms(a.upstream_put_ms),
                ms(a.passthrough_put_ms),
                ms(a.overhead_per_step_ms),
                ms(a.overhead_vs_passthrough_ms)
            );
        }
        out.push('\n');
    }

    if let Some(s) = &r.scale {
        let _ = writeln!(
            out,
            "### Scale: keys with open {}-step plans (SQLite; build: {})\n",
            s.steps_per_plan, s.build
        );
        let _ = writeln!(
            out,
            "| keys with open plans | get_plan p50 ms (spread) | p99 ms | gateway RSS MB |"
        );
        let _ = writeln!(out, "|---|---|---|---|");
        for p in &s.points {
            let _ = writeln!(
                out,
                "| {} | {} ({}–{}) | {} | {:.1} |",
                p.keys,
                ms(p.get_plan.p50_ms),
                ms(p.get_plan.p50_spread_ms[0]),
                ms(p.get_plan.p50_spread_ms[1]),
                ms(p.get_plan.p99_ms),
                p.rss_kib as f64 / 1024.0
            );
        }
        let _ = writeln!(
            out,
            "\nIdle RSS: {:.1} MB at ready, {:.1} MB after a first session's calls. Memory per open plan: {:.0} B (overall: (RSS at the largest point − idle after calls) ÷ plans), {:.0} B marginal (between the two largest points). Seeding: {:.0} keys/s.\n",
            s.idle_rss_kib as f64 / 1024.0,
            s.idle_after_calls_rss_kib as f64 / 1024.0,
            s.bytes_per_plan,
            s.bytes_per_plan_marginal,
            s.seed_keys_per_s
        );
        let _ = writeln!(out, "| start-up to ready | p50 ms (spread) |");
        let _ = writeln!(out, "|---|---|");
        for (what, m) in [
            (
                "HTTP, fresh data dir (spawn → `/readyz` 200)",
                &s.startup_empty,
            ),
            (
                "HTTP, store holding the largest point's plans",
                &s.startup_full,
            ),
            (
                "stdio, fresh data dir (spawn → `initialize` answered)",
                &s.startup_stdio,
            ),
        ] {
            let _ = writeln!(
                out,
                "| {what} | {} ({}–{}) |",
                ms(m.p50_ms),
                ms(m.p50_spread_ms[0]),
                ms(m.p50_spread_ms[1]),
            );
        }
        out.push('\n');
    }

    let _ = writeln!(out, "### Peers\n");
    let _ = writeln!(out, "| peer | version | ran | note |");
    let _ = writeln!(out, "|---|---|---|---|");
    for p in &m.peers {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            p.name,
            p.version,
            if p.available { "yes" } else { "**no**" },
            p.note
        );
    }
    if !r.not_measured.is_empty() {
        let _ = writeln!(out, "\nNot measured in this run:\n");
        for n in &r.not_measured {
            let _ = writeln!(out, "* {}: {}", n.what, n.why);
        }
    }
    if !m.notes.is_empty() {
        let _ = writeln!(out, "\nNotes:\n");
        for n in &m.notes {
            let _ = writeln!(out, "* {n}");
        }
    }
    out
}

// === SVG ===

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn color(via: &str) -> &'static str {
    match via {
        "direct" => "#8c8c8c",
        "plangate" => "#2b6cb0",
        "candidate" => "#7fb2e5",
        _ => "#dd8a2e",
    }
}

struct Bar {
    label: String,
    value: f64,
    whisker: Option<f64>,
    color: &'static str,
    text: String,
}

/// One panel of horizontal bars on a log scale (values span several
/// orders of magnitude: a stalled call next to a direct one), gridlines
/// at powers of ten; returns the height used.
fn panel(
    out: &mut String,
    x0: f64,
    y0: f64,
    width: f64,
    title: &str,
    unit: &str,
    bars: &[Bar],
) -> f64 {
    let label_w = 300.0;
    let row_h = 20.0;
    let plot_w = width - label_w - 150.0;
    let values = bars
        .iter()
        .flat_map(|b| [Some(b.value), b.whisker])
        .flatten()
        .filter(|v| v.is_finite() && *v > 0.0);
    let (mut lo, mut hi) = (f64::INFINITY, 0.0_f64);
    for v in values {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        (lo, hi) = (1.0, 10.0);
    }
    let lo = 10f64.powf(lo.log10().floor());
    let hi = 10f64.powf(hi.log10().ceil()).max(lo * 10.0);
    let x_of = |v: f64| {
        if v.is_finite() && v > 0.0 {
            (v.max(lo).log10() - lo.log10()) / (hi.log10() - lo.log10()) * plot_w
        } else {
            0.0
        }
    };
    let _ = writeln!(
        out,
        r#"<text x="{x0}" y="{}" font-weight="bold" font-size="13">{}</text>"#,
        y0 + 14.0,
        esc(title)
    );
    let top = y0 + 24.0;
    let bottom = top + row_h * bars.len() as f64;
    let mut tick = lo;
    while tick <= hi * 1.0001 {
        let x = x0 + label_w + x_of(tick);
        let text = if tick >= 1.0 {
            format!("{tick:.0}")
        } else {
            format!("{tick}")
        };
        let _ = writeln!(
            out,
            r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{bottom}" stroke="#ddd" stroke-width="1"/><text x="{x:.1}" y="{}" font-size="9" fill="#666" text-anchor="middle">{text}{unit}</text>"##,
            bottom + 10.0
        );
        tick *= 10.0;
    }
    let mut y = top;
    for b in bars {
        let w = x_of(b.value);
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" font-size="11" text-anchor="end">{}</text>"#,
            x0 + label_w - 6.0,
            y + 13.0,
            esc(&b.label)
        );
        let _ = writeln!(
            out,
            r#"<rect x="{}" y="{}" width="{w:.1}" height="{}" fill="{}"/>"#,
            x0 + label_w,
            y + 3.0,
            row_h - 6.0,
            b.color
        );
        let mut text_x = x0 + label_w + w + 4.0;
        if let Some(wv) = b.whisker.filter(|v| v.is_finite() && *v > 0.0) {
            let wx = x0 + label_w + x_of(wv);
            let cy = y + row_h / 2.0;
            let _ = writeln!(
                out,
                r##"<line x1="{:.1}" y1="{cy}" x2="{wx:.1}" y2="{cy}" stroke="#333" stroke-width="1"/><line x1="{wx:.1}" y1="{}" x2="{wx:.1}" y2="{}" stroke="#333" stroke-width="1"/>"##,
                x0 + label_w + w,
                cy - 4.0,
                cy + 4.0
            );
            text_x = text_x.max(wx + 4.0);
        }
        let _ = writeln!(
            out,
            r##"<text x="{text_x:.1}" y="{}" font-size="10" fill="#222">{}</text>"##,
            y + 13.0,
            esc(&b.text)
        );
        y += row_h;
    }
    bottom + 14.0 - y0
}

/// `main`, or "candidate" for the other build (labels stay short).
fn short(build: &str) -> &str {
    if build == "main" { "main" } else { "candidate" }
}

/// A bar chart: passthrough p50 (whisker to p99) per configuration, one
/// client and concurrent; throughput with concurrent clients.
pub fn svg(r: &Report) -> String {
    let width = 1000.0;
    let mut body = String::new();
    let mut y = 40.0;
    let conc = r.passthrough.iter().map(|p| p.clients).max().unwrap_or(16);
    for (clients, title) in [
        (
            1,
            "Passthrough latency, 1 client: p50 bar, whisker to p99 (log scale)".to_owned(),
        ),
        (
            conc,
            format!(
                "Passthrough latency, {conc} concurrent clients: p50 bar, whisker to p99 (log scale)"
            ),
        ),
    ] {
        let bars: Vec<Bar> = r
            .passthrough
            .iter()
            .filter(|p| p.clients == clients)
            .map(|p| Bar {
                label: format!("{} → {} → {}", p.client, p.label, p.upstream),
                value: p.m.p50_ms,
                whisker: Some(p.m.p99_ms),
                color: color(&p.via),
                text: format!(
                    "{} ms{}",
                    ms(p.m.p50_ms),
                    p.ratio_p50.map_or(String::new(), |r| format!(" ({r:.2}×)"))
                ),
            })
            .collect();
        if !bars.is_empty() {
            y += panel(&mut body, 10.0, y, width - 20.0, &title, " ms", &bars) + 16.0;
        }
    }
    let bars: Vec<Bar> = r
        .passthrough
        .iter()
        .filter(|p| p.clients == conc)
        .map(|p| Bar {
            label: format!("{} → {} → {}", p.client, p.label, p.upstream),
            value: p.m.throughput_rps,
            whisker: None,
            color: color(&p.via),
            text: format!("{}/s", rps(p.m.throughput_rps)),
        })
        .collect();
    if !bars.is_empty() {
        y += panel(
            &mut body,
            10.0,
            y,
            width - 20.0,
            &format!("Throughput, {conc} concurrent clients (calls/s, log scale)"),
            "/s",
            &bars,
        ) + 16.0;
    }
    let mut bars = Vec::new();
    for p in &r.planning {
        bars.push(Bar {
            label: format!(
                "write · {} · {} key{} · {}",
                p.store,
                p.keys,
                if p.keys > 1 { "s" } else { "" },
                short(&p.build)
            ),
            value: p.write.p50_ms,
            whisker: Some(p.write.p99_ms),
            color: if p.build == "main" {
                "#2b6cb0"
            } else {
                "#7fb2e5"
            },
            text: format!("{} ms ({:.2}× a read)", ms(p.write.p50_ms), p.ratio_p50),
        });
    }
    if let Some(s) = &r.scale {
        for p in &s.points {
            bars.push(Bar {
                label: format!(
                    "get_plan · {} keys with plans · {}",
                    p.keys,
                    short(&s.build)
                ),
                value: p.get_plan.p50_ms,
                whisker: Some(p.get_plan.p99_ms),
                color: "#4a9a5a",
                text: format!("{} ms", ms(p.get_plan.p50_ms)),
            });
        }
    }
    if !bars.is_empty() {
        y += panel(
            &mut body,
            10.0,
            y,
            width - 20.0,
            "Planned writes and get_plan over HTTP (p50 bar, whisker to p99; log scale)",
            " ms",
            &bars,
        ) + 16.0;
    }
    let height = y + 24.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height:.0}" viewBox="0 0 {width} {height:.0}" font-family="Helvetica, Arial, sans-serif">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="10" y="22" font-size="15" font-weight="bold">plangate benchmark — {}{}</text>"#,
        esc(&r.meta.started),
        if r.meta.quick { " (quick run)" } else { "" }
    );
    let _ = writeln!(
        out,
        r##"<g font-size="11"><rect x="520" y="12" width="10" height="10" fill="#8c8c8c"/><text x="534" y="21">direct</text><rect x="580" y="12" width="10" height="10" fill="#2b6cb0"/><text x="594" y="21">plangate (main)</text><rect x="690" y="12" width="10" height="10" fill="#7fb2e5"/><text x="704" y="21">plangate candidate</text><rect x="820" y="12" width="10" height="10" fill="#dd8a2e"/><text x="834" y="21">peer bridge</text></g>"##
    );
    out.push_str(&body);
    let _ = writeln!(
        out,
        r##"<text x="10" y="{:.0}" font-size="10" fill="#555">{} cores, shared machine; interleaved rounds; medians of round p50s. Full data: docs/benchmarks.json</text>"##,
        height - 8.0,
        r.meta.machine.cores
    );
    out.push_str("</svg>\n");
    out
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
            ..Report::default()
        };
        let t = targets(&report);
        let get = |prefix: &str| {
            t.iter()
                .find(|r| r.target.starts_with(prefix))
                .unwrap_or_else(|| panic!("{prefix}: {t:?}"))
        };
        assert_eq!(
            get("passthrough p50 via plangate ≤ 1.10× direct (http, 1 client)").met,
            Some(true)
        );
        assert_eq!(
            get("passthrough p50 via plangate ≤ 1.10× direct (stdio, 1 client)").met,
            None
        );
        let added =
            get("added latency ≥ 3× smaller than the fastest peer bridge's (http, 1 client)");
        assert_eq!(added.met, Some(true), "{added:?}");
        assert!(added.measured.contains("10.0× smaller"), "{added:?}");
        assert_eq!(get("planned write ≤ 1.5×").met, Some(false));
        assert_eq!(get("idle RSS").met, None);

        let full = Report {
            targets: t,
            ..report
        };
        let md = markdown(&full);
        assert!(md.contains("| main | planned write ≤ 1.5× a passthrough read (sqlite, 1 key) | 2.00× (1.000 ms vs 0.500 ms) | **no** |"), "{md}");
        let chart = svg(&full);
        assert!(chart.starts_with("<svg") && chart.trim_end().ends_with("</svg>"));
        assert!(chart.contains("http → plangate → stdio"));
    }
}
