//! `plangate audit verify` and `plangate audit public-key`: whether the
//! event log is the one plangate wrote (docs/design.md §6, "A log that
//! shows tampering").
//!
//! Online, every key's log is read from the store and followed link by
//! link ([`plangate_core::chain`]) under the log key's public half — the
//! same check an apply makes before it runs anything. Offline, an export
//! (`audit export`) is checked with only the public key: each line holds
//! the stored body, its link and signature, so no store or secret is
//! needed. Either way the first event that does not verify is named and
//! the command fails (exit 1).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Result, anyhow};
use plangate_core::chain::{Break, Chain, Sealed};
use plangate_gateway::audit::Verified;
use plangate_store::{PublicLogKey, Store};
use serde_json::Value;

use crate::commands::UsageError;
use crate::output::outln;

/// The fields `audit export` adds beside an event's own: left out when
/// the body is rebuilt to be hashed.
const EXPORT_FIELDS: [&str; 4] = ["seq", "key_seq", "hash", "sig"];

/// `plangate audit verify` against the store: every key's log, or only
/// `key`'s ([`plangate_gateway::audit::verify_store`], the operator API's
/// check too).
pub async fn verify_store(
    store: &dyn Store,
    public: PublicLogKey,
    key: Option<&str>,
    as_json: bool,
) -> Result<()> {
    let key_ids = match key {
        Some(k) => Some(vec![crate::audit::log_id(store, k).await?]),
        None => None,
    };
    let found = plangate_gateway::audit::verify_store(store, public, key_ids).await?;
    report(&found, "the store", as_json)
}

/// `plangate audit verify --public-key FILE EXPORT`: an export checked
/// with the public key alone.
pub fn verify_export(public_key_file: &Path, export: &Path, as_json: bool) -> Result<()> {
    let read = |path: &Path| {
        std::fs::read_to_string(path)
            .map_err(|e| UsageError(format!("cannot read {}: {e}", path.display())))
    };
    let public = PublicLogKey::parse(&read(public_key_file)?).map_err(|e| {
        UsageError(format!(
            "{} does not hold a public log key: {e}",
            public_key_file.display()
        ))
    })?;
    let found = verify_lines(&read(export)?, public)
        .map_err(|e| UsageError(format!("{}: {e}", export.display())))?;
    report(&found, &export.display().to_string(), as_json)
}

/// Follows every key's events in an export's lines (global order, so each
/// key's in its own order).
fn verify_lines(text: &str, public: PublicLogKey) -> Result<Verified, String> {
    let mut chains: BTreeMap<String, (Chain, i64)> = BTreeMap::new();
    let mut found = Verified {
        public_key: public.to_string(),
        ..Verified::default()
    };
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let event = ExportedEvent::parse(line).map_err(|e| format!("line {}: {e}", n + 1))?;
        found.events += 1;
        let (chain, last) = chains.entry(event.key_id.clone()).or_insert_with(|| {
            found.keys += 1;
            (Chain::default(), 0)
        });
        if *last == 0 && event.key_seq > 1 {
            // The events before are not in this export: start from this
            // one's own link, checking only its signature.
            found.partial.push(event.key_id.clone());
            resume(chain, &event, public);
        } else if event.key_seq != *last + 1 {
            chain.broken.get_or_insert_with(|| Break {
                key_id: event.key_id.clone(),
                key_seq: event.key_seq,
                reason: format!("it follows event {last}: an event is missing or out of order"),
            });
        } else {
            let sealed = Sealed {
                hash: event.hash.as_deref(),
                sig: event.sig.as_deref(),
            };
            chain.follow(
                &event.key_id,
                event.key_seq,
                event.at_ms,
                &event.kind,
                &event.body,
                sealed,
                |link, sig| public.verifies(link, sig),
            );
        }
        *last = event.key_seq;
    }
    for (key_id, (mut chain, _)) in chains {
        chain.settle(&key_id);
        found.unsigned += chain.unsigned;
        found.broken.extend(chain.broken);
    }
    Ok(found)
}

/// Starts `chain` at an event whose predecessors are not at hand: its
/// recorded link is taken as the head — checked by its own signature, or
/// by the next signed event's, whose link is computed from it.
fn resume(chain: &mut Chain, event: &ExportedEvent, public: PublicLogKey) {
    let mut link = [0u8; 32];
    let linked = event
        .hash
        .as_ref()
        .is_some_and(|h| hex::decode_to_slice(h, &mut link).is_ok());
    let fault = match (&event.sig, linked) {
        (_, false) => Some("the export starts here, and this event has no link"),
        (Some(sig), true) if !public.verifies(&link, sig) => {
            Some("the export starts here, and its signature is not the log key's")
        }
        _ => None,
    };
    match fault {
        None => {
            chain.extend(link);
            if event.sig.is_none() {
                chain.pending = Some(event.key_seq);
            }
        }
        Some(reason) => {
            chain.broken = Some(Break {
                key_id: event.key_id.clone(),
                key_seq: event.key_seq,
                reason: reason.to_owned(),
            });
        }
    }
}

/// One line of an export, taken apart into the stored columns.
struct ExportedEvent {
    key_id: String,
    key_seq: i64,
    at_ms: i64,
    kind: String,
    /// The body as the store holds it: the line without the export's own
    /// fields, serialized as the writer serialized it.
    body: String,
    hash: Option<String>,
    sig: Option<String>,
}

