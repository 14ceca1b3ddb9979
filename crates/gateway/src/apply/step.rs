//! One step of an apply (docs/design.md §5): claim it by a compare-and-set
//! append, re-check it fresh, call it with its real arguments while its
//! lease is renewed, and record what came back. Apart from the apply as a
//! whole because the at-most-once rule lives here: nothing is sent before
//! the claim, and what cannot be known is recorded as in doubt.

use std::time::Duration;

use plangate_core::{
    Code, Event, EventKind, KeyState, StepError, StepErrorCode, StepRecord, StepStatus,
    restore_secrets,
};
use plangate_store::now_ms;
use rmcp::model::{CallToolRequestParams, CallToolResult, RequestMetaObject};
use rmcp::service::ServiceError;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::Progress;
use super::key_check::KeyCheck;
use super::receipt::Outcome;
use super::recheck::recheck;
use super::{OPERATION_KEY, log_failed};
use crate::Ops;
use crate::acting::Acting;
use crate::refusal::Refusal;
use crate::upstream::CallError;

/// Who hears the upstream's progress on a running step: the apply's
/// [`Progress`], told it is step `at` of `total`.
pub(super) struct Heard<'a> {
    pub(super) progress: &'a Progress,
    pub(super) at: usize,
    pub(super) total: usize,
}

/// What one step of an apply hands the next.
pub(super) struct Handover {
    /// The events recording the previous step's outcome: committed with
    /// the next step's claim (or with the apply's end), one durable append
    /// per step, not two.
    pub(super) carry: Vec<Event>,
    /// The key's state as this apply last wrote it: the next claim decides
    /// on it (compare-and-set still guards it) instead of reading again.
    pub(super) known: Option<KeyState>,
    /// What this apply knows about its key's standing.
    pub(super) key: KeyCheck,
}

