//! `tools/call`, as a pipeline: authenticate → resolve the tool → validate
//! the call → decide (the core's [`decide`]) → act (run, plan, refuse, or
//! ask the person, then run). Each stage is one function below; a refusal
//! at any stage is a tool result with a stable code, and nothing after it
//! runs.

use std::time::Instant;

use plangate_core::{
    CallDecision, CallOutcome, CallerScope, Code, Decision, KeyState, ModeSpec, Scope,
    check_safe_integers, decide_before_state,
};
use rmcp::model::{CallToolRequestParams, CallToolResponse, JsonObject};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::{Value, json};

use super::forward::unavailable;
use super::{GatewayHandler, with_notice};
use crate::CatalogTool;
use crate::acting::Acting;
use crate::auth::Caller;
use crate::catalog::Catalog;
use crate::metrics::Outcome as Metered;
use crate::plan::{self, PlanReason};
use crate::refusal::Refusal;
use crate::tools::GatewayTool;
use plangate_policy::Outcome;

/// The argument that asks for a single write to be planned.
const PLAN_FLAG: &str = "_plangate_plan";

/// How many times a call decides again when its plan step found the key's
/// log moved on and the write no longer one to plan (another process set
/// the mode meanwhile) before it is refused as too busy.
const MAX_REDECISIONS: usize = 4;

/// A call that passed every check a call must pass before it could run.
struct Checked {
    /// The call to send upstream: the client's, without [`PLAN_FLAG`].
    forward: CallToolRequestParams,
    /// Its arguments.
    arguments: JsonObject,
    /// The same arguments as one JSON value.
    value: Value,
    /// Whether the agent asked for this write to be planned.
    explicit: bool,
    /// Top-level arguments the tool's schema does not declare but allows
    /// (the rest were refused): no widening rule decides on them.
    undeclared: Vec<String>,
}

