//! The console's JSON API: every key's plan and the tool definitions held
//! for review, and a person's approve, discard, retry, accept and reject —
//! each through the same code as `plangate plans` and `plangate tools`.
//! The checks ran before any handler here ([`super::Viewer`],
//! [`super::Acting`]); every refusal is a [`ConsoleError`].

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use plangate_core::{Channel, Code, KeyPlanView, Scope};
use plangate_store::{ApiKey, now_ms};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Acting, Body, ConsoleError, Viewer, ok_json};
use crate::Gateway;
use crate::operator::{self, OperatorError};
use crate::tool_pins::ToolRow;

/// `?after=SEQ`: the log position the page last saw.
#[derive(Deserialize)]
pub(super) struct After {
    after: Option<i64>,
}

/// A key with no record left (deleted outside plangate): shown by id.
fn unknown_key(key_id: &str) -> ApiKey {
    ApiKey {
        id: key_id.to_owned(),
        name: key_id.to_owned(),
        scope: Scope::Read,
        prefix: String::new(),
        created_at_ms: 0,
        revoked_at_ms: None,
    }
}

/// What the console page polls: every key's plan when the log moved, and
/// who is looking.
#[derive(Serialize)]
struct ConsoleState {
    /// The global seq the answer is current to; the next poll's `after`.
    seq: i64,
    /// Whether anything moved since `after` (if not, nothing else but who
    /// is looking is sent).
    changed: bool,
    /// Every key with a plan or a session.
    #[serde(skip_serializing_if = "Option::is_none")]
    keys: Option<Vec<KeyPlanView>>,
    /// Held tool definitions, for review.
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<ToolRow>>,
    /// The most recent calls on the record (`call_recorded`), newest
    /// first: what agents did, run, planned or refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    calls: Option<Vec<CallRow>>,
    /// The operator this session belongs to.
    operator: String,
    /// The session's CSRF token, for the page's POSTs.
    csrf: String,
}

/// One call on the record, as the console lists it.
#[derive(Serialize)]
struct CallRow {
    /// When.
    at: String,
    /// The key's name (or id, if the key is gone).
    key: String,
    /// Over which channel.
    channel: plangate_core::Channel,
    /// The call.
    #[serde(flatten)]
    call: plangate_core::CallRecord,
}

/// How far back the console looks for calls: the last this many events
/// of the global log (one indexed query), of which it shows the calls.
const RECENT_EVENTS: i64 = 500;

/// The calls among the newest [`RECENT_EVENTS`] events up to `seq`, newest
/// first.
async fn recent_calls(gw: &Gateway, seq: i64) -> Result<Vec<CallRow>, plangate_store::StoreError> {
    let names: std::collections::HashMap<String, String> = gw
        .store()
        .list_keys()
        .await?
        .into_iter()
        .map(|k| (k.id, k.name))
        .collect();
    let events = gw
        .store()
        .events_since((seq - RECENT_EVENTS).max(0), RECENT_EVENTS)
        .await?;
    Ok(events
        .iter()
        .rev()
        .filter(|e| e.kind == plangate_core::EventType::CallRecorded)
        .filter_map(|e| {
            let event: plangate_core::Event = serde_json::from_str(e.body.as_str()).ok()?;
            let plangate_core::EventKind::CallRecorded { call } = event.kind else {
                return None;
            };
            Some(CallRow {
                at: plangate_store::format_time_ms(e.at_ms),
                key: names
                    .get(&e.key_id)
                    .cloned()
                    .unwrap_or_else(|| e.key_id.clone()),
                channel: event.channel,
                call,
            })
        })
        .collect())
}