/// Claims, re-checks and calls one step. The previous step's outcome
/// (`handover.carry`) is committed with the claim; the events recording
/// this step's outcome are left in `handover` for the next commit. The
/// key's check runs beside the claim: its answer is needed before the
/// call, not before the claim.
pub(super) async fn run_step(
    gw: Ops<'_>,
    acting: &Acting,
    apply_id: &str,
    step_id: &str,
    (cancel, heard): (&CancellationToken, Option<Heard<'_>>),
    handover: &mut Handover,
) -> Result<Outcome, Refusal> {
    let carry = std::mem::take(&mut handover.carry);
    let known = handover.known.take();
    let lease_ms = gw.lease_ms();
    let owner = gw.owner().to_owned();
    // Claim: planned|failed → running, or not ours to run.
    let claim = gw.log().transact_from(&acting.key.id, known, |state| {
        let mut events = carry.clone();
        // The carried outcome is another step's (an apply lists a step
        // once), so deciding on the state before it is deciding on the
        // state after it.
        let claimable = plangate_core::rules::claimable(state, step_id);
        if claimable {
            events.push(acting.event(EventKind::StepStarted {
                step_id: step_id.to_owned(),
                apply_id: apply_id.to_owned(),
                owner: owner.clone(),
                lease_until_ms: now_ms() + lease_ms,
            }));
        }
        Ok::<_, Refusal>((events, claimable))
    });
    let (claim, key) = tokio::join!(claim, handover.key.still_writes(&gw, &acting.key.id));
    let (state, claimed) = match claim {
        Ok(decided) => decided?,
        Err(e) => {
            // Keep the previous step's outcome if the store takes it alone.
            if !carry.is_empty() {
                let _ = gw
                    .log()
                    .transact(&acting.key.id, |_| {
                        Ok::<_, std::convert::Infallible>((carry.clone(), ()))
                    })
                    .await;
            }
            return Err(log_failed(e));
        }
    };
    let step = state.step(step_id).filter(|_| claimed).cloned();
    let Some(step) = step else {
        handover.known = Some(state);
        return Ok(Outcome::NotRun);
    };
    let (outcome, events) =
        call_step(gw, acting, apply_id, (cancel, heard), step, &state, key).await?;
    handover.carry = events;
    handover.known = Some(state);
    Ok(outcome)
}

/// Re-checks and calls a claimed step (`key`: the key's check, asked
/// beside the claim); returns its outcome and the events recording it.
async fn call_step(
    gw: Ops<'_>,
    acting: &Acting,
    apply_id: &str,
    (cancel, heard): (&CancellationToken, Option<Heard<'_>>),
    step: plangate_core::Step,
    state: &KeyState,
    key: Result<(), StepError>,
) -> Result<(Outcome, Vec<Event>), Refusal> {
    let lease_ms = gw.lease_ms();
    let owner = gw.owner().to_owned();
    let record = &step.record;
    let step_id = record.step_id.as_str();

    let Some(secrets) = crate::plan::open_secrets(&gw, record) else {
        return Ok(finish(acting, step_id, StepError {
            code: Code::Forbidden.into(),
            message: "the step's sealed arguments cannot be opened with this gateway's seal key (were the keys changed?); nothing was sent".to_owned(),
            upstream: None,
        }));
    };

    // Re-check fresh: the call must still be one that could run. What its
    // read of the target found is what the step replaces (for an undo).
    let found = match recheck(gw, acting, &step, &secrets, key).await {
        Ok(found) => found,
        Err(error) => return Ok(finish(acting, step_id, error)),
    };
    let not_connected = || {
        finish(
            acting,
            step_id,
            StepError {
                code: Code::UpstreamDown.into(),
                message: format!(
                    "upstream {} is not connected; nothing was sent",
                    record.server
                ),
                upstream: None,
            },
        )
    };
    if !gw.is_connected(&record.server) {
        return Ok(not_connected());
    }

    // What comes back is scrubbed of every secret the key's log sealed,
    // not only this step's: an upstream's answer may quote an older one.
    let scrub_with = crate::plan::known_secrets(&gw, state, &secrets);

    // Call, with the real arguments and the step id as operation key,
    // renewing the claim while the call is alive.
    let (params, meta) = step_request(record, &secrets);
    let renew_stop = CancellationToken::new();
    let renewal = tokio::spawn(renew_lease(
        gw.log_handle(),
        acting.clone(),
        apply_id.to_owned(),
        step_id.to_owned(),
        owner.clone(),
        lease_ms,
        renew_stop.clone(),
    ));
    // The upstream's progress on this call, passed on to whoever hears
    // the apply.
    let heard = heard.as_ref();
    let tell = |p: rmcp::model::ProgressNotificationParam| -> futures::future::BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Some(h) = heard {
                h.progress.upstream(h.at, h.total, p).await;
            }
        })
    };
    let tell: &crate::edges::Heard<'_> = &tell;
    let call = crate::edges::ToUpstream {
        server: &record.server,
        params,
        meta: Some(meta),
        cancel,
        heard: heard.and(Some(tell)),
    };
    let Some(call) = gw.call(call) else {
        renew_stop.cancel();
        let _ = renewal.await;
        return Ok(not_connected());
    };
    let answer = call.await;
    let timed_out = match &answer {
        Err(CallError::Timeout(after)) => Some(*after),
        _ => None,
    };
    let outcome = definite(gw, answer, &scrub_with, &record.server);
    renew_stop.cancel();
    let _ = renewal.await;

    Ok(match outcome {
        Ok(result) if result.is_error != Some(true) => {
            let (outcome, mut events) = applied(gw, acting, record, &result, &scrub_with);
            let kept =
                super::undo::keep(gw, acting, record, found.as_ref(), (&result, &scrub_with));
            events.push(kept.await);
            (outcome, events)
        }
        Ok(result) => finish(acting, step_id, tool_error(gw, &result, &scrub_with)),
        Err(Some(error)) => finish(acting, step_id, error),
        Err(None) => in_doubt(acting, record, timed_out),
    })
}

