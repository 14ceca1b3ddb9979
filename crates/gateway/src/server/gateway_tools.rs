//! A call to one of plangate's own tools: read its arguments
//! ([`crate::tools::Call`]), run it where its rule lives, and keep this
//! session's view of the mode (and its tool list) true afterwards.

use plangate_core::{Code, ModeSpec};
use rmcp::model::{CallToolRequestParams, CallToolResponse};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::Value;

use super::{GatewayHandler, with_notice};
use crate::acting::Acting;
use crate::auth::Caller;
use crate::refusal::Refusal;
use crate::tools::{Call, GatewayTool};

impl GatewayHandler {
    /// Runs gateway tool `tool` for `caller`. Every answer, refusals
    /// included, is a tool result; a mode changed from outside since the
    /// agent last heard rides along as a notice. `seen`: where the key's
    /// log stood when it was authenticated, if the store said
    /// ([`crate::auth::LogSeen`]).
    pub(super) async fn call_gateway_tool(
        &self,
        caller: &Caller,
        seen: Option<i64>,
        tool: GatewayTool,
        request: CallToolRequestParams,
        cx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Caller::Key(key) = caller else {
            return Ok(Refusal::new(
                Code::PlanNeedsKey,
                "the plan tools need an API key: a caller without one can never plan. The person who runs plangate issues keys",
            )
            .into_result()
            .into());
        };
        let acting = Acting {
            key: key.clone(),
            channel: self.channel(),
            operator: None,
        };
        let arguments = request.arguments.clone().unwrap_or_default();
        let read = self.gw.log().state_seen(&key.id, seen).await.ok();
        let notice = match &read {
            Some(state) => {
                let in_force = self.gw.config().modes.in_force(state);
                self.tell_mode(in_force, cx).await.1
            }
            None => None,
        };
        let call = match Call::read(tool, &arguments, &self.gw.config().modes.names()) {
            Ok(call) => call,
            Err(refusal) => return Ok(self.refused(caller, tool, refusal, notice)),
        };
        // Whether this call may have set the mode itself, and whether plan
        // mode (so the tool list) changed.
        // The state after the call, when the call had it at hand.
        let mut after = None;
        let (result, resync, tools_changed) = match call {
            Call::Session(call) => match crate::tools::call(&self.gw, &acting, call, read).await {
                Ok((result, changed, state)) => {
                    after = state;
                    (Ok(result.into()), true, changed)
                }
                Err(refusal) => (Err(refusal), false, false),
            },
            Call::ApplyPlan(apply) => {
                // Its session is not evicted while the apply runs.
                let _held = crate::session_guard::hold(cx);
                let progress = cx
                    .meta
                    .get_progress_token()
                    .map(|token| crate::apply::Progress::client(cx.peer.clone(), token));
                let receipt = crate::apply::apply_plan(
                    self.gw.ops(),
                    &acting,
                    apply,
                    progress,
                    cx.ct.clone(),
                )
                .await;
                (
                    receipt.map(|r| crate::apply::receipt_result(&r).into()),
                    false,
                    false,
                )
            }
            Call::Revert { step_ids } => (
                crate::operator::revert(self.gw.ops(), &acting, &step_ids)
                    .await
                    .map(|answer| {
                        crate::operator::revert_result(&answer, prefix_of(&self.gw)).into()
                    })
                    .map_err(|e| Refusal::new(e.code(), e.to_string())),
                true,
                false,
            ),
            Call::ExitPlanMode { plan } => {
                // Nor while the person is asked, and then the apply runs.
                let _held = crate::session_guard::hold(cx);
                let args_value = Value::Object(arguments);
                let round = crate::review::Round {
                    tool: &request.name,
                    arguments: &args_value,
                    state: request.request_state.as_deref(),
                    responses: request.input_responses.as_ref(),
                    rule: None,
                };
                let was_plan = self
                    .seen
                    .lock()
                    .spec
                    .as_ref()
                    .is_some_and(ModeSpec::plan_mode);
                let result =
                    crate::review::exit_plan_mode(&self.gw, &acting, &plan, round, cx).await;
                let now_plan = self.in_plan_mode(&key.id).await.unwrap_or(was_plan);
                (result, true, was_plan != now_plan)
            }
        };
        // What this session did to the mode is no news to its agent.
        if resync {
            let state = match after {
                Some(state) => Some(state),
                None => self.gw.log().state(&key.id).await.ok(),
            };
            if let Some(state) = state {
                self.set_seen_mode(self.gw.config().modes.in_force(&state));
            }
        }
        if tools_changed {
            let _ = cx.peer.notify_tool_list_changed().await;
            self.gw
                .hub()
                .notify_key_tools_changed(&key.id, self.session)
                .await;
        }
        Ok(match result {
            Ok(response) => with_notice(response, notice),
            Err(refusal) => self.refused(caller, tool, refusal, notice),
        })
    }

    /// A gateway tool's refusal as its answer, logged.
    fn refused(
        &self,
        caller: &Caller,
        tool: GatewayTool,
        refusal: Refusal,
        notice: Option<String>,
    ) -> CallToolResponse {
        tracing::info!(tool = ?tool, caller = caller.label(), code = refusal.code.as_str(), "gateway tool refused");
        with_notice(refusal.into_result().into(), notice)
    }
}

/// The gateway tools' prefix (`plangate_`).
fn prefix_of(gw: &crate::Gateway) -> String {
    gw.config().gateway.tool_prefix.clone()
}
