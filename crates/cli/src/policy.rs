//! `plangate policy test`: what the operator's rules (`[[rules]]`) make of
//! a call, without making it — rendered from the gateway's one operation
//! ([`plangate_gateway::policy_test::test`]), asked of a gateway built here
//! from the config file (its upstreams connected to list their tools, none
//! called), or with `--server` of the running gateway, whose rules are the
//! ones in force.

use std::sync::Arc;

use anyhow::Result;
use plangate_config::Config;
use plangate_core::{Code, Effect};
use plangate_gateway::policy_test::{Question, Verdict};
use plangate_store::{KeyMaterial, Store};
use serde_json::Value;

use crate::commands::UsageError;
use crate::output::outln;
use crate::plans::resolve_key;

/// What `policy test` is asked.
pub struct Test<'a> {
    /// The key (name or id).
    pub key: &'a str,
    /// The tool as the agent calls it.
    pub tool: &'a str,
    /// The arguments, as JSON text.
    pub arguments: &'a str,
    /// The effect class, when given.
    pub effect: Option<&'a str>,
}

impl Test<'_> {
    /// The question as the gateway's operation takes it.
    fn question(&self) -> Result<Question> {
        let arguments: Value = serde_json::from_str(self.arguments).map_err(|e| {
            UsageError(format!(
                "--arguments is not JSON ({e}) [invalid_arguments]; give a JSON object, e.g. '{{\"path\": \"/tmp/a.txt\"}}'"
            ))
        })?;
        if !arguments.is_object() {
            return Err(UsageError(
                "--arguments must be a JSON object, as the tool takes them [invalid_arguments]"
                    .to_owned(),
            )
            .into());
        }
        Ok(Question {
            key: self.key.to_owned(),
            tool: self.tool.to_owned(),
            arguments,
            effect: self.effect.and_then(effect_named),
        })
    }
}

fn effect_named(word: &str) -> Option<Effect> {
    Effect::ALL.into_iter().find(|e| e.as_str() == word)
}

/// `plangate policy test --key K --tool T [--arguments JSON] [--effect E]`
/// at the data dir: a gateway is built from `config` (its upstreams
/// connected, so tools are classed as dispatch classes them) and asked.
pub async fn test(
    config: Config,
    store: Arc<dyn Store>,
    material: KeyMaterial,
    t: Test<'_>,
    as_json: bool,
) -> Result<()> {
    let question = t.question()?;
    let key = resolve_key(&*store, t.key).await?;
    let name = crate::commands::describe_source(&config.source);
    let gw = plangate_gateway::Gateway::build(config, store, material).await;
    let verdict = plangate_gateway::policy_test::test(&gw, &key, &question, (name, false)).await;
    gw.shutdown().await;
    let verdict =
        verdict.map_err(|r| UsageError(format!("{} [{}]", r.message, r.code.as_str())))?;
    print(&verdict, as_json)
}

/// `plangate policy test --server URL …`: the running gateway is asked,
/// with its rules and its connected upstreams.
pub async fn test_remote(url: &str, t: Test<'_>, as_json: bool) -> Result<()> {
    let question = t.question()?;
    let remote = crate::remote::Remote::new(url)?;
    let verdict: Verdict = remote
        .post(
            "/console/api/policy/test",
            serde_json::to_value(&question)?,
            &crate::args::FactorArgs::default(),
        )
        .await?;
    print(&verdict, as_json)
}

fn print(verdict: &Verdict, as_json: bool) -> Result<()> {
    if as_json {
        crate::output::json(verdict)?;
        return Ok(());
    }
    print_text(verdict);
    Ok(())
}

/// `policy test` as text: the config, the call, its paths, the rule, the
/// decision.
fn print_text(v: &Verdict) {
    if v.running {
        outln!("rules of the running gateway (its config: {})", v.config);
    } else {
        outln!(
            "rules of {} (as the file says now; a running gateway uses them once it reloads — `--server URL` asks it)",
            v.config
        );
    }
    outln!(
        "key {} (scope {}), mode {}; {} is {}'s {} ({})",
        v.key,
        v.scope,
        v.mode,
        v.exposed,
        v.upstream,
        v.tool,
        v.effect
    );
    for p in &v.paths {
        match (&p.placed, &p.unplaced) {
            (Some(at), _) if *at == p.sent => outln!("path {}", p.sent),
            (Some(at), _) => outln!("path {} → {at}", p.sent),
            (None, why) => outln!(
                "path {}: {}",
                p.sent,
                why.as_deref().unwrap_or("not placed")
            ),
        }
    }
    match &v.rule {
        Some(m) => {
            outln!("rule {:?} decides: {}", m.name, m.outcome);
            if let Some(e) = &m.error {
                outln!(
                    "  its condition could not be evaluated ({e}); a refuse rule refuses when in doubt"
                );
            }
        }
        None => outln!("no rule matches: the mode and the key's scope decide"),
    }
    let why = match (v.decision.as_str(), v.code) {
        ("run", _) => "sent to the upstream at once",
        ("plan", _) => "planned: a step of the key's plan, nothing written",
        ("ask", _) => "the person is asked first",
        (_, Some(Code::ForbiddenByRule)) => "refused by the rule (forbidden_by_rule)",
        (_, Some(Code::Forbidden)) => "refused: the key's scope allows reads only (forbidden)",
        (_, Some(Code::ForbiddenByMode)) => "refused by the mode (forbidden_by_mode)",
        _ => "refused",
    };
    outln!("decision: {} — {why}", v.decision);
    if let Some(m) = v.rule.as_ref().and_then(|m| m.message.as_deref()) {
        outln!("the agent would be told: {m}");
    }
}
