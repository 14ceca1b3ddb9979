//! The questions a person reads in their client (docs/design.md §7): about a
//! plan, and about one call an `ask` mode holds. Apart from the asking
//! because what the person is shown has rules of its own: every line
//! screened, a preview cut to an excerpt, the digest the yes binds named.

use plangate_core::{KeyState, ModeSpec, Where};
use plangate_store::now_ms;
use rmcp::model::ElicitRequestParams;
use serde_json::{Value, json};

use crate::Ops;
use crate::acting::Acting;
use crate::plan::expires_in;

pub(super) fn question_params(message: String) -> Result<ElicitRequestParams, serde_json::Error> {
    serde_json::from_value(json!({
        "mode": "form",
        "message": message,
        "requestedSchema": {
            "type": "object",
            "properties": {
                "decision": {
                    "type": "string",
                    "title": "Decision",
                    "oneOf": [
                        {"const": "approve", "title": "Approve: apply it"},
                        {"const": "keep_planning", "title": "Keep planning"}
                    ]
                },
                "feedback": {"type": "string", "title": "Feedback for the agent (optional)"}
            },
            "required": ["decision"]
        }
    }))
}

/// The question as the person reads it in their client: each line
/// screened ([`plangate_core::screen()`]: control characters, escape
/// sequences and invisible format characters an agent or an upstream put
/// in a value shown as visible escapes, the line marked), so nothing in a
/// value can hide or reorder what the person is asked about. The line
/// breaks are the question's own; a line break inside a value shows as
/// `\n`.
pub(crate) fn question_text(lines: &[String]) -> String {
    lines
        .iter()
        .map(|l| plangate_core::screen(l).marked().into_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The question of docs/design.md §7 about a plan: who asks, every step (server,
/// tool, predicted effect, where it lands, notes and warnings), freshness
/// and the digest.
pub(super) fn plan_question(
    gw: Ops<'_>,
    acting: &Acting,
    state: &KeyState,
    agent_plan: &str,
    digest: &str,
) -> String {
    let now = now_ms();
    let catalog = gw.catalog();
    let mut lines = vec![
        format!(
            "{} (API key {:?}, scope {}) asks you to approve this plan.",
            "An agent", acting.key.name, acting.key.scope
        ),
        String::new(),
        "In its words:".to_owned(),
    ];
    // The agent's plan keeps its own lines, each screened on its own.
    lines.extend(agent_plan.trim().split('\n').map(|l| format!("  {l}")));
    lines.extend([
        String::new(),
        "The steps plangate recorded (nothing has been written yet):".to_owned(),
    ]);
    for s in state.open_steps() {
        let r = &s.record;
        let mut warnings = Vec::new();
        if r.effect == plangate_core::Effect::Destructive {
            warnings.push("DESTRUCTIVE".to_owned());
        }
        match r.lands_on.where_ {
            Where::Live => warnings.push("live".to_owned()),
            Where::Copy => warnings.push("lands on a copy".to_owned()),
        }
        let open_world = catalog
            .tools
            .iter()
            .find(|t| t.upstream == r.server && t.original == r.tool)
            .and_then(|t| t.tool.annotations.as_ref())
            .is_none_or(|a| a.open_world_hint != Some(false));
        if open_world {
            warnings.push("open world".to_owned());
        }
        lines.push(format!(
            "{}. [{}] {} — {} on {}; {}{}",
            r.position,
            s.status,
            r.predicted_effect,
            r.tool,
            r.server,
            warnings.join(", "),
            r.approval_note
                .as_ref()
                .map(|n| format!(". {n}"))
                .unwrap_or_default()
        ));
        if let Some(rejection) = &s.rejection {
            lines.push(format!(
                "   Rejected by {}, will not run: {}",
                rejection.by, rejection.reason
            ));
        } else if let Some(p) = &r.preview {
            lines.extend(preview_excerpt(p));
            if r.preview_withheld.is_some() {
                lines.push("   (not shown to the agent: it may not read the target)".to_owned());
            }
        }
    }
    let first = state.open_steps().map(|s| s.record.planned_at_ms).min();
    lines.push(String::new());
    lines.push(format!(
        "Planned {}{}. Plan digest {digest}.",
        first
            .map(|t| format!("from {}", plangate_store::format_time_ms(t)))
            .unwrap_or_else(|| "just now".to_owned()),
        expires_in(state, now, gw.ttl_ms())
            .map(|s| format!("; expires in {} min", (s + 59) / 60))
            .unwrap_or_default()
    ));
    lines.push("Approve to apply exactly the waiting (planned) steps now; keep planning to send the agent back with your feedback.".to_owned());
    question_text(&lines)
}

/// The most lines of a step's diff or state the question shows.
const QUESTION_PREVIEW_LINES: usize = 12;

/// A step's preview for the question: its first lines, indented, then how
/// many more there are (the whole preview is in `get_plan`, `plans show`
/// and the console).
pub(crate) fn preview_excerpt(p: &plangate_core::Preview) -> Vec<String> {
    use plangate_core::Preview;
    let text = match p {
        Preview::Diff { diff, .. } => diff.clone(),
        Preview::State { state, .. } => match state {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Null => String::new(),
            other => serde_json::to_string_pretty(other).unwrap_or_default(),
        },
        Preview::Unavailable { reason, .. } => return vec![format!("   (no preview: {reason})")],
    };
    // Split at LF only: a CR stays in its line, where it is shown.
    let all: Vec<&str> = text
        .strip_suffix('\n')
        .unwrap_or(&text)
        .split('\n')
        .collect();
    let mut out: Vec<String> = all
        .iter()
        .take(QUESTION_PREVIEW_LINES)
        .map(|l| format!("   {l}"))
        .collect();
    if all.len() > QUESTION_PREVIEW_LINES {
        out.push(format!(
            "   … {} more line(s) (the whole preview: get_plan, plans show, the console)",
            all.len() - QUESTION_PREVIEW_LINES
        ));
    }
    out
}

/// The question of an `ask` mode about one call above its access: who
/// asks, the tool and its upstream, the redacted arguments and the call's
/// digest, which the yes binds.
pub(super) fn call_question(
    acting: &Acting,
    (mode, rule): (&ModeSpec, Option<&str>),
    tool: &crate::CatalogTool,
    redacted_arguments: &Value,
    call_digest: &str,
) -> String {
    let why = match rule {
        Some(rule) => format!("the operator's rule {rule:?} asks you first"),
        None => format!("above what mode {} runs without asking", mode.name),
    };
    let mut lines = vec![
        format!(
            "An agent (API key {:?}, scope {}) wants to call {} on {} — a {} tool; {why}.",
            acting.key.name, acting.key.scope, tool.original, tool.upstream, tool.effect,
        ),
        format!("Arguments: {redacted_arguments}"),
    ];
    if tool.effect == plangate_core::Effect::Destructive {
        lines.push("DESTRUCTIVE: it may destroy or overwrite data.".to_owned());
    }
    lines.push(format!("Call digest {call_digest}."));
    lines.push("Approve to run this one call now.".to_owned());
    question_text(&lines)
}
