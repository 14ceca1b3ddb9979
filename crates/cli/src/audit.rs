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
use serde_json::{Value, json};

use crate::commands::UsageError;

/// One exported line: the stored body with `seq` and `key_seq` beside its
/// own fields, and its link and signature in the hash chain (`hash`,
/// `sig`) when it has them, so `audit verify --public-key` can check the
/// export alone.
fn line(event: &plangate_store::StoredEvent) -> Value {
    let mut body = match event.body.value() {
        Value::Object(map) => map,
        other => {
            let mut m = serde_json::Map::new();
            m.insert("body".to_owned(), other);
            m
        }
    };
    body.insert("seq".to_owned(), json!(event.seq));
    body.insert("key_seq".to_owned(), json!(event.key_seq));
    if let Some(hash) = &event.hash {
        body.insert("hash".to_owned(), json!(hash));
    }
    if let Some(sig) = &event.sig {
        body.insert("sig".to_owned(), json!(sig));
    }
    Value::Object(body)
}

/// The log `name` names: a key's (by name or id), or one of plangate's own
/// logs (`tools`, the tool pins; `operators`, who may approve and every
/// factor used) when no key has that name.
pub async fn log_id(store: &dyn Store, name: &str) -> Result<String> {
    match crate::plans::resolve_key(store, name).await {
        Ok(key) => Ok(key.id),
        Err(_)
            if name == plangate_core::TOOLS_LOG
                || name == plangate_core::operators::OPERATORS_LOG =>
        {
            Ok(name.to_owned())
        }
        Err(e) => Err(e),
    }
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
    let mut text = String::new();
    for e in &events {
        // Hidden characters as `\uXXXX`: the same JSON, safe to `cat`.
        text.push_str(&plangate_core::screen_json(&serde_json::to_string(&line(
            e,
        ))?));
        text.push('\n');
    }
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
                    "events": events.len(),
                    "out": path.display().to_string(),
                }))?;
            } else {
                outln!("wrote {} event(s) to {}", events.len(), path.display());
            }
        }
    }
    Ok(())
}
