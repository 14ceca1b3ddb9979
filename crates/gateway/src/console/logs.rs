//! plangate's own logs through the operator API (`plangate tools list`
//! and `plangate audit export|verify|public-key` with `--server`): the
//! tool pins and the audit trail read as at the data dir, by the same
//! operations ([`crate::tool_pins::rows`], [`crate::audit`]) — and what
//! the running gateway's rules make of a call ([`crate::policy_test`]).

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use plangate_core::{AccessCode, TOOLS_LOG};
use serde::Deserialize;
use serde_json::json;

use super::api::log_down;
use super::{Acting, Body, ConsoleError, Viewer, harden, ok_typed};
use crate::Gateway;

/// `GET /console/api/tools`: every pinned, quarantined or rejected tool
/// with what changed ([`crate::tool_pins::ToolRow`]).
pub(super) async fn tools(
    State(gw): State<Arc<Gateway>>,
    Viewer(_): Viewer,
) -> Result<Response, ConsoleError> {
    let pins = gw.pins_log().state(TOOLS_LOG).await.map_err(log_down)?;
    let rows = crate::tool_pins::rows(&pins, &gw.config());
    Ok(ok_typed(&json!({ "tools": rows })))
}

/// Which log a request reads: a key's by name or id, `tools` or
/// `operators`; every log when absent.
#[derive(Deserialize)]
pub(super) struct LogQuery {
    #[serde(default)]
    key: Option<String>,
    /// Only events at or after this time (ms since the epoch).
    #[serde(default)]
    since_ms: Option<i64>,
}

/// The log id `query` names, or `None` for every log.
async fn named_log(gw: &Gateway, query: &LogQuery) -> Result<Option<String>, ConsoleError> {
    let Some(name) = &query.key else {
        return Ok(None);
    };
    match crate::audit::log_id(gw.store().as_ref(), name).await {
        Ok(Some(id)) => Ok(Some(id)),
        Ok(None) => Err(ConsoleError::access(
            AccessCode::NotFound,
            format!("no key named {name:?}; `plangate keys list` shows the keys"),
        )),
        Err(e) => Err(log_down(e)),
    }
}

/// `GET /console/api/audit/verify[?key=K]`: every link and signature of
/// the store's logs (or one log) checked under the log key's public half
/// ([`crate::audit::Verified`]; a break is in the answer, not an error).
pub(super) async fn verify(
    State(gw): State<Arc<Gateway>>,
    Viewer(_): Viewer,
    Query(query): Query<LogQuery>,
) -> Result<Response, ConsoleError> {
    let key_ids = named_log(&gw, &query).await?.map(|id| vec![id]);
    let public = gw.material().log_key().public();
    let found = crate::audit::verify_store(gw.store().as_ref(), public, key_ids)
        .await
        .map_err(log_down)?;
    Ok(ok_typed(&found))
}

/// `GET /console/api/audit/export[?key=K&since_ms=T]`: the log as JSON
/// Lines, as `plangate audit export` writes it.
pub(super) async fn export(
    State(gw): State<Arc<Gateway>>,
    Viewer(_): Viewer,
    Query(query): Query<LogQuery>,
) -> Result<Response, ConsoleError> {
    let key_id = named_log(&gw, &query).await?;
    let events = gw
        .store()
        .export_events(key_id.as_deref(), query.since_ms)
        .await
        .map_err(log_down)?;
    let text = crate::audit::export_text(&events);
    let response = (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/jsonl; charset=utf-8")],
        text,
    )
        .into_response();
    Ok(harden(response, "default-src 'none'"))
}

/// `GET /console/api/audit/public-key`: the log key's public half, to
/// check exports with elsewhere.
pub(super) async fn public_key(
    State(gw): State<Arc<Gateway>>,
    Viewer(_): Viewer,
) -> Result<Response, ConsoleError> {
    let public = gw.material().log_key().public();
    Ok(ok_typed(&json!({ "public_key": public.to_string() })))
}

/// `POST /console/api/policy/test`: what the rules this gateway runs make
/// of a call, without making it ([`crate::policy_test::test`], as
/// `plangate policy test --server` prints it). Reads only; the person's
/// session (or operator token) is all it needs.
pub(super) async fn policy_test(
    State(gw): State<Arc<Gateway>>,
    Acting(_): Acting,
    Body(question): Body<crate::policy_test::Question>,
) -> Result<Response, ConsoleError> {
    let key = super::api::key_named(&gw, &question.key).await?;
    let config = gw.config().source.to_string();
    let verdict = crate::policy_test::test(&gw, &key, &question, (config, true))
        .await
        .map_err(|r| ConsoleError::refusal(r.code, r.message))?;
    Ok(ok_typed(&verdict))
}
