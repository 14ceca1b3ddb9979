//! Planning: turning a write into a plan step, and describing a plan.
//!
//! The decision *whether* to plan is the core's ([`plangate_core::decide`]);
//! this module does the edge work around it — redacting and sealing
//! arguments, asking the upstream's preview tool what the write would do,
//! and recording the step in the key's log — and answers with the core's
//! typed [`plangate_core::PlannedWrite`].

use std::time::Instant;

use plangate_core::rules::{self, Repeat};
use plangate_core::view::AnswerCode;
use plangate_core::{
    Actor, Event, EventKind, InForce, KeyState, ModeSpec, PlanSummary, PlannedStep, PlannedWrite,
    Scope, StepRecord,
};
use plangate_store::now_ms;
use rmcp::model::{CallToolResult, JsonObject};

use crate::acting::Acting;
use crate::refusal::Refusal;
use crate::{Catalog, CatalogTool, Ops};

mod prepare;
mod secrets;

pub(crate) use prepare::{pointer_text, prepare_step, preview_version};
pub(crate) use secrets::known_secrets;
pub use secrets::open_secrets;

/// Why a write became a plan step; shapes the step's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanReason {
    /// The mode in force plans writes above its access.
    Mode,
    /// The caller's key has scope `plan`.
    Scope,
    /// The call asked for it with `"_plangate_plan": true`.
    Explicit,
    /// An operator's rule (`[[rules]]`, outcome `plan`) decided it.
    Rule,
    /// An `ask` mode asked the person about the call and they did not
    /// answer (why): the write waits in the plan for a person's yes
    /// instead of being lost ([`plangate_core::StepRecord::unanswered`]).
    Unanswered(String),
}

impl PlanReason {
    /// Why an `ask` about the write went unanswered, when that is why it
    /// is planned.
    fn unanswered(&self) -> Option<&str> {
        match self {
            PlanReason::Unanswered(why) => Some(why),
            _ => None,
        }
    }
}

/// The event that expires the plan's waiting steps, if its life is over.
/// Expiry fails closed: the mode is left as it is.
pub fn expiry_due(state: &KeyState, now: i64, ttl_ms: i64, acting: &Acting) -> Option<Event> {
    let step_ids = plangate_core::rules::expiring_steps(state, now, ttl_ms)?;
    let mut event = acting.event(EventKind::PlanExpired { step_ids });
    event.actor = Actor::System;
    Some(event)
}

pub use crate::answer::{structured, with_text};
pub use plangate_core::view::expires_in;

/// The catalog's tool a step was planned against (its upstream and the
/// upstream's own name for it), if it is still offered: what apply's fresh
/// checks and a person's amendment both start from.
pub(crate) fn planned_tool<'c>(
    catalog: &'c Catalog,
    record: &StepRecord,
) -> Option<&'c CatalogTool> {
    catalog
        .tools
        .iter()
        .find(|t| t.upstream == record.server && t.original == record.tool)
}

/// A write to plan: the tool, its checked arguments, why it is planned and
/// when the call arrived (for its record).
pub struct Write<'a> {
    /// The tool called.
    pub tool: &'a CatalogTool,
    /// Its arguments, checked against its schema.
    pub arguments: &'a JsonObject,
    /// Why it is planned rather than run.
    pub reason: PlanReason,
    /// When the call arrived.
    pub started: std::time::Instant,
    /// The operator's rule that decided to plan it, if one did.
    pub rule: Option<String>,
    /// The applied step it undoes, for a person's revert.
    pub reverts: Option<String>,
    /// Whether the write is still one to plan on a newer state of the key
    /// than the one it was decided on: the caller's decision, made again.
    /// The step is appended only on a state where this holds.
    pub still_plans: &'a (dyn Fn(&KeyState) -> bool + Sync),
}

/// The key's state a write was decided on.
pub struct Known {
    /// The state.
    pub state: KeyState,
    /// Whether it was read from the store for this call; otherwise it is
    /// this process's last view of the key, which the append's
    /// compare-and-set confirms or refutes.
    pub fresh: bool,
}

