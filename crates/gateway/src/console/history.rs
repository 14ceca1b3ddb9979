//! A key's past as the console shows it: the plan's diff since a revision
//! (`GET /console/api/diff`) and its history, page by page and searched
//! (`GET /console/api/history`). Apart from the person's acts in
//! [`super::api`] because it reads the key's whole log, never the state.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::Response;
use plangate_store::ApiKey;
use serde::Deserialize;
use serde_json::{Value, json};

use super::api::{key_by_id, log_down};
use super::{ConsoleError, Viewer, ok_json};
use crate::Gateway;

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
    let stored = gw.store().load_events(&key.id, 0).await.map_err(log_down)?;
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
