//! Apply (docs/design.md §5): run the chosen plan steps, in position order, at most
//! once each, through the same checks a direct call meets, and tell the
//! truth about what happened in a receipt.
//!
//! At most once comes from the log: a step is claimed (`planned → running`,
//! with this process as owner and a lease) by a compare-and-set append
//! before its call is sent, so no two processes can both claim it; the lease
//! is renewed while the call is alive. A claim whose lease ran out (its
//! owner died mid-call) becomes `in_doubt` — the request may have reached
//! the upstream — and runs again only when a person retries it. The step id
//! travels upstream as `_meta["dev.plangate/operation_key"]` so an upstream
//! that deduplicates by it never applies a step twice even then.

use std::time::Duration;
use tracing::Instrument as _;

use plangate_core::{
    Code, EventKind, KeyState, StepError, StepErrorCode, StepStatus, restore_secrets,
};
use plangate_store::now_ms;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ProgressNotificationParam, ProgressToken,
    RequestMetaObject,
};
use rmcp::service::ServiceError;
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::Gateway;
use crate::acting::Acting;
use crate::plan::expiry_due;
use crate::refusal::Refusal;
use crate::upstream::CallError;
use plangate_core::rules::{self, Applier, Refused, Selection};

mod key_check;
mod receipt;
mod recheck;

use key_check::KeyCheck;
use receipt::{Outcome, receipt};
use recheck::recheck;

/// The `_meta` key carrying a step's id to the upstream, so an upstream can
/// recognise a repeated delivery of the same step.
pub const OPERATION_KEY: &str = "dev.plangate/operation_key";

/// What `apply_plan` was asked to do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyRequest {
    /// The steps to run; all waiting steps if `None`.
    pub step_ids: Option<Vec<String>>,
    /// The digest the person approved; checked before anything runs.
    pub plan_digest: Option<String>,
    /// Run the remaining steps after a failure.
    pub continue_on_error: bool,
}

/// Where to report progress (step i of n), when the client asked for it.
pub struct Progress {
    /// The client.
    pub peer: Peer<RoleServer>,
    /// The client's progress token.
    pub token: ProgressToken,
}

fn log_failed(e: crate::key_log::LogError) -> Refusal {
    Refusal::store(e, "see the plan with plangate_get_plan before trying again")
}

/// The events of [`rules::lease_cleanup`], appended by the system.
pub fn lease_cleanup(
    state: &KeyState,
    now: i64,
    lease_ms: i64,
    acting: &Acting,
) -> Vec<plangate_core::Event> {
    rules::lease_cleanup(state, now, lease_ms)
        .into_iter()
        .map(|kind| {
            let mut e = acting.event(kind);
            e.actor = plangate_core::Actor::System;
            e
        })
        .collect()
}

/// Runs `apply_plan` for `acting`'s key and returns the receipt, in a
/// span of its own (`apply_plan`, with the plan digest) when tracing is on.
pub async fn apply_plan(
    gw: &Gateway,
    acting: &Acting,
    request: ApplyRequest,
    progress: Option<Progress>,
    cancel: CancellationToken,
) -> Result<CallToolResult, Refusal> {
    let span = crate::telemetry::internal_span("apply_plan");
    let result = apply_plan_in_span(gw, acting, request, progress, cancel)
        .instrument(span.clone())
        .await;
    if let Err(refusal) = &result {
        crate::telemetry::failed(&span, refusal.code.as_str());
    }
    result
}

