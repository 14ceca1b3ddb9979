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

use tracing::Instrument as _;

use plangate_core::{Code, Event, EventKind, KeyState, Receipt};
use plangate_store::now_ms;
use tokio_util::sync::CancellationToken;

use crate::Ops;
use crate::acting::Acting;
use crate::plan::expiry_due;
use crate::refusal::Refusal;
use plangate_core::rules::{self, Applier, Refused, Selection};

mod key_check;
mod progress;
mod receipt;
mod recheck;
mod step;
pub mod undo;

use key_check::KeyCheck;
pub use progress::{ApplyProgress, Progress, Rising};
pub use receipt::receipt_result;
use receipt::{Outcome, receipt};
use step::{Handover, run_step};

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
/// span of its own (`apply_plan`, with the plan digest) when tracing is on:
/// check and start, atomically; run the selected steps in order; record
/// the end.
pub async fn apply_plan(
    gw: Ops<'_>,
    acting: &Acting,
    request: ApplyRequest,
    progress: Option<Progress>,
    cancel: CancellationToken,
) -> Result<Receipt, Refusal> {
    let span = crate::telemetry::internal_span("apply_plan");
    let result = async {
        let begun = begin(gw, acting, &request).await?;
        let (outcomes, carry) =
            run_steps(gw, acting, &begun, &request, progress.as_ref(), &cancel).await?;
        conclude(gw, acting, begun, outcomes, carry).await
    }
    .instrument(span.clone())
    .await;
    if let Err(refusal) = &result {
        crate::telemetry::failed(&span, refusal.code.as_str());
    }
    result
}

/// An apply begun: the key's state once its start was recorded, the steps
/// it runs, those it leaves for want of an approval, and the plan digest
/// it runs.
struct Begun {
    apply_id: String,
    state: KeyState,
    selected: Vec<String>,
    not_approved: Vec<String>,
    digest: String,
    /// Selected steps an approval already covered: this apply was not
    /// their yes (the receipt's `approved_by_apply` leaves them out).
    covered: Vec<String>,
}

/// An apply's first step, check and start, atomically: the plan as the person approved it, no
/// other apply alive, the steps this apply may run, and `apply_started`.
async fn begin(gw: Ops<'_>, acting: &Acting, request: &ApplyRequest) -> Result<Begun, Refusal> {
    let opening = Opening {
        gw,
        acting,
        request,
        lease_ms: gw.lease_ms(),
        ttl_ms: gw.ttl_ms(),
        prefix: gw.config().gateway.tool_prefix.clone(),
        apply_id: plangate_store::new_id("apply_").map_err(Refusal::internal)?,
    };
    let (state, (selected, not_approved, digest, covered)) = gw
        .log()
        .transact(&acting.key.id, |state| opening.events(state))
        .await
        .map_err(log_failed)??;
    crate::telemetry::note("plangate.plan.digest", digest.clone());
    crate::telemetry::note("plangate.apply.id", opening.apply_id.clone());
    Ok(Begun {
        apply_id: opening.apply_id,
        state,
        selected,
        not_approved,
        digest,
        covered,
    })
}

/// What an apply's start is decided with, taken once for every turn of
/// its compare-and-set.
struct Opening<'a> {
    gw: Ops<'a>,
    acting: &'a Acting,
    request: &'a ApplyRequest,
    lease_ms: i64,
    ttl_ms: i64,
    prefix: String,
    apply_id: String,
}

/// The steps an apply runs, those not approved, the plan digest, and the
/// steps it runs that an approval already covered.
type Chosen = (Vec<String>, Vec<String>, String, Vec<String>);

