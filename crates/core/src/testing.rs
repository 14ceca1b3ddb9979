//! Fixtures for tests, in this crate and in the crates above it (with the
//! `test-support` feature): one way to make a step record, so no test
//! writes the record's fifteen fields again.

use serde_json::Value;

use crate::{Effect, JsonText, LandsOn, StepRecord, Where};

/// A waiting step's record on upstream `site`: position, tool and
/// arguments vary, the rest is fixed.
pub fn step_record(step_id: &str, position: u32, tool: &str, args: Value) -> StepRecord {
    StepRecord {
        step_id: step_id.into(),
        position,
        server: "site".into(),
        tool: tool.into(),
        exposed_as: format!("site__{tool}"),
        keyed_arguments: StepRecord::keyed_unless_same(
            &JsonText::from_value(&crate::redact(&args)),
            JsonText::from_value(
                &crate::keyed_arguments(&args, &[7; 32]).expect("test arguments canonicalise"),
            ),
        ),
        arguments: JsonText::from_value(&crate::redact(&args)),
        sealed_secrets: None,
        fingerprint: format!("fp-{tool}-{args}"),
        effect: Effect::Write,
        schema_hash: "sha256:00".into(),
        predicted_effect: format!("Call {tool}."),
        lands_on: LandsOn {
            where_: Where::Live,
            target: None,
            copy_id: None,
            note: None,
        },
        approval_required: false,
        approval_note: None,
        planned_at_ms: 1_000,
        target_version: None,
        definition_hash: None,
        preview: None,
        rule: None,
        preview_withheld: None,
        reverts: None,
        unanswered: None,
    }
}

/// The tools log's pin of `server`'s `tools`, as a gateway records it
/// when it first lists them: what a test writes to stand for a listing
/// seen before.
pub fn tools_pinned(server: &str, tools: Vec<crate::PinnedDefinition>) -> crate::Event {
    crate::Event {
        at_ms: 1,
        key_id: crate::TOOLS_LOG.into(),
        actor: crate::Actor::System,
        channel: crate::Channel::Gateway,
        kind: crate::EventKind::ToolsPinned {
            server: server.into(),
            tools,
        },
    }
}

/// How many cases a property test runs: `PROPTEST_CASES` when set (CI
/// and a deeper local run set it), else `default`.
pub fn proptest_cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}
