//! A plan step as recorded when planned ([`StepRecord`]), where its write
//! lands ([`LandsOn`], [`Where`]), and the record's form in the log
//! (`StepRecordWire`: keyed arguments always written out).
//!
//! Apart from the event kinds: `step_planned` and `step_amended` carry a
//! record, and every plan, digest and answer reads it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Effect, JsonText};

/// A plan step as recorded when planned. Never holds a secret in the clear.
///
/// In the event log `keyed_arguments` is always written out; in memory it
/// is `None` when it equals `arguments` (no secrets: the common case), so
/// a folded plan does not hold every step's arguments twice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "StepRecordWire", from = "StepRecordWire")]
pub struct StepRecord {
    /// The step's id; also the upstream operation key when applied.
    pub step_id: String,
    /// Its position in the plan; never renumbered.
    pub position: u32,
    /// The upstream server's name.
    pub server: String,
    /// The upstream's own tool name.
    pub tool: String,
    /// The tool's name as exposed to the client.
    pub exposed_as: String,
    /// Redacted arguments, for every answer, view and export. Held as
    /// text ([`JsonText`]): a gateway keeps many folded plans in memory.
    pub arguments: JsonText,
    /// Arguments with secrets replaced by HMACs, for digest and dedup;
    /// `None` when they equal `arguments` (see
    /// [`StepRecord::keyed_arguments`]).
    pub keyed_arguments: Option<JsonText>,
    /// AEAD ciphertext of the secrets, made by the edge; opaque here.
    pub sealed_secrets: Option<String>,
    /// [`crate::arguments_fingerprint`] of server, tool and keyed arguments.
    pub fingerprint: String,
    /// The tool's effect class when planned.
    pub effect: Effect,
    /// [`crate::schema_hash`] of the tool's input schema when planned.
    pub schema_hash: String,
    /// One sentence saying what the step would do.
    pub predicted_effect: String,
    /// Where the write lands.
    pub lands_on: LandsOn,
    /// Whether the step needs explicit attention (destructive).
    pub approval_required: bool,
    /// Why it needs attention.
    pub approval_note: Option<String>,
    /// When it was planned.
    pub planned_at_ms: i64,
    /// The target's version as the upstream's preview tool reported it
    /// when planned; apply re-checks it (`stale_target` if it moved).
    #[serde(default)]
    pub target_version: Option<Value>,
    /// [`crate::definition_hash`] of the tool's whole definition when
    /// planned: the step runs only against that definition. `None` for
    /// steps planned before definitions were pinned.
    #[serde(default)]
    pub definition_hash: Option<String>,
    /// What the write would change, as the upstream showed it when
    /// planned ([`crate::Preview`]); apply takes it again and runs the
    /// step only if the target's `before_digest` is the same.
    #[serde(default)]
    pub preview: Option<crate::Preview>,
    /// The operator's rule (`[[rules]]`) that made the call a step, when
    /// a rule did rather than the mode or the key's scope.
    #[serde(default)]
    pub rule: Option<String>,
    /// Why the key may not read what the preview read (a rule refuses it
    /// that read): the preview was taken for the person only, and every
    /// answer the agent can read says `preview withheld` instead of it
    /// (docs/security.md, "Previews").
    #[serde(default)]
    pub preview_withheld: Option<String>,
    /// The applied step this one undoes, when a person asked to revert
    /// it (`plans revert`): it writes back what that step replaced.
    pub reverts: Option<String>,
    /// Why the person did not answer, when an `ask` mode asked them about
    /// this call and the question went unanswered (it lapsed or failed):
    /// the write was planned instead of lost, and only a person's yes
    /// applies it, whatever the key's scope
    /// ([`crate::rules::approval_scope_for`]).
    pub unanswered: Option<String>,
}

impl StepRecord {
    /// About how many bytes the record holds — its arguments (shown,
    /// keyed and sealed), predicted effect and preview: what a plan's
    /// size cap counts ([`crate::rules::room_for`]).
    pub fn size_bytes(&self) -> usize {
        let preview = match &self.preview {
            Some(crate::Preview::Diff { diff, target, .. }) => diff.len() + target.len(),
            Some(crate::Preview::State { state, summary, .. }) => {
                serde_json::to_string(state).map_or(0, |s| s.len()) + summary.len()
            }
            Some(crate::Preview::Unavailable { reason, .. }) => reason.len(),
            None => 0,
        };
        self.arguments.as_str().len()
            + self
                .keyed_arguments
                .as_ref()
                .map_or(0, |k| k.as_str().len())
            + self.sealed_secrets.as_ref().map_or(0, String::len)
            + self.predicted_effect.len()
            + preview
    }

    /// The arguments with secrets replaced by HMACs, for digest and dedup.
    pub fn keyed_arguments(&self) -> &JsonText {
        self.keyed_arguments.as_ref().unwrap_or(&self.arguments)
    }

    /// `keyed` as the record holds it: `None` when it equals `arguments`.
    pub fn keyed_unless_same(arguments: &JsonText, keyed: JsonText) -> Option<JsonText> {
        (keyed != *arguments).then_some(keyed)
    }
}

