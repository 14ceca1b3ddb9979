//! Review in the agent's own client (DESIGN §7): `exit_plan_mode` asks the
//! person about the plan, and an `ask` mode asks before a call above its
//! access — through MCP elicitation (2025-11-25, form mode).
//!
//! The person's yes is bound to exactly what they saw: the question carries
//! the plan digest, the approval is recorded for that digest, and apply runs
//! only if the plan still has that digest — a step added while the question
//! was open makes the yes write nothing. No answer, a decline, a cancel, a
//! timeout or a client that cannot ask: nothing is written (never fails
//! open).

use std::time::Duration;

use plangate_core::{Code, EventKind, KeyState, ModeSpec, Verdict, Where};
use plangate_store::now_ms;
use rmcp::model::{CallToolResult, ContentBlock, ElicitRequestParams, ElicitationAction};
use rmcp::service::{RequestContext, ServiceError};
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};

use crate::Gateway;
use crate::apply::{ApplyRequest, Progress, apply_plan};
use crate::plan::{Acting, expires_in};
use crate::refusal::Refusal;

/// How long the person has to answer before the question lapses (nothing
/// is written).
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(600);

/// The person's answer to a question.
enum Answer {
    Approve,
    KeepPlanning(Option<String>),
    Decline,
    Cancel,
    Lapsed(String),
}

/// Whether the client declared form elicitation.
pub fn can_elicit(peer: &Peer<RoleServer>) -> bool {
    peer.peer_info()
        .and_then(|info| serde_json::to_value(&info.capabilities).ok())
        .and_then(|caps| caps.get("elicitation").cloned())
        .is_some_and(|e| match e {
            Value::Object(m) => m.is_empty() || m.contains_key("form"),
            _ => false,
        })
}

fn unsupported(prefix: &str, mode: &ModeSpec, what: &str) -> Refusal {
    Refusal::new(
        Code::ElicitationUnsupported,
        format!(
            "this client cannot show the person a question (it declared no form elicitation), so plangate cannot ask them {what}. Show the person the plan in plain words ({prefix}get_plan lists every step and the plan digest) and call {prefix}apply_plan with that plan_digest only after they say yes. Nothing was applied; the mode stays {}",
            mode.name
        ),
    )
}

async fn ask(peer: &Peer<RoleServer>, message: String, timeout: Duration) -> Answer {
    let params: ElicitRequestParams = match serde_json::from_value(json!({
        "mode": "form",
        "message": message,
        "requestedSchema": {
            "type": "object",
            "properties": {
                "decision": {
                    "type": "string",
                    "title": "Decision",
                    "oneOf": [
                        {"const": "approve", "title": "Approve: apply it"},
                        {"const": "keep_planning", "title": "Keep planning"}
                    ]
                },
                "feedback": {"type": "string", "title": "Feedback for the agent (optional)"}
            },
            "required": ["decision"]
        }
    })) {
        Ok(p) => p,
        Err(e) => return Answer::Lapsed(format!("the question could not be built: {e}")),
    };
    match peer
        .create_elicitation_with_timeout(params, Some(timeout))
        .await
    {
        Ok(result) => match result.action {
            ElicitationAction::Accept => {
                let content = result.content.unwrap_or(Value::Null);
                let feedback = content
                    .get("feedback")
                    .and_then(Value::as_str)
                    .filter(|f| !f.trim().is_empty())
                    .map(str::to_owned);
                match content.get("decision").and_then(Value::as_str) {
                    Some("approve") => Answer::Approve,
                    _ => Answer::KeepPlanning(feedback),
                }
            }
            ElicitationAction::Decline => Answer::Decline,
            _ => Answer::Cancel,
        },
        Err(ServiceError::Timeout { .. }) => {
            Answer::Lapsed(format!("no answer within {} s", timeout.as_secs()))
        }
        Err(e) => Answer::Lapsed(format!("the question failed: {e}")),
    }
}

