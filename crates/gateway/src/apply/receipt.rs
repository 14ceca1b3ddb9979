//! The receipt of docs/design.md §5: what each selected step did, in plan order,
//! and the totals.

use plangate_core::view::AnswerCode;
pub(super) use plangate_core::view::Outcome;
use plangate_core::{KeyState, Receipt, ReceiptStep};
use rmcp::model::CallToolResult;

use crate::Ops;
use crate::answer::structured;

/// The receipt of docs/design.md §5.
pub(super) fn receipt(
    gw: Ops<'_>,
    (state, covered): (&KeyState, &[String]),
    digest: &str,
    outcomes: &[(String, Outcome)],
    [applied, failed, in_doubt, not_run, not_approved]: [u32; 5],
) -> Receipt {
    let mut steps = Vec::new();
    let mut ordered: Vec<&(String, Outcome)> = outcomes.iter().collect();
    ordered.sort_by_key(|(id, _)| state.step(id).map(|s| s.record.position));
    for (step_id, outcome) in ordered {
        let Some(step) = state.step(step_id) else {
            continue;
        };
        let mut line = ReceiptStep::of(step, *outcome);
        // A person's approval was its yes, not this apply.
        line.approved_by_apply &= !covered.contains(step_id);
        steps.push(line);
    }
    let success = failed == 0 && in_doubt == 0;
    let mut message = if outcomes.is_empty() {
        "Nothing to apply: no step is waiting.".to_owned()
    } else if success && not_run == 0 {
        format!("Applied {applied} step(s).")
    } else {
        format!(
            "Applied {applied}, failed {failed}, in doubt {in_doubt}, not run {not_run}. Steps not run are still waiting; a failed step can be applied again by naming it; an in-doubt step may have reached the server and only a person can retry it."
        )
    };
    if not_approved > 0 {
        message.push_str(&format!(
            " {not_approved} step(s) were not run because no person approved them (a person approved other steps of this plan); they are still waiting until {}, or are discarded.",
            gw.how_to_approve()
        ));
    }
    let mode = gw.config().modes.in_force(state).spec;
    let applied_ids: Vec<String> = outcomes
        .iter()
        .filter(|(_, o)| *o == Outcome::Applied)
        .map(|(id, _)| id.clone())
        .collect();
    let left_waiting = match applied_ids.is_empty() {
        true => Vec::new(),
        false => plangate_core::partial::left_behind(state, &applied_ids),
    };
    if plangate_core::partial::any_tied(&left_waiting) {
        message.push_str(
            " Some steps still waiting are tied to steps applied now (listed with why): the work may be half done until they run or are discarded.",
        );
    }
    Receipt {
        success,
        code: AnswerCode::PlanApplied,
        message,
        applied,
        failed,
        in_doubt,
        not_run,
        not_approved,
        approved_by_apply: steps
            .iter()
            .filter(|s| s.approved_by_apply)
            .map(|s| s.step_id.clone())
            .collect(),
        plan_digest: digest.to_owned(),
        plan_mode: mode.plan_mode(),
        steps,
        rejected: plangate_core::view::RejectedStep::all(state),
        left_waiting,
        notice: None,
        mode: None,
    }
}

/// The agent's answer of a receipt: the receipt itself as structured
/// content, and as text its message and one line per step, in plan order
/// (why a failed or in-doubt step stopped), then the rejected steps.
pub fn receipt_result(receipt: &Receipt) -> CallToolResult {
    let mut lines = vec![receipt.message.clone()];
    for s in &receipt.steps {
        lines.push(format!(
            "{}. {} — {}{}",
            s.position,
            s.predicted_effect,
            s.outcome.as_str(),
            s.error
                .as_ref()
                .filter(|_| matches!(s.outcome, Outcome::Failed | Outcome::InDoubt))
                .map(|e| format!(": {}", e.message))
                .unwrap_or_default()
        ));
    }
    for r in &receipt.rejected {
        lines.push(format!(
            "{}. {} — rejected by {}, not run: {}",
            r.position, r.predicted_effect, r.by, r.reason
        ));
    }
    lines.extend(left_lines(receipt));
    structured(receipt, lines.join("\n"))
}

/// The steps an apply left waiting, one line each, with what ties each to
/// a step it applied: for the agent's answer and the CLI's receipt alike.
pub fn left_lines(receipt: &Receipt) -> Vec<String> {
    receipt
        .left_waiting
        .iter()
        .map(|l| {
            let tied = l
                .tied
                .as_deref()
                .map(|t| format!(": {t}"))
                .unwrap_or_default();
            format!(
                "{}. {} — still waiting{tied}",
                l.position, l.predicted_effect
            )
        })
        .collect()
}
