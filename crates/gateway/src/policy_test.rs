//! What the operator's rules (`[[rules]]`) make of a call, without making
//! it ([`test()`]): `plangate policy test` at the data dir and, through the
//! operator API (`POST /console/api/policy/test`), `policy test --server`
//! asking the running gateway — one operation, so both answer alike. It is
//! the same evaluation and the same decision function as dispatch
//! ([`crate::policy::judge`], [`plangate_policy::decision`]), with the
//! key's mode in force now and the tool's effect class as the gateway
//! classes it: from its live catalog (its tools are listed, none is
//! called), else the pinned definition, else the config or the effect the
//! person gave.

use plangate_config::Config;
use plangate_core::{Code, Decision, Effect, ToolPins};
use plangate_store::ApiKey;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Gateway;
use crate::policy::{CallPaths, PathFacts, ToolNames, Who, call_paths, judge};
use crate::refusal::Refusal;
use crate::tool_pins::effect_of;

/// The argument that asks for one write to be planned (as dispatch reads
/// it: taken out before the rules see the arguments).
const PLAN_FLAG: &str = "_plangate_plan";

/// What is asked: a call of `tool` by `key` with `arguments`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Question {
    /// The key (name or id).
    pub key: String,
    /// The tool as the agent calls it.
    pub tool: String,
    /// The arguments, a JSON object as the tool takes them (with
    /// `_plangate_plan: true` to ask for the write to be planned).
    #[serde(default = "empty_object")]
    pub arguments: Value,
    /// The effect class to judge the call at, when given.
    #[serde(default)]
    pub effect: Option<Effect>,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

/// Where one path of the call lands, as the rules judged it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlacedPath {
    /// The path as the call sent it.
    pub sent: String,
    /// Where the server acts on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placed: Option<String>,
    /// Why it could not be placed (rules fail closed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unplaced: Option<String>,
}

/// The rule that decided.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuleHit {
    /// Its name.
    pub name: String,
    /// What it decided (`run`, `plan`, `ask`, `refuse`).
    pub outcome: String,
    /// What the agent is told, if the rule says.
    pub message: Option<String>,
    /// Why its condition could not be evaluated, when that decided.
    pub error: Option<String>,
}

/// What the rules make of the call (`policy test --json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The config whose rules were read: the file (`policy test` at the
    /// data dir), or the one the running gateway serves (`--server`).
    pub config: String,
    /// Whether the rules are the running gateway's (`--server`), rather
    /// than the file's as it is now.
    #[serde(default)]
    pub running: bool,
    /// The key's name.
    pub key: String,
    /// Its scope.
    pub scope: plangate_core::Scope,
    /// The mode in force for it now.
    pub mode: String,
    /// The upstream.
    pub upstream: String,
    /// The upstream's own tool name.
    pub tool: String,
    /// The name the agent calls.
    pub exposed: String,
    /// The effect class the call was judged at.
    pub effect: Effect,
    /// Whether the call asked to be planned.
    pub explicit_plan: bool,
    /// The call's paths, placed.
    pub paths: Vec<PlacedPath>,
    /// The rule that decided, if one did.
    pub rule: Option<RuleHit>,
    /// `run`, `plan`, `ask` or `refuse`.
    pub decision: String,
    /// The refusal's code, for `refuse`.
    pub code: Option<Code>,
}

