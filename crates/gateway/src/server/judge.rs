//! How a call is judged: the operator's rules ([`Ruled`]), the key's mode
//! and the core's decision, on a state of the key this process holds or
//! reads fresh ([`Judge`]); a call without a key by the rules alone; and
//! what a refused write is told. Apart from the pipeline because this is
//! the decision itself (docs/design.md §4), where the pipeline only acts
//! on it.

use plangate_core::{CallDecision, Code, Decision, InForce, KeyState, ModeSpec};
use plangate_policy::Outcome;
use plangate_store::ApiKey;
use rmcp::ErrorData;
use rmcp::model::CallToolResponse;

use super::GatewayHandler;
use super::tool_call::ToolCall;
use super::validate::Checked;
use crate::CatalogTool;
use crate::auth::Caller;
use crate::policy::CallPaths;
use crate::refusal::Refusal;

/// The rule that decided a call, owned (the policy lends its names).
pub(super) struct Ruled {
    pub(super) name: String,
    pub(super) outcome: Outcome,
    message: Option<String>,
    error: Option<String>,
}

impl Ruled {
    /// What the agent is told when the rule refuses (or asks, where asking
    /// cannot be).
    pub(super) fn refusal(&self, tool: &CatalogTool) -> String {
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

/// What decides a keyed call on a state of its key: the mode in force, the
/// operator's rule that decides the call, if one does, and the core's
/// decision — a rule before the mode's default.
pub(super) struct Judge<'a> {
    pub(super) gw: &'a crate::Gateway,
    pub(super) tool: &'a CatalogTool,
    pub(super) caller: &'a Caller,
    pub(super) key: &'a ApiKey,
    pub(super) checked: &'a Checked,
    /// Where the call's paths land, when rules may decide it: found once
    /// for every decision.
    pub(super) paths: Option<&'a CallPaths>,
}

/// A decision on a state of the key, with what it was made on.
pub(super) struct Decided {
    /// The state decided on.
    pub(super) state: KeyState,
    /// Whether it is known to be the key's latest.
    pub(super) fresh: bool,
    pub(super) in_force: InForce,
    pub(super) rule: Option<Ruled>,
    pub(super) decision: Decision,
}

impl Judge<'_> {
    /// The decision on `state`: the mode in force, the rule, the decision.
    pub(super) fn on(&self, state: &KeyState) -> (InForce, Option<Ruled>, Decision) {
        let in_force = self.gw.config().modes.in_force(state);
        let rule = self.paths.and_then(|paths| {
            rule_for(
                self.gw,
                self.tool,
                self.caller,
                &in_force.spec.name,
                self.checked,
                paths,
            )
        });
        let decision = plangate_policy::decision(
            rule.as_ref().map(|r| r.outcome),
            self.tool.effect,
            self.key.scope,
            &in_force.spec,
            self.checked.explicit,
        );
        (in_force, rule, decision)
    }

    /// The key's state to decide on, and the decision on it.
    ///
    /// The key's state as this process last saw it (`known`), when it has
    /// one: a write planned on it is appended with compare-and-set on that
    /// state, so the step lands only if the state was still the key's
    /// latest — the same as deciding on a fresh read, one store round trip
    /// less. Every other decision (run, ask, refuse), and a plan whose
    /// append finds the log moved on and the write no longer planned,
    /// decides again on a fresh read. A state that is not fresh is never
    /// what lets a call run. The held state *is* fresh when it is folded up
    /// to where the key's log stood as the statement that authenticated
    /// this request saw it (`seen`, from stores without a log mark): then a
    /// write that runs needs no read of its own.
    pub(super) async fn decide(
        &self,
        known: &mut Option<KeyState>,
        seen: Option<i64>,
    ) -> Result<Decided, Refusal> {
        loop {
            let (state, fresh) = match known.take() {
                Some(state) => {
                    let fresh = seen == Some(state.last_seq);
                    (state, fresh)
                }
                None => {
                    let read = self.gw.log().state(&self.key.id).await;
                    let state =
                        read.map_err(|e| Refusal::store(e, "nothing was run or planned"))?;
                    (state, true)
                }
            };
            let (in_force, rule, decision) = self.on(&state);
            if fresh || decision == Decision::Plan {
                return Ok(Decided {
                    state,
                    fresh,
                    in_force,
                    rule,
                    decision,
                });
            }
        }
    }
}

impl GatewayHandler {
    /// A call without a key when there are rules: they are evaluated in the
    /// default mode; a read runs unless a rule refuses it (or asks, which a
    /// caller without a key cannot be), and a write is refused as ever.
    pub(super) async fn anonymous_ruled(
        &self,
        at: ToolCall<'_>,
        checked: Checked,
    ) -> Result<CallToolResponse, ErrorData> {
        let (caller, tool) = (at.caller, at.tool);
        let prefix = &self.gw.config().gateway.tool_prefix;
        let mode = self.gw.config().modes.default_name().to_owned();
        let paths = crate::policy::call_paths(
            Some(self.gw.ops()),
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
                let refusal = Refusal::new(Code::ForbiddenByRule, message);
                let decided = (CallDecision::Refuse, name);
                Box::pin(self.refuse_ruled(at, refusal, Some(&checked.value), decided)).await
            }
            _ if effect == plangate_core::Effect::Read => self.forward(at, checked.forward).await,
            _ => Ok(Refusal::new(
                Code::PlanNeedsKey,
                refused_message(Code::PlanNeedsKey, tool, None, prefix),
            )
            .into_result()
            .into()),
        }
    }
}

/// What a refused write is told: why, and who can change it.
/// `keyed`: the caller's key and mode, when it has a key.
pub(super) fn refused_message(
    code: Code,
    tool: &CatalogTool,
    keyed: Option<(&plangate_store::ApiKey, &ModeSpec)>,
    prefix: &str,
) -> String {
    match (code, keyed) {
        (Code::PlanNeedsKey, _) => format!(
            "{} is a {} tool; callers without an API key may only read and can never plan. The person who runs plangate issues keys",
            tool.exposed, tool.effect
        ),
        (Code::Forbidden, Some((key, _))) => format!(
            "{} is a {} tool and key {:?} has scope {}, which allows reads only; ask the person who runs plangate for a plan key",
            tool.exposed, tool.effect, key.name, key.scope
        ),
        (Code::ForbiddenByMode, Some((_, mode))) => format!(
            "{} is a {} tool and mode {} runs only {} calls and refuses the rest; ask the person to change the mode ({prefix}begin_session) if this write is wanted",
            tool.exposed, tool.effect, mode.name, mode.access
        ),
        (other, _) => format!("{} was refused ({other})", tool.exposed),
    }
}
