//! What a partial apply leaves behind (docs/design.md §5, "Partial
//! applies"): the steps still waiting once some of a plan runs, each
//! flagged when it is tied to a step that runs — the same target, or a
//! name the running step moves or removes (a file renamed, a function
//! renamed in one file and still imported by the name in another). A
//! person's apply that would leave a tied step behind needs their word
//! that it is meant ([`crate::rules::Refused::PartialApply`]); the agent's
//! receipt lists what is left.
//!
//! The tie is read from the steps' own arguments and landing: path-like
//! arguments (`path`, `source`, `from`, … and their file names) and the
//! words an edit's old text has that its new text lacks. It flags, it does
//! not prove: a step it does not flag may still depend on another.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{KeyState, Step};

/// A step left waiting by an apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LeftStep {
    /// The step.
    pub step_id: String,
    /// Its position in the plan.
    pub position: u32,
    /// What it would do.
    pub predicted_effect: String,
    /// Why it may depend on a step that runs, in words; `None` when
    /// nothing ties it to one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tied: Option<String>,
}

/// The waiting steps of `state` that `run` leaves behind, in plan order,
/// each with what ties it to a step of `run`.
pub fn left_behind(state: &KeyState, run: &[String]) -> Vec<LeftStep> {
    let running: Vec<&Step> = run.iter().filter_map(|id| state.step(id)).collect();
    let changes: Vec<(u32, Changes)> = running
        .iter()
        .map(|s| (s.record.position, Changes::of(s)))
        .collect();
    let mut left: Vec<LeftStep> = state
        .planned_steps()
        .filter(|s| !run.contains(&s.record.step_id))
        .map(|s| LeftStep {
            step_id: s.record.step_id.clone(),
            position: s.record.position,
            predicted_effect: s.record.predicted_effect.clone(),
            tied: changes.iter().find_map(|(at, c)| c.tie(s, *at)),
        })
        .collect();
    left.sort_by_key(|l| l.position);
    left
}

/// Whether any step left behind is tied to one that runs.
pub fn any_tied(left: &[LeftStep]) -> bool {
    left.iter().any(|l| l.tied.is_some())
}

/// What one running step touches and changes.
struct Changes {
    /// Where it lands (`lands_on.target`).
    target: Option<String>,
    /// Paths it names, and their file names.
    paths: BTreeSet<String>,
    /// Words its edits take out.
    removed: BTreeSet<String>,
}

/// Argument names that hold a path or a name the call moves or edits.
const PATH_KEYS: [&str; 8] = [
    "path", "source", "from", "file", "filename", "uri", "old_name", "oldname",
];
/// Argument names whose path the call moves away.
const MOVED_KEYS: [&str; 4] = ["source", "from", "old_name", "oldname"];
/// The old and new text of an edit, by the names servers give them.
const EDIT_PAIRS: [(&str, &str); 5] = [
    ("oldtext", "newtext"),
    ("old_text", "new_text"),
    ("old_str", "new_str"),
    ("old_string", "new_string"),
    ("search", "replace"),
];

impl Changes {
    fn of(step: &Step) -> Changes {
        let arguments = step.record.arguments.value();
        let mut changes = Changes {
            target: step.record.lands_on.target.clone(),
            paths: BTreeSet::new(),
            removed: BTreeSet::new(),
        };
        changes.walk(&arguments);
        changes
    }

    fn walk(&mut self, value: &Value) {
        match value {
            Value::Object(map) => {
                for (name, v) in map {
                    let name = name.to_ascii_lowercase();
                    if PATH_KEYS.contains(&name.as_str()) || name.ends_with("path") {
                        self.add_paths(v, MOVED_KEYS.contains(&name.as_str()));
                    }
                }
                for (old, new) in EDIT_PAIRS {
                    let field = |want: &str| {
                        map.iter()
                            .find(|(k, _)| k.eq_ignore_ascii_case(want))
                            .and_then(|(_, v)| v.as_str())
                    };
                    if let (Some(old), Some(new)) = (field(old), field(new)) {
                        let kept: BTreeSet<&str> = words(new).collect();
                        self.removed
                            .extend(words(old).filter(|w| !kept.contains(w)).map(str::to_owned));
                    }
                }
                map.values().for_each(|v| self.walk(v));
            }
            Value::Array(items) => items.iter().for_each(|v| self.walk(v)),
            _ => {}
        }
    }

