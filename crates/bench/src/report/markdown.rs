//! The report as Markdown: the results section of docs/benchmarks.md.

use std::fmt::Write as _;

use super::format::{ms, ratio, rps};
use super::{PassRow, Report, Scale};
use crate::stats::Measured;

fn pass_table(out: &mut String, rows: &[PassRow], clients: usize) {
    let rows: Vec<&PassRow> = rows.iter().filter(|r| r.clients == clients).collect();
    // The many-clients table also says what the sessions cost each server.
    let rss = rows.iter().any(|r| r.peak_rss_kib.is_some());
    let _ = writeln!(
        out,
        "| client → | via | → upstream | p50 ms (spread) | p99 ms | calls/s | added p50 ms | p50 × direct | p99 × direct | calls/s × direct |{}",
        if rss { " peak RSS MB |" } else { "" }
    );
    let _ = writeln!(
        out,
        "|---|---|---|---|---|---|---|---|---|---|{}",
        if rss { "---|" } else { "" }
    );
    for r in rows {
        let _ = write!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.client,
            r.label,
            r.upstream,
            p50_spread(&r.m),
            ms(r.m.p99_ms),
            rps(r.m.throughput_rps),
            r.added_p50_ms.map_or("–".into(), |a| format!("{a:+.3}")),
            ratio(r.ratio_p50),
            ratio(r.ratio_p99),
            ratio(r.ratio_throughput),
        );
        if rss {
            let _ = write!(
                out,
                " {} |",
                r.peak_rss_kib
                    .map_or("–".into(), |k| format!("{:.1}", k as f64 / 1024.0))
            );
        }
        let _ = writeln!(out);
    }
}

/// A median with its spread over rounds, `p50 (smallest–largest)`: how
/// every timed cell of the tables reads.
fn p50_spread(m: &Measured) -> String {
    format!(
        "{} ({}–{})",
        ms(m.p50_ms),
        ms(m.p50_spread_ms[0]),
        ms(m.p50_spread_ms[1])
    )
}

/// The results as Markdown (the part of docs/benchmarks.md between the
/// result markers).
pub fn markdown(r: &Report) -> String {
    let mut out = String::new();
    run_header(&mut out, r);
    targets_section(&mut out, r);
    passthrough_sections(&mut out, r);
    planning_section(&mut out, r);
    apply_section(&mut out, r);
    rules_section(&mut out, r);
    if let Some(s) = &r.scale {
        scale_section(&mut out, s);
    }
    peers_and_notes(&mut out, r);
    out
}

/// When, where and with what sizes and durability the run was made.
fn run_header(out: &mut String, r: &Report) {
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
}

/// The targets table, after a warning when main's HTTP answers stalled.
fn targets_section(out: &mut String, r: &Report) {
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
}

