//! Keeping what an applied step replaced, for an undo (docs/design.md §5,
//! "Undo"): the state its fresh check read just before the call
//! (the fresh check's `Found`) is sealed and kept in the store beside the
//! log, and the log says so (`undo_recorded`, in the same append as the
//! step's `step_applied`) — or says why nothing is kept. What the step
//! left behind is read again and bound as `after_digest`, so an undo
//! later overwrites nothing that changed since.

use plangate_core::undo::{KeptState, Replaced, Undo};
use plangate_core::{Event, EventKind, StepRecord};
use rmcp::model::CallToolResult;
use serde_json::{Map, Value};

use super::recheck::Found;
use crate::Ops;
use crate::acting::Acting;

/// The associated data a kept state is sealed under: it opens only as the
/// state of this step of this key.
pub fn sealed_for(key_id: &str, step_id: &str) -> String {
    format!("undo:{key_id}:{step_id}")
}

/// The `undo_recorded` event of `record`, applied: what `found` read is
/// kept (sealed) when it is within `max_undo_bytes`, else why not.
/// `scrub_with` are the step's secrets, kept out of what the record says.
pub(super) async fn keep(
    gw: Ops<'_>,
    acting: &Acting,
    record: &StepRecord,
    found: Option<&Found>,
    (result, scrub_with): (&CallToolResult, &[(String, Value)]),
) -> Event {
    let undo = match (restore_calls(gw, record, result, scrub_with), found) {
        (Some((tool, calls)), _) => by_snapshot(gw, record, tool, calls).await,
        (None, None) => Undo::Unavailable {
            reason: format!(
                "no profile reads what {} changes, so nothing it replaced could be kept",
                record.exposed_as
            ),
        },
        (None, Some(found)) => kept(gw, acting, record, found, scrub_with).await,
    };
    if let Undo::Unavailable { reason } = &undo {
        tracing::debug!(key = %acting.key.name, step = %record.step_id, "no undo: {reason}");
    }
    acting.event(EventKind::UndoRecorded {
        step_id: record.step_id.clone(),
        undo,
    })
}

/// The restoring tool and its calls when the operator's settings say the
/// step is undone by one (`undo`) and its answer gave snapshots: each
/// snapshot id under the name its `snapshots` pointer ends in.
fn restore_calls(
    gw: Ops<'_>,
    record: &StepRecord,
    result: &CallToolResult,
    scrub_with: &[(String, Value)],
) -> Option<(String, Vec<Map<String, Value>>)> {
    let config = gw.config();
    let settings = config.tool_settings(&record.server, &record.tool)?;
    let tool = settings.undo.clone()?;
    let structured = gw
        .redactor()
        .scrub_value(result.structured_content.as_ref()?, scrub_with);
    let calls: Vec<Map<String, Value>> = settings
        .snapshots
        .iter()
        .filter_map(|pointer| {
            let id = crate::plan::pointer_text(&structured, pointer)?;
            let name = pointer
                .rsplit('/')
                .next()?
                .replace("~1", "/")
                .replace("~0", "~");
            Some(Map::from_iter([(name, Value::String(id))]))
        })
        .collect();
    (!calls.is_empty()).then_some((tool, calls))
}

/// An undo by the server's own snapshots: what each restore's preview
/// says of the target now (what the step left) is bound, so a revert
/// later restores nothing over a change since.
async fn by_snapshot(
    gw: Ops<'_>,
    record: &StepRecord,
    tool: String,
    calls: Vec<Map<String, Value>>,
) -> Undo {
    let catalog = gw.catalog();
    let Some(restore) = catalog
        .tools
        .iter()
        .find(|t| t.upstream == record.server && t.original == tool)
    else {
        return Undo::Unavailable {
            reason: format!("{} does not offer {tool} now", record.server),
        };
    };
    let mut after_versions = Vec::new();
    for call in &calls {
        after_versions.push(crate::plan::preview_version(gw, restore, call).await);
    }
    if after_versions.iter().all(Option::is_none) {
        after_versions.clear();
    }
    Undo::Snapshot {
        tool,
        calls,
        after_versions,
    }
}

/// Seals and keeps what `found` read; reads the target again for what
/// the step left.
async fn kept(
    gw: Ops<'_>,
    acting: &Acting,
    record: &StepRecord,
    found: &Found,
    scrub_with: &[(String, Value)],
) -> Undo {
    let read_arguments = Value::Object(plangate_config::profiles::read_arguments(
        &found.spec,
        &found.real,
    ));
    // What the step left: read once, bound as `after_digest` and kept as
    // the applied version a stale revert shows.
    let after = crate::preview::read(gw, &record.server, &found.spec, &found.real)
        .await
        .ok();
    let replaced = Replaced {
        server: record.server.clone(),
        tool: record.tool.clone(),
        target: record.lands_on.target.clone(),
        read: found.spec.read.clone(),
        read_arguments: gw.redactor().scrub_value(&read_arguments, scrub_with),
        before: KeptState::from(&found.seen),
        after: after.as_ref().map(KeptState::from),
    };
    // Kept only when the server's own tools can undo the step with it.
    let catalog = gw.catalog();
    let profile = crate::plan::planned_tool(&catalog, record)
        .and_then(|t| t.profile.as_ref())
        .map(|m| m.name.clone())
        .unwrap_or_default();
    if let Err(reason) =
        plangate_core::undo::inverse(&profile, &record.tool, &record.arguments.value(), &replaced)
    {
        return Undo::Unavailable { reason };
    }
    let plaintext = replaced.plaintext();
    let max = gw.config().gateway.max_undo_bytes;
    if plaintext.len() > max {
        return Undo::Unavailable {
            reason: format!(
                "what it replaced and what it left are {} bytes, over [gateway] max_undo_bytes ({max})",
                plaintext.len()
            ),
        };
    }
    let digest = Replaced::digest_of(&plaintext);
    let aad = sealed_for(&acting.key.id, &record.step_id);
    let sealed = match plangate_store::seal::seal(gw.material(), &plaintext, aad.as_bytes()) {
        Ok(sealed) => sealed,
        Err(e) => {
            return Undo::Unavailable {
                reason: format!("what it replaced could not be sealed ({e})"),
            };
        }
    };
    if let Err(e) = gw
        .store()
        .undo_states()
        .keep_undo(&acting.key.id, &record.step_id, &digest, &sealed)
        .await
    {
        tracing::warn!(key = %acting.key.name, step = %record.step_id, "undo state not kept: {e}");
        return Undo::Unavailable {
            reason: format!("what it replaced could not be stored ({e})"),
        };
    }
    Undo::Kept {
        digest,
        bytes: plaintext.len() as u64,
        after_digest: after.map(|seen| seen.digest(&found.bind)),
    }
}