impl GatewayHandler {
    /// Every call, read or write, runs in a task rmcp spawns per request,
    /// whose future holds this one inline and is moved (copied) when it is
    /// spawned and when it completes; the large, rarely taken paths
    /// (gateway tools, planning, asking a person, an upstream's progress
    /// and questions) are boxed so a passthrough read does not copy their
    /// kilobytes of state.
    pub(super) async fn call(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.gw.note_call();
        let started = Instant::now();
        // Authenticate.
        let (caller, seen) = self.caller_seen(&cx, &request.name).await?;
        let seen = seen.map(|s| s.0);
        let limited = |refusal: Refusal| {
            let (caller, name) = (&caller, &request.name);
            async move {
                tracing::info!(tool = %name, caller = caller.label(), "call refused: rate limited");
                let catalog = self.gw.catalog();
                if let Some(tool) = catalog.tool(name) {
                    self.on_record(
                        caller,
                        tool,
                        None,
                        (CallDecision::Refuse, None),
                        (CallOutcome::Refused, Some(refusal.code.as_str().to_owned())),
                        started,
                    )
                    .await;
                }
                Ok::<_, ErrorData>(refusal.into_result().into())
            }
        };
        if let Err(refusal) = self.within_rate(&caller, &request.name) {
            return Box::pin(limited(refusal)).await;
        }
        let prefix = &self.gw.config().gateway.tool_prefix;
        let gateway_tool = GatewayTool::parse(prefix, &request.name);
        // A call that reaches an upstream, plans or applies holds one of
        // its key's slots until it ends (`rate::CallSlots`) — which also
        // bounds the sessions it can hold against eviction
        // (`session_guard`); the gateway's own bookkeeping does not.
        let _slot = if gateway_tool
            .is_none_or(|t| matches!(t, GatewayTool::ApplyPlan | GatewayTool::ExitPlanMode))
        {
            let rates = self.gw.rates();
            match rates.slots().try_take(caller.key_id()) {
                Some(slot) => Some(slot),
                None => match Box::pin(rates.slots().take(caller.key_id(), caller.label())).await {
                    Ok(slot) => Some(slot),
                    Err(refusal) => return Box::pin(limited(refusal)).await,
                },
            }
        } else {
            None
        };
        if let Some(tool) = gateway_tool {
            return Box::pin(self.call_gateway_tool(&caller, seen, tool, request, &cx)).await;
        }
        // Resolve the tool.
        let catalog = self.gw.catalog();
        let tool = self.resolve(&catalog, &request.name)?;
        let tool = match tool {
            Ok(tool) => tool,
            Err(refusal) => return Ok(refusal.into_result().into()),
        };
        // Every refusal from here on is metered, logged and on the record.
        let refuse = |refusal: Refusal, decision: CallDecision, arguments: Option<Value>| {
            let caller = &caller;
            async move {
                self.gw
                    .metrics()
                    .record(&tool.upstream, &tool.original, Metered::Refused, None);
                tracing::info!(tool = %tool.exposed, caller = caller.label(), code = refusal.code.as_str(), "call refused");
                self.on_record(
                    caller,
                    tool,
                    arguments.as_ref(),
                    (decision, None),
                    (CallOutcome::Refused, Some(refusal.code.as_str().to_owned())),
                    started,
                )
                .await;
                Ok::<_, ErrorData>(refusal.into_result().into())
            }
        };
        // Validate.
        let checked = match validate(tool, prefix, request) {
            Ok(checked) => checked,
            Err(refusal) => return Box::pin(refuse(refusal, CallDecision::Refuse, None)).await,
        };
        // Decide: what needs no key state first (a read runs; an anonymous
        // write is refused), then the whole table with the key's mode. With
        // rules, every call of a key reads its mode (rules may be scoped
        // to modes), and a rule decides before the mode's default.
        let scope = match &caller {
            Caller::Key(key) => CallerScope::Key(key.scope),
            Caller::Anonymous => CallerScope::Anonymous,
        };
        // Rules about other tools (a guard says so) cost nothing here.
        let ruled = !self.gw.policy().is_empty()
            && self.gw.policy().may_decide(&plangate_policy::Tool {
                upstream: &tool.upstream,
                tool: &tool.original,
                exposed: &tool.exposed,
                effect: tool.effect,
            });
        let key = match (&caller, decide_before_state(tool.effect, scope)) {
            (Caller::Key(key), _) if ruled => key,
            (Caller::Anonymous, _) if ruled => {
                return Box::pin(self.anonymous_ruled(&caller, tool, checked, started, &cx)).await;
            }
            (_, Some(Decision::Run)) => {
                if matches!(caller, Caller::Key(_)) && crate::call_log::records(&self.gw, tool) {
                    return Box::pin(self.run_recorded(
                        &caller,
                        tool,
                        checked,
                        (CallDecision::Run, None),
                        started,
                        &cx,
                    ))
                    .await;
                }
                return self.forward(&caller, tool, checked.forward, &cx).await;
            }
            (Caller::Key(key), None) => key,
            (_, early) => {
                let code = match early {
                    Some(Decision::Refuse(code)) => code,
                    _ => Code::PlanNeedsKey,
                };
                return Box::pin(refuse(
                    Refusal::new(code, refused_message(code, tool, None, prefix)),
                    CallDecision::Refuse,
                    Some(checked.value),
                ))
                .await;
            }
        };
        // The key's state as this process last saw it, when it has one: a
        // write planned on it is appended with compare-and-set on that
        // state, so the step lands only if the state was still the key's
        // latest — the same as deciding on a fresh read, one store round
        // trip less. Every other decision (run, ask, refuse), and a plan
        // whose append finds the log moved on and the write no longer
        // planned, decides again on a fresh read. A state that is not
        // fresh is never what lets a call run. The held state *is* fresh
        // when it is folded up to where the key's log stood as the
        // statement that authenticated this request saw it (`seen`, from
        // stores without a log mark): then a write that runs needs no
        // read of its own.
        // Where the call's paths land, found once for every decision below.
        let paths = if ruled {
            Some(
                crate::policy::call_paths(
                    Some(&self.gw),
                    &self.gw.config(),
                    &tool.upstream,
                    &tool.paths,
                    &checked.value,
                )
                .await,
            )
        } else {
            None
        };
        let decide_on = |state: &KeyState| {
            let in_force = self.gw.config().modes.in_force(state);
            let rule = paths.as_ref().and_then(|paths| {
                rule_for(
                    &self.gw,
                    tool,
                    &caller,
                    &in_force.spec.name,
                    &checked,
                    paths,
                )
            });
            let decision = plangate_policy::decision(
                rule.as_ref().map(|r| r.outcome),
                tool.effect,
                key.scope,
                &in_force.spec,
                checked.explicit,
            );
            (in_force, rule, decision)
        };
        let mut known = self.gw.log().cached(&key.id);
        // A plan that found the log moved on decides again, at most a few
        // times: each turn reads the store first.
        for _ in 0..MAX_REDECISIONS {
            let (state, fresh, in_force, rule, decision) = loop {
                let (state, fresh) = match known.take() {
                    Some(state) => {
                        let fresh = seen == Some(state.last_seq);
                        (state, fresh)
                    }
                    None => match self.gw.log().state(&key.id).await {
                        Ok(state) => (state, true),
                        Err(e) => {
                            return Box::pin(refuse(
                                Refusal::store(e, "nothing was run or planned"),
                                CallDecision::Refuse,
                                Some(checked.value),
                            ))
                            .await;
                        }
                    },
                };
                let (in_force, rule, decision) = decide_on(&state);
                if fresh || decision == Decision::Plan {
                    break (state, fresh, in_force, rule, decision);
                }
            };
            let (in_force, notice) = self.tell_mode(in_force, &cx).await;
            let mode = &in_force.spec;
            let acting = Acting {
                key: key.clone(),
                channel: self.channel(),
                operator: None,
            };
            let explicit = checked.explicit;
            let rule_name = rule.as_ref().map(|r| r.name.clone());
            // Act.
            let answer = match decision {
                Decision::Run => {
                    let response = Box::pin(self.run_recorded(
                        &caller,
                        tool,
                        checked,
                        (CallDecision::Run, rule_name),
                        started,
                        &cx,
                    ))
                    .await?;
                    Ok(with_notice(response, notice))
                }
                Decision::Plan => {
                    let reason = if rule.as_ref().is_some_and(|r| r.outcome == Outcome::Plan) {
                        PlanReason::Rule
                    } else if explicit {
                        PlanReason::Explicit
                    } else if key.scope == Scope::Plan {
                        PlanReason::Scope
                    } else {
                        PlanReason::Mode
                    };
                    let still_plans = |state: &KeyState| decide_on(state).2 == Decision::Plan;
                    let write = plan::Write {
                        tool,
                        arguments: &checked.arguments,
                        reason,
                        started,
                        rule: rule_name.clone(),
                        still_plans: &still_plans,
                    };
                    let planned = Box::pin(plan::plan_write(
                        &self.gw,
                        &acting,
                        &in_force,
                        write,
                        plan::Known { state, fresh },
                    ))
                    .await;
                    match planned {
                        Ok(plan::Planned::Step(result)) => Ok(with_notice(result.into(), notice)),
                        // The log moved on since this process last saw it, and
                        // the write is no longer one to plan: decide again on
                        // the state as it is now.
                        Ok(plan::Planned::Moved) => continue,
                        Err(refusal) => {
                            Box::pin(refuse(refusal, CallDecision::Plan, Some(checked.value))).await
                        }
                    }
                }
                Decision::Refuse(Code::ForbiddenByRule) => {
                    let message = rule.as_ref().map(|r| r.refusal(tool)).unwrap_or_default();
                    Box::pin(self.refuse_ruled(
                        &caller,
                        tool,
                        Refusal::new(Code::ForbiddenByRule, message),
                        Some(checked.value),
                        (CallDecision::Refuse, rule_name),
                        started,
                    ))
                    .await
                }
                Decision::Refuse(code) => {
                    Box::pin(refuse(
                        Refusal::new(code, refused_message(code, tool, Some((key, mode)), prefix)),
                        CallDecision::Refuse,
                        Some(checked.value),
                    ))
                    .await
                }
                Decision::Ask => {
                    let value = checked.value.clone();
                    match Box::pin(self.ask_first(&acting, mode, tool, checked, &cx)).await {
                        Ok(Asked::Run(forward)) => {
                            let checked = Checked {
                                forward,
                                arguments: JsonObject::new(),
                                value,
                                explicit,
                                undeclared: Vec::new(),
                            };
                            let response = Box::pin(self.run_recorded(
                                &caller,
                                tool,
                                checked,
                                (CallDecision::Ask, rule_name),
                                started,
                                &cx,
                            ))
                            .await?;
                            Ok(with_notice(response, notice))
                        }
                        Ok(Asked::Pending(response)) => {
                            Box::pin(self.on_record(
                                &caller,
                                tool,
                                Some(&value),
                                (CallDecision::Ask, rule_name),
                                (CallOutcome::Pending, None),
                                started,
                            ))
                            .await;
                            Ok(response)
                        }
                        Err(refusal) if rule_name.is_some() => {
                            Box::pin(self.refuse_ruled(
                                &caller,
                                tool,
                                refusal,
                                Some(value),
                                (CallDecision::Ask, rule_name),
                                started,
                            ))
                            .await
                        }
                        Err(refusal) => {
                            Box::pin(refuse(refusal, CallDecision::Ask, Some(value))).await
                        }
                    }
                }
            };
            return answer;
        }
        Box::pin(refuse(
            Refusal::store(
                crate::key_log::LogError::Busy(key.id.clone()),
                "nothing was run or planned",
            ),
            CallDecision::Refuse,
            Some(checked.value),
        ))
        .await
    }

