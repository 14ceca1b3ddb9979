//! The receipt of DESIGN §5: what each selected step did, in plan order,
//! and the totals.

use plangate_core::{JsonText, KeyState};
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Value, json};

use crate::Gateway;

/// How one selected step ended in this apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// The upstream answered without an error.
    Applied,
    /// The upstream answered with an error, or a check refused the step.
    Failed,
    /// The call may or may not have reached the upstream.
    InDoubt,
    /// Not run: an earlier step failed and `continue_on_error` was off.
    NotRun,
}

impl Outcome {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::Failed => "failed",
            Outcome::InDoubt => "in_doubt",
            Outcome::NotRun => "not_run",
        }
    }
}

/// The receipt of DESIGN §5.
pub(super) fn receipt(
    gw: &Gateway,
    state: &KeyState,
    digest: &str,
    outcomes: &[(String, Outcome)],
    [applied, failed, in_doubt, not_run]: [u32; 4],
) -> CallToolResult {
    let mut approved = Vec::new();
    let mut steps = Vec::new();
    let mut lines = Vec::new();
    for (step_id, outcome) in outcomes {
        let Some(step) = state.step(step_id) else {
            continue;
        };
        let r = &step.record;
        let by_apply = r.approval_required && *outcome != Outcome::NotRun;
        if by_apply {
            approved.push(step_id.clone());
        }
        let mut s = json!({
            "step_id": step_id,
            "position": r.position,
            "tool": r.tool,
            "server": r.server,
            "predicted_effect": r.predicted_effect,
            "approved_by_apply": by_apply,
            "outcome": outcome.as_str(),
        });
        if *outcome == Outcome::Applied {
            s["result"] = step.result.as_ref().map_or(Value::Null, JsonText::value);
            s["copy_id"] = json!(step.copy_id);
            s["links"] = json!(step.links);
            s["snapshots"] = json!(step.snapshots);
        }
        if matches!(outcome, Outcome::Failed | Outcome::InDoubt)
            && let Some(e) = &step.error
        {
            s["error"] = json!(e);
        }
        lines.push(format!(
            "{}. {} — {}{}",
            r.position,
            r.predicted_effect,
            outcome.as_str(),
            step.error
                .as_ref()
                .filter(|_| *outcome != Outcome::Applied && *outcome != Outcome::NotRun)
                .map(|e| format!(": {}", e.message))
                .unwrap_or_default()
        ));
        steps.push(s);
    }
    let success = failed == 0 && in_doubt == 0;
    let message = if outcomes.is_empty() {
        "Nothing to apply: no step is waiting.".to_owned()
    } else if success && not_run == 0 {
        format!("Applied {applied} step(s).")
    } else {
        format!(
            "Applied {applied}, failed {failed}, in doubt {in_doubt}, not run {not_run}. Steps not run are still waiting; a failed step can be applied again by naming it; an in-doubt step may have reached the server and only a person can retry it."
        )
    };
    let mode = gw.config().modes.resolve(state.mode.as_deref()).0;
    let body = json!({
        "success": success,
        "code": "plan_applied",
        "message": message,
        "applied": applied,
        "failed": failed,
        "in_doubt": in_doubt,
        "not_run": not_run,
        "approved_by_apply": approved,
        "plan_digest": digest,
        "plan_mode": mode.plan_mode(),
        "steps": steps,
    });
    let mut result = CallToolResult::structured(body);
    result.content = vec![ContentBlock::text(format!(
        "{message}\n{}",
        lines.join("\n")
    ))];
    result
}
