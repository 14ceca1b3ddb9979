//! Every end of a call on the record: a refusal metered, logged and
//! recorded in the key's log, a call that ran recorded with how it ended
//! ([`crate::call_log`]). Apart from the pipeline because every stage of it
//! ends here, the same way.

use std::time::Instant;

use plangate_core::{CallDecision, CallOutcome};
use rmcp::ErrorData;
use rmcp::model::CallToolResponse;
use serde_json::Value;

use super::GatewayHandler;
use super::tool_call::ToolCall;
use super::validate::Checked;
use crate::CatalogTool;
use crate::acting::Acting;
use crate::auth::Caller;
use crate::metrics::Outcome as Metered;
use crate::refusal::Refusal;

impl GatewayHandler {
    /// Refuses a call over its rates: logged, and on the record when the
    /// tool is known.
    pub(super) async fn rate_limited(
        &self,
        caller: &Caller,
        name: &str,
        refusal: Refusal,
        started: Instant,
    ) -> Result<CallToolResponse, ErrorData> {
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
        Ok(refusal.into_result().into())
    }

    /// Refuses a call: metered, logged and recorded as `decision`.
    pub(super) async fn refuse(
        &self,
        at: ToolCall<'_>,
        refusal: Refusal,
        decision: CallDecision,
        arguments: Option<&Value>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.meter_refused(at.tool);
        tracing::info!(tool = %at.tool.exposed, caller = at.caller.label(), code = refusal.code.as_str(), "call refused");
        self.on_record_refused(at, refusal, arguments, (decision, None))
            .await
    }

    /// Refuses a call on a rule's word: metered, logged and recorded with
    /// the rule's name.
    pub(super) async fn refuse_ruled(
        &self,
        at: ToolCall<'_>,
        refusal: Refusal,
        arguments: Option<&Value>,
        (decision, rule): (CallDecision, Option<String>),
    ) -> Result<CallToolResponse, ErrorData> {
        self.meter_refused(at.tool);
        tracing::info!(tool = %at.tool.exposed, caller = at.caller.label(), rule = rule.as_deref().unwrap_or(""), "call refused by a rule");
        self.on_record_refused(at, refusal, arguments, (decision, rule))
            .await
    }

    /// Counts a refused call of `tool`.
    fn meter_refused(&self, tool: &CatalogTool) {
        self.gw
            .metrics()
            .record(&tool.upstream, &tool.original, Metered::Refused, None);
    }

    /// A refusal on the record, as the call's answer.
    async fn on_record_refused(
        &self,
        at: ToolCall<'_>,
        refusal: Refusal,
        arguments: Option<&Value>,
        decided: (CallDecision, Option<String>),
    ) -> Result<CallToolResponse, ErrorData> {
        self.on_record(
            at.caller,
            at.tool,
            arguments,
            decided,
            (CallOutcome::Refused, Some(refusal.code.as_str().to_owned())),
            at.started,
        )
        .await;
        Ok(refusal.into_result().into())
    }

    /// Sends a checked call upstream and records how it ended before its
    /// answer goes back.
    pub(super) async fn run_recorded(
        &self,
        at: ToolCall<'_>,
        checked: Checked,
        decided: (CallDecision, Option<String>),
    ) -> Result<CallToolResponse, ErrorData> {
        let (caller, tool) = (at.caller, at.tool);
        let answer = self.forward(at, checked.forward).await;
        let (outcome, code) = crate::call_log::outcome_of(&answer);
        let ended = (outcome, code);
        self.on_record(
            caller,
            tool,
            Some(&checked.value),
            decided,
            ended,
            at.started,
        )
        .await;
        answer
    }

    /// Records a call of `caller` (a key's; calls without one have no log)
    /// as [`crate::call_log`] says, ending with `outcome` and `code`.
    pub(super) async fn on_record(
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
}
