//! What operators' rules cost (`[[rules]]`): 100 rules evaluated, in
//! process, for a passthrough call none of them matches — the work dispatch
//! adds to every call when rules are configured. Two kinds: rules that name
//! their tool (`tool == '…' && …`), which the policy passes over without
//! evaluating, and rules that do not, each of which is evaluated — once
//! with paths taken as written (an upstream elsewhere) and once with
//! symlinks resolved on this machine, as for a local upstream like
//! server-filesystem. The passthrough phase also measures the whole call through plangate with
//! the first kind configured, beside the same call without rules.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Result, anyhow};
use plangate_core::Effect;
use plangate_gateway::policy::LocalFs;
use plangate_policy::{Call, Lexical, PathResolver, Policy, RuleSpec};
use serde_json::json;

use crate::ctx::Ctx;
use crate::report::RulesRow;

/// How many rules each case has.
pub const RULES: usize = 100;

/// `n` rules naming their tool, none matching the bench's `echo`: what
/// the passthrough phase configures too (as TOML).
pub fn named_rules(n: usize) -> Vec<RuleSpec> {
    (0..n)
        .map(|i| RuleSpec {
            name: format!("rule-{i}"),
            when: format!(
                "tool == 'tool_{i}' && has(arguments.path) && glob(arguments.path, '/srv/{i}/**')"
            ),
            outcome: "run".into(),
            ..RuleSpec::default()
        })
        .collect()
}

/// `rules` as `[[rules]]` tables.
pub fn toml(rules: &[RuleSpec]) -> String {
    let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
    rules
        .iter()
        .map(|r| {
            format!(
                "\n[[rules]]\nname = {}\nwhen = {}\noutcome = {}\n",
                q(&r.name),
                q(&r.when),
                q(&r.outcome)
            )
        })
        .collect()
}

/// `n` rules that do not name a tool: each is evaluated for every call.
fn unnamed_rules(n: usize) -> Vec<RuleSpec> {
    (0..n)
        .map(|i| RuleSpec {
            name: format!("rule-{i}"),
            when: format!("has(arguments.path) && glob(arguments.path, '/srv/{i}/**')"),
            outcome: "run".into(),
            ..RuleSpec::default()
        })
        .collect()
}

fn measure(
    policy: &Policy,
    resolver: Arc<dyn PathResolver>,
    path: &str,
    samples: usize,
) -> (f64, f64) {
    let args = json!({"message": "hello", "path": path});
    let paths = [path.to_owned()];
    let call = Call {
        key_name: "bench",
        scope: "write",
        upstream: "bench",
        tool: "echo",
        exposed: "echo",
        effect: Effect::Read,
        mode: "default",
        arguments: &args,
        paths: &paths,
        undeclared: &[],
    };
    for _ in 0..samples / 10 {
        std::hint::black_box(policy.decide(&call, resolver.clone()));
    }
    let mut ns: Vec<u128> = (0..samples)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(policy.decide(&call, resolver.clone()));
            t.elapsed().as_nanos()
        })
        .collect();
    ns.sort_unstable();
    let at = |q: usize| ns[(ns.len() * q / 100).min(ns.len() - 1)] as f64 / 1000.0;
    (at(50), at(99))
}

/// The rules phase: both kinds, `RULES` each.
pub fn run(ctx: &mut Ctx) -> Result<()> {
    let samples = if ctx.report.meta.quick { 2_000 } else { 20_000 };
    let modes = vec!["default".to_owned(), "plan".to_owned()];
    // A file that exists, under a directory that does, as an agent's
    // write to a local upstream names one.
    let dir = std::env::temp_dir().join(format!("plangate-bench-rules-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("notes"))?;
    std::fs::write(dir.join("notes/a.txt"), "a")?;
    let local = dir.join("notes/a.txt").to_string_lossy().into_owned();
    let lexical: Arc<dyn PathResolver> = Arc::new(Lexical::default());
    let on_this_machine: Arc<dyn PathResolver> = Arc::new(LocalFs(Default::default()));
    let cases = [
        (
            "naming their tool (passed over)",
            named_rules(RULES),
            lexical.clone(),
        ),
        (
            "not naming a tool (each evaluated)",
            unnamed_rules(RULES),
            lexical,
        ),
        (
            "not naming a tool, symlinks resolved (local upstream)",
            unnamed_rules(RULES),
            on_this_machine,
        ),
    ];
    let measured: Result<()> = cases.into_iter().try_for_each(|(case, rules, resolver)| {
        let policy = Policy::compile(&rules, &modes)
            .map_err(|e| anyhow!("the bench's rules do not compile: {e:?}"))?;
        let (p50_us, p99_us) = measure(&policy, resolver, &local, samples);
        eprintln!("bench: rules: {RULES} {case}: p50 {p50_us:.2} µs, p99 {p99_us:.2} µs");
        ctx.report.rules.push(RulesRow {
            case: case.to_owned(),
            rules: RULES,
            samples,
            p50_us,
            p99_us,
        });
        Ok(())
    });
    let _ = std::fs::remove_dir_all(&dir);
    measured
}