async fn apply_plan_in_span(
    gw: &Gateway,
    acting: &Acting,
    request: ApplyRequest,
    progress: Option<Progress>,
    cancel: CancellationToken,
) -> Result<CallToolResult, Refusal> {
    let lease_ms = gw.lease_ms();
    let ttl_ms = gw.ttl_ms();
    let prefix = gw.config().gateway.tool_prefix.clone();
    let apply_id = plangate_store::new_id("apply_").map_err(Refusal::internal)?;

    // 1. Check and start, atomically.
    let (state, (selected, not_approved, digest)) = gw
        .log()
        .transact(&acting.key.id, |state| {
            let now = now_ms();
            let mut events = Vec::new();
            let mut view = state.clone();
            let add = |view: &mut KeyState, e: plangate_core::Event, events: &mut Vec<_>| {
                view.apply(view.last_seq + 1, &e);
                events.push(e);
            };
            if let Some(e) = expiry_due(&view, now, ttl_ms, acting) {
                add(&mut view, e, &mut events);
            }
            if rules::apply_alive(&view, now, lease_ms) {
                return Err(Refusal::new(
                    Code::ApplyInProgress,
                    "another apply of this plan is running; nothing was run. Wait for it to finish, then check the plan with plangate_get_plan".to_owned(),
                ));
            }
            for e in lease_cleanup(&view, now, lease_ms, acting) {
                add(&mut view, e, &mut events);
            }
            let current = view.plan_digest();
            if let Some(d) = &request.plan_digest
                && *d != current
            {
                return Err(Refusal::new(
                    Code::PlanChanged,
                    format!("the plan changed since it was reviewed (digest {d} is now {current}); nothing was run. Show the person the plan again ({prefix}get_plan) and apply the digest they approve"),
                ));
            }
            let scope = rules::approval_scope_for(
                &view,
                acting.key.scope,
                &gw.config().modes.in_force(&view),
            );
            let applier = match &acting.operator {
                Some(_) => Applier::Operator,
                // A locked write key is held like a plan key.
                None => Applier::Key {
                    id: &acting.key.id,
                    scope,
                },
            };
            let selection = match &request.step_ids {
                None => Selection::Waiting,
                Some(ids) => Selection::Named(ids),
            };
            let approved = rules::approved_steps(&view, &acting.key.id, scope);
            let steps = rules::apply_steps(&view, selection, applier, &approved).map_err(|refused| {
                let hint = match &refused {
                    Refused::NotApproved { digest } => format!(
                        ". Nothing was run: {}; then call {prefix}apply_plan again",
                        gw.how_to_approve(&acting.key.name, Some(digest))
                    ),
                    Refused::InDoubt(id) => format!(
                        " (`plangate plans retry --key {} {id}`, or discard it). Nothing was run",
                        plangate_core::shell_word(&acting.key.name)
                    ),
                    Refused::Status { .. } => " (only waiting or failed steps can be applied). Nothing was run".to_owned(),
                    Refused::ReadScope => ". Nothing was run".to_owned(),
                    _ => format!("; {prefix}get_plan lists the steps. Nothing was run"),
                };
                Refusal::new(refused.code(), format!("{refused}{hint}"))
            })?;
            let selected = steps.run;
            if !selected.is_empty() {
                add(
                    &mut view,
                    acting.event(EventKind::ApplyStarted {
                        apply_id: apply_id.clone(),
                        step_ids: selected.clone(),
                        plan_digest: Some(current.clone()),
                    }),
                    &mut events,
                );
            }
            Ok((events, (selected, steps.not_approved, current)))
        })
        .await
        .map_err(log_failed)??;
    crate::telemetry::note("plangate.plan.digest", digest.clone());
    crate::telemetry::note("plangate.apply.id", apply_id.clone());

    let total = selected.len();
    let mut outcomes: Vec<(String, Outcome)> = Vec::new();
    let mut stop = false;
    let mut handover = Handover {
        carry: Vec::new(),
        known: Some(state.clone()),
        key: KeyCheck::default(),
    };
    for (i, step_id) in selected.iter().enumerate() {
        if stop || cancel.is_cancelled() {
            outcomes.push((step_id.clone(), Outcome::NotRun));
            continue;
        }
        if let Some(p) = &progress {
            let predicted = state
                .step(step_id)
                .map(|s| s.record.predicted_effect.clone())
                .unwrap_or_default();
            let note = ProgressNotificationParam::new(p.token.clone(), i as f64)
                .with_total(total as f64)
                .with_message(format!("step {} of {total}: {predicted}", i + 1));
            let _ = p.peer.notify_progress(note).await;
        }
        let step_span = crate::telemetry::internal_span("apply step");
        if !step_span.is_none() {
            use tracing_opentelemetry::OpenTelemetrySpanExt as _;
            step_span.set_attribute("plangate.step.id", step_id.clone());
            step_span.set_attribute("plangate.plan.digest", digest.clone());
        }
        let outcome = run_step(gw, acting, &apply_id, step_id, &cancel, &mut handover)
            .instrument(step_span.clone())
            .await?;
        if matches!(outcome, Outcome::Failed | Outcome::InDoubt) {
            crate::telemetry::failed(&step_span, outcome_code(&outcome));
        }
        if matches!(outcome, Outcome::Failed | Outcome::InDoubt) && !request.continue_on_error {
            stop = true;
        }
        outcomes.push((step_id.clone(), outcome));
    }
    if let Some(p) = &progress
        && total > 0
    {
        let note = ProgressNotificationParam::new(p.token.clone(), total as f64)
            .with_total(total as f64)
            .with_message(format!("{total} of {total} done"));
        let _ = p.peer.notify_progress(note).await;
    }

    outcomes.extend(
        not_approved
            .into_iter()
            .map(|id| (id, Outcome::NotApproved)),
    );
    let count = |o: Outcome| {
        u32::try_from(outcomes.iter().filter(|(_, x)| *x == o).count()).unwrap_or(u32::MAX)
    };
    let (applied, failed, in_doubt, not_run) = (
        count(Outcome::Applied),
        count(Outcome::Failed),
        count(Outcome::InDoubt),
        count(Outcome::NotRun),
    );
    let unapproved = count(Outcome::NotApproved);
    let state = if total > 0 {
        gw.log()
            .transact(&acting.key.id, |_| {
                let mut events = handover.carry.clone();
                events.push(acting.event(EventKind::ApplyFinished {
                    apply_id: apply_id.clone(),
                    applied,
                    failed,
                    in_doubt,
                    not_run,
                }));
                Ok::<_, Refusal>((events, ()))
            })
            .await
            .map_err(log_failed)??
            .0
    } else {
        state
    };
    Ok(receipt(
        gw,
        &state,
        &digest,
        &acting.key.name,
        &outcomes,
        [applied, failed, in_doubt, not_run, unapproved],
    ))
}

