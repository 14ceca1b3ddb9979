//! `plangate plans … --server URL`: a person acting on keys' plans through
//! a running plangate's operator API (docs/design.md §12), with an
//! operator token and no access to its data dir — how a person reaches the
//! gateway `plangate service install` runs as its own OS user, which the
//! agent's user cannot read or write.
//!
//! The server decides everything, through the same operations the console
//! and the data-dir commands call ([`plangate_gateway::operator`]); this
//! module asks it, renders its typed answers with the same printing as the
//! local commands, asks the person on the terminal (the steps a yes covers,
//! then a code when approvals require one), and turns refusals into exit
//! codes ([`crate::remote`]).

use anyhow::{Context as _, Result};
use plangate_core::{
    ApprovalAnswer, DiscardAnswer, KeyPlanView, PlanReview, PlannedStep, Receipt, RejectionAnswer,
    StepStatus,
};
use serde_json::{Value, json};

use super::confirm::{Act, Shown, confirm};
use super::render::finish_receipt;
use super::review::{print_approval, print_discarded, print_rejected};
use crate::args::{FactorArgs, PlanApply, PlanYes, PlansCommand};
use crate::commands::UsageError;
use crate::remote::Remote;

/// One key's plan as a person reviews it, from the server.
async fn review(remote: &Remote, key: &str) -> Result<PlanReview> {
    remote.get("/console/api/plan", &[("key", key)]).await
}

/// Runs a `plans` verb against the server at `url`.
pub(crate) async fn run(url: &str, command: PlansCommand) -> Result<()> {
    let remote = Remote::new(url)?;
    match command {
        PlansCommand::List { json, .. } => list(&remote, json).await,
        PlansCommand::Show { key, json, .. } => {
            super::read::print_review(&review(&remote, &key).await?, json)
        }
        PlansCommand::Reject(no) => {
            let review = review(&remote, &no.key).await?;
            let body = json!({"key_id": review.plan.key_id, "step_id": no.step, "reason": no.reason});
            let answer: RejectionAnswer = remote
                .post("/console/api/reject", body, &FactorArgs::default())
                .await?;
            print_rejected(&answer, no.json)
        }
        PlansCommand::Discard {
            key, steps, json, ..
        } => {
            let review = review(&remote, &key).await?;
            let body = json!({"key_id": review.plan.key_id, "step_ids": steps});
            let answer: DiscardAnswer = remote
                .post("/console/api/discard", body, &FactorArgs::default())
                .await?;
            print_discarded(&answer, json)
        }
        PlansCommand::Retry {
            key,
            step,
            json,
            factor,
            ..
        } => {
            let review = review(&remote, &key).await?;
            let body = json!({"key_id": review.plan.key_id, "step_id": step});
            let receipt: Receipt = remote.post("/console/api/retry", body, &factor).await?;
            finish_receipt(receipt, json)
        }
        PlansCommand::Approve(yes) => approve(&remote, yes).await,
        PlansCommand::Apply(PlanApply {
            yes,
            partial,
            go_on,
        }) => apply(&remote, yes, (partial, go_on)).await,
        PlansCommand::Revert {
            key, steps, json, ..
        } => {
            let review = review(&remote, &key).await?;
            let body = json!({"key_id": review.plan.key_id, "step_ids": steps});
            let answer: plangate_gateway::operator::RevertAnswer = remote
                .post("/console/api/revert", body, &crate::args::FactorArgs::default())
                .await?;
            super::revert::print(&answer, json)
        }
        PlansCommand::Amend { .. } | PlansCommand::Diff { .. } => Err(UsageError(
            "`plans amend` and `plans diff` work on the data dir; over --server, use the web console's amend form and history".to_owned(),
        )
        .into()),
    }
}

/// `plans approve --server`: the plan as the server shows it, the person's
/// yes to it (asked on the terminal without `--digest`), then the server's
/// approve bound to that digest and revision.
async fn approve(remote: &Remote, yes: PlanYes) -> Result<()> {
    let review = review(remote, &yes.key).await?;
    let view = &review.plan;
    let shown = match &yes.digest {
        Some(d) => Shown::at(d, view.standing.revision),
        None => {
            let steps = chosen(view, &yes.steps, |s| s.status == StepStatus::Planned, &[]);
            asked(view, steps, Act::Approve).await?
        }
    };
    let body = seen_body(view, &shown, &yes);
    let answer: ApprovalAnswer = remote
        .post("/console/api/approve", body, &yes.factor)
        .await?;
    print_approval(&answer, |id| position_and_effect(view, id), yes.json)
}

