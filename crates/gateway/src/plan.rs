//! Planning: turning a write into a plan step, and describing a plan.
//!
//! The decision *whether* to plan is the core's ([`plangate_core::decide`]);
//! this module does the edge work around it — redacting and sealing
//! arguments, asking the upstream's preview tool what the write would do,
//! and recording the step in the key's log — and answers with the core's
//! typed [`plangate_core::PlannedWrite`].

use plangate_core::rules;
use plangate_core::view::AnswerCode;
use plangate_core::{
    Actor, CallFacts, Code, Effect, Event, EventKind, InForce, JsonText, KeyState, LandsOn,
    ModeSpec, PlanSummary, PlannedStep, PlannedWrite, Scope, StepRecord, Where,
    arguments_fingerprint, generic_effect, render_template,
};
use plangate_store::now_ms;
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, JsonObject};
use serde_json::{Value, json};

use crate::acting::Acting;
use crate::refusal::Refusal;
use crate::{CatalogTool, Gateway};

/// Why a write became a plan step; shapes the step's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanReason {
    /// The mode in force plans writes above its access.
    Mode,
    /// The caller's key has scope `plan`.
    Scope,
    /// The call asked for it with `"_plangate_plan": true`.
    Explicit,
    /// An operator's rule (`[[rules]]`, outcome `plan`) decided it.
    Rule,
}

/// The event that expires the plan's waiting steps, if its life is over.
/// Expiry fails closed: the mode is left as it is.
pub fn expiry_due(state: &KeyState, now: i64, ttl_ms: i64, acting: &Acting) -> Option<Event> {
    let step_ids = plangate_core::rules::expiring_steps(state, now, ttl_ms)?;
    let mut event = acting.event(EventKind::PlanExpired { step_ids });
    event.actor = Actor::System;
    Some(event)
}

pub use plangate_core::view::expires_in;

/// A typed answer as a tool result: `structuredContent` = `view`'s JSON,
/// `content` = `text`.
pub fn structured<T: serde::Serialize>(view: &T, text: String) -> CallToolResult {
    let body = serde_json::to_value(view).unwrap_or_else(|e| {
        // Every view is strings, numbers and JSON already parsed: this
        // cannot happen, and if it did the agent must not get half an answer.
        tracing::error!("serialising an answer: {e}");
        json!({"code": Code::InternalError, "message": "plangate could not write its answer; see its log"})
    });
    with_text(body, text, false)
}

/// A tool result carrying `body` as `structuredContent` and `text` as its
/// one content block. Built directly rather than with rmcp's
/// `CallToolResult::structured`, which also writes the whole body out as
/// JSON text — work thrown away when the text is replaced by the summary,
/// and on every planned write and `get_plan` the largest answer there is.
pub fn with_text(body: Value, text: String, is_error: bool) -> CallToolResult {
    let content = vec![ContentBlock::text(text)];
    let mut result = if is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    result.structured_content = Some(body);
    result
}

/// The value at JSON `pointer` in `args` as text (a string as is, anything
/// else as JSON; null and absent are none): how a configured pointer names
/// a target, a copy, a link or a snapshot.
/// What a profile's target pointer names, in words: a list by its items'
/// names (`name`, `entityName`, `from`→`to`), anything else as
/// [`pointer_text`] gives it.
fn target_text(args: &Value, pointer: &str) -> Option<String> {
    let Some(Value::Array(items)) = args.pointer(pointer) else {
        return pointer_text(args, pointer);
    };
    let names: Vec<String> = items
        .iter()
        .map(|item| match item {
            Value::String(s) => s.clone(),
            Value::Object(o) => match (o.get("from"), o.get("to")) {
                (Some(Value::String(f)), Some(Value::String(t))) => format!("{f} → {t}"),
                _ => ["name", "entityName", "id"]
                    .iter()
                    .find_map(|k| o.get(*k).and_then(Value::as_str))
                    .map(str::to_owned)
                    .unwrap_or_else(|| item.to_string()),
            },
            other => other.to_string(),
        })
        .collect();
    (!names.is_empty()).then(|| names.join(", "))
}