/// The passthrough tables (one client, then each concurrency), then the
/// same through the Python SDK and against `server-everything`.
fn passthrough_sections(out: &mut String, r: &Report) {
    let s = &r.meta.settings;
    let _ = writeln!(
        out,
        "\n### Passthrough: one client, sequential `echo` calls\n"
    );
    pass_table(out, &r.passthrough, 1);
    let mut counts: Vec<usize> = r
        .passthrough
        .iter()
        .map(|p| p.clients)
        .filter(|c| *c > 1)
        .collect();
    counts.sort_unstable();
    counts.dedup();
    for conc in &counts {
        let _ = writeln!(out, "\n### Passthrough: {conc} concurrent clients\n");
        pass_table(out, &r.passthrough, *conc);
    }
    let many = if s.many_clients > 0 && counts.contains(&s.many_clients) {
        format!(
            " With {} HTTP clients each makes {} timed calls; a bridge missing from that table failed or stalled with that many (see \"Not measured\"); its peak RSS is the serving process's own (not its upstream's), sampled every 20 ms while those clients called it, the most over the rounds (for the direct row: the timing upstream's).",
            s.many_clients, s.many_calls_per_client
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "\n`added` and every `× direct` compare with the direct row of the same client transport and concurrency (the upstream's own stdio or HTTP). Through HTTP, each client has its own MCP session; over stdio, each starts its own process (as each agent window does).{many}\n"
    );

    if !r.sdk.is_empty() {
        let _ = writeln!(
            out,
            "### The same through the official Python SDK (\"real agent\" figures)\n"
        );
        pass_table(out, &r.sdk, 1);
        out.push('\n');
    }
    if !r.everything.is_empty() {
        let _ = writeln!(
            out,
            "### Cross-check: `server-everything` as the upstream\n"
        );
        pass_table(out, &r.everything, 1);
        out.push('\n');
    }
}

/// Durable planned writes beside reads on the same gateway.
fn planning_section(out: &mut String, r: &Report) {
    if r.planning.is_empty() {
        return;
    }
    let _ = writeln!(out, "### Planning: durable planned writes over HTTP\n");
    let _ = writeln!(
        out,
        "| build | store | concurrent keys | planned write p50 ms (spread) | p99 ms | writes/s | read p50 ms (same gateway) | write ÷ read |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
    for p in &r.planning {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {:.2}× |",
            p.build,
            p.store,
            p.keys,
            p50_spread(&p.write),
            ms(p.write.p99_ms),
            rps(p.write.throughput_rps),
            ms(p.read.p50_ms),
            p.ratio_p50
        );
    }
    out.push('\n');
}

/// Applying a plan, and what each step costs beyond the upstream call.
fn apply_section(out: &mut String, r: &Report) {
    if r.apply.is_empty() {
        return;
    }
    let _ = writeln!(out, "### Apply: a {}-step plan\n", r.apply[0].steps);
    let _ = writeln!(
        out,
        "| build | store | apply_plan ms (spread) | per step ms | upstream `put` ms (direct, stdio) | `put` through plangate ms (not planned) | overhead per step beyond the upstream call | beyond a passthrough write |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
    for a in &r.apply {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            a.build,
            a.store,
            p50_spread(&a.apply),
            ms(a.per_step_ms),
            ms(a.upstream_put_ms),
            ms(a.passthrough_put_ms),
            ms(a.overhead_per_step_ms),
            ms(a.overhead_vs_passthrough_ms)
        );
    }
    out.push('\n');
}

/// Evaluating operators' rules for a call none matches.
fn rules_section(out: &mut String, r: &Report) {
    if r.rules.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "### Rules (`[[rules]]`): evaluating them for a call none matches (in process)\n"
    );
    let _ = writeln!(out, "| rules | kind | p50 µs | p99 µs | calls |");
    let _ = writeln!(out, "|---|---|---|---|---|");
    for row in &r.rules {
        let _ = writeln!(
            out,
            "| {} | {} | {:.2} | {:.2} | {} |",
            row.rules, row.case, row.p50_us, row.p99_us, row.samples
        );
    }
    let _ = writeln!(
        out,
        "\nA rule that names its tool (`tool == '…' && …`) is passed over for other tools without being evaluated; one that does not is evaluated for every call. The passthrough rows \"plangate, 100 rules\" are the whole call through a gateway with 100 rules of the first kind.\n"
    );
}

/// `get_plan` and memory with many keys holding open plans, then start-up.
fn scale_section(out: &mut String, s: &Scale) {
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
            "| {} | {} | {} | {:.1} |",
            p.keys,
            p50_spread(&p.get_plan),
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
        let _ = writeln!(out, "| {what} | {} |", p50_spread(m));
    }
    out.push('\n');
}

/// The peers asked for, what was not measured, and the run's notes.
fn peers_and_notes(out: &mut String, r: &Report) {
    let m = &r.meta;
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(via: &str, clients: usize, peak_rss_kib: Option<u64>) -> PassRow {
        PassRow {
            id: format!("{via}-c{clients}"),
            label: via.into(),
            client: "http".into(),
            upstream: "stdio".into(),
            via: via.into(),
            clients,
            peak_rss_kib,
            ..PassRow::default()
        }
    }

    #[test]
    fn the_many_clients_table_says_each_servers_peak_rss_and_the_others_do_not() {
        let rows = [
            row("plangate", 16, None),
            row("plangate", 256, Some(40 * 1024 + 512)),
            row("peer", 256, None),
        ];
        let mut many = String::new();
        pass_table(&mut many, &rows, 256);
        let lines: Vec<&str> = many.lines().collect();
        assert!(lines[0].ends_with("| peak RSS MB |"), "{many}");
        assert!(lines[1].ends_with("|---|---|"), "{many}");
        assert!(lines[2].ends_with("| 40.5 |"), "{many}");
        // A bridge whose process was not found says so, not zero.
        assert!(lines[3].ends_with("| – |"), "{many}");
        let mut few = String::new();
        pass_table(&mut few, &rows, 16);
        assert!(!few.contains("RSS"), "{few}");
        assert_eq!(few.lines().count(), 3);
    }
}