/// What one step of an apply hands the next.
struct Handover {
    /// The events recording the previous step's outcome: committed with
    /// the next step's claim (or with the apply's end), one durable append
    /// per step, not two.
    carry: Vec<plangate_core::Event>,
    /// The key's state as this apply last wrote it: the next claim decides
    /// on it (compare-and-set still guards it) instead of reading again.
    known: Option<KeyState>,
    /// What this apply knows about its key's standing.
    key: KeyCheck,
}

/// Claims, re-checks and calls one step. The previous step's outcome
/// (`handover.carry`) is committed with the claim; the events recording
/// this step's outcome are left in `handover` for the next commit. The
/// key's check runs beside the claim: its answer is needed before the
/// call, not before the claim.
async fn run_step(
    gw: &Gateway,
    acting: &Acting,
    apply_id: &str,
    step_id: &str,
    cancel: &CancellationToken,
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
        let claimable = state
            .step(step_id)
            .is_some_and(|step| matches!(step.status, StepStatus::Planned | StepStatus::Failed));
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
    let (claim, key) = tokio::join!(claim, handover.key.still_writes(gw, &acting.key.id));
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
    let (outcome, events) = call_step(gw, acting, apply_id, cancel, step, &state, key).await?;
    handover.carry = events;
    handover.known = Some(state);
    Ok(outcome)
}