    /// A call without a key when there are rules: they are evaluated in the
    /// default mode; a read runs unless a rule refuses it (or asks, which a
    /// caller without a key cannot be), and a write is refused as ever.
    async fn anonymous_ruled(
        &self,
        caller: &Caller,
        tool: &CatalogTool,
        checked: Checked,
        started: Instant,
        cx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let prefix = &self.gw.config().gateway.tool_prefix;
        let mode = self.gw.config().modes.default_name().to_owned();
        let paths = crate::policy::call_paths(
            Some(&self.gw),
            &self.gw.config(),
            &tool.upstream,
            &tool.paths,
            &checked.value,
        )
        .await;
        let rule = rule_for(&self.gw, tool, caller, &mode, &checked, &paths);
        let effect = match rule.as_ref().map(|r| r.outcome) {
            Some(Outcome::Effect(e)) => e,
            _ => tool.effect,
        };
        match rule.as_ref().map(|r| r.outcome) {
            Some(Outcome::Refuse) | Some(Outcome::Ask) => {
                let rule = rule.as_ref();
                let message = rule.map(|r| r.refusal(tool)).unwrap_or_default();
                let name = rule.map(|r| r.name.clone());
                Box::pin(self.refuse_ruled(
                    caller,
                    tool,
                    Refusal::new(Code::ForbiddenByRule, message),
                    Some(checked.value),
                    (CallDecision::Refuse, name),
                    started,
                ))
                .await
            }
            _ if effect == plangate_core::Effect::Read => {
                self.forward(caller, tool, checked.forward, cx).await
            }
            _ => Ok(Refusal::new(
                Code::PlanNeedsKey,
                refused_message(Code::PlanNeedsKey, tool, None, prefix),
            )
            .into_result()
            .into()),
        }
    }