impl ExportedEvent {
    fn parse(line: &str) -> Result<ExportedEvent, String> {
        let Value::Object(fields) =
            serde_json::from_str::<Value>(line).map_err(|e| format!("not JSON ({e})"))?
        else {
            return Err("not a JSON object".to_owned());
        };
        let text = |name: &str| fields.get(name).and_then(Value::as_str).map(str::to_owned);
        let int = |name: &str| {
            fields
                .get(name)
                .and_then(Value::as_i64)
                .ok_or_else(|| format!("it has no integer {name:?}; is this an `audit export`?"))
        };
        // Rebuilt in the line's own order, minus what the export added.
        let body: serde_json::Map<String, Value> = fields
            .iter()
            .filter(|(name, _)| !EXPORT_FIELDS.contains(&name.as_str()))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        Ok(ExportedEvent {
            key_id: text("key_id").ok_or("it has no \"key_id\"")?,
            key_seq: int("key_seq")?,
            at_ms: int("at_ms")?,
            kind: text("type").ok_or("it has no \"type\"")?,
            body: plangate_store::body_text(&Value::Object(body))
                .map_err(|e| format!("its body cannot be written back ({e})"))?,
            hash: text("hash"),
            sig: text("sig"),
        })
    }
}

/// Prints what was found; an error (exit 1) naming the first break of
/// each key when any does not verify.
pub(crate) fn report(found: &Verified, what: &str, as_json: bool) -> Result<()> {
    if as_json {
        crate::output::json(found)?;
    } else if found.broken.is_empty() {
        outln!(
            "{what}: {} event(s) of {} key(s) verify: every link of the hash chain holds and every signature is the log key's ({})",
            found.events,
            found.keys,
            found.public_key
        );
        if found.unsigned > 0 {
            outln!(
                "  {} event(s) were written before this log was signed; the first signed event after them covers them",
                found.unsigned
            );
        }
        if !found.partial.is_empty() {
            outln!(
                "  the export starts after the first event of key(s) {}: checked from where it starts",
                found.partial.join(", ")
            );
        }
    }
    if found.broken.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = found.broken.iter().map(|b| format!("  {b}")).collect();
    Err(anyhow!(
        "{what}: the log was changed outside plangate; nothing is applied from a key whose log does not verify [tampered_log]:\n{}",
        lines.join("\n")
    ))
}

/// `plangate audit public-key`: the log key's public half, to check
/// exports with elsewhere.
pub fn public_key(public: PublicLogKey, as_json: bool) -> Result<()> {
    if as_json {
        crate::output::json(&serde_json::json!({ "public_key": public.to_string() }))?;
    } else {
        outln!("{public}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use plangate_core::chain::link;
    use plangate_store::LogKey;

    use super::*;

    /// An export of `bodies` as key `k`'s first events, signed with `key`.
    fn export(key: &LogKey, bodies: &[&str]) -> Vec<String> {
        let mut head = plangate_core::chain::GENESIS;
        bodies
            .iter()
            .enumerate()
            .map(|(i, body)| {
                let key_seq = i as i64 + 1;
                head = link(&head, "k", key_seq, 5, "mode_set", body);
                let mut line: serde_json::Map<String, Value> = serde_json::from_str(body).unwrap();
                line.insert("seq".into(), key_seq.into());
                line.insert("key_seq".into(), key_seq.into());
                line.insert("hash".into(), hex::encode(head).into());
                line.insert("sig".into(), key.sign(&head).into());
                serde_json::to_string(&line).unwrap()
            })
            .collect()
    }

    const BODIES: [&str; 3] = [
        r#"{"at_ms":5,"key_id":"k","mode":"plan","type":"mode_set"}"#,
        r#"{"at_ms":5,"key_id":"k","mode":"default","type":"mode_set"}"#,
        r#"{"at_ms":5,"key_id":"k","mode":"plan","type":"mode_set"}"#,
    ];

    #[test]
    fn an_untouched_export_verifies_and_a_changed_line_is_named() {
        let key = LogKey::from_seed(&[1; 32]).unwrap();
        let lines = export(&key, &BODIES);
        let found = verify_lines(&lines.join("\n"), key.public()).unwrap();
        assert_eq!((found.keys, found.events), (1, 3));
        assert!(found.broken.is_empty(), "{:?}", found.broken);

        let mut forged = lines.clone();
        forged[1] = forged[1].replace("\"default\"", "\"yolo\"");
        let found = verify_lines(&forged.join("\n"), key.public()).unwrap();
        assert_eq!(found.broken[0].key_seq, 2);

        let mut dropped = lines.clone();
        dropped.remove(1);
        let found = verify_lines(&dropped.join("\n"), key.public()).unwrap();
        assert_eq!(found.broken[0].key_seq, 3);

        let other = LogKey::from_seed(&[2; 32]).unwrap();
        let found = verify_lines(&lines.join("\n"), other.public()).unwrap();
        assert_eq!(found.broken[0].key_seq, 1);
    }

    #[test]
    fn an_export_that_starts_later_is_checked_from_where_it_starts() {
        let key = LogKey::from_seed(&[1; 32]).unwrap();
        let lines = export(&key, &BODIES);
        let found = verify_lines(&lines[1..].join("\n"), key.public()).unwrap();
        assert!(found.broken.is_empty(), "{:?}", found.broken);
        assert_eq!(found.partial, ["k"]);
    }
}
