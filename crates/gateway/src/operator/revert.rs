//! A person's revert (docs/design.md §5, "Undo"): the applied steps named
//! (every step of the last apply by default) get inverse steps in their
//! key's plan — the step's own server's tools writing back what it
//! replaced ([`plangate_core::undo::inverse`]) — reviewed, approved and
//! applied like any step. A revert never overwrites later work: the target
//! is read first and must still be as the step left it (its
//! `after_digest`); if it changed, nothing is planned for it and the
//! answer says so. What cannot be reverted with the server's tools (a
//! file the step created, an unprofiled server, a state no longer kept) is
//! listed with why.

use plangate_core::undo::{Replaced, Undo, Versions, inverse};
use plangate_core::{KeyState, Step, StepStatus, restore_secrets};
use serde::{Deserialize, Serialize};

use super::OperatorError;
use crate::Ops;
use crate::acting::Acting;
use crate::plan::{Known, PlanReason, Planned, Write, plan_write};

/// What a revert planned, and what it could not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RevertAnswer {
    /// The key whose plan holds the inverse steps.
    pub key: String,
    /// The inverse steps planned, waiting for a person's yes.
    pub planned: Vec<RevertStep>,
    /// The steps nothing was planned for, and why.
    pub not_reverted: Vec<NotReverted>,
    /// The plan's digest now.
    pub plan_digest: String,
}

/// An inverse step planned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RevertStep {
    /// The new step.
    pub step_id: String,
    /// Its position in the plan.
    pub position: u32,
    /// What it would do.
    pub predicted_effect: String,
    /// The applied step it reverts.
    pub reverts: String,
}

/// An applied step with no inverse planned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NotReverted {
    /// The step.
    pub step_id: String,
    /// What it did.
    pub predicted_effect: String,
    /// Why nothing is planned to revert it.
    pub reason: String,
    /// For a target changed since the apply: what the step changed and
    /// what changed since, as diffs (redacted, as previews are).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versions: Option<Versions>,
}

/// Plans the inverse of each step of `acting`'s key named (every step
/// applied by the key's last apply when none is), as the person acting.
/// Later steps are reverted first (their inverses come earlier in the
/// plan). Refused only when there is nothing applied to revert or the log
/// cannot be read; each step that cannot be reverted is in the answer.
pub async fn revert(
    gw: Ops<'_>,
    acting: &Acting,
    named: &[String],
) -> Result<RevertAnswer, OperatorError> {
    let key = &acting.key;
    // An agent whose key may only read cannot plan writes, undoing ones
    // included.
    if acting.operator.is_none() && key.scope == plangate_core::Scope::Read {
        return Err(OperatorError::Refused(crate::refusal::Refusal::new(
            plangate_core::Code::Forbidden,
            "this API key may only read, so it cannot plan the steps that undo others; nothing was planned",
        )));
    }
    let state = gw.log().state(&key.id).await?;
    let mut targets = chosen(&state, named);
    if targets.is_empty() {
        return Err(OperatorError::BadArguments(format!(
            "key {:?} has no applied step to revert{}",
            key.name,
            if named.is_empty() {
                ""
            } else {
                " among those named"
            }
        )));
    }
    targets.sort_by_key(|s| std::cmp::Reverse(s.record.position));
    let mut answer = RevertAnswer {
        key: key.name.clone(),
        planned: Vec::new(),
        not_reverted: Vec::new(),
        plan_digest: String::new(),
    };
    for (id, step) in named_but_not_applied(&state, named) {
        answer.not_reverted.push(NotReverted {
            step_id: id,
            predicted_effect: step
                .map(|s| s.record.predicted_effect.clone())
                .unwrap_or_default(),
            reason: "it is not an applied step of this plan".to_owned(),
            versions: None,
        });
    }
    for step in targets {
        match revert_one(gw, acting, &step).await {
            Ok(planned) => answer.planned.extend(planned),
            Err(Why { reason, versions }) => answer.not_reverted.push(NotReverted {
                step_id: step.record.step_id.clone(),
                predicted_effect: step.record.predicted_effect.clone(),
                reason,
                versions,
            }),
        }
    }
    answer.plan_digest = gw.log().state(&key.id).await?.plan_digest();
    Ok(answer)
}

/// The applied steps a revert of `named` covers: those named, or every
/// step the last apply applied ([`KeyState::last_applied`]).
fn chosen(state: &KeyState, named: &[String]) -> Vec<Step> {
    if named.is_empty() {
        return state.last_applied().into_iter().cloned().collect();
    }
    state
        .steps
        .iter()
        .filter(|s| s.status == StepStatus::Applied && named.contains(&s.record.step_id))
        .map(|s| (**s).clone())
        .collect()
}

/// The named steps that are not applied ones, with the step when it
/// exists.
fn named_but_not_applied(state: &KeyState, named: &[String]) -> Vec<(String, Option<Step>)> {
    named
        .iter()
        .filter_map(|id| match state.step(id) {
            Some(s) if s.status == StepStatus::Applied => None,
            found => Some((id.clone(), found.cloned())),
        })
        .collect()
}