    /// Adds the paths in `value`; when the call moves them away (`moved`),
    /// their file stems too, as names other steps may still use.
    fn add_paths(&mut self, value: &Value, moved: bool) {
        match value {
            Value::String(path) if !path.is_empty() => {
                self.paths.insert(path.clone());
                let file = path.rsplit(['/', '\\']).next().unwrap_or(path);
                if file.len() >= 3 && file != path {
                    self.paths.insert(file.to_owned());
                }
                let stem = file.split('.').next().unwrap_or(file);
                if moved && stem.len() >= 3 && stem != file {
                    self.removed.insert(stem.to_owned());
                }
            }
            Value::Array(items) => items.iter().for_each(|v| self.add_paths(v, moved)),
            _ => {}
        }
    }

    /// What ties `step` to the running step at `position`, if anything.
    fn tie(&self, step: &Step, position: u32) -> Option<String> {
        if let (Some(mine), Some(theirs)) = (&self.target, &step.record.lands_on.target)
            && mine == theirs
        {
            return Some(format!("it lands on {mine}, as step {position} does"));
        }
        let mut texts = Vec::new();
        strings(&step.record.arguments.value(), &mut texts);
        if let Some(path) = self
            .paths
            .iter()
            .find(|p| texts.iter().any(|t| t.contains(p.as_str())))
        {
            return Some(format!("it names {path}, which step {position} changes"));
        }
        self.removed
            .iter()
            .find(|w| texts.iter().any(|t| words(t).any(|x| x == w.as_str())))
            .map(|w| format!("it mentions {w}, which step {position} takes out"))
    }
}

/// Every string in `value`.
fn strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

/// The identifier-like words of `text` (three characters or more).
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| w.chars().count() >= 3 && !w.chars().all(|c| c.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::event::tests::record;
    use crate::{Actor, Channel, Event, EventKind};

    fn plan(steps: &[(&str, Value)]) -> KeyState {
        let mut state = KeyState::default();
        for (i, (id, arguments)) in steps.iter().enumerate() {
            let event = Event {
                at_ms: 1,
                key_id: "k".into(),
                actor: Actor::System,
                channel: Channel::Cli,
                kind: EventKind::StepPlanned {
                    step: record(id, i as u32 + 1, "edit_file", arguments.clone()),
                },
            };
            state.apply(i as i64 + 1, &event);
        }
        state
    }

    #[test]
    fn a_rename_applied_alone_flags_the_import_left_behind() {
        let state = plan(&[
            (
                "s1",
                json!({"path": "/w/utils.py", "edits": [{"oldText": "def compute_total(xs):", "newText": "def compute_sum(xs):"}]}),
            ),
            (
                "s2",
                json!({"path": "/w/report.py", "edits": [{"oldText": "from utils import compute_total", "newText": "from utils import compute_sum"}]}),
            ),
            (
                "s3",
                json!({"path": "/w/notes.md", "edits": [{"oldText": "draft", "newText": "final"}]}),
            ),
        ]);
        let left = left_behind(&state, &["s1".to_owned()]);
        assert_eq!(left.len(), 2);
        assert_eq!(
            left[0].tied.as_deref(),
            Some("it mentions compute_total, which step 1 takes out")
        );
        assert_eq!(left[1].tied, None, "{left:?}");
        assert!(any_tied(&left));
        // Applied together, nothing is left.
        assert!(left_behind(&state, &["s1".into(), "s2".into(), "s3".into()]).is_empty());
    }

    #[test]
    fn a_moved_file_flags_a_step_that_still_names_it() {
        let state = plan(&[
            (
                "s1",
                json!({"source": "/w/old_report.py", "destination": "/w/report.py"}),
            ),
            ("s2", json!({"path": "/w/old_report.py", "edits": []})),
            ("s3", json!({"path": "/w/other.py", "edits": []})),
            (
                "s4",
                json!({"path": "/w/main.py", "edits": [{"oldText": "import old_report", "newText": "import report"}]}),
            ),
        ]);
        let left = left_behind(&state, &["s1".to_owned()]);
        assert_eq!(
            left[0].tied.as_deref(),
            Some("it names /w/old_report.py, which step 1 changes")
        );
        assert_eq!(left[1].tied, None);
        assert_eq!(
            left[2].tied.as_deref(),
            Some("it mentions old_report, which step 1 takes out")
        );
        // Leaving only untied steps behind flags nothing.
        let left = left_behind(&state, &["s3".to_owned()]);
        assert!(!any_tied(&left), "{left:?}");
    }
}
