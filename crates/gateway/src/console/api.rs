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
        out.push(operator::plan_view(config, &key, &state, now_ms()));
    }
    // Refreshing may have appended (expiry, leases): report the seq after.
    let seq = store.last_seq().await?;
    Ok((seq, Some(out)))
}

/// Every quarantined or rejected tool definition, for review (the same
/// rows as `plangate tools list`).
async fn held_tools(gw: &Gateway) -> Result<Vec<ToolRow>, crate::key_log::LogError> {
    let pins = gw.pins_log().state(plangate_core::TOOLS_LOG).await?;
    Ok(crate::tool_pins::rows(&pins, gw.config())
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
        gw.config(),
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

/// `POST /console/api/approve` body: the digest the person saw, and the
/// steps they approve (none: every waiting step).
#[derive(Deserialize)]
pub(super) struct ApproveBody {
    key_id: String,
    plan_digest: String,
    #[serde(default)]
    step_ids: Vec<String>,
}

/// Records the operator's yes to the named waiting steps (or all of them)
/// of the plan the person saw; refused with `plan_changed` (nothing
/// recorded) when the plan is no longer at that digest.
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
        Some(&body.plan_digest),
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