pub(crate) fn pointer_text(args: &Value, pointer: &str) -> Option<String> {
    match args.pointer(pointer)? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// The secret values sealed with a step, opened with this gateway's seal
/// key; `None` when they cannot be opened (the keys changed).
pub fn open_secrets(gw: &Gateway, record: &StepRecord) -> Option<Vec<(String, Value)>> {
    match &record.sealed_secrets {
        None => Some(Vec::new()),
        Some(sealed) => {
            plangate_store::seal::unseal(gw.material(), sealed, record.step_id.as_bytes())
                .ok()
                .and_then(|plain| serde_json::from_slice(&plain).ok())
        }
    }
}

/// Fewest characters a secret from an earlier step must have to be
/// scrubbed from later upstream text: shorter ones ("1", "on") would blank
/// out ordinary words and numbers everywhere.
const MIN_LOGGED_SECRET: usize = 4;

/// Every secret value sealed in the key's log, with `current` (the call's
/// own secrets, whatever their length): what upstream text is scrubbed of,
/// so a value sealed by one step cannot come back through another step's
/// preview (the upstream's current state quotes it).
/// Every secret a preview's answer must be scrubbed of: this call's and
/// every one the key's log sealed. The key's state is read once and kept
/// in `known` for the append that follows.
async fn secrets_to_scrub(
    gw: &Gateway,
    acting: &Acting,
    known: &mut Option<KeyState>,
    current: &[(String, Value)],
) -> Result<Vec<(String, Value)>, Refusal> {
    let state = match known.take() {
        Some(state) => state,
        None => gw
            .log()
            .state(&acting.key.id)
            .await
            .map_err(|e| Refusal::store(e, "nothing was planned"))?,
    };
    let secrets = known_secrets(gw, &state, current);
    *known = Some(state);
    Ok(secrets)
}

pub(crate) fn known_secrets(
    gw: &Gateway,
    state: &KeyState,
    current: &[(String, Value)],
) -> Vec<(String, Value)> {
    let mut all = current.to_vec();
    for step in &state.steps {
        if step.record.sealed_secrets.is_none() {
            continue;
        }
        for (pointer, value) in open_secrets(gw, &step.record).unwrap_or_default() {
            let long_enough = match &value {
                Value::String(s) => s.chars().count() >= MIN_LOGGED_SECRET,
                Value::Array(_) | Value::Object(_) => true,
                other => other.to_string().len() >= MIN_LOGGED_SECRET,
            };
            if long_enough {
                all.push((pointer, value));
            }
        }
    }
    all
}

/// What a preview tool said about a write.
struct Preview {
    effect: Option<String>,
    target: Option<String>,
    target_version: Option<Value>,
}

/// Asks the upstream's configured preview tool what the write would do.
/// `Err` carries a refusal when the preview says the write cannot work.
async fn preview(
    gw: &Gateway,
    tool: &CatalogTool,
    preview_tool: &str,
    arguments: &JsonObject,
) -> Result<Option<Preview>, Refusal> {
    let Some(upstream) = gw.upstream(&tool.upstream) else {
        return Ok(None);
    };
    let mut params = CallToolRequestParams::new(preview_tool.to_owned());
    params.arguments = Some(arguments.clone());
    let never = tokio_util::sync::CancellationToken::new();
    let result = match upstream.call(gw.metrics(), params, None, &never).await {
        Ok(result) => result,
        Err(e) => {
            tracing::warn!(upstream = %tool.upstream, preview = preview_tool, "preview failed: {e}");
            return Ok(None);
        }
    };
    let structured = result.structured_content.clone().unwrap_or(Value::Null);
    if result.is_error == Some(true) {
        let why = structured
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| {
                result
                    .content
                    .iter()
                    .find_map(|c| c.as_text().map(|t| t.text.clone()))
            })
            .unwrap_or_else(|| "the upstream's preview refused it".to_owned());
        return Err(Refusal::new(
            Code::InvalidArguments,
            format!(
                "{} cannot be planned: {why}. Nothing was planned or written; fix the arguments and call it again",
                tool.exposed
            ),
        ));
    }
    Ok(Some(Preview {
        effect: structured
            .get("effect")
            .and_then(Value::as_str)
            .map(str::to_owned),
        target: structured.get("target").map(|t| match t {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }),
        target_version: structured.get("target_version").cloned(),
    }))
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

/// A write's step as planning makes it, before it has a place in the plan
/// (`position` 0): redacted arguments, keyed fingerprint, sealed secrets
/// (bound to `step_id`), preview, predicted effect, where it lands and
/// whether it is destructive. Planning a write and a person amending a
/// step both make their record here, so an amended step is checked,
/// previewed, redacted and sealed exactly as a planned one. `known` is the
/// key's state if already read; it is kept for the append that follows.
pub(crate) async fn prepare_step(
    gw: &Gateway,
    acting: &Acting,
    in_force: &InForce,
    tool: &CatalogTool,
    arguments: &JsonObject,
    step_id: String,
    known: &mut Option<KeyState>,
) -> Result<StepRecord, Refusal> {
    let args = Value::Object(arguments.clone());
    let redactor = gw.redactor();
    let (redacted, secrets) = redactor.split(&args);
    let signing = gw.material().signing_key();
    let internal = |what: &str| {
        Refusal::new(
            Code::InvalidArguments,
            format!("{} cannot be planned: {what}", tool.exposed),
        )
    };
    plangate_core::check_safe_integers(&args).map_err(|e| internal(&e.to_string()))?;
    // One scan of the arguments for what is shown and what is keyed.
    let keyed = plangate_core::keyed_from_split(redacted.clone(), &secrets, signing);
    let fingerprint = arguments_fingerprint(&tool.upstream, &tool.original, &keyed)
        .map_err(|e| internal(&e.to_string()))?;
    let schema_hash = tool
        .schema_hash
        .clone()
        .ok_or_else(|| internal("its input schema cannot be canonicalised"))?;
    let config = gw.config();
    let configured = config.tool_settings(&tool.upstream, &tool.original);
    let has_settings = configured.is_some();
    let settings = configured.cloned().unwrap_or_default();
    // A built-in profile fills in what the operator did not set.
    let profile = tool.profile.as_deref().map(|m| &m.tool);

    let mut target = match settings.target.as_deref() {
        Some(p) => pointer_text(&redacted, p),
        None => profile
            .and_then(|p| p.target.as_deref())
            .and_then(|p| target_text(&redacted, p)),
    };
    let mut target_version = None;
    let mut predicted = None;
    if let Some(preview_tool) = &settings.preview {
        // A preview is a read by the caller: one it may not make is not
        // made; one a rule keeps from it binds the target's version but
        // tells the agent nothing of what it said.
        let access = crate::preview::access(
            gw,
            acting,
            &in_force.spec,
            &tool.upstream,
            preview_tool,
            &args,
        )
        .await;
        if !matches!(access, crate::preview::Access::Never(_)) {
            // The preview sees the real arguments; whatever it says back
            // is scrubbed of them, and of every secret the key's log
            // holds, before anyone else sees it.
            let secrets = secrets_to_scrub(gw, acting, known, &secrets).await?;
            let shown = access == crate::preview::Access::Read;
            match preview(gw, tool, preview_tool, arguments).await {
                Ok(Some(p)) => {
                    if shown {
                        predicted = p.effect.map(|e| redactor.scrub_text(&e, &secrets));
                        target = target.or(p.target.map(|t| redactor.scrub_text(&t, &secrets)));
                    }
                    target_version = p.target_version;
                }
                Ok(None) => {}
                Err(mut refusal) => {
                    refusal.message = if shown {
                        redactor.scrub_text(&refusal.message, &secrets)
                    } else {
                        format!(
                            "{} cannot be planned: its preview refused it ({}). Nothing was planned or written",
                            tool.exposed,
                            plangate_core::preview::WITHHELD
                        )
                    };
                    return Err(refusal);
                }
            }
        }
    }
    // The profile's preview: the upstream's own read (or dry run) of the
    // target, with the real arguments, decided as the key's own read;
    // what it shows is scrubbed.
    let mut step_preview = None;
    let mut preview_withheld = None;
    if let Some(spec) = crate::preview::spec_of(gw, tool) {
        let read_args = Value::Object(plangate_config::profiles::read_arguments(spec, &args));
        let access = crate::preview::access(
            gw,
            acting,
            &in_force.spec,
            &tool.upstream,
            &spec.read,
            &read_args,
        )
        .await;
        step_preview = Some(match access {
            crate::preview::Access::Never(why) => plangate_core::Preview::Unavailable {
                target: target.clone(),
                reason: why,
            },
            access => {
                let secrets = secrets_to_scrub(gw, acting, known, &secrets).await?;
                let bind = crate::preview::Bind {
                    at: crate::preview::placed_at(gw, tool, &args).await,
                    key: match &access {
                        crate::preview::Access::Withheld(why) => {
                            preview_withheld = Some(why.clone());
                            Some(*signing)
                        }
                        _ => None,
                    },
                };
                crate::preview::take(gw, tool, spec, &args, &secrets, target.clone(), &bind).await
            }
        });
    }
    let lands_where = match (has_settings, settings.lands_on, profile) {
        (false, _, Some(p)) if p.lands_on.as_deref() == Some("copy") => Where::Copy,
        (_, plangate_config::LandsOnSetting::Copy, _) => Where::Copy,
        _ => Where::Live,
    };
    let predicted_effect = predicted
        .or_else(|| {
            settings
                .predicted_effect
                .as_deref()
                .or(profile.and_then(|p| p.predicted_effect.as_deref()))
                .map(|t| {
                    let named = target.as_deref().unwrap_or("?");
                    let t = t.replace("{@target}", &named.replace('{', "{{").replace('}', "}}"));
                    let sentence = render_template(&t, &redacted);
                    match &step_preview {
                        // What the preview read is not for the agent.
                        Some(_) if preview_withheld.is_some() => format!("{sentence}."),
                        Some(p) => format!("{sentence}: {}.", p.summary()),
                        None => format!("{sentence}."),
                    }
                })
        })
        .unwrap_or_else(|| {
            generic_effect(&CallFacts {
                server: &tool.upstream,
                tool: &tool.original,
                effect: tool.effect,
                arguments: &redacted,
                schema: Some(&tool.tool.input_schema),
                target: target.as_deref(),
                lands: lands_where,
            })
        });
    let lands_on = LandsOn {
        where_: lands_where,
        target,
        copy_id: None,
        note: settings.lands_on_note.clone(),
    };
    let approval_required = tool.effect == Effect::Destructive;
    // Whose yes runs it: for a plan key (or a locked mode) a person outside
    // the key; for a write key its own apply is the yes (docs/design.md §7).
    let outside = rules::approval_scope(acting.key.scope, in_force) == Scope::Plan;
    let approval_note = approval_required.then(|| {
        if outside {
            format!(
                "Destructive: {} may destroy or overwrite data. It runs only after {}.",
                tool.exposed,
                gw.how_to_approve(&acting.key.name, None)
            )
        } else {
            format!(
                "Destructive: {} may destroy or overwrite data. It needs the person's explicit yes; applying the plan is that yes.",
                tool.exposed
            )
        }
    });

    let sealed_secrets = if secrets.is_empty() {
        None
    } else {
        let plain = serde_json::to_vec(&secrets).map_err(Refusal::internal)?;
        Some(
            plangate_store::seal::seal(gw.material(), &plain, step_id.as_bytes())
                .map_err(|e| Refusal::internal(format!("sealing a secret failed: {e}")))?,
        )
    };
    let arguments = JsonText::from_value(&redacted);
    let keyed_arguments = StepRecord::keyed_unless_same(&arguments, JsonText::from_value(&keyed));
    Ok(StepRecord {
        step_id,
        position: 0,
        server: tool.upstream.clone(),
        tool: tool.original.clone(),
        exposed_as: tool.exposed.clone(),
        arguments,
        keyed_arguments,
        sealed_secrets,
        fingerprint,
        effect: tool.effect,
        schema_hash,
        predicted_effect,
        lands_on,
        approval_required,
        approval_note,
        planned_at_ms: now_ms(),
        target_version,
        definition_hash: Some(tool.definition_hash.clone()),
        preview: step_preview,
        rule: None,
        preview_withheld,
    })
}

/// Plans a write: the step record, recorded durably in the key's log with
/// the call's record (one append), and the planned-write answer of docs/design.md
/// §5.
pub async fn plan_write(
    gw: &Gateway,
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
    let outside = rules::approval_scope(acting.key.scope, in_force) == Scope::Plan;
    let ttl_ms = gw.ttl_ms();
    let max_steps = gw.config().gateway.max_steps as usize;
    let max_bytes = gw.config().gateway.max_plan_bytes;

    let outcome = gw
        .log()
        .transact_from(&acting.key.id, known, |state| {
            if state.last_seq != decided_at && !still_plans(state) {
                return Err(None);
            }
            let now = now_ms();
            let mut events = Vec::new();
            let mut view = state.clone();
            if let Some(expired) = expiry_due(state, now, ttl_ms, acting) {
                view.apply(view.last_seq + 1, &expired);
                events.push(expired);
            }
            // The call's record goes in the same append as its step.
            let call = |step_id: &str| {
                let mut record = crate::call_log::record_of(
                    gw,
                    &acting.key.id,
                    crate::call_log::Call {
                        tool,
                        arguments: None,
                        decision: plangate_core::CallDecision::Plan,
                        outcome: plangate_core::CallOutcome::Planned,
                        code: None,
                        started,
                        rule: rule.clone(),
                    },
                );
                if let Some(r) = record.as_mut() {
                    r.step_id = Some(step_id.to_owned());
                }
                record.map(|call| acting.event(EventKind::CallRecorded { call }))
            };
            if let Some(existing) = view.find_planned_duplicate(&prepared.fingerprint) {
                let step_id = existing.record.step_id.clone();
                // What the person was shown of the target: a built-in
                // profile's preview (its `before_digest`), or the version a
                // configured preview tool reported (`target_version`).
                let seen_then = existing.record.preview.as_ref().and_then(|p| p.before_digest());
                let seen_now = prepared.preview.as_ref().and_then(|p| p.before_digest());
                if seen_then == seen_now
                    && existing.record.target_version == prepared.target_version
                {
                    events.push(acting.event(EventKind::StepDeduplicated {
                        step_id: step_id.clone(),
                    }));
                    events.extend(call(&step_id));
                    return Ok((events, (step_id, true)));
                }
                // The same write, but its target changed since it was
                // planned: the old step (and any approval of it) goes, and
                // the write is planned anew with what the target is now.
                let dropped = acting.event(EventKind::StepsDiscarded {
                    step_ids: vec![step_id],
                });
                view.apply(view.last_seq + 1, &dropped);
                events.push(dropped);
            }
            if let Err(refused) = rules::room_for(&view, prepared.size_bytes(), None, max_steps, max_bytes) {
                return Err(Some(Refusal::new(
                    refused.code(),
                    format!(
                        "{refused}; apply or discard some steps (plangate_get_plan shows them) before planning more. Nothing was planned"
                    ),
                )));
            }
            let mut record = prepared.clone();
            record.position = view.next_position;
            record.rule = rule.clone();
            events.push(acting.event(EventKind::StepPlanned { step: record }));
            events.extend(call(&step_id));
            Ok((events, (step_id.clone(), false)))
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
    let approver = outside.then(|| gw.how_to_approve(&acting.key.name, None));
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

/// The planned-write answer; `approver` says how a person outside the key
/// approves, when the key's own apply is not the yes.
fn planned_answer(
    gw: &Gateway,
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
