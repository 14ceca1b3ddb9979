//! How `plans` commands put things in words: durations, where a step lands,
//! a JSON diff, and a receipt (docs/design.md §5). Apart from the commands so
//! each verb's file holds what it does, and every verb renders alike.

use anyhow::{Result, anyhow};
use plangate_core::{LandsOn, Receipt, Where};

use super::print_json;
use crate::output::outln;

/// Seconds as a person reads them: `3h 59m`, `4m 10s`, `12s`.
pub fn human_secs(secs: i64) -> String {
    match secs {
        s if s <= 0 => "now".to_owned(),
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m {}s", s / 60, s % 60),
        s => format!("{}h {}m", s / 3600, s % 3600 / 60),
    }
}

/// Where a step lands, in a few words.
pub fn lands_on_text(l: &LandsOn) -> String {
    match (l.where_, &l.target) {
        (Where::Copy, Some(t)) => format!("a copy of {t}"),
        (Where::Copy, None) => "a copy".to_owned(),
        (Where::Live, Some(t)) => format!("live ({t})"),
        (Where::Live, None) => "live".to_owned(),
    }
}

/// The lines of a receipt (docs/design.md §5) for a person.
pub fn receipt_lines(receipt: &Receipt) -> Vec<String> {
    let mut lines = vec![
        receipt.message.clone(),
        format!(
            "applied {}, failed {}, in doubt {}, not run {}{}",
            receipt.applied,
            receipt.failed,
            receipt.in_doubt,
            receipt.not_run,
            if receipt.not_approved > 0 {
                format!(", not approved {}", receipt.not_approved)
            } else {
                String::new()
            }
        ),
    ];
    for s in &receipt.steps {
        let mut line = format!(
            "step {} ({}): {} — {}",
            s.position,
            s.step_id,
            s.predicted_effect,
            s.outcome.as_str(),
        );
        if let Some(applied) = &s.applied {
            if let Some(c) = &applied.copy_id {
                line.push_str(&format!("; copy {c}"));
            }
            for l in &applied.links {
                line.push_str(&format!("; link {l}"));
            }
            for l in &applied.snapshots {
                line.push_str(&format!("; snapshot {l}"));
            }
            if let Some(undo) = &applied.undo {
                line.push_str(&format!("; {}", undo.said()));
            }
        }
        if let Some(reverts) = &s.reverts {
            line.push_str(&format!("; reverts {reverts}"));
        }
        if s.approved_by_apply {
            line.push_str("; approved by this apply (destructive)");
        }
        if let Some(e) = &s.error {
            line.push_str(&format!("; error {}: {}", e.code, e.message));
        }
        lines.push(line);
    }
    for r in &receipt.rejected {
        lines.push(format!(
            "step {} ({}): {} — rejected by {}, not run: {}",
            r.position, r.step_id, r.predicted_effect, r.by, r.reason
        ));
    }
    for l in &receipt.left_waiting {
        let tied = l
            .tied
            .as_deref()
            .map(|t| format!(": {t}"))
            .unwrap_or_default();
        lines.push(format!(
            "step {} ({}): {} — still waiting{tied}",
            l.position, l.step_id, l.predicted_effect
        ));
    }
    lines.push(format!("plan digest {}", receipt.plan_digest));
    lines
}

/// A JSON diff as lines a person reads: `path: before → after`.
pub(super) fn change_lines(changes: &[plangate_core::JsonChange]) -> Vec<String> {
    changes.iter().map(ToString::to_string).collect()
}

/// Prints a receipt; an apply with failed or in-doubt steps exits 1.
pub(super) fn finish_receipt(receipt: Receipt, as_json: bool) -> Result<()> {
    if as_json {
        print_json(&receipt)?;
    } else {
        for line in receipt_lines(&receipt) {
            outln!("{line}");
        }
    }
    if receipt.success {
        Ok(())
    } else {
        Err(anyhow!(
            "not every step was applied; `plangate plans show` shows what is left"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_a_person_says_them() {
        assert_eq!(human_secs(0), "now");
        assert_eq!(human_secs(12), "12s");
        assert_eq!(human_secs(250), "4m 10s");
        assert_eq!(human_secs(14_399), "3h 59m");
    }
}