/// `GET /console/api/state`: every key's plan, or — when the global log
/// has not moved past `after` — just `{"seq", "changed": false}`, so
/// polling every second costs one indexed query.
pub(super) async fn state(
    State(gw): State<Arc<Gateway>>,
    Viewer(session): Viewer,
    Query(q): Query<After>,
) -> Response {
    match plans(&gw, q.after).await {
        Ok((seq, keys)) => {
            let tools = match &keys {
                Some(_) => match held_tools(&gw).await {
                    Ok(tools) => Some(tools),
                    Err(e) => {
                        tracing::error!("console: tool pins: {e}");
                        None
                    }
                },
                None => None,
            };
            let calls = match &keys {
                Some(_) => match recent_calls(&gw, seq).await {
                    Ok(calls) => Some(calls),
                    Err(e) => {
                        tracing::error!("console: recent calls: {e}");
                        None
                    }
                },
                None => None,
            };
            ok_json(json!(ConsoleState {
                seq,
                changed: keys.is_some(),
                keys,
                tools,
                calls,
                operator: session.operator.name.clone(),
                csrf: session.csrf.clone(),
            }))
        }
        Err(e) => {
            tracing::error!("console: event log: {e}");
            ConsoleError::store_down().into_response()
        }
    }
}

/// The console's view of every key with a plan (open steps or a session),
/// brought up to date first, as `plangate plans list` does, with the seq
/// it is current to; no keys when the log has not moved past `after`.
async fn plans(
    gw: &Gateway,
    after: Option<i64>,
) -> Result<(i64, Option<Vec<KeyPlanView>>), crate::key_log::LogError> {
    let store = gw.store();
    let seq = store.last_seq().await?;
    if after == Some(seq) {
        return Ok((seq, None));
    }
    let keys = store.list_keys().await?;
    let config = gw.config();
    let (ttl, lease) = (gw.ttl_ms(), gw.lease_ms());
    let mut out = Vec::new();
    for key_id in store.keys_with_events().await? {
        let key = keys
            .iter()
            .find(|k| k.id == key_id)
            .cloned()
            .unwrap_or_else(|| unknown_key(&key_id));
        let acting = operator::acting(&key, "console", Channel::Console);
        let state = operator::refresh(gw.log(), &acting, ttl, lease).await?;
        if state.open_steps().next().is_none() && state.session_id.is_none() {
            continue;
        }
        out.push(operator::plan_view(&config, &key, &state, now_ms()));
    }
    // Refreshing may have appended (expiry, leases): report the seq after.
    let seq = store.last_seq().await?;
    Ok((seq, Some(out)))
}

/// Every quarantined or rejected tool definition, for review (the same
/// rows as `plangate tools list`).
async fn held_tools(gw: &Gateway) -> Result<Vec<ToolRow>, crate::key_log::LogError> {
    let pins = gw.pins_log().state(plangate_core::TOOLS_LOG).await?;
    Ok(crate::tool_pins::rows(&pins, &gw.config())
        .into_iter()
        .filter(|r| r.held_hash.is_some())
        .collect())
}