    /// Refuses a call on a rule's word: metered, logged and recorded with
    /// the rule's name.
    async fn refuse_ruled(
        &self,
        caller: &Caller,
        tool: &CatalogTool,
        refusal: Refusal,
        arguments: Option<Value>,
        (decision, rule): (CallDecision, Option<String>),
        started: Instant,
    ) -> Result<CallToolResponse, ErrorData> {
        self.gw
            .metrics()
            .record(&tool.upstream, &tool.original, Metered::Refused, None);
        tracing::info!(tool = %tool.exposed, caller = caller.label(), rule = rule.as_deref().unwrap_or(""), "call refused by a rule");
        self.on_record(
            caller,
            tool,
            arguments.as_ref(),
            (decision, rule),
            (CallOutcome::Refused, Some(refusal.code.as_str().to_owned())),
            started,
        )
        .await;
        Ok(refusal.into_result().into())
    }

    /// Sends a checked call upstream and records how it ended before its
    /// answer goes back.
    async fn run_recorded(
        &self,
        caller: &Caller,
        tool: &CatalogTool,
        checked: Checked,
        decided: (CallDecision, Option<String>),
        started: Instant,
        cx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let answer = self.forward(caller, tool, checked.forward, cx).await;
        let (outcome, code) = crate::call_log::outcome_of(&answer);
        let ended = (outcome, code);
        self.on_record(caller, tool, Some(&checked.value), decided, ended, started)
            .await;
        answer
    }