/// The question of DESIGN §7 about a plan: who asks, every step (server,
/// tool, predicted effect, where it lands, notes and warnings), freshness
/// and the digest.
fn plan_question(
    gw: &Gateway,
    acting: &Acting,
    state: &KeyState,
    agent_plan: &str,
    digest: &str,
) -> String {
    let now = now_ms();
    let catalog = gw.catalog();
    let mut lines = vec![
        format!(
            "{} (API key {:?}, scope {}) asks you to approve this plan.",
            "An agent", acting.key.name, acting.key.scope
        ),
        String::new(),
        format!("In its words: {}", agent_plan.trim()),
        String::new(),
        "The steps plangate recorded (nothing has been written yet):".to_owned(),
    ];
    for s in state.open_steps() {
        let r = &s.record;
        let mut warnings = Vec::new();
        if r.effect == plangate_core::Effect::Destructive {
            warnings.push("DESTRUCTIVE".to_owned());
        }
        match r.lands_on.where_ {
            Where::Live => warnings.push("live".to_owned()),
            Where::Copy => warnings.push("lands on a copy".to_owned()),
        }
        let open_world = catalog
            .tools
            .iter()
            .find(|t| t.upstream == r.server && t.original == r.tool)
            .and_then(|t| t.tool.annotations.as_ref())
            .is_none_or(|a| a.open_world_hint != Some(false));
        if open_world {
            warnings.push("open world".to_owned());
        }
        lines.push(format!(
            "{}. [{}] {} — {} on {}; {}{}",
            r.position,
            s.status,
            r.predicted_effect,
            r.tool,
            r.server,
            warnings.join(", "),
            r.approval_note
                .as_ref()
                .map(|n| format!(". {n}"))
                .unwrap_or_default()
        ));
    }
    let first = state.open_steps().map(|s| s.record.planned_at_ms).min();
    lines.push(String::new());
    lines.push(format!(
        "Planned {}{}. Plan digest {digest}.",
        first
            .map(|t| format!("from {}", plangate_store::format_time_ms(t)))
            .unwrap_or_else(|| "just now".to_owned()),
        expires_in(state, now, gw.ttl_ms())
            .map(|s| format!("; expires in {} min", (s + 59) / 60))
            .unwrap_or_default()
    ));
    lines.push("Approve to apply exactly these steps now; keep planning to send the agent back with your feedback.".to_owned());
    lines.join("\n")
}

fn review_declined(message: String, feedback: Option<&str>) -> CallToolResult {
    let mut body =
        json!({"success": false, "code": Code::ReviewDeclined.as_str(), "message": message});
    if let Some(f) = feedback {
        body["feedback"] = json!(f);
    }
    let text = match feedback {
        Some(f) => format!("{message} The person's feedback, verbatim: {f}"),
        None => message.clone(),
    };
    let mut r = CallToolResult::structured_error(body);
    r.content = vec![ContentBlock::text(text)];
    r
}

/// `exit_plan_mode {plan}`: asks the person about the agent's plan plus the
/// recorded steps; on a yes applies exactly that digest and returns the
/// receipt, with the mode back to `default`.
pub async fn exit_plan_mode(
    gw: &Gateway,
    acting: &Acting,
    agent_plan: &str,
    cx: &RequestContext<RoleServer>,
) -> Result<CallToolResult, Refusal> {
    let prefix = gw.config().gateway.tool_prefix.clone();
    let state = gw
        .log()
        .state(&acting.key.id)
        .await
        .map_err(crate::tools::log_failed)?;
    let mode = gw.config().modes.resolve(state.mode.as_deref()).0;
    if !mode.plan_mode() {
        return Err(Refusal::new(
            Code::NotInPlanMode,
            format!(
                "mode {} is not a plan mode, so there is no plan review to leave; writes run as the mode allows",
                mode.name
            ),
        ));
    }
    if !can_elicit(&cx.peer) {
        return Err(unsupported(&prefix, &mode, "about the plan"));
    }
    let digest = state.plan_digest();
    let review_id = plangate_store::new_id("rev_")
        .map_err(|e| Refusal::new(Code::UpstreamUnavailable, e.to_string()))?;
    record(
        gw,
        acting,
        EventKind::ReviewRequested {
            review_id: review_id.clone(),
            plan_digest: digest.clone(),
        },
    )
    .await?;
    let question = plan_question(gw, acting, &state, agent_plan, &digest);
    let answer = ask(&cx.peer, question, gw.review_timeout()).await;
    let (verdict, feedback) = match &answer {
        Answer::Approve => (Verdict::Approve, None),
        Answer::KeepPlanning(f) => (Verdict::KeepPlanning, f.clone()),
        Answer::Decline => (Verdict::Decline, None),
        Answer::Cancel | Answer::Lapsed(_) => (Verdict::Cancel, None),
    };
    record(
        gw,
        acting,
        EventKind::ReviewAnswered {
            review_id: Some(review_id),
            verdict,
            plan_digest: digest.clone(),
            feedback: feedback.clone(),
        },
    )
    .await?;
    match answer {
        Answer::Approve => {
            let progress = cx.meta.get_progress_token().map(|token| Progress {
                peer: cx.peer.clone(),
                token,
            });
            let request = ApplyRequest {
                step_ids: None,
                plan_digest: Some(digest),
                continue_on_error: false,
            };
            let mut receipt = apply_plan(gw, acting, request, progress, cx.ct.clone()).await?;
            // The person approved and the plan ran: the session leaves plan mode.
            record(
                gw,
                acting,
                EventKind::ModeSet {
                    mode: plangate_core::DEFAULT_MODE.to_owned(),
                },
            )
            .await?;
            if let Some(Value::Object(body)) = receipt.structured_content.as_mut() {
                body.insert("plan_mode".into(), json!(false));
                body.insert("mode".into(), json!(plangate_core::DEFAULT_MODE));
            }
            Ok(receipt)
        }
        Answer::KeepPlanning(f) => Ok(review_declined(
            format!(
                "The person wants you to keep planning; nothing was applied and the mode stays {}.",
                mode.name
            ),
            Some(f.as_deref().unwrap_or("")),
        )),
        Answer::Decline => Ok(review_declined(
            format!(
                "The person declined the plan; nothing was applied and the mode stays {}.",
                mode.name
            ),
            None,
        )),
        Answer::Cancel => Ok(review_declined(
            format!(
                "The person dismissed the question; nothing was applied and the mode stays {}.",
                mode.name
            ),
            None,
        )),
        Answer::Lapsed(why) => Ok(review_declined(
            format!(
                "No answer from the person ({why}); nothing was applied and the mode stays {}.",
                mode.name
            ),
            None,
        )),
    }
}