/// [`StepRecord`] as the event log holds it, keyed arguments written out.
#[derive(Serialize, Deserialize)]
struct StepRecordWire {
    step_id: String,
    position: u32,
    server: String,
    tool: String,
    exposed_as: String,
    arguments: JsonText,
    keyed_arguments: JsonText,
    sealed_secrets: Option<String>,
    fingerprint: String,
    effect: Effect,
    schema_hash: String,
    predicted_effect: String,
    lands_on: LandsOn,
    approval_required: bool,
    approval_note: Option<String>,
    planned_at_ms: i64,
    #[serde(default)]
    target_version: Option<Value>,
    #[serde(default)]
    definition_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    preview: Option<crate::Preview>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    preview_withheld: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reverts: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    unanswered: Option<String>,
}

impl From<StepRecord> for StepRecordWire {
    fn from(r: StepRecord) -> Self {
        let keyed_arguments = r.keyed_arguments.unwrap_or_else(|| r.arguments.clone());
        StepRecordWire {
            step_id: r.step_id,
            position: r.position,
            server: r.server,
            tool: r.tool,
            exposed_as: r.exposed_as,
            arguments: r.arguments,
            keyed_arguments,
            sealed_secrets: r.sealed_secrets,
            fingerprint: r.fingerprint,
            effect: r.effect,
            schema_hash: r.schema_hash,
            predicted_effect: r.predicted_effect,
            lands_on: r.lands_on,
            approval_required: r.approval_required,
            approval_note: r.approval_note,
            planned_at_ms: r.planned_at_ms,
            target_version: r.target_version,
            definition_hash: r.definition_hash,
            preview: r.preview,
            rule: r.rule,
            preview_withheld: r.preview_withheld,
            reverts: r.reverts,
            unanswered: r.unanswered,
        }
    }
}

impl From<StepRecordWire> for StepRecord {
    fn from(w: StepRecordWire) -> Self {
        StepRecord {
            keyed_arguments: StepRecord::keyed_unless_same(&w.arguments, w.keyed_arguments),
            step_id: w.step_id,
            position: w.position,
            server: w.server,
            tool: w.tool,
            exposed_as: w.exposed_as,
            arguments: w.arguments,
            sealed_secrets: w.sealed_secrets,
            fingerprint: w.fingerprint,
            effect: w.effect,
            schema_hash: w.schema_hash,
            predicted_effect: w.predicted_effect,
            lands_on: w.lands_on,
            approval_required: w.approval_required,
            approval_note: w.approval_note,
            planned_at_ms: w.planned_at_ms,
            target_version: w.target_version,
            definition_hash: w.definition_hash,
            preview: w.preview,
            rule: w.rule,
            preview_withheld: w.preview_withheld,
            reverts: w.reverts,
            unanswered: w.unanswered,
        }
    }
}

/// Where a step's write lands (`lands_on` in answers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LandsOn {
    /// Live data or a copy.
    #[serde(rename = "where")]
    pub where_: Where,
    /// The target's id, when known.
    pub target: Option<String>,
    /// The copy's id, filled in by the receipt.
    pub copy_id: Option<String>,
    /// A note for the person.
    pub note: Option<String>,
}

/// Whether a write lands on live data or on a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Where {
    /// The real thing.
    Live,
    /// A copy the upstream makes (the receipt names it).
    Copy,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::Verdict;
    use crate::event::tests::record;

    /// The log always holds the keyed arguments written out; memory keeps
    /// them only when they differ from the redacted ones (secrets).
    #[test]
    fn keyed_arguments_are_written_out_and_held_only_when_they_differ() {
        let plain = record("step_1", 1, "update_page", json!({"id": 2, "title": "t"}));
        assert_eq!(plain.keyed_arguments, None);
        let json = serde_json::to_value(&plain).unwrap();
        assert_eq!(json["keyed_arguments"], json!({"id": 2, "title": "t"}));
        let back: StepRecord = serde_json::from_value(json).unwrap();
        assert_eq!(back, plain);
        assert_eq!(back.keyed_arguments(), &json!({"id": 2, "title": "t"}));
        // Read from the log's text as well as from a value.
        let text = serde_json::to_string(&plain).unwrap();
        let back: StepRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, plain);
        assert_eq!(back.keyed_arguments, None);

        let secret = record("step_2", 2, "login", json!({"password": "hunter2"}));
        let keyed = secret.keyed_arguments.clone().expect("a secret is keyed");
        assert_ne!(&keyed, &secret.arguments);
        let json = serde_json::to_value(&secret).unwrap();
        assert_eq!(json["keyed_arguments"], keyed.value());
        let back: StepRecord = serde_json::from_value(json).unwrap();
        assert_eq!(back.keyed_arguments(), &keyed);
    }

    #[test]
    fn a_step_record_uses_the_answer_field_names() {
        let r = record(
            "step_1",
            2,
            "update_page",
            json!({"id": 42, "api_key": "k"}),
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["lands_on"]["where"], "live");
        assert_eq!(json["effect"], "write");
        assert_eq!(json["arguments"]["api_key"], "[redacted]");
        assert!(!json.to_string().contains("\"k\""));
        assert_eq!(
            serde_json::to_value(Verdict::KeepPlanning).unwrap(),
            json!("keep_planning")
        );
    }
}