/// The call a step sends: its tool with the real arguments, and the step
/// id as operation key in `_meta`.
fn step_request(
    record: &StepRecord,
    secrets: &[(String, Value)],
) -> (CallToolRequestParams, RequestMetaObject) {
    let arguments = restore_secrets(&record.arguments.value(), secrets);
    let mut params = CallToolRequestParams::new(record.tool.clone());
    params.arguments = arguments.as_object().cloned();
    let mut meta = RequestMetaObject::default();
    meta.0
        .0
        .insert(OPERATION_KEY.to_owned(), json!(record.step_id));
    (params, meta)
}

/// What the upstream's answer definitely says: a result, a failure
/// (`Err(Some)`, scrubbed), or nothing definite (`Err(None)`: in doubt).
fn definite(
    gw: Ops<'_>,
    answer: Result<CallToolResult, CallError>,
    scrub_with: &[(String, Value)],
    server: &str,
) -> Result<CallToolResult, Option<StepError>> {
    match answer {
        Ok(result) => Ok(result),
        Err(CallError::Unexpected) => Err(Some(StepError {
            code: StepErrorCode::UnexpectedResult,
            message: "the upstream answered with a result type plangate cannot record".to_owned(),
            upstream: None,
        })),
        Err(CallError::Rpc(e)) => Err(Some(StepError {
            code: StepErrorCode::UpstreamError,
            message: gw.redactor().scrub_text(&e.message, scrub_with),
            upstream: Some(gw.redactor().scrub_value(
                &json!({"code": e.code.0, "message": e.message, "data": e.data}),
                scrub_with,
            )),
        })),
        Err(CallError::NoAnswer { sent, error }) => Err(in_doubt_or_unsent(
            error,
            sent,
            (server, gw.signs_in(server)),
        )),
        Err(CallError::Timeout(_) | CallError::Cancelled) => Err(None),
    }
}

/// A step the upstream ran: `step_applied` with its result, and the copy,
/// links and snapshots the operator's pointers pick from it.
fn applied(
    gw: Ops<'_>,
    acting: &Acting,
    record: &StepRecord,
    result: &CallToolResult,
    scrub_with: &[(String, Value)],
) -> (Outcome, Vec<Event>) {
    let step_id = record.step_id.as_str();
    let structured = result
        .structured_content
        .clone()
        .map(|v| gw.redactor().scrub_value(&v, scrub_with));
    // The receipt carries the upstream's structured result (or, from
    // a server without one, its whole answer), scrubbed of secrets.
    let recorded = match &structured {
        Some(s) => s.clone(),
        None => gw.redactor().scrub_value(
            &serde_json::to_value(result).unwrap_or(Value::Null),
            scrub_with,
        ),
    };
    let settings = gw
        .config()
        .tool_settings(&record.server, &record.tool)
        .cloned()
        .unwrap_or_default();
    let pick = |p: &str| {
        structured
            .as_ref()
            .and_then(|s| crate::plan::pointer_text(s, p))
    };
    let copy_id = settings.copy_id.as_deref().and_then(pick);
    let links = settings.links.iter().filter_map(|p| pick(p)).collect();
    let snapshots = settings.snapshots.iter().filter_map(|p| pick(p)).collect();
    tracing::info!(key = %acting.key.name, step = step_id, upstream = %record.server, tool = %record.tool, "step applied");
    (
        Outcome::Applied,
        vec![acting.event(EventKind::StepApplied {
            step_id: step_id.to_owned(),
            result: recorded,
            copy_id,
            links,
            snapshots,
        })],
    )
}

/// A tool's own error (`isError`) as the step's failure, scrubbed.
fn tool_error(gw: Ops<'_>, result: &CallToolResult, scrub_with: &[(String, Value)]) -> StepError {
    let upstream_result = gw.redactor().scrub_value(
        &serde_json::to_value(result).unwrap_or(Value::Null),
        scrub_with,
    );
    let message = result
        .content
        .iter()
        .find_map(|c| {
            c.as_text()
                .map(|t| gw.redactor().scrub_text(&t.text, scrub_with))
        })
        .unwrap_or_else(|| "the upstream answered an error".to_owned());
    StepError {
        code: StepErrorCode::UpstreamError,
        message,
        upstream: Some(upstream_result),
    }
}

