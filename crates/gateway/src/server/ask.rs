//! An `ask` mode's question before a call above its access: the person
//! says yes to exactly these arguments (by fingerprint) or nothing runs
//! ([`crate::review::ask_for_call`]). Apart from the pipeline because a
//! question has rounds of its own: a retry that answers it, or one that
//! answers the upstream's own question about a call already allowed.

use plangate_core::{CallDecision, CallOutcome, Code, ModeSpec};
use plangate_store::ApiKey;
use rmcp::model::{CallToolRequestParams, CallToolResponse, JsonObject};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};

use super::tool_call::ToolCall;
use super::validate::Checked;
use super::{GatewayHandler, with_notice};
use crate::CatalogTool;
use crate::acting::Acting;
use crate::refusal::Refusal;

impl GatewayHandler {
    /// Acts on an `ask` decision: asks the person ([`Self::ask_first`]);
    /// a yes runs the call, on the record as asked; a question still open
    /// is on the record as pending; a no is refused (on the rule's word
    /// when a rule asked); a question nobody answered is handed back
    /// ([`AskEnd::Unanswered`]) for the call to be planned.
    pub(super) async fn ask(
        &self,
        at: ToolCall<'_>,
        key: &ApiKey,
        mode: &ModeSpec,
        checked: Checked,
        rule_name: Option<String>,
        notice: Option<String>,
    ) -> Result<AskEnd, ErrorData> {
        let acting = Acting {
            key: key.clone(),
            channel: self.channel(),
            operator: None,
        };
        let explicit = checked.explicit;
        let value = checked.value.clone();
        let asked = self.ask_first(
            &acting,
            (mode, rule_name.as_deref()),
            at.tool,
            checked,
            at.cx,
        );
        match Box::pin(asked).await {
            Ok(Asked::Run(forward, sent)) => {
                // The question's heartbeat went out under the client's
                // token: the call's own progress is counted above it.
                let at = ToolCall {
                    progress_sent: sent,
                    ..at
                };
                let checked = Checked {
                    forward,
                    arguments: JsonObject::new(),
                    value,
                    explicit,
                    undeclared: Vec::new(),
                };
                let decided = (CallDecision::Ask, rule_name);
                let response = Box::pin(self.run_recorded(at, checked, decided)).await?;
                Ok(AskEnd::Answered(with_notice(response, notice)))
            }
            Ok(Asked::Unanswered(why)) => Ok(AskEnd::Unanswered(why)),
            Ok(Asked::Pending(response)) => {
                Box::pin(self.on_record(
                    at.caller,
                    at.tool,
                    Some(&value),
                    (CallDecision::Ask, rule_name),
                    (CallOutcome::Pending, None),
                    at.started,
                ))
                .await;
                Ok(AskEnd::Answered(response))
            }
            Err(refusal) if rule_name.is_some() => {
                let decided = (CallDecision::Ask, rule_name);
                let refused = self.refuse_ruled(at, refusal, Some(&value), decided);
                Box::pin(refused).await.map(AskEnd::Answered)
            }
            Err(refusal) => {
                let refused = self.refuse(at, refusal, CallDecision::Ask, Some(&value));
                Box::pin(refused).await.map(AskEnd::Answered)
            }
        }
    }

    /// An `ask` mode's question before a call above its access: the person
    /// says yes to exactly these arguments (by fingerprint) or nothing runs.
    async fn ask_first(
        &self,
        acting: &Acting,
        (mode, rule): (&ModeSpec, Option<&str>),
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
            return Ok(Asked::Run(forward, 0.0));
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
            rule,
        };
        let sent = match crate::review::ask_for_call(
            &self.gw, acting, mode, tool, &redacted, &digest, round, cx,
        )
        .await?
        {
            crate::review::Asked::Yes(heard) => heard,
            crate::review::Asked::Pending(response) => return Ok(Asked::Pending(response)),
            crate::review::Asked::Unanswered(why) => return Ok(Asked::Unanswered(why)),
        };
        forward.request_state = None;
        forward.input_responses = None;
        Ok(Asked::Run(forward, sent))
    }
}

/// How an `ask` ended for the pipeline.
pub(super) enum AskEnd {
    /// Answered (run, refused or pending): the call's answer.
    Answered(CallToolResponse),
    /// Nobody answered (why): the pipeline plans the call instead
    /// ([`crate::plan::PlanReason::Unanswered`]).
    Unanswered(String),
}

/// What came of asking before a call.
enum Asked {
    /// The person said yes (or had already): send this call; the progress
    /// the question already sent under the client's token.
    Run(CallToolRequestParams, f64),
    /// The question went to the client as `input_required`; this is the
    /// answer for now.
    Pending(CallToolResponse),
    /// Nobody answered the question (why).
    Unanswered(String),
}
