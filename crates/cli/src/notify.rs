//! `plangate notify`: send a receiver one signed test message (`test`),
//! and read the outbox (`list`) — what was sent to whom, and how each
//! attempt went.

use std::path::Path;

use anyhow::Result;
use plangate_core::notify::{Notice, message_id};
use plangate_gateway::notify::send;
use plangate_store::{format_time_ms, now_ms};
use serde_json::json;

use crate::args::NotifyCommand;
use crate::commands::UsageError;
use crate::output::{self, outln};
use crate::setup::{load_config, open_store};

/// Runs one `plangate notify` command.
pub(crate) async fn run(cmd: NotifyCommand, data_dir: &Path) -> Result<()> {
    match cmd {
        NotifyCommand::Test { source, name, json } => {
            let config = load_config(&source, data_dir)?;
            test(&config, &name, json).await
        }
        NotifyCommand::List { limit, json } => list(data_dir, limit, json).await,
    }
}

/// Sends `notify.test` to receiver `name` and prints its answer; fails
/// (exit status 1) when it did not take it.
async fn test(config: &plangate_config::Config, name: &str, as_json: bool) -> Result<()> {
    let Some(target) = config.notify.iter().find(|t| t.name == name) else {
        let known: Vec<&str> = config.notify.iter().map(|t| t.name.as_str()).collect();
        let known = if known.is_empty() {
            "it defines none: add a [[notify]] table with name, url and secret (docs/config.md, \"Notifications\")".to_owned()
        } else {
            format!("it defines {}", known.join(", "))
        };
        return Err(UsageError(format!(
            "no [[notify]] receiver named {name:?} in {}; {known}",
            config.source
        ))
        .into());
    };
    let now = now_ms();
    let console = config
        .gateway
        .public_url
        .as_ref()
        .map(|u| format!("{u}/console"));
    let notice = Notice::test(format_time_ms(now), console.as_deref());
    let id = message_id(notice.event, &[name, &now.to_string()]);
    let http = send::client().map_err(anyhow::Error::msg)?;
    let sent = send::send(&http, target, &id, &notice, now / 1000).await;
    if as_json {
        output::json(&json!({
            "receiver": name,
            "url": target.shown_url(),
            "webhook_id": id,
            "delivered": sent.delivered,
            "status": sent.status,
        }))?;
    } else {
        outln!(
            "sent notify.test to {name} ({}) as {id}",
            target.shown_url()
        );
        outln!("{}", sent.status);
    }
    if sent.delivered {
        Ok(())
    } else {
        anyhow::bail!(
            "the receiver did not take it ({}): check its url, that it is running, and that it verifies with this secret",
            sent.status
        )
    }
}

/// Prints the newest `limit` messages of the outbox.
async fn list(data_dir: &Path, limit: i64, as_json: bool) -> Result<()> {
    let store = open_store(data_dir).await?;
    let rows = store.outbox().recent(limit).await?;
    if as_json {
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let attempts = store
                .outbox()
                .attempts(&r.message.receiver, &r.message.msg_id)
                .await?;
            let notice: serde_json::Value =
                serde_json::from_str(&r.message.notice).unwrap_or_default();
            out.push(json!({
                "receiver": r.message.receiver,
                "webhook_id": r.message.msg_id,
                "type": r.message.event,
                "created_at": format_time_ms(r.message.created_at_ms),
                "state": r.state.as_str(),
                "next_attempt_at": (r.state == plangate_store::OutboxState::Pending).then(|| format_time_ms(r.next_at_ms)),
                "attempts": attempts.iter().map(|(n, at, status)| json!({"attempt": n, "at": format_time_ms(*at), "status": status})).collect::<Vec<_>>(),
                "notice": notice,
            }));
        }
        return output::json(&out);
    }
    if rows.is_empty() {
        outln!(
            "the outbox is empty: nothing was notified yet (receivers are [[notify]] tables in plangate.toml; `plangate notify test NAME` checks one)"
        );
        return Ok(());
    }
    for r in &rows {
        let m = &r.message;
        let state = match r.state {
            plangate_store::OutboxState::Pending => {
                format!("pending, next attempt {}", format_time_ms(r.next_at_ms))
            }
            other => other.as_str().replace('_', " "),
        };
        outln!(
            "{}  {}  {}  {}",
            format_time_ms(m.created_at_ms),
            m.receiver,
            m.event,
            m.msg_id
        );
        let last = r.last_status.as_deref().unwrap_or("not tried yet");
        outln!("    {state}; {} attempt(s), last: {last}", m.attempts);
    }
    Ok(())
}