    /// Records a call of `caller` (a key's; calls without one have no log)
    /// as [`crate::call_log`] says, ending with `outcome` and `code`.
    async fn on_record(
        &self,
        caller: &Caller,
        tool: &CatalogTool,
        arguments: Option<&Value>,
        (decision, rule): (CallDecision, Option<String>),
        (outcome, code): (CallOutcome, Option<String>),
        started: Instant,
    ) {
        let Caller::Key(key) = caller else {
            return;
        };
        let acting = Acting {
            key: key.clone(),
            channel: self.channel(),
            operator: None,
        };
        crate::call_log::record(
            &self.gw,
            &acting,
            crate::call_log::Call {
                tool,
                arguments,
                decision,
                outcome,
                code,
                started,
                rule,
            },
        )
        .await;
    }

    /// The per-key and per-tool rate limits.
    fn within_rate(&self, caller: &Caller, name: &str) -> Result<(), Refusal> {
        if !self.gw.rates().active() {
            return Ok(());
        }
        let catalog = self.gw.catalog();
        let upstream_tool = catalog
            .tool(name)
            .map(|t| (t.upstream.as_str(), t.original.as_str()));
        self.gw
            .rates()
            .check(caller.key_id(), caller.label(), upstream_tool)
    }

    /// The catalog's tool called `name`. An unknown name is a JSON-RPC
    /// error (invalid params); a tool whose upstream is gone answers
    /// `upstream_unavailable`.
    #[allow(clippy::type_complexity)]
    fn resolve<'c>(
        &self,
        catalog: &'c Catalog,
        name: &str,
    ) -> Result<Result<&'c CatalogTool, Refusal>, ErrorData> {
        match catalog.tool(name) {
            Some(tool) => Ok(Ok(tool)),
            None => match catalog.gone_tool(name) {
                Some(upstream) => Ok(Err(unavailable(upstream, &self.gw))),
                None => {
                    let near = catalog.near_names(name);
                    let hint = match near.as_slice() {
                        [] => "; tools/list names every tool plangate offers".to_owned(),
                        [one] => format!("; did you mean {one}? (tools/list names every tool)"),
                        several => format!(
                            "; did you mean one of {}? (tools/list names every tool)",
                            several.join(", ")
                        ),
                    };
                    Err(ErrorData::invalid_params(
                        format!("unknown tool: {name}{hint}"),
                        Some(json!({"tool": name, "near": near})),
                    ))
                }
            },
        }
    }

    /// Sends the checked call to `tool`'s upstream.
    async fn forward(
        &self,
        caller: &Caller,
        tool: &CatalogTool,
        forward: CallToolRequestParams,
        cx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.forward_call(caller, &tool.upstream, &tool.original, forward, cx)
            .await
    }

    /// An `ask` mode's question before a call above its access: the person
    /// says yes to exactly these arguments (by fingerprint) or nothing runs.
    async fn ask_first(
        &self,
        acting: &Acting,
        mode: &ModeSpec,
        tool: &CatalogTool,
        checked: Checked,
        cx: &RequestContext<RoleServer>,
    ) -> Result<Asked, Refusal> {
        let Checked {
            mut forward, value, ..
        } = checked;
        // A retry answering the upstream's own question (parked call): the
        // person already said yes to this call.
        let resuming = forward.request_state.as_deref().is_some_and(|state| {
            crate::parked::Parked::is_park_state(&self.gw, &acting.key.id, state)
        });
        if resuming {
            return Ok(Asked::Run(forward));
        }
        let (redacted, secrets) = self.gw.redactor().split(&value);
        let keyed = plangate_core::keyed_from_split(
            redacted.clone(),
            &secrets,
            self.gw.material().signing_key(),
        );
        // Unsafe integers were refused before the decision.
        let digest = plangate_core::arguments_fingerprint(&tool.upstream, &tool.original, &keyed)
            .map(|d| format!("sha256:{d}"))
            .map_err(|e| Refusal::new(Code::InvalidArguments, e.to_string()))?;
        let round = crate::review::Round {
            tool: &tool.exposed,
            arguments: &value,
            state: forward.request_state.as_deref(),
            responses: forward.input_responses.as_ref(),
        };
        match crate::review::ask_for_call(
            &self.gw, acting, mode, tool, &redacted, &digest, round, cx,
        )
        .await?
        {
            crate::review::Asked::Yes => {}
            crate::review::Asked::Pending(response) => return Ok(Asked::Pending(response)),
        }
        forward.request_state = None;
        forward.input_responses = None;
        Ok(Asked::Run(forward))
    }
}