/// An `ask` mode: asks the person about one call above the mode's access.
/// `Ok(())` means yes — run it; a refusal means no call.
pub async fn ask_for_call(
    gw: &Gateway,
    acting: &Acting,
    mode: &ModeSpec,
    tool: &crate::CatalogTool,
    redacted_arguments: &Value,
    call_digest: &str,
    cx: &RequestContext<RoleServer>,
) -> Result<(), Refusal> {
    let prefix = gw.config().gateway.tool_prefix.clone();
    if !can_elicit(&cx.peer) {
        return Err(Refusal::new(
            Code::ElicitationUnsupported,
            format!(
                "mode {} asks the person before {} calls, and this client cannot show them a question (no form elicitation). Nothing was run. Tell the person what you want to do; they can change the mode ({prefix}begin_session) or you can plan it with \"_plangate_plan\": true",
                mode.name, tool.effect
            ),
        ));
    }
    let review_id = plangate_store::new_id("rev_")
        .map_err(|e| Refusal::new(Code::UpstreamUnavailable, e.to_string()))?;
    record(
        gw,
        acting,
        EventKind::ReviewRequested {
            review_id: review_id.clone(),
            plan_digest: call_digest.to_owned(),
        },
    )
    .await?;
    let question = format!(
        "An agent (API key {:?}, scope {}) wants to call {} on {} — a {} tool, above what mode {} runs without asking.\nArguments: {}\n{}Call digest {call_digest}.\nApprove to run this one call now.",
        acting.key.name,
        acting.key.scope,
        tool.original,
        tool.upstream,
        tool.effect,
        mode.name,
        redacted_arguments,
        if tool.effect == plangate_core::Effect::Destructive {
            "DESTRUCTIVE: it may destroy or overwrite data.\n"
        } else {
            ""
        },
    );
    let answer = ask(&cx.peer, question, gw.review_timeout()).await;
    let (verdict, feedback) = match &answer {
        Answer::Approve => (Verdict::Approve, None),
        Answer::KeepPlanning(f) => (Verdict::KeepPlanning, f.clone()),
        Answer::Decline => (Verdict::Decline, None),
        Answer::Cancel | Answer::Lapsed(_) => (Verdict::Cancel, None),
    };
    record(
        gw,
        acting,
        EventKind::ReviewAnswered {
            review_id: Some(review_id),
            verdict,
            plan_digest: call_digest.to_owned(),
            feedback: feedback.clone(),
        },
    )
    .await?;
    match answer {
        Answer::Approve => Ok(()),
        Answer::KeepPlanning(f) => Err(Refusal::new(
            Code::ReviewDeclined,
            format!(
                "The person did not allow this call; nothing was run. Their feedback, verbatim: {}",
                f.unwrap_or_default()
            ),
        )),
        Answer::Decline | Answer::Cancel => Err(Refusal::new(
            Code::ReviewDeclined,
            "The person did not allow this call; nothing was run.".to_owned(),
        )),
        Answer::Lapsed(why) => Err(Refusal::new(
            Code::ReviewDeclined,
            format!("No answer from the person ({why}); nothing was run."),
        )),
    }
}

async fn record(gw: &Gateway, acting: &Acting, kind: EventKind) -> Result<(), Refusal> {
    gw.log()
        .transact(&acting.key.id, |_| {
            Ok::<_, Refusal>((vec![acting.event(kind.clone())], ()))
        })
        .await
        .map_err(crate::tools::log_failed)??;
    Ok(())
}