/// What planning a write came to, short of a refusal.
#[derive(Debug)]
pub enum Planned {
    /// The step is recorded (or an existing one stands for it): the
    /// planned-write answer.
    Step(CallToolResult),
    /// Nothing was recorded: the key's log had moved on from the state the
    /// write was decided on, and on the log as it is the write is not one
    /// to plan (another process changed the mode). The caller decides
    /// again on a fresh read.
    Moved,
}
/// Plans a write: the step record, recorded durably in the key's log with
/// the call's record (one append), and the planned-write answer of docs/design.md
/// §5.
pub async fn plan_write(
    gw: Ops<'_>,
    acting: &Acting,
    in_force: &InForce,
    write: Write<'_>,
    known: Known,
) -> Result<Planned, Refusal> {
    let Write {
        tool,
        arguments,
        reason,
        started,
        rule,
        reverts,
        still_plans,
    } = write;
    let step_id = plangate_store::new_id("step_").map_err(Refusal::internal)?;
    let decided_at = known.state.last_seq;
    // A preview's answer is scrubbed of every secret the key's log holds,
    // so preparing reads the log afresh unless the state is fresh already;
    // a state it reads is the one the append starts from.
    let (mut for_prepare, cached) = if known.fresh {
        (Some(known.state), None)
    } else {
        (None, Some(known.state))
    };
    let prepared = prepare_step(
        gw,
        acting,
        in_force,
        tool,
        arguments,
        step_id.clone(),
        &mut for_prepare,
    )
    .await?;
    let known = for_prepare.or(cached);
    let recording = Recording {
        gw,
        acting,
        tool,
        prepared: &prepared,
        started,
        rule: &rule,
        reverts: &reverts,
        unanswered: reason.unanswered(),
        ttl_ms: gw.ttl_ms(),
        max_steps: gw.config().gateway.max_steps as usize,
        max_bytes: gw.config().gateway.max_plan_bytes,
    };
    let outcome = gw
        .log()
        .transact_from(&acting.key.id, known, |state| {
            if state.last_seq != decided_at && !still_plans(state) {
                return Err(None);
            }
            recording.events(state)
        })
        .await
        .map_err(|e| Refusal::store(e, "the step was not recorded; nothing was planned"))?;
    let (state, (step_id, deduplicated)) = match outcome {
        Ok(done) => done,
        Err(Some(refusal)) => return Err(refusal),
        Err(None) => return Ok(Planned::Moved),
    };
    let Some(step) = state.step(&step_id) else {
        return Err(Refusal::internal(
            "the step just recorded is not in the log",
        ));
    };
    note_planned(acting, tool, &state, step, deduplicated);
    let outside = rules::approval_scope_for(&state, acting.key.scope, in_force) == Scope::Plan;
    let approver = outside.then(|| gw.how_to_approve());
    Ok(Planned::Step(planned_answer(
        gw,
        &state,
        step,
        &in_force.spec,
        (reason, rule),
        deduplicated,
        approver,
    )))
}

/// The events of a planned write's append, with its step's id and whether
/// an existing step stands for it.
type Appended = (Vec<Event>, (String, bool));

/// What the append of a planned write records, with the limits it is
/// held to: taken once, for every turn of the append's compare-and-set.
struct Recording<'a> {
    gw: Ops<'a>,
    acting: &'a Acting,
    tool: &'a CatalogTool,
    /// The step as planning made it.
    prepared: &'a StepRecord,
    started: Instant,
    rule: &'a Option<String>,
    reverts: &'a Option<String>,
    /// Why the person did not answer an `ask` about this call, if so.
    unanswered: Option<&'a str>,
    ttl_ms: i64,
    max_steps: usize,
    max_bytes: usize,
}

