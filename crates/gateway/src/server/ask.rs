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
    /// when a rule asked).
    pub(super) async fn ask(
        &self,
        at: ToolCall<'_>,
        key: &ApiKey,
        mode: &ModeSpec,
        checked: Checked,
        rule_name: Option<String>,
        notice: Option<String>,
    ) -> Result<CallToolResponse, ErrorData> {
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
            Ok(Asked::Run(forward)) => {
                let checked = Checked {
                    forward,
                    arguments: JsonObject::new(),
                    value,
                    explicit,
                    undeclared: Vec::new(),
                };
                let decided = (CallDecision::Ask, rule_name);
                let response = Box::pin(self.run_recorded(at, checked, decided)).await?;
                Ok(with_notice(response, notice))
            }
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
                Ok(response)
            }
            Err(refusal) if rule_name.is_some() => {
                let decided = (CallDecision::Ask, rule_name);
                Box::pin(self.refuse_ruled(at, refusal, Some(&value), decided)).await
            }
            Err(refusal) => {
                Box::pin(self.refuse(at, refusal, CallDecision::Ask, Some(&value))).await
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
            rule,
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