/// Why a step has no inverse planned, and — when the target changed
/// since the apply — the versions a person compares.
struct Why {
    reason: String,
    versions: Option<Versions>,
}

impl From<String> for Why {
    fn from(reason: String) -> Why {
        Why {
            reason,
            versions: None,
        }
    }
}

/// Plans the inverse of `step` (one step per call it takes), or says why
/// not.
async fn revert_one(gw: Ops<'_>, acting: &Acting, step: &Step) -> Result<Vec<RevertStep>, Why> {
    let record = &step.record;
    if !step.reverted_by.is_empty() {
        return Err(format!(
            "it was reverted already (by {})",
            step.reverted_by.join(", ")
        )
        .into());
    }
    let (after, logged) = match &step.undo {
        Some(Undo::Snapshot {
            tool,
            calls,
            after_versions,
        }) => return by_snapshot(gw, acting, record, tool, (calls, after_versions)).await,
        Some(Undo::Kept {
            after_digest,
            digest,
            ..
        }) => (
            after_digest.clone().ok_or_else(|| {
                "what it left could not be read after it ran, so a revert could overwrite later work"
                    .to_owned()
            })?,
            digest,
        ),
        Some(Undo::Unavailable { reason }) | Some(Undo::Dropped { reason }) => {
            return Err(format!("no undo: {reason}").into());
        }
        None => {
            return Err("it was applied before plangate kept what steps replace"
                .to_owned()
                .into());
        }
    };
    let replaced = kept_state(gw, acting, record, logged).await?;
    let catalog = gw.catalog();
    let tool = crate::plan::planned_tool(&catalog, record)
        .ok_or_else(|| format!("{} is not offered now", record.exposed_as))?;
    let profile = tool
        .profile
        .as_ref()
        .map(|m| m.name.as_str())
        .unwrap_or("this server");
    let back = inverse(profile, &record.tool, &record.arguments.value(), &replaced)?;
    let spec = crate::preview::spec_of(gw, tool)
        .ok_or_else(|| "no profile reads its target, so it cannot be checked".to_owned())?;
    let secrets = crate::plan::open_secrets(&gw, record)
        .ok_or_else(|| "its sealed arguments do not open with this gateway's keys".to_owned())?;
    let real = restore_secrets(&record.arguments.value(), &secrets);
    // What was there is shown (in the inverse step, or as versions) only
    // to a key that may read the target.
    let (_, in_force) = state_in_force(gw, acting).await?;
    let read_args =
        serde_json::Value::Object(plangate_config::profiles::read_arguments(spec, &real));
    if !matches!(
        crate::preview::access(
            gw,
            acting,
            &in_force.spec,
            &record.server,
            &spec.read,
            &read_args
        )
        .await,
        crate::preview::Access::Read
    ) {
        return Err(
            "this key may not read the target, so its plan cannot carry what was there"
                .to_owned()
                .into(),
        );
    }
    // Never over later work: the target must be as the step left it.
    if let Err(moved) = crate::preview::still_as_seen(gw, tool, spec, &real, &after).await {
        let why = moved
            .why
            .replace("since the plan was reviewed", "since the apply");
        let label = record.lands_on.target.as_deref().unwrap_or(&record.tool);
        let versions = moved.now.as_ref().and_then(|now| {
            let shown = Versions::of(
                &replaced,
                &now.into(),
                label,
                gw.config().gateway.max_preview_bytes,
            )?;
            Some(Versions {
                applied: gw.redactor().scrub_text(&shown.applied, &secrets),
                since: gw.redactor().scrub_text(&shown.since, &secrets),
            })
        });
        return Err(Why {
            reason: format!("stale_target: {why}; the later change stays and nothing is planned"),
            versions,
        });
    }
    let mut planned = Vec::new();
    for call in back {
        planned.push(plan_inverse(gw, acting, record, &call).await?);
    }
    Ok(planned)
}

/// Plans the restores of the snapshots the server kept when `record`
/// applied — only while each restore's preview still finds the target at
/// the version the step left it (later work is never restored over).
async fn by_snapshot(
    gw: Ops<'_>,
    acting: &Acting,
    record: &plangate_core::StepRecord,
    tool: &str,
    (calls, after_versions): (
        &[serde_json::Map<String, serde_json::Value>],
        &[Option<serde_json::Value>],
    ),
) -> Result<Vec<RevertStep>, Why> {
    let catalog = gw.catalog();
    let restore = catalog
        .tools
        .iter()
        .find(|t| t.upstream == record.server && t.original == tool)
        .ok_or_else(|| format!("{} does not offer {tool} now", record.server))?;
    for (call, then) in calls.iter().zip(after_versions) {
        let Some(then) = then else { continue };
        let now = crate::plan::preview_version(gw, restore, call).await;
        if now.as_ref() != Some(then) {
            return Err(format!(
                "stale_target: the target changed since the apply (version {then} then, {} now); the later change stays and nothing is planned",
                now.map_or_else(|| "none".to_owned(), |v| v.to_string())
            )
            .into());
        }
    }
    let mut planned = Vec::new();
    for call in calls {
        let inverse = plangate_core::undo::Inverse {
            tool: tool.to_owned(),
            arguments: call.clone(),
        };
        planned.push(plan_inverse(gw, acting, record, &inverse).await?);
    }
    Ok(planned)
}

