//! Waiting for the person (docs/design.md §7): a key whose own client's
//! yes does not count (a `plan`-scope key) puts its plan up for review,
//! and its `exit_plan_mode` call waits for the person's answer from any
//! surface — the console, the CLI, another replica — up to
//! `review_timeout`, reading the key's log every [`EVERY`]. The plan is
//! the handle: when the call ends first, the review goes on, and
//! `get_plan` shows its outcome when it comes.

use std::time::Duration;

use plangate_core::{KeyState, ReviewOutcome};

use crate::Gateway;
use crate::acting::Acting;
use crate::refusal::Refusal;

/// How often a waiting call reads the key's log for the person's answer.
const EVERY: Duration = Duration::from_millis(500);

/// Waits until a person answers the review asked at state `asked`
/// ([`plangate_core::rules::review_outcome`]), at most `timeout`;
/// `None` when it ran out (or the gateway stops) first.
pub(super) async fn for_the_person(
    gw: &Gateway,
    acting: &Acting,
    asked: &KeyState,
    timeout: Duration,
) -> Result<Option<ReviewOutcome>, Refusal> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let now = gw
            .log()
            .state(&acting.key.id)
            .await
            .map_err(crate::tools::log_failed)?;
        let approved = crate::operator::covered_steps(&gw.config(), &acting.key, &now);
        if let Some(outcome) = plangate_core::rules::review_outcome(asked, &now, &approved) {
            return Ok(Some(outcome));
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::select! {
            () = tokio::time::sleep(EVERY) => {}
            () = tokio::time::sleep_until(deadline) => {}
            () = gw.shutdown.cancelled() => return Ok(None),
        }
    }
}

/// The answer's words for `outcome` (or for none: the review goes on);
/// `prefix` is the gateway's tool prefix, `how` where a person approves.
pub(super) fn said(outcome: Option<&ReviewOutcome>, prefix: &str, how: &str, mode: &str) -> String {
    let Some(outcome) = outcome else {
        return format!(
            "Review asked: {how}. No answer yet; the review goes on after this call. Nothing was applied and the mode stays {mode}. {prefix}get_plan shows the person's answer in its `outcome` when it comes; once that names approved steps, call {prefix}apply_plan."
        );
    };
    let mut text = String::from("The person answered the review.");
    if !outcome.approved.is_empty() {
        text.push_str(&format!(
            " They approved {} step(s): call {prefix}apply_plan with plan_digest {} to apply them.",
            outcome.approved.len(),
            outcome.plan_digest
        ));
    }
    for no in &outcome.rejected {
        text.push_str(&format!(
            " They rejected step {} ({}): {:?}.",
            no.position, no.step_id, no.reason
        ));
    }
    if outcome.waiting > 0 {
        text.push_str(&format!(
            " {} step(s) still wait for a yes.",
            outcome.waiting
        ));
    } else if outcome.approved.is_empty() {
        text.push_str(" Nothing is left waiting in the plan.");
    }
    text.push_str(&format!(" Nothing was applied; the mode stays {mode}."));
    text
}