/// What the rules of `gw` make of `question` by `key` (its mode in force
/// read from the log now). `config_name` names the config for the answer;
/// `running` says it is the rules a running gateway serves. Refused with
/// `invalid_arguments` when the tool is unknown or ambiguous, its effect
/// class cannot be known, or the arguments are not an object or name an
/// argument the tool does not take (dispatch refuses those before any
/// rule).
pub async fn test(
    gw: &Gateway,
    key: &ApiKey,
    question: &Question,
    (config_name, running): (String, bool),
) -> Result<Verdict, Refusal> {
    let config = gw.config();
    let (arguments, explicit) = call_arguments(&question.arguments)?;
    let state = gw
        .log()
        .state(&key.id)
        .await
        .map_err(|e| Refusal::store(e, "nothing was tested — try again"))?;
    let mode = config.modes.in_force(&state).spec;
    let exposed = question.tool.as_str();
    let (found, paths) = match live_tool(gw, &config, exposed, &arguments).await {
        Some(live) => live,
        None => pinned_tool(&config, &gw.pins(), exposed, question.effect, &arguments).await?,
    };
    let effect = question.effect.unwrap_or(found.effect);
    // Arguments the tool does not take are refused before any rule, as
    // dispatch refuses them.
    let undeclared = found
        .schema
        .as_ref()
        .map(|schema| plangate_core::undeclared(schema, &arguments))
        .unwrap_or_default();
    if !undeclared.refused.is_empty() {
        return Err(invalid(format!(
            "{exposed} does not take {}: its input schema does not declare it, so dispatch refuses the call before any rule",
            undeclared.refused.join(", ")
        )));
    }
    let policy = gw.policy();
    let matched = judge(
        &policy,
        ToolNames {
            upstream: &found.server,
            tool: &found.tool,
            exposed,
        },
        effect,
        Who {
            name: &key.name,
            scope: key.scope.as_str(),
        },
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
    let (word, code) = match decision {
        Decision::Run => ("run", None),
        Decision::Plan => ("plan", None),
        Decision::Ask => ("ask", None),
        Decision::Refuse(code) => ("refuse", Some(code)),
    };
    Ok(Verdict {
        config: config_name,
        running,
        key: key.name.clone(),
        scope: key.scope,
        mode: mode.name.clone(),
        upstream: found.server,
        tool: found.tool,
        exposed: exposed.to_owned(),
        effect,
        explicit_plan: explicit,
        paths: placed(&paths),
        rule: matched.map(|m| RuleHit {
            name: m.rule.to_owned(),
            outcome: m.outcome.as_str().to_owned(),
            message: m.message.map(str::to_owned),
            error: m.error,
        }),
        decision: word.to_owned(),
        code,
    })
}

fn invalid(message: String) -> Refusal {
    Refusal::new(Code::InvalidArguments, message)
}

/// The arguments as the tool takes them (a JSON object), without the flag
/// that asks for the write to be planned, and whether that flag was set.
fn call_arguments(given: &Value) -> Result<(Value, bool), Refusal> {
    let mut arguments = given.clone();
    let Some(object) = arguments.as_object_mut() else {
        return Err(invalid(
            "the arguments must be a JSON object, as the tool takes them".to_owned(),
        ));
    };
    let explicit = object.remove(PLAN_FLAG) == Some(Value::Bool(true));
    Ok((arguments, explicit))
}

/// What is known of the tool called: its names, effect class and input
/// schema (when known).
struct Found {
    server: String,
    tool: String,
    effect: Effect,
    schema: Option<serde_json::Map<String, Value>>,
}

/// `exposed` in the gateway's live catalog — exactly as dispatch sees it
/// — with the call's paths placed as dispatch places them (which may ask
/// the upstream's read that lists the directories relative paths resolve
/// against; nothing else is called). `None` when no connected upstream
/// offers it.
async fn live_tool(
    gw: &Gateway,
    config: &Config,
    exposed: &str,
    arguments: &Value,
) -> Option<(Found, CallPaths)> {
    let catalog = gw.catalog();
    let t = catalog.tool(exposed)?;
    let paths = call_paths(Some(gw.ops()), config, &t.upstream, &t.paths, arguments).await;
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

/// `exposed` as its pinned definition (or the config) knows it, when no
/// connected upstream offers it, with the call's paths placed without
/// asking any upstream.
async fn pinned_tool(
    config: &Config,
    pins: &ToolPins,
    exposed: &str,
    given: Option<Effect>,
    arguments: &Value,
) -> Result<(Found, CallPaths), Refusal> {
    let found = find_tool(config, pins, exposed, given)?;
    let facts = PathFacts::of(
        config,
        &found.server,
        &found.tool,
        None,
        None,
        found.schema.as_ref().unwrap_or(&serde_json::Map::new()),
    );
    let paths = call_paths(None, config, &found.server, &facts, arguments).await;
    Ok((found, paths))
}

/// The upstream and tool `exposed` names, and its effect class: from the
/// pinned definitions (`UPSTREAM__TOOL`, or a tool name one upstream has).
fn find_tool(
    config: &Config,
    pins: &ToolPins,
    exposed: &str,
    effect: Option<Effect>,
) -> Result<Found, Refusal> {
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
                (None, None) => config
                    .tool_settings(server, tool)
                    .and_then(|o| o.effect)
                    .ok_or_else(|| invalid(format!(
                        "{server} is not reachable and no definition of {exposed} is pinned, so its effect class is not known: check the upstream (`plangate config check`), or give --effect read|write|destructive"
                    )))?,
            };
            let schema = definition
                .as_ref()
                .and_then(|d| d.get("inputSchema"))
                .and_then(Value::as_object)
                .cloned();
            Ok(Found {
                server: server.clone(),
                tool: tool.clone(),
                effect,
                schema,
            })
        }
        [] => Err(invalid(format!(
            "no upstream offers a tool called {exposed}: `plangate tools list` shows the pinned ones"
        ))),
        several => Err(invalid(format!(
            "{exposed} is a tool of several upstreams ({}): name it as UPSTREAM__{exposed}",
            several
                .iter()
                .map(|(s, _, _)| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// Where each path of the call lands, as the rules judged it: the path
/// placed, or why it could not be.
fn placed(paths: &CallPaths) -> Vec<PlacedPath> {
    paths
        .values
        .iter()
        .map(|v| match paths.resolver.resolve(v) {
            Ok(at) => PlacedPath {
                sent: v.clone(),
                placed: Some(at.to_string()),
                unplaced: None,
            },
            Err(e) => PlacedPath {
                sent: v.clone(),
                placed: None,
                unplaced: Some(e.to_string()),
            },
        })
        .collect()
}