/// Re-checks and calls a claimed step (`key`: the key's check, asked
/// beside the claim); returns its outcome and the events recording it.
async fn call_step(
    gw: &Gateway,
    acting: &Acting,
    apply_id: &str,
    cancel: &CancellationToken,
    step: plangate_core::Step,
    state: &KeyState,
    key: Result<(), StepError>,
) -> Result<(Outcome, Vec<plangate_core::Event>), Refusal> {
    let lease_ms = gw.lease_ms();
    let owner = gw.owner().to_owned();
    let record = &step.record;
    let step_id = record.step_id.as_str();

    let Some(secrets) = crate::plan::open_secrets(gw, record) else {
        return Ok(finish(acting, step_id, StepError {
            code: Code::Forbidden.into(),
            message: "the step's sealed arguments cannot be opened with this gateway's seal key (were the keys changed?); nothing was sent".to_owned(),
            upstream: None,
        }));
    };

    // Re-check fresh: the call must still be one that could run.
    if let Err(error) = recheck(gw, acting, &step, &secrets, key).await {
        return Ok(finish(acting, step_id, error));
    }
    let Some(upstream) = gw.upstream(&record.server) else {
        return Ok(finish(
            acting,
            step_id,
            StepError {
                code: Code::UpstreamUnavailable.into(),
                message: format!(
                    "upstream {} is not connected; nothing was sent",
                    record.server
                ),
                upstream: None,
            },
        ));
    };

    // What comes back is scrubbed of every secret the key's log sealed,
    // not only this step's: an upstream's answer may quote an older one.
    let scrub_with = crate::plan::known_secrets(gw, state, &secrets);

    // Call, with the real arguments and the step id as operation key,
    // renewing the claim while the call is alive.
    let arguments = restore_secrets(&record.arguments.value(), &secrets);
    let mut params = CallToolRequestParams::new(record.tool.clone());
    params.arguments = arguments.as_object().cloned();
    let mut meta = RequestMetaObject::default();
    meta.0
        .0
        .insert(OPERATION_KEY.to_owned(), json!(record.step_id));
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
    let answer = upstream
        .call(gw.metrics(), params, Some(meta), cancel)
        .await;
    let timed_out = matches!(answer, Err(CallError::Timeout(_)));
    let outcome = match answer {
        Ok(result) => Ok(result),
        Err(CallError::Unexpected) => Err(Some(StepError {
            code: StepErrorCode::UnexpectedResult,
            message: "the upstream answered with a result type plangate cannot record".to_owned(),
            upstream: None,
        })),
        Err(CallError::Rpc(e)) => Err(Some(StepError {
            code: StepErrorCode::UpstreamError,
            message: gw.redactor().scrub_text(&e.message, &scrub_with),
            upstream: Some(gw.redactor().scrub_value(
                &json!({"code": e.code.0, "message": e.message, "data": e.data}),
                &scrub_with,
            )),
        })),
        Err(CallError::NoAnswer { sent, error }) => Err(in_doubt_or_unsent(error, sent, &upstream)),
        Err(CallError::Timeout(_) | CallError::Cancelled) => Err(None),
    };
    renew_stop.cancel();
    let _ = renewal.await;

    match outcome {
        Ok(result) if result.is_error != Some(true) => {
            let structured = result
                .structured_content
                .clone()
                .map(|v| gw.redactor().scrub_value(&v, &scrub_with));
            // The receipt carries the upstream's structured result (or, from
            // a server without one, its whole answer), scrubbed of secrets.
            let recorded = match &structured {
                Some(s) => s.clone(),
                None => gw.redactor().scrub_value(
                    &serde_json::to_value(&result).unwrap_or(Value::Null),
                    &scrub_with,
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
            Ok((
                Outcome::Applied,
                vec![acting.event(EventKind::StepApplied {
                    step_id: step_id.to_owned(),
                    result: recorded,
                    copy_id,
                    links,
                    snapshots,
                })],
            ))
        }
        Ok(result) => {
            let upstream_result = gw.redactor().scrub_value(
                &serde_json::to_value(&result).unwrap_or(Value::Null),
                &scrub_with,
            );
            let message = result
                .content
                .iter()
                .find_map(|c| {
                    c.as_text()
                        .map(|t| gw.redactor().scrub_text(&t.text, &scrub_with))
                })
                .unwrap_or_else(|| "the upstream answered an error".to_owned());
            Ok(finish(
                acting,
                step_id,
                StepError {
                    code: StepErrorCode::UpstreamError,
                    message,
                    upstream: Some(upstream_result),
                },
            ))
        }
        Err(Some(error)) => Ok(finish(acting, step_id, error)),
        Err(None) => {
            tracing::warn!(key = %acting.key.name, step = step_id, "step in doubt");
            Ok((
                Outcome::InDoubt,
                vec![acting.event(EventKind::StepInDoubt {
                    step_id: step_id.to_owned(),
                    reason: if timed_out {
                        format!(
                            "upstream {} did not answer within its call_timeout ({}); the call was cancelled, but the request may have reached the server and taken effect",
                            record.server,
                            plangate_config::format_duration(upstream.call_timeout())
                        )
                    } else {
                        "no definite answer came back (connection lost, timeout or cancellation); the request may have reached the server".to_owned()
                    },
                })],
            ))
        }
    }
}

/// A send error before any byte went out is a definite failure, and so is
/// an OAuth upstream's refusal at its door (401/403: its server never read
/// the call); `None` means in doubt.
fn in_doubt_or_unsent(
    e: ServiceError,
    sent: bool,
    upstream: &crate::Upstream,
) -> Option<StepError> {
    if let Some(refusal) = crate::upstream::oauth::door_refusal(&e) {
        return Some(StepError {
            code: Code::UpstreamUnavailable.into(),
            message: format!(
                "{}; the step did not run: after the sign-in, apply it again by naming it (a failed step may be applied again)",
                refusal.explain(upstream.name(), Some(upstream.signs_in()))
            ),
            upstream: None,
        });
    }
    if !sent && matches!(e, ServiceError::TransportClosed) {
        return Some(StepError {
            code: Code::UpstreamUnavailable.into(),
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
fn finish(
    acting: &Acting,
    step_id: &str,
    error: StepError,
) -> (Outcome, Vec<plangate_core::Event>) {
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

/// A failed step's `error.type`.
fn outcome_code(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::InDoubt => "in_doubt",
        _ => "step_failed",
    }
}