/// Plans one inverse call of `record` in its key's plan, as the person.
async fn plan_inverse(
    gw: Ops<'_>,
    acting: &Acting,
    record: &plangate_core::StepRecord,
    call: &plangate_core::undo::Inverse,
) -> Result<RevertStep, String> {
    let catalog = gw.catalog();
    let tool = catalog
        .tools
        .iter()
        .find(|t| t.upstream == record.server && t.original == call.tool)
        .ok_or_else(|| format!("{} does not offer {} now", record.server, call.tool))?;
    let (state, in_force) = state_in_force(gw, acting).await?;
    let planned = plan_write(
        gw,
        acting,
        &in_force,
        Write {
            tool,
            arguments: &call.arguments,
            reason: PlanReason::Explicit,
            started: std::time::Instant::now(),
            rule: None,
            reverts: Some(record.step_id.clone()),
            still_plans: &|_| true,
        },
        Known { state, fresh: true },
    )
    .await
    .map_err(|refusal| refusal.message)?;
    if let Planned::Moved = planned {
        return Err("the plan moved while the revert was planned; ask again".to_owned());
    }
    let now = gw
        .log()
        .state(&acting.key.id)
        .await
        .map_err(|e| e.to_string())?;
    let new = now
        .planned_steps()
        .filter(|s| s.record.reverts.as_deref() == Some(record.step_id.as_str()))
        .max_by_key(|s| s.record.position)
        .ok_or_else(|| "the inverse step was not recorded".to_owned())?;
    Ok(RevertStep {
        step_id: new.record.step_id.clone(),
        position: new.record.position,
        predicted_effect: new.record.predicted_effect.clone(),
        reverts: record.step_id.clone(),
    })
}

/// What `record`'s apply replaced, opened from the store — only if it is
/// what the key's log recorded (`logged`, the digest in its
/// `undo_recorded`): the store's row alone, which whoever can write the
/// database could replace (and re-seal), does not decide what a revert
/// writes back.
async fn kept_state(
    gw: Ops<'_>,
    acting: &Acting,
    record: &plangate_core::StepRecord,
    logged: &str,
) -> Result<Replaced, String> {
    let kept = gw
        .store()
        .undo_states()
        .undo_state(&acting.key.id, &record.step_id)
        .await
        .map_err(|e| format!("what it replaced cannot be read ({e})"))?
        .ok_or_else(|| "what it replaced is no longer kept".to_owned())?;
    let aad = crate::apply::undo::sealed_for(&acting.key.id, &record.step_id);
    let plain = plangate_store::seal::unseal(gw.material(), &kept.sealed, aad.as_bytes())
        .map_err(|e| format!("what it replaced does not open ({e})"))?;
    if Replaced::digest_of(&plain) != kept.digest || kept.digest != logged {
        return Err(
            "what is kept for it is not what its log recorded (changed outside plangate), so nothing is planned from it"
                .to_owned(),
        );
    }
    serde_json::from_slice(&plain).map_err(|e| format!("what it replaced is not readable ({e})"))
}

/// The agent's answer to `revert`: the answer as `structuredContent`, and
/// in words what was planned, what was not and why, and what comes next.
pub fn revert_result(answer: &RevertAnswer, prefix: String) -> rmcp::model::CallToolResult {
    let mut text = if answer.planned.is_empty() {
        "Nothing was planned: no step could be reverted.".to_owned()
    } else {
        format!(
            "Planned {} step(s) to revert; nothing was written. They wait for the person like any plan step; when {prefix}get_plan shows them approved, call {prefix}apply_plan.",
            answer.planned.len()
        )
    };
    for s in &answer.planned {
        text.push_str(&format!(
            "\n{}. {} (reverts {})",
            s.position, s.predicted_effect, s.reverts
        ));
    }
    for n in &answer.not_reverted {
        text.push_str(&format!("\nNot reverted: {} — {}", n.step_id, n.reason));
        if let Some(v) = &n.versions {
            text.push_str(&format!(
                "\nWhat the step changed:\n{}What changed since:\n{}",
                v.applied, v.since
            ));
        }
    }
    let body = serde_json::to_value(answer).unwrap_or(serde_json::Value::Null);
    crate::answer::with_text(body, text, false)
}

/// The key's state and the mode in force on it, read now.
async fn state_in_force(
    gw: Ops<'_>,
    acting: &Acting,
) -> Result<(KeyState, plangate_core::InForce), String> {
    let state = gw
        .log()
        .state(&acting.key.id)
        .await
        .map_err(|e| e.to_string())?;
    let in_force = gw.config().modes.in_force(&state);
    Ok((state, in_force))
}
