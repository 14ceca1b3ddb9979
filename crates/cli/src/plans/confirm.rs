//! A person's yes at the terminal: `plans approve` and `plans apply`
//! without `--digest` show the steps the yes covers and ask (y/N). Apart
//! from both verbs, which share it, so the question is asked one way
//! (docs/design.md §7).

use anyhow::{Context, Result, anyhow};
use plangate_core::{KeyState, PlannedStep};
use plangate_gateway::operator;

use super::render::lands_on_text;
use crate::commands::UsageError;

/// What a person says yes to with `plans approve` or `plans apply`.
#[derive(Clone, Copy)]
pub(crate) enum Act {
    Approve,
    Apply,
}

/// The plan as a person was shown it on their terminal: what their yes is
/// bound to.
pub(crate) struct Shown {
    digest: String,
    revision: u64,
}

impl Shown {
    /// `state`'s plan as it is now.
    pub(super) fn of(state: &KeyState) -> Shown {
        Shown {
            digest: state.plan_digest(),
            revision: state.revision,
        }
    }

    /// A plan at `digest` and `revision`, as the operator API showed it.
    pub(crate) fn at(digest: &str, revision: u64) -> Shown {
        Shown {
            digest: digest.to_owned(),
            revision,
        }
    }

    /// What the yes is bound to, for [`operator`].
    pub(crate) fn seen(&self) -> operator::Seen<'_> {
        operator::Seen {
            digest: &self.digest,
            revision: Some(self.revision),
        }
    }
}

/// `plans approve` and `plans apply` without `--digest`: shows the person
/// at the terminal the steps their yes covers — each with its predicted
/// effect, where it lands and its preview (not the note meant for the agent) — with the plan's
/// digest and revision, on stderr (stdout keeps the answer), and asks
/// (y/N). The yes is bound to exactly that plan ([`operator::Seen`]): one
/// that moved while the question was open is refused `plan_changed`, and
/// nothing is recorded. With no terminal to ask on (a script, a pipe, an
/// agent's shell) it refuses before anything is recorded — a yes nobody
/// read is no yes — and says how to pass the digest the person was shown.
pub(crate) async fn confirm(
    key: &str,
    shown: Shown,
    steps: &[PlannedStep],
    act: Act,
) -> Result<Shown> {
    use std::io::IsTerminal;
    let (verb, done) = match act {
        Act::Approve => ("approve", "approved"),
        Act::Apply => ("apply", "applied"),
    };
    let name = plangate_core::shell_word(key);
    if !std::io::stdin().is_terminal() {
        return Err(UsageError(format!(
            "`plangate plans {verb}` without --digest asks the person at a terminal, and stdin is not one: nothing was {done}. `plangate plans show --key {name}` prints the plan and its digest; pass that digest as --digest to {verb} exactly that plan [invalid_arguments]"
        ))
        .into());
    }
    let note = |line: String| crate::output::note(format_args!("{line}"));
    note(format!(
        "key {key}: plan digest {}, revision {}",
        shown.digest, shown.revision
    ));
    note(match act {
        Act::Approve => format!("your yes approves {} waiting step(s):", steps.len()),
        Act::Apply => format!("this apply runs {} step(s) now:", steps.len()),
    });
    for r in steps {
        note(format!(
            "  {}. {}  {}: {} — {}{}",
            r.position,
            r.step_id,
            r.exposed_as,
            r.predicted_effect,
            lands_on_text(&r.lands_on),
            if r.approval_required {
                "; destructive"
            } else {
                ""
            }
        ));
        if let Some(p) = &r.preview {
            for line in crate::preview_text::preview_lines(r.position, p) {
                note(format!("     {}", line.text));
            }
        }
    }
    let question = match act {
        Act::Approve => format!("Approve these {} step(s) of {key}'s plan?", steps.len(),),
        Act::Apply => format!("Apply these {} step(s) of {key}'s plan now?", steps.len(),),
    };
    let yes = tokio::task::spawn_blocking(move || crate::output::ask_yes(&question))
        .await
        .context("cannot read the answer")?
        .context("cannot read the answer")?;
    if !yes {
        return Err(anyhow!(
            "not {done}: the answer was not yes; nothing was recorded"
        ));
    }
    Ok(shown)
}