/// What came of asking before a call.
enum Asked {
    /// The person said yes (or had already): send this call.
    Run(CallToolRequestParams),
    /// The question went to the client as `input_required`; this is the
    /// answer for now.
    Pending(CallToolResponse),
}

/// The checks a call must pass before it could run or be planned: the tool
/// is enabled and not withheld, the plan flag is a boolean, every integer
/// is safe, and the arguments fit the tool's input schema.
/// Whether knowing where the key's log stands when the key is
/// authenticated ([`crate::auth::LogSeen`]) could spare a call of `name`
/// a read of the store — asking it costs the store a little on every
/// request, so only such calls ask. It could when this process holds a
/// state of the key (`hint`: the key this token was last found to be, a
/// guess, never a credential) and the call is decided on it: plangate's
/// own tools, a tool the operator's rules may decide, and a write that the
/// held state would not plan — a write to plan is decided on the held
/// state anyway (its append's compare-and-set confirms it), so only a
/// write that runs, asks or is refused needs the fresh view. A read no
/// rule touches, and an unknown tool, need no state.
pub(crate) fn seen_would_help(
    gw: &crate::Gateway,
    name: &str,
    hint: Option<&plangate_store::ApiKey>,
) -> bool {
    let Some(key) = hint else {
        return false;
    };
    if GatewayTool::parse(&gw.config().gateway.tool_prefix, name).is_some() {
        return gw.log().look_cached(&key.id, |_| ()).is_some();
    }
    let catalog = gw.catalog();
    let Some(tool) = catalog.tool(name) else {
        return false;
    };
    let ruled = !gw.policy().is_empty()
        && gw.policy().may_decide(&plangate_policy::Tool {
            upstream: &tool.upstream,
            tool: &tool.original,
            exposed: &tool.exposed,
            effect: tool.effect,
        });
    if ruled {
        return true;
    }
    if tool.effect == plangate_core::Effect::Read {
        return false;
    }
    let config = gw.config();
    gw.log()
        .look_cached(&key.id, |state| {
            let in_force = config.modes.in_force(state);
            plangate_policy::decision(None, tool.effect, key.scope, &in_force.spec, false)
                != Decision::Plan
        })
        .unwrap_or(false)
}

fn validate(
    tool: &CatalogTool,
    prefix: &str,
    request: CallToolRequestParams,
) -> Result<Checked, Refusal> {
    if !tool.enabled {
        return Err(Refusal::new(
            Code::Forbidden,
            format!(
                "tool {} is disabled in plangate's config (upstreams.{}.tools.{}.enabled = false); ask the operator to enable it",
                tool.exposed, tool.upstream, tool.original
            ),
        ));
    }
    if let Some(why) = &tool.withheld {
        return Err(Refusal::new(
            why.code(),
            format!("{}. Nothing was run or planned", why.reason(tool, prefix)),
        ));
    }
    let mut forward = request;
    let mut arguments = forward.arguments.take().unwrap_or_default();
    let explicit = match arguments.remove(PLAN_FLAG) {
        None | Some(Value::Bool(false)) => false,
        Some(Value::Bool(true)) => true,
        Some(_) => {
            return Err(Refusal::new(
                Code::InvalidArguments,
                format!("\"{PLAN_FLAG}\" must be true or false"),
            ));
        }
    };
    let value = Value::Object(arguments.clone());
    if let Err(e) = check_safe_integers(&value) {
        return Err(Refusal::new(
            Code::InvalidArguments,
            format!("{e}; send it as a string or a smaller number. Nothing was run or planned"),
        ));
    }
    if let Err(errors) = tool.check_arguments(&value) {
        return Err(Refusal::new(
            Code::InvalidArguments,
            format!(
                "the arguments do not match {}'s input schema: {}. Nothing was run or planned",
                tool.exposed,
                errors.join("; ")
            ),
        ));
    }
    // An argument the tool does not take is one its server ignores: a rule
    // must not decide on it, so it is refused unless the schema allows
    // more (docs/config.md, "Rules see what the tool takes").
    let undeclared = plangate_core::undeclared(&tool.tool.input_schema, &value);
    if !undeclared.refused.is_empty() {
        return Err(Refusal::new(
            Code::InvalidArguments,
            format!(
                "{} does not take {}: its input schema does not declare {}. Send only the arguments it declares (tools/list shows its schema). Nothing was run or planned",
                tool.exposed,
                undeclared.refused.join(", "),
                if undeclared.refused.len() == 1 {
                    "it"
                } else {
                    "them"
                },
            ),
        ));
    }
    forward.arguments = Some(arguments.clone());
    Ok(Checked {
        forward,
        arguments,
        value,
        explicit,
        undeclared: undeclared.allowed,
    })
}

