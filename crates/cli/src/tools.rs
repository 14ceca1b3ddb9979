//! `plangate tools list|accept|reject`: a person reviewing the pinned tool
//! definitions of the upstreams (docs/design.md §9). The pins live in the store
//! every gateway shares, so these commands need no upstream connection;
//! a running gateway picks the decision up within a second and tells its
//! clients the tool list changed. The rules are
//! [`plangate_gateway::tool_pins`]', shared with the web console.

use std::sync::Arc;

use crate::output::outln;

use anyhow::Result;
use plangate_config::Config;
use plangate_core::{Actor, Channel, TOOLS_LOG, ToolPins};
use plangate_gateway::key_log::KeyLog;
use plangate_gateway::operator::factor::Confirmed;
use plangate_gateway::tool_pins::{self, Decided, Decision, PinError, ToolRow};
use plangate_store::{LogKey, Store, format_time_ms, now_ms};
use serde_json::json;

use crate::commands::{UsageError, operator_name, print_table};

fn short(hash: &str) -> String {
    hash.trim_start_matches("sha256:")
        .chars()
        .take(12)
        .collect()
}

async fn pins(store: Arc<dyn Store>, log_key: Arc<LogKey>) -> Result<ToolPins> {
    Ok(KeyLog::<ToolPins>::with_capacity(store, log_key, 1)
        .state(TOOLS_LOG)
        .await?)
}

/// `plangate tools list`: every pinned, quarantined or rejected tool.
pub async fn list(
    config: &Config,
    store: Arc<dyn Store>,
    log_key: Arc<LogKey>,
    as_json: bool,
) -> Result<()> {
    let pins = pins(store, log_key).await?;
    print_rows(&tool_pins::rows(&pins, config), as_json)
}

/// Prints the tools' rows as a table (or JSON), and how to review what is
/// held.
pub fn print_rows(rows: &[ToolRow], as_json: bool) -> Result<()> {
    if as_json {
        crate::output::json(&json!({"tools": rows}))?;
        return Ok(());
    }
    if rows.is_empty() {
        outln!(
            "no tool is pinned yet: a gateway pins each upstream's tools when it first lists them"
        );
        return Ok(());
    }
    let table: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            let effect = match (r.effect, r.held_effect) {
                (Some(a), Some(h)) if a != h => format!("{a} -> {h}"),
                (Some(a), _) => a.to_string(),
                (None, Some(h)) => h.to_string(),
                (None, None) => String::new(),
            };
            let status = match r.reason {
                Some(reason) => format!("{} ({})", r.status, reason.as_str()),
                None => r.status.to_string(),
            };
            let definition = match (&r.accepted_hash, &r.held_hash) {
                (Some(a), Some(h)) => format!("{} -> {}", short(a), short(h)),
                (Some(a), None) => short(a),
                (None, Some(h)) => short(h),
                (None, None) => String::new(),
            };
            [
                r.server.clone(),
                r.tool.clone(),
                status,
                effect,
                definition,
                if r.changed.is_empty() {
                    r.held_since_ms
                        .map(|t| format!("since {}", format_time_ms(t)))
                        .unwrap_or_default()
                } else {
                    format!("changed: {}", r.changed.join(", "))
                },
            ]
        })
        .collect();
    print_table(
        &["UPSTREAM", "TOOL", "STATUS", "EFFECT", "DEFINITION", "NOTE"],
        &table,
    );
    let held = rows.iter().filter(|r| r.held_hash.is_some()).count();
    if held > 0 {
        outln!();
        outln!(
            "{held} held back: not offered, calls refused tool_quarantined. Review with `plangate tools list --json`, then `plangate tools accept UPSTREAM TOOL` or `plangate tools reject UPSTREAM TOOL`."
        );
    }
    Ok(())
}

/// Refuses an accept before the person's code is asked for when nothing
/// of the tool is held, or the held definition is not the one reviewed
/// (checked again when the decision is recorded).
pub async fn held_as_seen(
    store: Arc<dyn Store>,
    log_key: Arc<LogKey>,
    named: (&str, &str),
    hash: Option<&str>,
) -> Result<()> {
    let pins = pins(store, log_key).await?;
    tool_pins::held_as_seen(&pins, named, hash)
        .map(|_| ())
        .map_err(|e| UsageError(e.to_string()).into())
}

/// `plangate tools accept|reject UPSTREAM TOOL [--hash H]`; an accept
/// comes with the person's confirmed yes.
pub async fn decide(
    config: &Config,
    store: Arc<dyn Store>,
    log_key: Arc<LogKey>,
    (server, tool): (&str, &str),
    hash: Option<&str>,
    (decision, yes): (Decision, Option<&Confirmed>),
    as_json: bool,
) -> Result<()> {
    let log = KeyLog::<ToolPins>::with_capacity(store, log_key, 1);
    let who = Actor::Operator {
        name: yes
            .and_then(Confirmed::operator)
            .map_or_else(operator_name, str::to_owned),
    };
    let pins = tool_pins::decide(
        &log,
        config,
        server,
        tool,
        hash,
        decision,
        (who, yes),
        Channel::Cli,
        now_ms(),
    )
    .await
    .map_err(|e| match e {
        PinError::Log(e) => anyhow::Error::from(e),
        other => UsageError(other.to_string()).into(),
    })?;
    print_decided(&Decided::of(&pins, (server, tool), decision), as_json)
}

/// Says what a person decided on a held definition, and what follows.
pub fn print_decided(decided: &Decided, as_json: bool) -> Result<()> {
    if as_json {
        return crate::output::json(decided);
    }
    let next = if decided.decision == "accepted" {
        "it is offered again from the next call, by every gateway sharing this store"
    } else {
        "it stays out until the upstream changes it and someone accepts the new definition"
    };
    outln!(
        "{} {} {} ({}): {next}",
        decided.decision,
        decided.server,
        decided.tool,
        short(&decided.definition_hash)
    );
    Ok(())
}
