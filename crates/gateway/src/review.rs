//! Review in the agent's own client (docs/design.md §7): `exit_plan_mode` asks the
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
use rmcp::model::{
    CallToolResponse, CallToolResult, ElicitRequest, ElicitRequestParams, ElicitResult,
    ElicitationAction, InputRequest, InputRequiredResult, InputResponses, RequestStateCodec,
    SealOptions,
};
use rmcp::service::{RequestContext, ServiceError};
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};

use crate::Gateway;
use crate::acting::Acting;
use crate::apply::{ApplyRequest, Progress, apply_plan};
use crate::plan::expires_in;
use crate::refusal::Refusal;

/// The person's answer to a question.
enum Answer {
    Approve,
    KeepPlanning(Option<String>),
    Decline,
    Cancel,
    Lapsed(String),
}

/// Whether the client declared form elicitation — per request in
/// 2026-07-28, from the handshake before.
pub fn can_elicit(cx: &RequestContext<RoleServer>) -> bool {
    client_capability(cx, "elicitation").is_some_and(|e| match e {
        Value::Object(m) => m.is_empty() || m.contains_key("form"),
        _ => false,
    })
}

/// The client's declared capability `what` (`elicitation`, `sampling`,
/// `roots`) — per request in 2026-07-28, from the handshake before — if it
/// declared one.
pub fn client_capability(cx: &RequestContext<RoleServer>, what: &str) -> Option<Value> {
    cx.client_capabilities()
        .and_then(|caps| serde_json::to_value(&caps).ok())
        .and_then(|caps| caps.get(what).cloned())
        .filter(|v| !v.is_null())
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

fn question_params(message: String) -> Result<ElicitRequestParams, serde_json::Error> {
    serde_json::from_value(json!({
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
    }))
}

/// What an elicitation result says.
fn read_answer(result: ElicitResult) -> Answer {
    match result.action {
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
    }
}

/// Asks over `elicitation/create` (MCP 2025-11-25) and waits, at most
/// `timeout`.
async fn ask(peer: &Peer<RoleServer>, message: String, timeout: Duration) -> Answer {
    let params = match question_params(message) {
        Ok(p) => p,
        Err(e) => return Answer::Lapsed(format!("the question could not be built: {e}")),
    };
    match peer
        .create_elicitation_with_timeout(params, Some(timeout))
        .await
    {
        Ok(result) => read_answer(result),
        Err(ServiceError::Timeout { .. }) => {
            Answer::Lapsed(format!("no answer within {} s", timeout.as_secs()))
        }
        Err(e) => Answer::Lapsed(format!("the question failed: {e}")),
    }
}

/// The question as the person reads it in their client: each line
/// screened ([`plangate_core::screen()`]: control characters, escape
/// sequences and invisible format characters an agent or an upstream put
/// in a value shown as visible escapes, the line marked), so nothing in a
/// value can hide or reorder what the person is asked about. The line
/// breaks are the question's own; a line break inside a value shows as
/// `\n`.
fn question_text(lines: &[String]) -> String {
    lines
        .iter()
        .map(|l| plangate_core::screen(l).marked().into_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The question of docs/design.md §7 about a plan: who asks, every step (server,
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
        "In its words:".to_owned(),
    ];
    // The agent's plan keeps its own lines, each screened on its own.
    lines.extend(agent_plan.trim().split('\n').map(|l| format!("  {l}")));
    lines.extend([
        String::new(),
        "The steps plangate recorded (nothing has been written yet):".to_owned(),
    ]);
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
        if let Some(rejection) = &s.rejection {
            lines.push(format!(
                "   Rejected by {}, will not run: {}",
                rejection.by, rejection.reason
            ));
        } else if let Some(p) = &r.preview {
            lines.extend(preview_excerpt(p));
            if r.preview_withheld.is_some() {
                lines.push("   (not shown to the agent: it may not read the target)".to_owned());
            }
        }
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
    lines.push("Approve to apply exactly the waiting (planned) steps now; keep planning to send the agent back with your feedback.".to_owned());
    question_text(&lines)
}

/// The most lines of a step's diff or state the question shows.
const QUESTION_PREVIEW_LINES: usize = 12;

/// A step's preview for the question: its first lines, indented, then how
/// many more there are (the whole preview is in `get_plan`, `plans show`
/// and the console).
fn preview_excerpt(p: &plangate_core::Preview) -> Vec<String> {
    use plangate_core::Preview;
    let text = match p {
        Preview::Diff { diff, .. } => diff.clone(),
        Preview::State { state, .. } => match state {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Null => String::new(),
            other => serde_json::to_string_pretty(other).unwrap_or_default(),
        },
        Preview::Unavailable { reason, .. } => return vec![format!("   (no preview: {reason})")],
    };
    // Split at LF only: a CR stays in its line, where it is shown.
    let all: Vec<&str> = text
        .strip_suffix('\n')
        .unwrap_or(&text)
        .split('\n')
        .collect();
    let mut out: Vec<String> = all
        .iter()
        .take(QUESTION_PREVIEW_LINES)
        .map(|l| format!("   {l}"))
        .collect();
    if all.len() > QUESTION_PREVIEW_LINES {
        out.push(format!(
            "   … {} more line(s) (the whole preview: get_plan, plans show, the console)",
            all.len() - QUESTION_PREVIEW_LINES
        ));
    }
    out
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
    crate::plan::with_text(body, text, true)
}

/// Where a reviewed call is in its rounds: the MCP 2026-07-28 retry of a
/// call carries the request state plangate signed and the client's answers.
#[derive(Clone, Copy)]
pub struct Round<'a> {
    /// The exposed name of the tool being called.
    pub tool: &'a str,
    /// The call's arguments (as sent; never stored in the state).
    pub arguments: &'a Value,
    /// `requestState` echoed back by the client, on a retry.
    pub state: Option<&'a str>,
    /// `inputResponses` from the client, on a retry.
    pub responses: Option<&'a InputResponses>,
}

/// Whether the request speaks MCP 2026-07-28 or later: no server-to-client
/// requests, so the person is asked through `input_required`.
pub fn modern(cx: &RequestContext<RoleServer>) -> bool {
    cx.protocol_version().is_some_and(|v| !v.has_initialize())
}

/// The key under which the question travels in `inputRequests`.
const INPUT_KEY: &str = "review";

/// What the signed request state binds (docs/design.md §7): key id, tool, a digest
/// of the canonical arguments (never the arguments: the state is readable),
/// the plan digest (or the call's own) and the question; expiry is the
/// codec's.
#[derive(serde::Serialize, serde::Deserialize)]
struct ReviewState {
    kid: String,
    tool: String,
    args: String,
    digest: String,
    review: String,
}

/// The signing codec for request states (signing key per docs/design.md §2).
pub(crate) fn codec(gw: &Gateway) -> Result<RequestStateCodec, Refusal> {
    RequestStateCodec::try_new(gw.material().signing_key().to_vec())
        .map_err(|e| Refusal::internal(format!("cannot sign request state: {e}")))
}

/// A digest of the call's arguments with secrets keyed (docs/design.md §5 Digest).
pub(crate) fn args_digest(gw: &Gateway, arguments: &Value) -> Result<String, Refusal> {
    let keyed = gw
        .redactor()
        .keyed(arguments, gw.material().signing_key())
        .map_err(|e| Refusal::new(Code::InvalidArguments, e.to_string()))?;
    let canonical = plangate_core::canonical_json(&keyed)
        .map_err(|e| Refusal::new(Code::InvalidArguments, e.to_string()))?;
    Ok(plangate_core::hmac_hex(
        gw.material().signing_key(),
        canonical.as_bytes(),
    ))
}

/// The first round over 2026-07-28: record the question and answer
/// `input_required` with it and a signed, expiring, single-use state.
async fn open_question(
    gw: &Gateway,
    acting: &Acting,
    round: Round<'_>,
    question: String,
    digest: &str,
) -> Result<CallToolResponse, Refusal> {
    let review = plangate_store::new_id("rev_").map_err(Refusal::internal)?;
    let payload = ReviewState {
        kid: acting.key.id.clone(),
        tool: round.tool.to_owned(),
        args: args_digest(gw, round.arguments)?,
        digest: digest.to_owned(),
        review: review.clone(),
    };
    let options = SealOptions::new()
        .associated_data(acting.key.id.as_bytes())
        .ttl(gw.review_timeout());
    let sealed = codec(gw)?
        .seal_json_with(&payload, &options)
        .map_err(|e| Refusal::internal(format!("cannot sign request state: {e}")))?;
    record(
        gw,
        acting,
        EventKind::ReviewRequested {
            review_id: review,
            plan_digest: digest.to_owned(),
        },
    )
    .await?;
    let params = question_params(question)
        .map_err(|e| Refusal::internal(format!("the question could not be built: {e}")))?;
    let requests = std::collections::BTreeMap::from([(
        INPUT_KEY.to_owned(),
        InputRequest::Elicitation(ElicitRequest::new(params)),
    )]);
    Ok(CallToolResponse::InputRequired(InputRequiredResult::new(
        Some(requests),
        Some(sealed),
    )))
}

/// The retry over 2026-07-28: verify the state (signature, expiry, key,
/// tool, arguments), take the answer and record it — once: a replayed state
/// is refused atomically.
async fn take_answer(
    gw: &Gateway,
    acting: &Acting,
    round: Round<'_>,
) -> Result<(String, Answer), Refusal> {
    let invalid = |why: &str| {
        Refusal::new(
            Code::ReviewDeclined,
            format!(
                "{why}; nothing was written. Call {} again to ask the person anew",
                round.tool
            ),
        )
    };
    let sealed = round.state.unwrap_or_default();
    let payload: ReviewState = codec(gw)?
        .open_json_with(sealed, acting.key.id.as_bytes())
        .map_err(|e| match e {
            rmcp::model::RequestStateError::Expired => invalid("the question expired before the answer came back"),
            _ => invalid("the request state is not one plangate issued to this key (tampered, forged or from another key)"),
        })?;
    if payload.kid != acting.key.id || payload.tool != round.tool {
        return Err(invalid("the request state belongs to another key or tool"));
    }
    if payload.args != args_digest(gw, round.arguments)? {
        return Err(invalid(
            "the retried request's arguments differ from the ones the person was asked about",
        ));
    }
    let answer = round
        .responses
        .and_then(|r| r.get(INPUT_KEY))
        .and_then(|v| serde_json::from_value::<ElicitResult>(v.clone()).ok())
        .map(read_answer)
        .unwrap_or(Answer::Cancel);
    let (verdict, feedback) = verdict_of(&answer);
    let review = payload.review.clone();
    let digest = payload.digest.clone();
    gw.log()
        .transact(&acting.key.id, |state| {
            if state.is_answered(&review) {
                return Err(invalid(
                    "this question was already answered (a replayed request state)",
                ));
            }
            Ok((
                vec![acting.event(EventKind::ReviewAnswered {
                    review_id: Some(review.clone()),
                    verdict,
                    plan_digest: digest.clone(),
                    feedback: feedback.clone(),
                    step_ids: None,
                    revision: state.revision_seen(&digest),
                })],
                (),
            ))
        })
        .await
        .map_err(crate::tools::log_failed)??;
    Ok((payload.digest, answer))
}

fn verdict_of(answer: &Answer) -> (Verdict, Option<String>) {
    match answer {
        Answer::Approve => (Verdict::Approve, None),
        Answer::KeepPlanning(f) => (Verdict::KeepPlanning, f.clone()),
        Answer::Decline => (Verdict::Decline, None),
        Answer::Cancel | Answer::Lapsed(_) => (Verdict::Cancel, None),
    }
}

/// `exit_plan_mode {plan}`: asks the person about the agent's plan plus the
/// recorded steps; on a yes applies exactly that digest and returns the
/// receipt, with the mode back to `default`. Over 2026-07-28 the question
/// is an `input_required` round; before, an `elicitation/create`.
pub async fn exit_plan_mode(
    gw: &Gateway,
    acting: &Acting,
    agent_plan: &str,
    round: Round<'_>,
    cx: &RequestContext<RoleServer>,
) -> Result<CallToolResponse, Refusal> {
    let prefix = gw.config().gateway.tool_prefix.clone();
    let state = gw
        .log()
        .state(&acting.key.id)
        .await
        .map_err(crate::tools::log_failed)?;
    let in_force = gw.config().modes.in_force(&state);
    // Under a lock the agent cannot leave: refused before anyone is asked.
    plangate_core::rules::may_change_mode(
        &in_force,
        plangate_core::rules::ModeChange::ExitPlanMode,
    )
    .map_err(|refused| {
        crate::tools::locked(
            &refused,
            &acting.key.name,
            "nobody was asked and nothing was applied",
        )
    })?;
    let mode = in_force.spec;
    if !mode.plan_mode() {
        return Err(Refusal::new(
            Code::NotInPlanMode,
            format!(
                "mode {} is not a plan mode, so there is no plan review to leave; writes run as the mode allows",
                mode.name
            ),
        ));
    }
    let (digest, answer) = if round.state.is_some() {
        take_answer(gw, acting, round).await?
    } else {
        if !can_elicit(cx) {
            return Err(unsupported(&prefix, &mode, "about the plan"));
        }
        let digest = state.plan_digest();
        let question = plan_question(gw, acting, &state, agent_plan, &digest);
        if modern(cx) {
            return open_question(gw, acting, round, question, &digest).await;
        }
        let answer = ask_and_record(gw, acting, cx, question, &digest).await?;
        (digest, answer)
    };
    conclude_plan(gw, acting, &mode, digest, answer, cx)
        .await
        .map(CallToolResponse::from)
}

/// What follows the person's answer about a plan.
async fn conclude_plan(
    gw: &Gateway,
    acting: &Acting,
    mode: &ModeSpec,
    digest: String,
    answer: Answer,
    cx: &RequestContext<RoleServer>,
) -> Result<CallToolResult, Refusal> {
    match answer {
        Answer::Approve => {
            let progress = cx.meta.get_progress_token().map(|token| Progress {
                peer: cx.peer.clone(),
                token,
            });
            // Bound to the digest the person saw: the plan is rebuilt fresh
            // and only a matching digest proceeds (else plan_changed).
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

/// What an `ask` mode's question came to.
pub enum Asked {
    /// The person said yes: run the call.
    Yes,
    /// Over 2026-07-28: answer this `input_required` and wait for the retry.
    Pending(CallToolResponse),
}

/// An `ask` mode: asks the person about one call above the mode's access,
/// bound to that call's own digest. A refusal means no call.
#[allow(clippy::too_many_arguments)]
pub async fn ask_for_call(
    gw: &Gateway,
    acting: &Acting,
    mode: &ModeSpec,
    tool: &crate::CatalogTool,
    redacted_arguments: &Value,
    call_digest: &str,
    round: Round<'_>,
    cx: &RequestContext<RoleServer>,
) -> Result<Asked, Refusal> {
    let prefix = gw.config().gateway.tool_prefix.clone();
    let answer = if round.state.is_some() {
        let (digest, answer) = take_answer(gw, acting, round).await?;
        if digest != call_digest {
            return Err(Refusal::new(
                Code::ReviewDeclined,
                "the answer was about another call; nothing was run".to_owned(),
            ));
        }
        answer
    } else {
        if !can_elicit(cx) {
            return Err(Refusal::new(
                Code::ElicitationUnsupported,
                format!(
                    "mode {} asks the person before {} calls, and this client cannot show them a question (no form elicitation). Nothing was run. Tell the person what you want to do; they can change the mode ({prefix}begin_session) or you can plan it with \"_plangate_plan\": true",
                    mode.name, tool.effect
                ),
            ));
        }
        let mut lines = vec![
            format!(
                "An agent (API key {:?}, scope {}) wants to call {} on {} — a {} tool, above what mode {} runs without asking.",
                acting.key.name,
                acting.key.scope,
                tool.original,
                tool.upstream,
                tool.effect,
                mode.name,
            ),
            format!("Arguments: {redacted_arguments}"),
        ];
        if tool.effect == plangate_core::Effect::Destructive {
            lines.push("DESTRUCTIVE: it may destroy or overwrite data.".to_owned());
        }
        lines.push(format!("Call digest {call_digest}."));
        lines.push("Approve to run this one call now.".to_owned());
        let question = question_text(&lines);
        if modern(cx) {
            return open_question(gw, acting, round, question, call_digest)
                .await
                .map(Asked::Pending);
        }
        ask_and_record(gw, acting, cx, question, call_digest).await?
    };
    match answer {
        Answer::Approve => Ok(Asked::Yes),
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

/// Asks the person `question` inside the client's request (2025-11-25
/// elicitation) about exactly `digest`, recording the question and the
/// answer — the same for a plan's review and a call's.
async fn ask_and_record(
    gw: &Gateway,
    acting: &Acting,
    cx: &RequestContext<RoleServer>,
    question: String,
    digest: &str,
) -> Result<Answer, Refusal> {
    let review_id = plangate_store::new_id("rev_").map_err(Refusal::internal)?;
    record(
        gw,
        acting,
        EventKind::ReviewRequested {
            review_id: review_id.clone(),
            plan_digest: digest.to_owned(),
        },
    )
    .await?;
    // The session the answer comes back on is not evicted meanwhile.
    let _held = crate::session_guard::hold(cx);
    let answer = ask(&cx.peer, question, gw.review_timeout()).await;
    let (verdict, feedback) = verdict_of(&answer);
    record(
        gw,
        acting,
        EventKind::ReviewAnswered {
            review_id: Some(review_id),
            verdict,
            plan_digest: digest.to_owned(),
            feedback,
            step_ids: None,
            revision: None,
        },
    )
    .await?;
    Ok(answer)
}

async fn record(gw: &Gateway, acting: &Acting, kind: EventKind) -> Result<(), Refusal> {
    gw.log()
        .transact(&acting.key.id, |state| {
            let mut kind = kind.clone();
            // An answer records the revision the person saw.
            if let EventKind::ReviewAnswered {
                plan_digest,
                revision,
                ..
            } = &mut kind
            {
                *revision = state.revision_seen(plan_digest);
            }
            Ok::<_, Refusal>((vec![acting.event(kind)], ()))
        })
        .await
        .map_err(crate::tools::log_failed)??;
    Ok(())
}