/// The rule that decided a call, owned (the policy lends its names).
struct Ruled {
    name: String,
    outcome: Outcome,
    message: Option<String>,
    error: Option<String>,
}

impl Ruled {
    /// What the agent is told when the rule refuses (or asks, where asking
    /// cannot be).
    fn refusal(&self, tool: &CatalogTool) -> String {
        let said = self.message.as_deref().unwrap_or("");
        let mut text = match self.outcome {
            Outcome::Ask => format!(
                "{} needs a person's yes by the operator's rule {:?}, and a caller without an API key cannot be asked; nothing was run",
                tool.exposed, self.name
            ),
            _ => format!(
                "{} was refused by the operator's rule {:?}: {said}. Nothing was run or planned; if this call is wanted, ask the operator about that rule",
                tool.exposed, self.name
            ),
        };
        if let Some(e) = &self.error {
            text.push_str(&format!(
                " (the rule's condition could not be evaluated for this call — {e} — and a refuse rule refuses when in doubt)"
            ));
        }
        text
    }
}

/// The operator's rule that decides `tool`'s call (`checked`) by `caller`
/// in `mode`, if one does ([`crate::policy::judge`], as apply and `policy
/// test` judge).
fn rule_for(
    gw: &crate::Gateway,
    tool: &CatalogTool,
    caller: &Caller,
    mode: &str,
    checked: &Checked,
    paths: &crate::policy::CallPaths,
) -> Option<Ruled> {
    let who = match caller {
        Caller::Key(key) => crate::policy::Who {
            name: &key.name,
            scope: key.scope.as_str(),
        },
        Caller::Anonymous => crate::policy::Who {
            name: "",
            scope: "anonymous",
        },
    };
    let policy = gw.policy();
    crate::policy::judge(
        &policy,
        tool.into(),
        tool.effect,
        who,
        mode,
        &checked.value,
        &checked.undeclared,
        paths,
    )
    .map(|m| Ruled {
        name: m.rule.to_owned(),
        outcome: m.outcome,
        message: m.message.map(str::to_owned),
        error: m.error,
    })
}

/// What a refused write is told: why, and who can change it.
/// `keyed`: the caller's key and mode, when it has a key.
fn refused_message(
    code: Code,
    tool: &CatalogTool,
    keyed: Option<(&plangate_store::ApiKey, &ModeSpec)>,
    prefix: &str,
) -> String {
    match (code, keyed) {
        (Code::PlanNeedsKey, _) => format!(
            "{} is a {} tool; callers without an API key may only read and can never plan. Create a key with `plangate keys create --name NAME --scope plan`",
            tool.exposed, tool.effect
        ),
        (Code::Forbidden, Some((key, _))) => format!(
            "{} is a {} tool and key {:?} has scope {}, which allows reads only; ask the operator for a plan or write key",
            tool.exposed, tool.effect, key.name, key.scope
        ),
        (Code::ForbiddenByMode, Some((_, mode))) => format!(
            "{} is a {} tool and mode {} runs only {} calls and refuses the rest; ask the person to change the mode ({prefix}begin_session) if this write is wanted",
            tool.exposed, tool.effect, mode.name, mode.access
        ),
        (other, _) => format!("{} was refused ({other})", tool.exposed),
    }
}
