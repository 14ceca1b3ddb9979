//! `plangate policy test`: what the operator's rules (`[[rules]]`) make of
//! a call, without making it — the same evaluation and the same decision
//! function as dispatch ([`plangate_policy::Policy::decide`],
//! [`plangate_policy::decision`]), with the key's mode in force now and
//! the tool's effect class as the gateway classes it: from the upstream's
//! live tool list (its tools are listed, none is called), else its pinned
//! definition, else `--effect`.

use std::sync::Arc;

use anyhow::Result;
use plangate_config::Config;
use plangate_core::{Code, Decision, Effect, TOOLS_LOG, ToolPins};
use plangate_gateway::key_log::KeyLog;
use plangate_gateway::policy::{CallPaths, PathFacts, ToolNames, Who, call_paths, judge};
use plangate_gateway::tool_pins::effect_of;
use plangate_store::{ApiKey, KeyMaterial, LogKey, Store};
use serde_json::{Value, json};

use crate::commands::UsageError;
use crate::output::outln;
use crate::plans::resolve_key;

/// The argument that asks for one write to be planned (as dispatch reads
/// it: taken out before the rules see the arguments).
const PLAN_FLAG: &str = "_plangate_plan";

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

/// The upstream and tool `exposed` names, and its effect class: from the
/// pinned definitions (`UPSTREAM__TOOL`, or a tool name one upstream has).
#[allow(clippy::type_complexity)]
fn find_tool(
    config: &Config,
    pins: &ToolPins,
    exposed: &str,
    effect: Option<Effect>,
) -> Result<(
    String,
    String,
    Effect,
    Option<serde_json::Map<String, Value>>,
)> {
    let mut found: Vec<(String, String, Option<Value>)> = Vec::new();
    for (server, tools) in &pins.tools {
        for (tool, pin) in tools {
            let namespaced = format!("{server}__{tool}");
            if tool == exposed || namespaced == exposed {
                let definition = pin.accepted.as_ref().map(|a| a.definition.value());
                found.push((server.clone(), tool.clone(), definition));
            }
        }
    }
    if found.is_empty()
        && let Some((server, tool)) = exposed.split_once("__")
        && config.upstreams.contains_key(server)
    {
        found.push((server.to_owned(), tool.to_owned(), None));
    }
    if found.is_empty() && config.upstreams.len() == 1 {
        let server = config.upstreams.keys().next().cloned().unwrap_or_default();
        found.push((server, exposed.to_owned(), None));
    }
    match found.as_slice() {
        [(server, tool, definition)] => {
            let effect = match (effect, definition) {
                (Some(e), _) => e,
                (None, Some(d)) => effect_of(config, server, tool, d),
                (None, None) => match config.tool_settings(server, tool).and_then(|o| o.effect) {
                    Some(e) => e,
                    None => {
                        return Err(UsageError(format!(
                            "{server} is not reachable and no definition of {exposed} is pinned, so its effect class is not known [invalid_arguments]: check the upstream (`plangate config check`), or give --effect read|write|destructive"
                        ))
                        .into());
                    }
                },
            };
            let schema = definition
                .as_ref()
                .and_then(|d| d.get("inputSchema"))
                .and_then(Value::as_object)
                .cloned();
            Ok((server.clone(), tool.clone(), effect, schema))
        }
        [] => Err(UsageError(format!(
            "no upstream offers a tool called {exposed} [invalid_arguments]: `plangate tools list` shows the pinned ones"
        ))
        .into()),
        several => Err(UsageError(format!(
            "{exposed} is a tool of several upstreams ({}) [invalid_arguments]: name it as UPSTREAM__{exposed}",
            several
                .iter()
                .map(|(s, _, _)| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .into()),
    }
}

fn effect_named(word: &str) -> Option<Effect> {
    match word {
        "read" => Some(Effect::Read),
        "write" => Some(Effect::Write),
        "destructive" => Some(Effect::Destructive),
        _ => None,
    }
}

/// What `policy test` knows of the tool called: its names, effect class,
/// input schema (when known) and path facts.
struct Found {
    server: String,
    tool: String,
    effect: Effect,
    schema: Option<serde_json::Map<String, Value>>,
}

/// `exposed` in a gateway's live catalog — the upstreams are connected and
/// list their tools, exactly as dispatch would see them — with the call's
/// paths placed as dispatch places them (which may ask the upstream's read
/// that lists the directories relative paths resolve against; nothing
/// else is called). `None` when no connected upstream offers it.
async fn live_tool(
    config: &Config,
    store: Arc<dyn Store>,
    material: KeyMaterial,
    exposed: &str,
    arguments: &Value,
) -> Option<(Found, CallPaths)> {
    let gw = plangate_gateway::Gateway::build(config.clone(), store, material).await;
    let found = match gw.catalog().tool(exposed) {
        Some(t) => {
            let paths = call_paths(Some(&gw), config, &t.upstream, &t.paths, arguments).await;
            Some((
                Found {
                    server: t.upstream.clone(),
                    tool: t.original.clone(),
                    effect: t.effect,
                    schema: Some((*t.tool.input_schema).clone()),
                },
                paths,
            ))
        }
        None => None,
    };
    gw.shutdown().await;
    found
}

/// `plangate policy test --key K --tool T [--arguments JSON] [--effect E]`.
pub async fn test(
    config: Config,
    store: Arc<dyn Store>,
    material: KeyMaterial,
    t: Test<'_>,
    as_json: bool,
) -> Result<()> {
    let config = &config;
    let (arguments, explicit) = call_arguments(t.arguments)?;
    let key = resolve_key(&*store, t.key).await?;
    let state = KeyLog::new(store.clone(), material.log_key())
        .state(&key.id)
        .await?;
    let in_force = config.modes.in_force(&state);
    let mode = in_force.spec;
    let given = t.effect.and_then(effect_named);
    let log_key = material.log_key();
    let (found, paths) = match live_tool(config, store.clone(), material, t.tool, &arguments).await
    {
        Some(live) => live,
        None => pinned_tool(config, store, log_key, t.tool, given, &arguments).await?,
    };
    let effect = given.unwrap_or(found.effect);
    // Arguments the tool does not take are refused before any rule, as
    // dispatch refuses them.
    let undeclared = found
        .schema
        .as_ref()
        .map(|schema| plangate_core::undeclared(schema, &arguments))
        .unwrap_or_default();
    if !undeclared.refused.is_empty() {
        return Err(UsageError(format!(
            "{} does not take {}: its input schema does not declare it, so dispatch refuses the call before any rule [invalid_arguments]",
            t.tool,
            undeclared.refused.join(", ")
        ))
        .into());
    }
    let policy = plangate_gateway::policy::compile(config);
    let names = ToolNames {
        upstream: &found.server,
        tool: &found.tool,
        exposed: t.tool,
    };
    let who = Who {
        name: &key.name,
        scope: key.scope.as_str(),
    };
    let matched = judge(
        &policy,
        names,
        effect,
        who,
        &mode.name,
        &arguments,
        &undeclared.allowed,
        &paths,
    );
    // A read with no rule runs for everyone, before any mode is read.
    let decision = match (&matched, effect) {
        (None, Effect::Read) => Decision::Run,
        _ => plangate_policy::decision(
            matched.as_ref().map(|m| m.outcome),
            effect,
            key.scope,
            &mode,
            explicit,
        ),
    };
    let verdict = Verdict {
        config: crate::commands::describe_source(&config.source),
        key: &key,
        mode: &mode.name,
        found: &found,
        exposed: t.tool,
        effect,
        explicit,
        placed: placed(&paths),
        matched: matched.as_ref(),
        decision,
    };
    if as_json {
        return verdict.print_json();
    }
    verdict.print_text();
    Ok(())
}

/// `--arguments` as the tool takes them (a JSON object), without the flag
/// that asks for the write to be planned, and whether that flag was set.
fn call_arguments(text: &str) -> Result<(Value, bool)> {
    let mut arguments: Value = serde_json::from_str(text).map_err(|e| {
        UsageError(format!(
            "--arguments is not JSON ({e}) [invalid_arguments]; give a JSON object, e.g. '{{\"path\": \"/tmp/a.txt\"}}'"
        ))
    })?;
    let Some(object) = arguments.as_object_mut() else {
        return Err(UsageError(
            "--arguments must be a JSON object, as the tool takes them [invalid_arguments]"
                .to_owned(),
        )
        .into());
    };
    let explicit = object.remove(PLAN_FLAG) == Some(Value::Bool(true));
    Ok((arguments, explicit))
}

/// `exposed` as its pinned definition (or the config) knows it, when no
/// connected upstream offers it, with the call's paths placed without
/// asking any upstream.
async fn pinned_tool(
    config: &Config,
    store: Arc<dyn Store>,
    log_key: Arc<LogKey>,
    exposed: &str,
    given: Option<Effect>,
    arguments: &Value,
) -> Result<(Found, CallPaths)> {
    let pins = KeyLog::<ToolPins>::with_capacity(store, log_key, 1)
        .state(TOOLS_LOG)
        .await?;
    let (server, tool, effect, schema) = find_tool(config, &pins, exposed, given)?;
    let facts = PathFacts::of(
        config,
        &server,
        &tool,
        None,
        None,
        schema.as_ref().unwrap_or(&serde_json::Map::new()),
    );
    let paths = call_paths(None, config, &server, &facts, arguments).await;
    let found = Found {
        server,
        tool,
        effect,
        schema,
    };
    Ok((found, paths))
}

/// Where each path of the call lands, as the rules judged it: the path
/// placed, or why it could not be.
fn placed(paths: &CallPaths) -> Vec<(String, Result<String, String>)> {
    paths
        .values
        .iter()
        .map(|v| {
            let at = paths.resolver.resolve(v).map_err(|e| e.to_string());
            (v.clone(), at)
        })
        .collect()
}

/// What `policy test` concluded, as it prints it.
struct Verdict<'a> {
    /// The config the rules were read from (a running gateway may hold
    /// another, until it reloads).
    config: String,
    key: &'a ApiKey,
    mode: &'a str,
    found: &'a Found,
    exposed: &'a str,
    effect: Effect,
    explicit: bool,
    placed: Vec<(String, Result<String, String>)>,
    matched: Option<&'a plangate_policy::Matched<'a>>,
    decision: Decision,
}

impl Verdict<'_> {
    /// The decision in a word, and the refusal's code.
    fn word(&self) -> (&'static str, Option<Code>) {
        match self.decision {
            Decision::Run => ("run", None),
            Decision::Plan => ("plan", None),
            Decision::Ask => ("ask", None),
            Decision::Refuse(code) => ("refuse", Some(code)),
        }
    }

    /// `policy test --json`.
    fn print_json(&self) -> Result<()> {
        let (word, code) = self.word();
        let body = json!({
            "config": self.config,
            "key": self.key.name,
            "scope": self.key.scope,
            "mode": self.mode,
            "upstream": self.found.server,
            "tool": self.found.tool,
            "exposed": self.exposed,
            "effect": self.effect,
            "explicit_plan": self.explicit,
            "paths": self.placed.iter().map(|(sent, at)| match at {
                Ok(at) => json!({"sent": sent, "placed": at}),
                Err(why) => json!({"sent": sent, "unplaced": why}),
            }).collect::<Vec<_>>(),
            "rule": self.matched.map(|m| json!({
                "name": m.rule,
                "outcome": m.outcome.as_str(),
                "message": m.message,
                "error": m.error,
            })),
            "decision": word,
            "code": code.map(Code::as_str),
        });
        crate::output::json(&body)?;
        Ok(())
    }

    /// `policy test` as text: the call, its paths, the rule, the decision.
    fn print_text(&self) {
        let (server, tool) = (&self.found.server, &self.found.tool);
        outln!(
            "rules of {} (as the file says now; a running gateway uses them once it reloads)",
            self.config
        );
        outln!(
            "key {} (scope {}), mode {}; {} is {server}'s {tool} ({})",
            self.key.name,
            self.key.scope,
            self.mode,
            self.exposed,
            self.effect
        );
        for (sent, at) in &self.placed {
            match at {
                Ok(at) if at == sent => outln!("path {sent}"),
                Ok(at) => outln!("path {sent} → {at}"),
                Err(why) => outln!("path {sent}: {why}"),
            }
        }
        match self.matched {
            Some(m) => {
                outln!("rule {:?} decides: {}", m.rule, m.outcome.as_str());
                if let Some(e) = &m.error {
                    outln!(
                        "  its condition could not be evaluated ({e}); a refuse rule refuses when in doubt"
                    );
                }
            }
            None => outln!("no rule matches: the mode and the key's scope decide"),
        }
        let (word, code) = self.word();
        let why = match (self.decision, code) {
            (Decision::Run, _) => "sent to the upstream at once",
            (Decision::Plan, _) => "planned: a step of the key's plan, nothing written",
            (Decision::Ask, _) => "the person is asked first",
            (_, Some(Code::ForbiddenByRule)) => "refused by the rule (forbidden_by_rule)",
            (_, Some(Code::Forbidden)) => "refused: the key's scope allows reads only (forbidden)",
            (_, Some(Code::ForbiddenByMode)) => "refused by the mode (forbidden_by_mode)",
            _ => "refused",
        };
        outln!("decision: {word} — {why}");
        if let Some(m) = self.matched.and_then(|m| m.message) {
            outln!("the agent would be told: {m}");
        }
    }
}