/// `plans apply --server`: as [`approve`], then the server runs the steps
/// and answers the receipt.
async fn apply(remote: &Remote, yes: PlanYes, (partial, go_on): (bool, bool)) -> Result<()> {
    let review = review(remote, &yes.key).await?;
    let view = &review.plan;
    let shown = match &yes.digest {
        Some(d) => Shown::at(d, view.standing.revision),
        None => {
            let runnable = |s: &&plangate_core::StepView| {
                matches!(s.status, StepStatus::Planned | StepStatus::Failed)
            };
            let steps = chosen(view, &yes.steps, runnable, &review.applies);
            asked(view, steps, Act::Apply).await?
        }
    };
    let mut body = seen_body(view, &shown, &yes);
    body["partial"] = json!(partial);
    body["continue"] = json!(go_on);
    let receipt: Receipt = remote.post("/console/api/apply", body, &yes.factor).await?;
    finish_receipt(receipt, yes.json)
}

/// An approve or apply request: the key, the plan as the person saw it
/// (its revision only when they were shown it here, not given a digest),
/// and the steps named.
fn seen_body(view: &KeyPlanView, shown: &Shown, yes: &PlanYes) -> Value {
    json!({
        "key_id": view.key_id,
        "plan_digest": shown.seen().digest,
        "revision": yes.digest.is_none().then_some(view.standing.revision),
        "step_ids": yes.steps,
    })
}

/// The steps a yes covers, as the server listed them: the named ones that
/// pass `fits`, or (none named) those in `all` — or, with `all` empty,
/// every waiting step.
fn chosen(
    view: &KeyPlanView,
    named: &[String],
    fits: impl Fn(&&plangate_core::StepView) -> bool,
    all: &[String],
) -> Vec<PlannedStep> {
    view.steps
        .iter()
        .filter(|s| match named.is_empty() {
            false => named.contains(&s.step.step_id) && fits(s),
            true if all.is_empty() => s.status == StepStatus::Planned,
            true => all.contains(&s.step.step_id),
        })
        .map(|s| s.step.clone())
        .collect()
}

/// Shows the person the steps and asks; with none to show, the plan as it
/// is, for the server to refuse.
async fn asked(view: &KeyPlanView, steps: Vec<PlannedStep>, act: Act) -> Result<Shown> {
    let shown = Shown::at(&view.standing.plan_digest, view.standing.revision);
    if steps.is_empty() {
        return Ok(shown);
    }
    confirm(&view.key, shown, &steps, act).await
}

/// A step's position and predicted effect, from the plan the server showed.
fn position_and_effect(view: &KeyPlanView, id: &str) -> Option<(u32, String)> {
    view.steps
        .iter()
        .find(|s| s.step.step_id == id)
        .map(|s| (s.step.position, s.step.predicted_effect.clone()))
}

/// `plans list --server`: every key with a plan, from the server's view.
async fn list(remote: &Remote, as_json: bool) -> Result<()> {
    let state: Value = remote.get("/console/api/state", &[]).await?;
    let views: Vec<KeyPlanView> = serde_json::from_value(state["keys"].clone())
        .context("the server's plans are not what this plangate reads (another version?)")?;
    let rows: Vec<Value> = views.iter().map(super::read::row_of_view).collect();
    super::read::print_rows(&rows, as_json)
}

/// `plangate mode set --server URL`: the key's mode and lock, set by the
/// server ([`plangate_gateway::operator::set_mode`]); the code asked for
/// when an unlock (or a move out of plan mode of a held key) needs one.
pub(crate) async fn mode(
    url: &str,
    key: &str,
    mode: Option<&str>,
    (lock, unlock): (bool, bool),
    factor: &FactorArgs,
    as_json: bool,
) -> Result<()> {
    use plangate_gateway::operator::LockChange;
    let remote = Remote::new(url)?;
    let review = review(&remote, key).await?;
    let (change, word) = match (lock, unlock) {
        (true, _) => (LockChange::Lock, "lock"),
        (_, true) => (LockChange::Unlock, "unlock"),
        _ => (LockChange::Keep, "keep"),
    };
    let body = json!({"key_id": review.plan.key_id, "mode": mode, "lock": word});
    let answer: plangate_core::ModeAnswer = remote.post("/console/api/mode", body, factor).await?;
    crate::commands::print_mode(&answer, (change, mode.is_some()), as_json)
}