impl Recording<'_> {
    /// The events a planned write appends to `state`: an expiry due first,
    /// then the step (or a `step_deduplicated` naming the existing step that
    /// stands for it) with the call's record. Returns the step's id and
    /// whether it was a duplicate; `Err(Some)` when the plan has no room.
    fn events(&self, state: &KeyState) -> Result<Appended, Option<Refusal>> {
        let acting = self.acting;
        let prepared = self.prepared;
        let now = now_ms();
        let mut events = Vec::new();
        let mut view = state.clone();
        if let Some(expired) = expiry_due(state, now, self.ttl_ms, acting) {
            view.apply(view.last_seq + 1, &expired);
            events.push(expired);
        }
        let repeat = rules::repeat_of(
            &view,
            &prepared.fingerprint,
            prepared.preview.as_ref(),
            prepared.target_version.as_ref(),
        );
        match repeat {
            Repeat::New => {}
            Repeat::Same(step_id) => {
                let step_id = step_id.to_owned();
                events.push(acting.event(EventKind::StepDeduplicated {
                    step_id: step_id.clone(),
                }));
                events.extend(self.call_event(&step_id));
                return Ok((events, (step_id, true)));
            }
            Repeat::TargetChanged(step_id) => {
                let dropped = acting.event(EventKind::StepsDiscarded {
                    step_ids: vec![step_id.to_owned()],
                });
                view.apply(view.last_seq + 1, &dropped);
                events.push(dropped);
            }
        }
        if let Err(refused) = rules::room_for(
            &view,
            prepared.size_bytes(),
            None,
            self.max_steps,
            self.max_bytes,
        ) {
            return Err(Some(Refusal::new(
                refused.code(),
                format!(
                    "{refused}; apply or discard some steps (plangate_get_plan shows them) before planning more. Nothing was planned"
                ),
            )));
        }
        let mut record = prepared.clone();
        record.position = view.next_position;
        record.rule = self.rule.clone();
        record.reverts = self.reverts.clone();
        if let Some(why) = self.unanswered {
            // Only a person's yes applies it (`rules::approval_scope_for`),
            // and the step says so wherever it is shown.
            record.unanswered = Some(why.to_owned());
            record.approval_note = Some(format!(
                "The person was asked about this call and did not answer ({why}); it runs only after {}.",
                self.gw.how_to_approve()
            ));
        }
        let step_id = prepared.step_id.clone();
        events.push(acting.event(EventKind::StepPlanned { step: record }));
        events.extend(self.call_event(&step_id));
        Ok((events, (step_id, false)))
    }

    /// The call's record, which goes in the same append as its step.
    fn call_event(&self, step_id: &str) -> Option<Event> {
        let mut record = crate::call_log::record_once(
            &self.gw,
            crate::call_log::Call {
                tool: self.tool,
                arguments: None,
                // An unanswered `ask` is on the record as asked.
                decision: if self.unanswered.is_some() {
                    plangate_core::CallDecision::Ask
                } else {
                    plangate_core::CallDecision::Plan
                },
                outcome: plangate_core::CallOutcome::Planned,
                code: None,
                started: self.started,
                rule: self.rule.clone(),
            },
        );
        record.step_id = Some(step_id.to_owned());
        Some(self.acting.event(EventKind::CallRecorded { call: record }))
    }
}

/// Notes a planned step on the call's span and in the log.
fn note_planned(
    acting: &Acting,
    tool: &CatalogTool,
    state: &KeyState,
    step: &plangate_core::Step,
    deduplicated: bool,
) {
    let step_id = &step.record.step_id;
    crate::telemetry::note("plangate.step.id", step_id.clone());
    // The digest is computed for the span only when spans are exported:
    // it hashes the whole plan, and the answer computes it once already.
    if crate::telemetry::enabled() {
        crate::telemetry::note("plangate.plan.digest", state.plan_digest());
    }
    tracing::info!(
        key = %acting.key.name,
        tool = %tool.exposed,
        step = %step_id,
        position = step.record.position,
        deduplicated,
        "write planned"
    );
}

/// The planned-write answer; `approver` says how a person outside the key
/// approves, when the key's own apply is not the yes.
fn planned_answer(
    gw: Ops<'_>,
    state: &KeyState,
    step: &plangate_core::Step,
    mode: &ModeSpec,
    (reason, rule): (PlanReason, Option<String>),
    deduplicated: bool,
    approver: Option<String>,
) -> CallToolResult {
    let prefix = &gw.config().gateway.tool_prefix;
    let r = &step.record;
    let why = match reason {
        PlanReason::Mode => format!("{} mode", capitalize(&mode.name)),
        PlanReason::Scope => "This API key plans every write".to_owned(),
        PlanReason::Explicit => "You asked to plan this write".to_owned(),
        PlanReason::Rule => format!(
            "The operator's rule {:?} plans this write",
            rule.as_deref().unwrap_or("?")
        ),
        PlanReason::Unanswered(why) => format!(
            "The person was asked about this call and did not answer ({why}), so it was planned instead of run"
        ),
    };
    let dedup = if deduplicated {
        " It is the same write as an existing step, so the plan did not grow."
    } else {
        ""
    };
    let message = match approver {
        Some(approver) => format!(
            "{why}: nothing was written. This write is step {} of the plan.{dedup} Show the person the plan in plain words: it runs only after {approver}; then call {prefix}apply_plan. Sending the write again does not run it.",
            r.position
        ),
        None => format!(
            "{why}: nothing was written. This write is step {} of the plan.{dedup} Show the person the plan and call {prefix}apply_plan only after they say yes; sending the write again does not run it.",
            r.position
        ),
    };
    let body = PlannedWrite {
        code: AnswerCode::PlanStep,
        planned: true,
        mutation_performed: false,
        message: message.clone(),
        step: PlannedStep::of(step).compact(),
        deduplicated,
        plan: PlanSummary::of(state, &mode.name, now_ms(), gw.ttl_ms()),
        notice: None,
    };
    let text = format!(
        "Planned, not run — step {} of the plan: {} {}",
        r.position,
        r.predicted_effect,
        if r.approval_required {
            "(destructive: needs the person's explicit yes)."
        } else {
            ""
        }
    );
    structured(&body, format!("{} {message}", text.trim_end()))
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}
