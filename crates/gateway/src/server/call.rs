//! `tools/call`, as a pipeline: authenticate → admit (rates, a call slot)
//! → resolve the tool → validate the call ([`super::validate`]) → classify
//! what needs no key state → judge on the key's mode and the operator's
//! rules ([`super::judge`]) → act (run, plan, refuse, or ask the person,
//! then run: [`super::ask`]) → record ([`super::record`]). Each stage is
//! one function; a refusal at any stage is a tool result with a stable
//! code, and nothing after it runs.

use std::time::Instant;

use plangate_core::{CallDecision, CallerScope, Code, Decision, InForce, KeyState, Scope};
use plangate_policy::Outcome;
use plangate_store::ApiKey;
use rmcp::model::{CallToolRequestParams, CallToolResponse};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::json;

use super::ask::AskEnd;
use super::forward::unavailable;
use super::judge::{Decided, Judge, Ruled, refused_message};
use super::tool_call::ToolCall;
use super::validate::{Checked, validate};
use super::{GatewayHandler, with_notice};
use crate::CatalogTool;
use crate::acting::Acting;
use crate::auth::Caller;
use crate::catalog::Catalog;
use crate::plan::{self, PlanReason};
use crate::policy::may_rule;
use crate::rate::CallSlot;
use crate::refusal::Refusal;
use crate::tools::GatewayTool;

/// How many times a call decides again when its plan step found the key's
/// log moved on and the write no longer one to plan (another process set
/// the mode meanwhile) before it is refused as too busy.
const MAX_REDECISIONS: usize = 4;

