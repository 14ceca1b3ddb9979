//! What the console page polls (`GET /console/api/state`): every key's
//! plan, the tool definitions held for review and the recent calls, or —
//! when the log has not moved — next to nothing. Apart from the person's
//! acts in [`super::api`] because it only reads, once a second.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use plangate_core::{Channel, KeyPlanView};
use plangate_store::now_ms;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::api::log_down;
use super::{Viewer, ok_json};
use crate::Gateway;
use crate::operator;
use crate::tool_pins::ToolRow;

/// `?after=SEQ`: the log position the page last saw.
#[derive(Deserialize)]
pub(super) struct After {
    after: Option<i64>,
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
    match operator::plan_views(&gw, ("console", Channel::Console), q.after).await {
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
        Err(e) => log_down(e).into_response(),
    }
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

/// `?key=NAME`: the key (name or id) whose plan is asked for.
#[derive(Deserialize)]
pub(super) struct KeyQuery {
    key: String,
}

/// `GET /console/api/plan?key=NAME`: one key's plan as a person reviews it
/// ([`operator::plan_review`]), brought up to date first — what `plangate
/// plans show --server` prints, the same answer as at the data dir.
pub(super) async fn plan(
    State(gw): State<Arc<Gateway>>,
    Viewer(_): Viewer,
    Query(q): Query<KeyQuery>,
) -> Result<Response, super::ConsoleError> {
    let key = super::api::key_named(&gw, &q.key).await?;
    let acting = operator::acting(&key, "console", Channel::Console);
    let state = operator::refresh(gw.log(), &acting, gw.ttl_ms(), gw.lease_ms())
        .await
        .map_err(log_down)?;
    Ok(super::ok_typed(&operator::plan_review(
        &gw.config(),
        &key,
        &state,
        now_ms(),
    )))
}
