//! `plangate audit export`: the event log as JSON Lines (docs/design.md §6).
//!
//! Each line is one event exactly as stored — its body, which the gateway
//! wrote with every secret redacted or sealed — plus the store's `seq`
//! (global order), `key_seq` (the key's own order) and the event's link
//! and signature (`hash`, `sig`; see `audit_verify`). Nothing is
//! re-derived or unsealed here, so the export is what the log says.

use std::io::Write;
use std::path::Path;

use crate::output::outln;

use anyhow::Result;
use plangate_store::Store;
use serde_json::json;

use crate::commands::UsageError;

/// The log `name` names: a key's (by name or id), or one of plangate's own
/// logs (`tools`, the tool pins; `operators`, who may approve and every
/// factor used) when no key has that name.
pub async fn log_id(store: &dyn Store, name: &str) -> Result<String> {
    plangate_gateway::audit::log_id(store, name)
        .await?
        .ok_or_else(|| {
            UsageError(format!(
                "no key named {name:?}; `plangate keys list` shows the keys"
            ))
            .into()
        })
}

/// `plangate audit export`.
pub async fn export(
    store: &dyn Store,
    key: Option<&str>,
    since_ms: Option<i64>,
    out: Option<&Path>,
    as_json: bool,
) -> Result<()> {
    let key_id = match key {
        Some(k) => Some(log_id(store, k).await?),
        None => None,
    };
    let events = store.export_events(key_id.as_deref(), since_ms).await?;
    let text = plangate_gateway::audit::export_text(&events);
    write_export(&text, events.len(), out, as_json)
}

/// Writes an export's `text` (`count` events) to stdout or to `out`, with
/// a summary line for the person when it went to a file.
pub fn write_export(text: &str, count: usize, out: Option<&Path>, as_json: bool) -> Result<()> {
    match out {
        None => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(text.as_bytes())?;
            stdout.flush()?;
        }
        Some(path) => {
            std::fs::write(path, text.as_bytes()).map_err(|e| {
                UsageError(format!(
                    "cannot write the export to {}: {e}",
                    path.display()
                ))
            })?;
            if as_json {
                crate::output::json(&json!({
                    "events": count,
                    "out": path.display().to_string(),
                }))?;
            } else {
                outln!("wrote {count} event(s) to {}", path.display());
            }
        }
    }
    Ok(())
}