/// `POST /console/api/tool` body: accept or reject exactly the held
/// definition the person looked at.
#[derive(Deserialize)]
pub(super) struct ToolBody {
    server: String,
    tool: String,
    definition_hash: String,
    decision: ToolVerdict,
    #[serde(default)]
    allow_downgrade: bool,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub(super) enum ToolVerdict {
    Accept,
    Reject,
}

/// Records a person's accept or reject of a quarantined tool definition,
/// through the same rule as `plangate tools accept|reject`.
pub(super) async fn tool_decision(
    State(gw): State<Arc<Gateway>>,
    Acting(session): Acting,
    Body(body): Body<ToolBody>,
) -> Result<Response, ConsoleError> {
    use crate::tool_pins::{Decision, PinError};
    let decision = match body.decision {
        ToolVerdict::Accept => Decision::Accept {
            allow_downgrade: body.allow_downgrade,
        },
        ToolVerdict::Reject => Decision::Reject,
    };
    let who = plangate_core::Actor::Operator {
        name: session.operator.name.clone(),
    };
    match crate::tool_pins::decide(
        gw.pins_log(),
        &gw.config(),
        &body.server,
        &body.tool,
        Some(&body.definition_hash),
        decision,
        who,
        Channel::Console,
        now_ms(),
    )
    .await
    {
        Ok(_) => {
            gw.refresh_pins().await;
            tracing::info!(operator = %session.operator.name, server = %body.server, tool = %body.tool, "console: tool definition decided");
            Ok(ok_json(
                json!({"success": true, "server": body.server, "tool": body.tool}),
            ))
        }
        Err(PinError::Log(e)) => {
            tracing::error!("console: tool pins: {e}");
            Err(ConsoleError::store_down())
        }
        Err(e @ (PinError::Changed { .. } | PinError::Downgrade { .. })) => Err(ConsoleError::new(
            StatusCode::CONFLICT,
            Code::ToolQuarantined.as_str(),
            e.to_string(),
        )),
        Err(e) => Err(ConsoleError::new(
            StatusCode::NOT_FOUND,
            Code::InvalidArguments.as_str(),
            e.to_string(),
        )),
    }
}

/// The key an API request names, by id.
async fn key_by_id(gw: &Gateway, key_id: &str) -> Result<ApiKey, ConsoleError> {
    match gw.store().find_key(key_id).await {
        Ok(Some(k)) if k.id == key_id => Ok(k),
        Ok(_) => Err(ConsoleError::new(
            StatusCode::NOT_FOUND,
            Code::InvalidArguments.as_str(),
            format!("there is no key with id {key_id:?}"),
        )),
        Err(e) => {
            tracing::error!("console: key store: {e}");
            Err(ConsoleError::store_down())
        }
    }
}

impl From<OperatorError> for ConsoleError {
    fn from(e: OperatorError) -> ConsoleError {
        refused(e)
    }
}

fn refused(e: OperatorError) -> ConsoleError {
    let status = match &e {
        e if e.is_bad_input() => StatusCode::BAD_REQUEST,
        OperatorError::PlanChanged { .. }
        | OperatorError::RevisionMoved { .. }
        | OperatorError::StepChanged { .. }
        | OperatorError::ApplyAlive { .. } => StatusCode::CONFLICT,
        OperatorError::PlanOutlived { .. } => StatusCode::GONE,
        OperatorError::Refused(_) => StatusCode::CONFLICT,
        OperatorError::UpstreamDown { .. } | OperatorError::Log(_) => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        _ => StatusCode::BAD_REQUEST,
    };
    if let OperatorError::Log(inner) = &e {
        tracing::error!("console: event log: {inner}");
    }
    ConsoleError::new(status, e.code(), e.to_string())
}

/// `POST /console/api/approve` body: the digest and revision of the plan
/// the person saw, and the steps they approve (none: every waiting step).
#[derive(Deserialize)]
pub(super) struct ApproveBody {
    key_id: String,
    plan_digest: String,
    /// The revision on screen; the page always sends it, an older client
    /// may not (then the digest alone binds the yes).
    #[serde(default)]
    revision: Option<u64>,
    #[serde(default)]
    step_ids: Vec<String>,
}

/// Records the operator's yes to the named waiting steps (or all of them)
/// of the plan the person saw; refused with `plan_changed` (nothing
/// recorded) when the plan is no longer at that digest and revision.
pub(super) async fn approve(
    State(gw): State<Arc<Gateway>>,
    Acting(session): Acting,
    Body(body): Body<ApproveBody>,
) -> Result<Response, ConsoleError> {
    let key = key_by_id(&gw, &body.key_id).await?;
    let acting = operator::acting(&key, &session.operator.name, Channel::Console);
    let approved = operator::approve(
        gw.log(),
        &key,
        acting.actor(),
        Channel::Console,
        Some(operator::Seen {
            digest: &body.plan_digest,
            revision: body.revision,
        }),
        &body.step_ids,
    )
    .await?;
    tracing::info!(operator = %session.operator.name, key = %key.name, steps = approved.step_ids.len(), "console: approved steps");
    Ok(ok_json(json!({
        "success": true,
        "key": key.name,
        "plan_digest": body.plan_digest,
        "approved_steps": approved.step_ids,
        "approved_digest": approved.digest,
        "current_digest": approved.state.plan_digest(),
        "approved_by": session.operator.name,
    })))
}

/// `POST /console/api/discard` body: no `step_ids` discards every waiting
/// step.
#[derive(Deserialize)]
pub(super) struct DiscardBody {
    key_id: String,
    #[serde(default)]
    step_ids: Vec<String>,
}

pub(super) async fn discard(
    State(gw): State<Arc<Gateway>>,
    Acting(session): Acting,
    Body(body): Body<DiscardBody>,
) -> Result<Response, ConsoleError> {
    let key = key_by_id(&gw, &body.key_id).await?;
    let acting = operator::acting(&key, &session.operator.name, Channel::Console);
    let (state, ids) = operator::discard(gw.log(), &acting, &body.step_ids, gw.ttl_ms()).await?;
    tracing::info!(operator = %session.operator.name, key = %key.name, discarded = ids.len(), "console: discarded steps");
    Ok(ok_json(json!({
        "success": true,
        "key": key.name,
        "discarded": ids,
        "pending_steps": state.planned_steps().count(),
        "plan_digest": state.plan_digest(),
    })))
}

/// `POST /console/api/retry` body.
#[derive(Deserialize)]
pub(super) struct RetryBody {
    key_id: String,
    step_id: String,
}

/// Retries one in-doubt step now and answers its receipt.
pub(super) async fn retry(
    State(gw): State<Arc<Gateway>>,
    Acting(session): Acting,
    Body(body): Body<RetryBody>,
) -> Result<Response, ConsoleError> {
    let key = key_by_id(&gw, &body.key_id).await?;
    let acting = operator::acting(&key, &session.operator.name, Channel::Console);
    let receipt = operator::retry(&gw, &acting, &body.step_id).await?;
    tracing::info!(operator = %session.operator.name, key = %key.name, "console: retried a step");
    Ok(ok_json(receipt.structured_content.unwrap_or(Value::Null)))
}

/// `POST /console/api/apply` body: the digest and revision the person saw, and the
/// steps to run (none: every waiting step — only the approved ones once a
/// person approved part of the plan).
#[derive(Deserialize)]
pub(super) struct ApplyBody {
    key_id: String,
    plan_digest: String,
    /// The revision on screen (see [`ApproveBody`]).
    #[serde(default)]
    revision: Option<u64>,
    #[serde(default)]
    step_ids: Vec<String>,
}

/// The person's Apply: the same code as `plangate plans apply`
/// ([`operator::apply_now`]); the page sees each step's progress through
/// its live view of the log, and this answers the receipt.
pub(super) async fn apply(
    State(gw): State<Arc<Gateway>>,
    Acting(session): Acting,
    Body(body): Body<ApplyBody>,
) -> Result<Response, ConsoleError> {
    let key = key_by_id(&gw, &body.key_id).await?;
    let acting = operator::acting(&key, &session.operator.name, Channel::Console);
    let seen = operator::Seen {
        digest: &body.plan_digest,
        revision: body.revision,
    };
    let receipt = operator::apply_now(&gw, &acting, Some(seen), &body.step_ids).await?;
    tracing::info!(operator = %session.operator.name, key = %key.name, "console: applied steps");
    Ok(ok_json(match receipt {
        Some(r) => r.structured_content.unwrap_or(Value::Null),
        None => json!({
            "success": true,
            "code": "plan_applied",
            "applied": 0,
            "message": format!("Nothing to apply: key {} has no waiting steps.", key.name),
            "steps": [],
        }),
    }))
}

/// `POST /console/api/reject` body.
#[derive(Deserialize)]
pub(super) struct RejectBody {
    key_id: String,
    step_id: String,
    reason: String,
}

/// A person's no to one waiting step, with the reason its agent reads.
pub(super) async fn reject(
    State(gw): State<Arc<Gateway>>,
    Acting(session): Acting,
    Body(body): Body<RejectBody>,
) -> Result<Response, ConsoleError> {
    let key = key_by_id(&gw, &body.key_id).await?;
    let acting = operator::acting(&key, &session.operator.name, Channel::Console);
    let state = operator::reject(gw.log(), &acting, &body.step_id, &body.reason).await?;
    tracing::info!(operator = %session.operator.name, key = %key.name, "console: rejected a step");
    Ok(ok_json(json!({
        "success": true,
        "key": key.name,
        "rejected": body.step_id,
        "plan_digest": state.plan_digest(),
        "revision": state.revision,
    })))
}

/// `POST /console/api/amend` body: the new arguments, and the plan
/// revision the person saw.
#[derive(Deserialize)]
pub(super) struct AmendBody {
    key_id: String,
    step_id: String,
    arguments: Value,
    revision: u64,
}

/// A person's change to a waiting step's arguments, through the same code
/// as `plangate plans amend`; `plan_changed` if someone amended it after
/// the revision the person saw.
pub(super) async fn amend(
    State(gw): State<Arc<Gateway>>,
    Acting(session): Acting,
    Body(body): Body<AmendBody>,
) -> Result<Response, ConsoleError> {
    let key = key_by_id(&gw, &body.key_id).await?;
    let acting = operator::acting(&key, &session.operator.name, Channel::Console);
    let state = crate::amend::amend(
        &gw,
        &acting,
        &body.step_id,
        &body.arguments,
        Some(body.revision),
    )
    .await?;
    tracing::info!(operator = %session.operator.name, key = %key.name, "console: amended a step");
    let step = state
        .step(&body.step_id)
        .map(plangate_core::StepView::for_person);
    Ok(ok_json(json!({
        "success": true,
        "key": key.name,
        "step": step,
        "plan_digest": state.plan_digest(),
        "revision": state.revision,
    })))
}

/// `?key_id=…&step_id=…`: one step of a key's plan.
#[derive(Deserialize)]
pub(super) struct StepQuery {
    key_id: String,
    step_id: String,
}

/// What the amend form is built from: the step's tool's input schema and
/// its current (redacted) arguments.
pub(super) async fn step_form(
    State(gw): State<Arc<Gateway>>,
    Viewer(_): Viewer,
    Query(q): Query<StepQuery>,
) -> Result<Response, ConsoleError> {
    let key = key_by_id(&gw, &q.key_id).await?;
    let state = gw.log().state(&key.id).await.map_err(|e| {
        tracing::error!("console: event log: {e}");
        ConsoleError::store_down()
    })?;
    let Some(step) = state.step(&q.step_id) else {
        return Err(refused(OperatorError::NoStep {
            key: key.name.clone(),
            step: q.step_id.clone(),
        }));
    };
    let catalog = gw.catalog();
    let schema = catalog
        .tools
        .iter()
        .find(|t| t.upstream == step.record.server && t.original == step.record.tool)
        .map(|t| Value::Object((*t.tool.input_schema).clone()));
    Ok(ok_json(json!({
        "step_id": step.record.step_id,
        "exposed_as": step.record.exposed_as,
        "arguments": step.record.arguments,
        "input_schema": schema,
        "revision": state.revision,
    })))
}

/// `?key_id=…&since=REV`: what changed since a revision (default: the one
/// the last review saw).
#[derive(Deserialize)]
pub(super) struct DiffQuery {
    key_id: String,
    since: Option<u64>,
}

/// The key's events folded, with their key_seq, in order.
async fn key_events(
    gw: &Gateway,
    key: &ApiKey,
) -> Result<Vec<(i64, plangate_core::Event)>, ConsoleError> {
    let stored = gw.store().load_events(&key.id, 0).await.map_err(|e| {
        tracing::error!("console: event log: {e}");
        ConsoleError::store_down()
    })?;
    let mut events = Vec::with_capacity(stored.len());
    for e in &stored {
        match serde_json::from_str::<plangate_core::Event>(e.body.as_str()) {
            Ok(event) => events.push((e.key_seq, event)),
            Err(err) => {
                tracing::error!(key = %key.name, seq = e.key_seq, "console: unreadable event: {err}");
                return Err(ConsoleError::store_down());
            }
        }
    }
    Ok(events)
}

/// The plan's revision diff, as `plangate plans diff` computes it.
pub(super) async fn diff(
    State(gw): State<Arc<Gateway>>,
    Viewer(_): Viewer,
    Query(q): Query<DiffQuery>,
) -> Result<Response, ConsoleError> {
    let key = key_by_id(&gw, &q.key_id).await?;
    let events = key_events(&gw, &key).await?;
    let now = plangate_core::KeyState::fold(events.iter().map(|(s, e)| (*s, e)));
    let since = q
        .since
        .or_else(|| now.reviewed.as_ref().map(|r| r.revision))
        .unwrap_or(0)
        .min(now.revision);
    let then = plangate_core::at_revision(events.iter().map(|(s, e)| (*s, e)), since);
    Ok(ok_json(json!(plangate_core::PlanDiff::between(
        &then, &now
    ))))
}

/// `?key_id=…&before=SEQ&limit=N&kind=TYPE&q=TEXT`: one page of a key's
/// history, newest first.
#[derive(Deserialize)]
pub(super) struct HistoryQuery {
    key_id: String,
    before: Option<i64>,
    limit: Option<usize>,
    kind: Option<String>,
    q: Option<String>,
}

/// The most history entries one page holds.
const MAX_PAGE: usize = 200;

/// A key's history: every event, newest first, with who, over which
/// channel and what changed — filtered by type and searched (in the
/// sentence and the event's redacted body), `limit` at a time.
pub(super) async fn history(
    State(gw): State<Arc<Gateway>>,
    Viewer(_): Viewer,
    Query(q): Query<HistoryQuery>,
) -> Result<Response, ConsoleError> {
    let key = key_by_id(&gw, &q.key_id).await?;
    let events = key_events(&gw, &key).await?;
    let entries = plangate_core::history::history(events.iter().map(|(s, e)| (*s, e)));
    let limit = q.limit.unwrap_or(50).clamp(1, MAX_PAGE);
    let needle =
        q.q.as_deref()
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_lowercase);
    let kind = q.kind.as_deref().filter(|k| !k.is_empty());
    let mut kinds: Vec<&str> = entries.iter().map(|e| e.kind.as_str()).collect();
    kinds.sort_unstable();
    kinds.dedup();
    let mut page = Vec::new();
    let mut more = false;
    for (entry, (_, event)) in entries.iter().zip(&events).rev() {
        if q.before.is_some_and(|b| entry.key_seq >= b) || kind.is_some_and(|k| entry.kind != k) {
            continue;
        }
        let body = shown_body(event);
        if let Some(n) = &needle {
            let hay = format!("{} {} {}", entry.summary, entry.actor.label(), body);
            if !hay.to_lowercase().contains(n.as_str()) {
                continue;
            }
        }
        if page.len() == limit {
            more = true;
            break;
        }
        let mut row = json!(entry);
        row["event"] = body;
        page.push(row);
    }
    let next_before = if more {
        page.last().and_then(|r| r["key_seq"].as_i64())
    } else {
        None
    };
    Ok(ok_json(json!({
        "key": key.name,
        "entries": page,
        "next_before": next_before,
        "kinds": kinds,
        "total": entries.len(),
    })))
}

/// An event's body as the history shows it: as stored (arguments already
/// redacted), without sealed ciphertext or keyed HMACs, which tell a
/// person nothing.
fn shown_body(event: &plangate_core::Event) -> Value {
    let mut v = serde_json::to_value(event).unwrap_or(Value::Null);
    if let Some(step) = v.get_mut("step").and_then(Value::as_object_mut) {
        step.remove("sealed_secrets");
        step.remove("keyed_arguments");
    }
    v
}