/// What a call comes to before its key's state is read.
enum Classed<'a> {
    /// It is decided on its key's state (and the rules).
    Keyed(&'a ApiKey),
    /// A call without a key, with rules: decided by them.
    AnonymousRuled,
    /// It runs now.
    Run,
    /// It is refused now, with this code.
    Refused(Code),
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
        // Admit.
        let prefix = &self.gw.config().gateway.tool_prefix;
        let gateway_tool = GatewayTool::parse(prefix, &request.name);
        let _slot = match self.admit(&caller, &request.name, gateway_tool).await {
            Ok(slot) => slot,
            Err(refusal) => {
                let limited = self.rate_limited(&caller, &request.name, refusal, started);
                return Box::pin(limited).await;
            }
        };
        if let Some(tool) = gateway_tool {
            return Box::pin(self.call_gateway_tool(&caller, seen, tool, request, &cx)).await;
        }
        // Resolve the tool.
        let catalog = self.gw.catalog();
        let tool = match self.resolve(&catalog, &request.name)? {
            Ok(tool) => tool,
            Err(refusal) => return Ok(refusal.into_result().into()),
        };
        let at = ToolCall {
            caller: &caller,
            tool,
            started,
            cx: &cx,
            progress_sent: 0.0,
        };
        // Validate.
        let checked = match validate(tool, prefix, request) {
            Ok(checked) => checked,
            Err(refusal) => {
                return Box::pin(self.refuse(at, refusal, CallDecision::Refuse, None)).await;
            }
        };
        // Classify: what needs no key state decides first.
        let ruled = may_rule(self.gw.ops(), tool);
        let key = match classify(&caller, tool, ruled) {
            Classed::Keyed(key) => key,
            Classed::AnonymousRuled => return Box::pin(self.anonymous_ruled(at, checked)).await,
            Classed::Run
                if matches!(caller, Caller::Key(_)) && crate::call_log::records(&self.gw, tool) =>
            {
                let decided = (CallDecision::Run, None);
                return Box::pin(self.run_recorded(at, checked, decided)).await;
            }
            Classed::Run => return self.forward(at, checked.forward).await,
            Classed::Refused(code) => {
                let refusal = Refusal::new(code, refused_message(code, tool, None, prefix));
                let refused = self.refuse(at, refusal, CallDecision::Refuse, Some(&checked.value));
                return Box::pin(refused).await;
            }
        };
        // Judge by the key's mode and the operator's rules, and act.
        Box::pin(self.judge_and_act(at, key, checked, seen, ruled)).await
    }

    /// Admits a call within the per-key and per-tool rate limits. A call
    /// that reaches an upstream, plans or applies holds one of its key's
    /// slots until it ends (`rate::CallSlots`) — which also bounds the
    /// sessions it can hold against eviction (`session_guard`); the
    /// gateway's own bookkeeping does not.
    async fn admit(
        &self,
        caller: &Caller,
        name: &str,
        gateway_tool: Option<GatewayTool>,
    ) -> Result<Option<CallSlot>, Refusal> {
        self.within_rate(caller, name)?;
        let holds_slot = gateway_tool
            .is_none_or(|t| matches!(t, GatewayTool::ApplyPlan | GatewayTool::ExitPlanMode));
        if !holds_slot {
            return Ok(None);
        }
        let rates = self.gw.rates();
        match rates.slots().try_take(caller.key_id()) {
            Some(slot) => Ok(Some(slot)),
            None => Box::pin(rates.slots().take(caller.key_id(), caller.label()))
                .await
                .map(Some),
        }
    }

    /// Decides a keyed call on its key's state ([`Judge::decide`]) and acts
    /// on the decision. A plan whose append finds the key's log moved on
    /// and the write no longer one to plan decides again, at most a few
    /// times: each turn reads the store first.
    async fn judge_and_act(
        &self,
        at: ToolCall<'_>,
        key: &ApiKey,
        checked: Checked,
        seen: Option<i64>,
        ruled: bool,
    ) -> Result<CallToolResponse, ErrorData> {
        let tool = at.tool;
        // Where the call's paths land, found once for every decision below.
        let paths = if ruled {
            let config = self.gw.config();
            let paths = crate::policy::call_paths(
                Some(self.gw.ops()),
                &config,
                &tool.upstream,
                &tool.paths,
                &checked.value,
            );
            Some(paths.await)
        } else {
            None
        };
        let judge = Judge {
            gw: &self.gw,
            tool,
            caller: at.caller,
            key,
            checked: &checked,
            paths: paths.as_ref(),
        };
        let mut known = self.gw.log().cached(&key.id);
        for _ in 0..MAX_REDECISIONS {
            let decided = match judge.decide(&mut known, seen).await {
                Ok(decided) => decided,
                Err(refusal) => {
                    let refused =
                        self.refuse(at, refusal, CallDecision::Refuse, Some(&checked.value));
                    return Box::pin(refused).await;
                }
            };
            let Decided {
                state,
                fresh,
                in_force,
                rule,
                decision,
            } = decided;
            let (in_force, notice) = self.tell_mode(in_force, at.cx).await;
            let rule_name = rule.as_ref().map(|r| r.name.clone());
            match decision {
                Decision::Run => {
                    let decided = (CallDecision::Run, rule_name);
                    let response = Box::pin(self.run_recorded(at, checked, decided)).await?;
                    return Ok(with_notice(response, notice));
                }
                Decision::Plan | Decision::Ask => {
                    // An `ask` nobody answered is planned like any write
                    // (`plan_decided`): it waits for a person's yes, never
                    // lost and never the agent's own.
                    let (unanswered, decided) = if decision == Decision::Ask {
                        let mode = &in_force.spec;
                        let asked =
                            self.ask(at, key, mode, checked.clone(), rule_name, notice.clone());
                        match Box::pin(asked).await? {
                            AskEnd::Answered(response) => return Ok(response),
                            AskEnd::Unanswered(why) => (Some(why), CallDecision::Ask),
                        }
                    } else {
                        (None, CallDecision::Plan)
                    };
                    let known_state = plan::Known { state, fresh };
                    let planned = self.plan_decided(
                        at,
                        &judge,
                        &in_force,
                        (rule.as_ref(), unanswered),
                        known_state,
                    );
                    match Box::pin(planned).await {
                        Ok(plan::Planned::Step(result)) => {
                            return Ok(with_notice(result.into(), notice));
                        }
                        // The log moved on since this process last saw it,
                        // and the write is no longer one to plan: decide
                        // again on the state as it is now. (An unanswered
                        // ask is planned on any state, so never moves.)
                        Ok(plan::Planned::Moved) => continue,
                        Err(refusal) => {
                            let value = Some(&checked.value);
                            let refused = self.refuse(at, refusal, decided, value);
                            return Box::pin(refused).await;
                        }
                    }
                }
                Decision::Refuse(code) => {
                    let refused = self.refuse_decided(at, key, &in_force, rule, code, &checked);
                    return Box::pin(refused).await;
                }
            }
        }
        let busy = Refusal::store(
            crate::key_log::LogError::Busy(key.id.clone()),
            "nothing was run or planned",
        );
        Box::pin(self.refuse(at, busy, CallDecision::Refuse, Some(&checked.value))).await
    }

    /// Plans the write on the state it was decided on
    /// ([`plan::plan_write`]): the step is appended only on a state where
    /// the write is still one to plan. `unanswered` says why an `ask` about
    /// it went unanswered: such a write waits for the person whatever the
    /// key's state has become.
    async fn plan_decided(
        &self,
        at: ToolCall<'_>,
        judge: &Judge<'_>,
        in_force: &InForce,
        (rule, unanswered): (Option<&Ruled>, Option<String>),
        known: plan::Known,
    ) -> Result<plan::Planned, Refusal> {
        let key = judge.key;
        let asked = unanswered.is_some();
        let reason = if let Some(why) = unanswered {
            PlanReason::Unanswered(why)
        } else if rule.is_some_and(|r| r.outcome == Outcome::Plan) {
            PlanReason::Rule
        } else if judge.checked.explicit {
            PlanReason::Explicit
        } else if key.scope == Scope::Plan {
            PlanReason::Scope
        } else {
            PlanReason::Mode
        };
        let acting = Acting {
            key: key.clone(),
            channel: self.channel(),
            operator: None,
        };
        let still_plans = |state: &KeyState| asked || judge.on(state).2 == Decision::Plan;
        let write = plan::Write {
            tool: at.tool,
            arguments: &judge.checked.arguments,
            reason,
            started: at.started,
            rule: rule.map(|r| r.name.clone()),
            reverts: None,
            still_plans: &still_plans,
        };
        plan::plan_write(self.gw.ops(), &acting, in_force, write, known).await
    }

    /// Refuses a call as decided: on the rule's word when a rule refused,
    /// else saying why and who can change it.
    async fn refuse_decided(
        &self,
        at: ToolCall<'_>,
        key: &ApiKey,
        in_force: &InForce,
        rule: Option<Ruled>,
        code: Code,
        checked: &Checked,
    ) -> Result<CallToolResponse, ErrorData> {
        let (tool, value) = (at.tool, Some(&checked.value));
        if code == Code::ForbiddenByRule {
            let message = rule.as_ref().map(|r| r.refusal(tool)).unwrap_or_default();
            let refusal = Refusal::new(Code::ForbiddenByRule, message);
            let decided = (CallDecision::Refuse, rule.map(|r| r.name));
            return self.refuse_ruled(at, refusal, value, decided).await;
        }
        let prefix = &self.gw.config().gateway.tool_prefix;
        let message = refused_message(code, tool, Some((key, &in_force.spec)), prefix);
        self.refuse(at, Refusal::new(code, message), CallDecision::Refuse, value)
            .await
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
            // A tool of an upstream that is down — also one that never
            // came up (its variables are unset, its command is missing), by
            // its `NAME__` prefix: that upstream and why, not "unknown tool".
            None => match catalog.gone_tool(name).or_else(|| {
                name.split_once("__")
                    .map(|(upstream, _)| upstream)
                    .filter(|upstream| self.gw.down_upstreams().contains_key(*upstream))
            }) {
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
    pub(super) async fn forward(
        &self,
        at: ToolCall<'_>,
        forward: CallToolRequestParams,
    ) -> Result<CallToolResponse, ErrorData> {
        let (tool, sent) = (at.tool, at.progress_sent);
        let call = (&tool.upstream[..], &tool.original[..], sent);
        self.forward_call(at.caller, call, forward, at.cx).await
    }
}

/// What a call comes to before its key's state is read: what needs no key
/// state decides first (a read runs; an anonymous write is refused), then
/// the whole table with the key's mode. With rules, every call of a key
/// reads its mode (rules may be scoped to modes), and a rule decides before
/// the mode's default; a call without a key is decided by the rules.
fn classify<'a>(caller: &'a Caller, tool: &CatalogTool, ruled: bool) -> Classed<'a> {
    let scope = match caller {
        Caller::Key(key) => CallerScope::Key(key.scope),
        Caller::Anonymous => CallerScope::Anonymous,
    };
    match (
        caller,
        plangate_core::decide_before_state(tool.effect, scope),
    ) {
        (Caller::Key(key), _) if ruled => Classed::Keyed(key),
        (Caller::Anonymous, _) if ruled => Classed::AnonymousRuled,
        (_, Some(Decision::Run)) => Classed::Run,
        (Caller::Key(key), None) => Classed::Keyed(key),
        (_, Some(Decision::Refuse(code))) => Classed::Refused(code),
        (_, _) => Classed::Refused(Code::PlanNeedsKey),
    }
}