impl Opening<'_> {
    /// The events that start the apply on `state` (an expiry due, leases
    /// run out, `apply_started`), with the steps chosen; or why nothing
    /// runs.
    fn events(&self, state: &KeyState) -> Result<(Vec<Event>, Chosen), Refusal> {
        let (gw, acting, prefix) = (self.gw, self.acting, &self.prefix);
        let now = now_ms();
        let mut events = Vec::new();
        let mut view = state.clone();
        let add = |view: &mut KeyState, e: Event, events: &mut Vec<_>| {
            view.apply(view.last_seq + 1, &e);
            events.push(e);
        };
        if let Some(e) = expiry_due(&view, now, self.ttl_ms, acting) {
            add(&mut view, e, &mut events);
        }
        if rules::apply_alive(&view, now, self.lease_ms) {
            return Err(Refusal::new(
                Code::ApplyInProgress,
                "another apply of this plan is running; nothing was run. Wait for it to finish, then check the plan with plangate_get_plan".to_owned(),
            ));
        }
        for e in lease_cleanup(&view, now, self.lease_ms, acting) {
            add(&mut view, e, &mut events);
        }
        if let Some(d) = &self.request.plan_digest
            && let Err(refused) = rules::still_as_seen(&view, d, None)
        {
            return Err(Refusal::new(
                refused.code(),
                format!(
                    "{refused}; nothing was run. Show the person the plan again ({prefix}get_plan) and apply the digest they approve"
                ),
            ));
        }
        let current = view.plan_digest();
        let scope =
            rules::approval_scope_for(&view, acting.key.scope, &gw.config().modes.in_force(&view));
        let applier = match &acting.operator {
            Some(_) => Applier::Operator,
            // A locked write key is held like a plan key.
            None => Applier::Key {
                id: &acting.key.id,
                scope,
            },
        };
        let selection = match &self.request.step_ids {
            None => Selection::Waiting,
            Some(ids) => Selection::Named(ids),
        };
        let approved = rules::approved_steps(&view, &acting.key.id, scope);
        let steps = rules::apply_steps(&view, selection, applier, &approved)
            .map_err(|refused| self.not_applied(&refused))?;
        let selected = steps.run;
        let covered: Vec<String> = selected
            .iter()
            .filter(|id| approved.contains(id.as_str()))
            .cloned()
            .collect();
        if !selected.is_empty() {
            add(
                &mut view,
                acting.event(EventKind::ApplyStarted {
                    apply_id: self.apply_id.clone(),
                    step_ids: selected.clone(),
                    plan_digest: Some(current.clone()),
                }),
                &mut events,
            );
        }
        Ok((events, (selected, steps.not_approved, current, covered)))
    }

    /// Why the steps asked for cannot be applied, and what to do.
    fn not_applied(&self, refused: &Refused) -> Refusal {
        let prefix = &self.prefix;
        let hint = match refused {
            Refused::NotApproved { .. } => format!(
                ". Nothing was run: {}; then call {prefix}apply_plan again",
                self.gw.how_to_approve()
            ),
            Refused::InDoubt(_) => {
                "; a person checks the target and retries or discards it. Nothing was run"
                    .to_owned()
            }
            Refused::Status { .. } => {
                " (only waiting or failed steps can be applied). Nothing was run".to_owned()
            }
            Refused::ReadScope => ". Nothing was run".to_owned(),
            _ => format!("; {prefix}get_plan lists the steps. Nothing was run"),
        };
        Refusal::new(refused.code(), format!("{refused}{hint}"))
    }
}

/// An apply's second step: runs the selected steps in position order,
/// each in a span of its own, stopping at the first failure unless asked
/// to go on; a step after a stop or a cancel is not run. Returns every step's outcome and the
/// events recording the last one's, still to be committed.
async fn run_steps(
    gw: Ops<'_>,
    acting: &Acting,
    begun: &Begun,
    request: &ApplyRequest,
    progress: Option<&Progress>,
    cancel: &CancellationToken,
) -> Result<(Vec<(String, Outcome)>, Vec<Event>), Refusal> {
    let Begun {
        apply_id,
        state,
        selected,
        digest,
        ..
    } = begun;
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
        if let Some(p) = progress {
            let predicted = state
                .step(step_id)
                .map(|s| s.record.predicted_effect.clone())
                .unwrap_or_default();
            p.step(i, total, format!("step {} of {total}: {predicted}", i + 1))
                .await;
        }
        let step_span = step_span(step_id, digest);
        let heard = progress.map(|p| step::Heard {
            progress: p,
            at: i,
            total,
        });
        let outcome = run_step(
            gw,
            acting,
            apply_id,
            step_id,
            (cancel, heard),
            &mut handover,
        )
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
    if let Some(p) = progress
        && total > 0
    {
        p.step(total, total, format!("{total} of {total} done"))
            .await;
    }
    Ok((outcomes, handover.carry))
}

/// A step's span, naming the step and the plan digest.
fn step_span(step_id: &str, digest: &str) -> tracing::Span {
    let span = crate::telemetry::internal_span("apply step");
    if !span.is_none() {
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        span.set_attribute("plangate.step.id", step_id.to_owned());
        span.set_attribute("plangate.plan.digest", digest.to_owned());
    }
    span
}

/// An apply's last step: records its end (with the last step's outcome, `carry`) and
/// answers the receipt.
async fn conclude(
    gw: Ops<'_>,
    acting: &Acting,
    begun: Begun,
    mut outcomes: Vec<(String, Outcome)>,
    carry: Vec<Event>,
) -> Result<Receipt, Refusal> {
    let total = begun.selected.len();
    outcomes.extend(
        begun
            .not_approved
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
                let mut events = carry.clone();
                events.push(acting.event(EventKind::ApplyFinished {
                    apply_id: begun.apply_id.clone(),
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
        begun.state
    };
    Ok(receipt(
        gw,
        (&state, &begun.covered),
        &begun.digest,
        &outcomes,
        [applied, failed, in_doubt, not_run, unapproved],
    ))
}

/// A failed step's `error.type`.
fn outcome_code(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::InDoubt => "in_doubt",
        _ => "step_failed",
    }
}