/// A step with no definite answer: `step_in_doubt`, saying why —
/// `timeout`, the upstream's call_timeout when that ran out.
fn in_doubt(
    acting: &Acting,
    record: &StepRecord,
    timeout: Option<Duration>,
) -> (Outcome, Vec<Event>) {
    let step_id = record.step_id.as_str();
    tracing::warn!(key = %acting.key.name, step = step_id, "step in doubt");
    let reason = match timeout {
        Some(timeout) => format!(
            "upstream {} did not answer within its call_timeout ({}); the call was cancelled, but the request may have reached the server and taken effect",
            record.server,
            plangate_config::format_duration(timeout)
        ),
        None => "no definite answer came back (connection lost, timeout or cancellation); the request may have reached the server".to_owned(),
    };
    (
        Outcome::InDoubt,
        vec![acting.event(EventKind::StepInDoubt {
            step_id: step_id.to_owned(),
            reason,
        })],
    )
}

/// A send error before any byte went out is a definite failure, and so is
/// an OAuth upstream's refusal at its door (401/403: its server never read
/// the call); `None` means in doubt.
fn in_doubt_or_unsent(
    e: ServiceError,
    sent: bool,
    (server, signs_in): (&str, bool),
) -> Option<StepError> {
    if let Some(refusal) = crate::upstream::oauth::door_refusal(&e) {
        return Some(StepError {
            code: Code::UpstreamUnavailable.into(),
            message: format!(
                "{}; the step did not run: after the sign-in, apply it again by naming it (a failed step may be applied again)",
                refusal.explain(server, Some(signs_in))
            ),
            upstream: None,
        });
    }
    if !sent && matches!(e, ServiceError::TransportClosed) {
        return Some(StepError {
            code: Code::UpstreamDown.into(),
            message:
                "the upstream's connection was closed before the request was sent; nothing was sent"
                    .to_owned(),
            upstream: None,
        });
    }
    tracing::warn!("apply: no definite answer: {e}");
    None
}

/// A step that failed: its outcome, and the event recording it.
fn finish(acting: &Acting, step_id: &str, error: StepError) -> (Outcome, Vec<Event>) {
    tracing::info!(key = %acting.key.name, step = step_id, code = %error.code, "step failed");
    (
        Outcome::Failed,
        vec![acting.event(EventKind::StepFailed {
            step_id: step_id.to_owned(),
            error,
        })],
    )
}

/// Renews a running claim every third of a lease until `stop`.
async fn renew_lease(
    log: std::sync::Arc<crate::key_log::KeyLog>,
    acting: Acting,
    apply_id: String,
    step_id: String,
    owner: String,
    lease_ms: i64,
    stop: CancellationToken,
) {
    let every = Duration::from_millis(u64::try_from(lease_ms / 3).unwrap_or(1000).max(50));
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = stop.cancelled() => return,
        }
        let renewed = log
            .transact(&acting.key.id, |state| {
                let ours = state.step(&step_id).is_some_and(|s| {
                    s.status == StepStatus::Running
                        && s.owner.as_deref() == Some(owner.as_str())
                        && s.apply_id.as_deref() == Some(apply_id.as_str())
                });
                if !ours {
                    return Ok::<_, std::convert::Infallible>((vec![], ()));
                }
                Ok((
                    vec![acting.event(EventKind::StepStarted {
                        step_id: step_id.clone(),
                        apply_id: apply_id.clone(),
                        owner: owner.clone(),
                        lease_until_ms: now_ms() + lease_ms,
                    })],
                    (),
                ))
            })
            .await;
        if let Err(e) = renewed {
            tracing::warn!(step = %step_id, "lease renewal failed: {e}");
        }
    }
}
