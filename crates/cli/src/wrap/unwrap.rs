//! `plangate unwrap`: puts back the client's file as it was before wrap —
//! byte for byte when it is still what wrap wrote, else its server map
//! only — with the permissions it had. Apart from wrap, which it undoes
//! from the record wrap kept.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use base64::Engine as _;
use plangate_config::clients::{self, Node};

use super::client_file::{absolute, resolve};
use super::files::{Access, mode_of, mode_permissions, write_atomically};
use super::{Record, Target, record_path, sha256_hex};
use crate::commands::UsageError;
use crate::output::outln;

/// `plangate unwrap`.
pub async fn unwrap(
    target: Target,
    (force, keep_key): (bool, bool),
    data_dir: &Path,
) -> Result<()> {
    let (file, _) = resolve(&target, "wrapped with this data dir", |p| {
        record_path(data_dir, &absolute(p).unwrap_or_default()).exists()
    })?;
    let record_file = record_path(data_dir, &file);
    let record: Record = match std::fs::read(&record_file) {
        Ok(bytes) => serde_json::from_slice(&bytes).with_context(|| {
            format!("the wrap record {} is not readable", record_file.display())
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(UsageError(format!(
                "{} was not wrapped with data dir {} (no record at {}): if it was wrapped with another --data-dir or PLANGATE_DATA_DIR, give that one",
                file.display(),
                data_dir.display(),
                record_file.display()
            ))
            .into());
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", record_file.display())),
    };
    let original = base64::engine::general_purpose::STANDARD
        .decode(&record.original)
        .context("the wrap record's copy of the file is damaged")?;
    let current =
        std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;

    let restored: Vec<u8>;
    let how: &str;
    if sha256_hex(&current) == record.written_sha256 {
        restored = original.clone();
        how = "as it was before wrap, byte for byte";
    } else if current == original {
        restored = original.clone();
        how = "unchanged: it already held what was there before wrap";
    } else {
        // Changed since wrap. When the server map is still the one wrap
        // wrote, put the original map back and keep the rest (clients such
        // as Claude Code rewrite their own file all the time).
        let text = String::from_utf8(current.clone()).unwrap_or_default();
        let original_text = String::from_utf8(original.clone()).unwrap_or_default();
        let (start, end) = record.original_servers;
        let servers_now = clients::parse(&text)
            .ok()
            .and_then(|(_, spans)| spans.find(&record.servers_path).map(Node::span));
        match servers_now {
            Some(span)
                if text[span.clone()] == record.written_servers && end <= original_text.len() =>
            {
                restored = format!(
                    "{}{}{}",
                    &text[..span.start],
                    &original_text[start..end],
                    &text[span.end..]
                )
                .into_bytes();
                how = "with its servers as they were before wrap; the file's other changes since are kept";
            }
            _ if force => {
                let saved = PathBuf::from(format!("{}.plangate-unwrap-saved", file.display()));
                // It holds the key wrap wrote, and whatever else you put
                // there: owner-only.
                write_atomically(&saved, &current, Access::Owner)?;
                eprintln!("your changes since wrap are saved as {}", saved.display());
                restored = original.clone();
                how = "as it was before wrap, byte for byte (--force)";
            }
            _ => {
                return Err(UsageError(format!(
                    "{} changed since wrap, its server map too, so unwrap would lose what you changed. To put back the original anyway (your current file saved as {}.plangate-unwrap-saved): plangate unwrap --from {} --force. Or restore it by hand from {}",
                    file.display(),
                    file.display(),
                    file.display(),
                    record.backup.display()
                ))
                .into());
            }
        }
    }
    // The file as it was, with the permissions it had (wrap made it
    // owner-only while it held the key).
    let access = record
        .original_mode
        .map_or(Access::Like(&file), Access::Mode);
    if restored != current {
        write_atomically(&file, &restored, access)?;
    } else if let Some(mode) = record.original_mode
        && mode_of(&file) != Some(mode)
        && let Some(permissions) = mode_permissions(mode)
    {
        std::fs::set_permissions(&file, permissions)
            .with_context(|| format!("cannot put back the permissions of {}", file.display()))?;
    }
    // The copy beside the file, when it is still the original.
    if std::fs::read(&record.backup).is_ok_and(|b| b == original) {
        let _ = std::fs::remove_file(&record.backup);
    }
    std::fs::remove_file(&record_file)
        .with_context(|| format!("cannot remove the wrap record {}", record_file.display()))?;
    outln!("restored {} {how}", file.display());
    if let Some(service) = &record.service {
        outln!(
            "  the service's key {:?} ({}) stays; revoke it as the service's user: plangate keys revoke {}",
            record.key_name,
            service,
            record.key_id
        );
        outln!(
            "  the servers stay in the service's config {} (remove their [upstreams] tables when you no longer need them)",
            record.config.display()
        );
        return Ok(());
    }
    if keep_key {
        outln!(
            "  the key {:?} stays (--keep-key); revoke it with: plangate --data-dir {} keys revoke {}",
            record.key_name,
            data_dir.display(),
            record.key_id
        );
    } else {
        revoke_key(&record, data_dir).await;
    }
    outln!(
        "  the plangate config stays at {} (remove it when you no longer need it)",
        record.config.display()
    );
    Ok(())
}

/// Revokes the key wrap created for the file now put back: nothing uses
/// it any more. Says so, or how to do it by hand when it cannot.
async fn revoke_key(record: &Record, data_dir: &Path) {
    let revoked = match crate::setup::open_store(data_dir).await {
        Ok(store) => store
            .revoke_key(&record.key_id)
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    match revoked {
        Ok(_) => outln!("  the key {:?} wrap created is revoked", record.key_name),
        Err(e) => outln!(
            "  the key {:?} could NOT be revoked ({e}): plangate --data-dir {} keys revoke {}",
            record.key_name,
            data_dir.display(),
            record.key_id
        ),
    }
}
