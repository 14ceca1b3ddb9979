//! The operator commands behind the flags: keys, operator tokens, modes
//! and the zero-config demo. Each prints a table (or text) by default and JSON with
//! `--json`.

use std::collections::BTreeMap;
use std::path::Path;

use crate::output::outln;

use anyhow::Result;
use plangate_config::{Config, ConfigSource, Transport, UpstreamConfig};
use plangate_core::Scope;
use plangate_store::{ApiKey, OperatorToken, Store, format_time_ms};
use serde_json::json;

/// A mistake in how plangate was invoked (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The zero-config setup: one stdio upstream, `site`, which is this very
/// binary running `plangate demo-site` on a state file in the data dir.
pub fn demo_config(exe: &Path, state: &Path) -> Config {
    let transport = Transport::Stdio {
        command: exe.display().to_string(),
        args: vec![
            "demo-site".into(),
            "--state".into(),
            state.display().to_string(),
        ],
        env: BTreeMap::new(),
        cwd: None,
    };
    let site = UpstreamConfig {
        tools: plangate_config::demo_tool_overrides(),
        ..UpstreamConfig::new("site", transport)
    };
    Config::new(
        ConfigSource::Builtin("the embedded demo site (no config file found)"),
        BTreeMap::from([("site".to_owned(), site)]),
    )
}

/// How a config source is named in logs.
pub fn describe_source(source: &ConfigSource) -> String {
    source.to_string()
}

fn key_json(k: &ApiKey) -> serde_json::Value {
    json!({
        "id": k.id,
        "name": k.name,
        // An OAuth identity's scope is its token's, per request; the row
        // keeps its first token's.
        "kind": if k.is_identity() { "oauth_identity" } else { "api_key" },
        "scope": k.scope,
        "prefix": k.prefix,
        "created_at": format_time_ms(k.created_at_ms),
        "revoked_at": k.revoked_at_ms.map(format_time_ms),
    })
}

/// `plangate keys create`: prints the token once.
pub async fn keys_create(store: &dyn Store, name: &str, scope: Scope, as_json: bool) -> Result<()> {
    let created = store
        .create_key(name, scope)
        .await
        .map_err(|e| UsageError(e.to_string()))?;
    print_created(
        (&created.key.name, &created.key.id, created.key.scope),
        &created.token,
        as_json.then(|| key_json(&created.key)),
    )
}

/// A key just made, here or through `--server`: the token on stdout
/// (or in `json`), once.
pub(crate) fn print_created(
    (name, id, scope): (&str, &str, Scope),
    token: &str,
    json_of_key: Option<serde_json::Value>,
) -> Result<()> {
    if let Some(mut v) = json_of_key {
        v["token"] = json!(token);
        crate::output::json(&v)?;
    } else {
        outln!("{token}");
        eprintln!(
            "created key {name:?} ({id}, scope {scope}). This is the only time the key is shown: store it now.\n\
             Use it as `Authorization: Bearer <key>` over HTTP, or PLANGATE_KEY=<key> for `plangate serve --stdio`."
        );
    }
    Ok(())
}

/// `plangate keys list`: never shows tokens, only their prefixes.
pub async fn keys_list(store: &dyn Store, as_json: bool) -> Result<()> {
    let keys = store.list_keys().await?;
    print_keys(&keys, as_json)
}

/// The keys as a table (or JSON), here or through `--server`.
pub(crate) fn print_keys(keys: &[ApiKey], as_json: bool) -> Result<()> {
    if as_json {
        let v: Vec<_> = keys.iter().map(key_json).collect();
        crate::output::json(&v)?;
        return Ok(());
    }
    if keys.is_empty() {
        outln!(
            "no keys; create one with `plangate keys create --name NAME --scope read|plan|write`"
        );
        return Ok(());
    }
    let rows: Vec<[String; 6]> = keys
        .iter()
        .map(|k| {
            [
                k.name.clone(),
                if k.is_identity() {
                    "per token".to_owned()
                } else {
                    k.scope.to_string()
                },
                k.prefix.clone(),
                k.id.clone(),
                format_time_ms(k.created_at_ms),
                k.revoked_at_ms
                    .map(|t| format!("revoked {}", format_time_ms(t)))
                    .unwrap_or_else(|| "active".into()),
            ]
        })
        .collect();
    print_table(
        &["NAME", "SCOPE", "PREFIX", "ID", "CREATED", "STATUS"],
        &rows,
    );
    Ok(())
}

/// `plangate keys revoke`.
pub async fn keys_revoke(store: &dyn Store, key: &str, as_json: bool) -> Result<()> {
    let revoked = store
        .revoke_key(key)
        .await
        .map_err(|e| UsageError(e.to_string()))?;
    print_revoked(&revoked, as_json)
}

/// A revoked key, here or through `--server`.
pub(crate) fn print_revoked(revoked: &ApiKey, as_json: bool) -> Result<()> {
    if as_json {
        crate::output::json(&key_json(revoked))?;
    } else {
        outln!("revoked key {:?} ({})", revoked.name, revoked.id);
    }
    Ok(())
}

fn operator_json(o: &OperatorToken) -> serde_json::Value {
    json!({
        "id": o.id,
        "name": o.name,
        "prefix": o.prefix,
        "created_at": format_time_ms(o.created_at_ms),
        "revoked_at": o.revoked_at_ms.map(format_time_ms),
    })
}

/// `plangate operator token`: prints a new operator token once.
pub async fn operator_token(store: &dyn Store, name: &str, as_json: bool) -> Result<()> {
    let created = store
        .create_operator_token(name)
        .await
        .map_err(|e| UsageError(e.to_string()))?;
    print_operator_token(&created.operator, &created.token, as_json)
}

/// Prints a new operator token, once, and what it opens.
pub(crate) fn print_operator_token(
    operator: &OperatorToken,
    token: &str,
    as_json: bool,
) -> Result<()> {
    if as_json {
        let mut v = operator_json(operator);
        v["token"] = json!(token);
        crate::output::json(&v)?;
    } else {
        outln!("{token}");
        eprintln!(
            "created operator token {:?} ({}). This is the only time it is shown: store it now.\n\
             Log in with it at http://HOST:PORT/console of `plangate serve --http`, or give it to `--server` commands (PLANGATE_OPERATOR_TOKEN). It is not an API key.",
            operator.name, operator.id
        );
    }
    Ok(())
}

/// `plangate operator list`: never shows tokens, only their prefixes.
pub async fn operator_list(store: &dyn Store, as_json: bool) -> Result<()> {
    print_operator_tokens(&store.list_operator_tokens().await?, as_json)
}

/// Prints operator tokens (their prefixes, never the tokens).
pub(crate) fn print_operator_tokens(operators: &[OperatorToken], as_json: bool) -> Result<()> {
    if as_json {
        let v: Vec<_> = operators.iter().map(operator_json).collect();
        crate::output::json(&v)?;
        return Ok(());
    }
    if operators.is_empty() {
        outln!("no operator tokens; create one with `plangate operator token --name NAME`");
        return Ok(());
    }
    let rows: Vec<[String; 5]> = operators
        .iter()
        .map(|o| {
            [
                o.name.clone(),
                o.prefix.clone(),
                o.id.clone(),
                format_time_ms(o.created_at_ms),
                o.revoked_at_ms
                    .map(|t| format!("revoked {}", format_time_ms(t)))
                    .unwrap_or_else(|| "active".into()),
            ]
        })
        .collect();
    print_table(&["NAME", "PREFIX", "ID", "CREATED", "STATUS"], &rows);
    Ok(())
}

/// `plangate operator revoke`: takes effect at the token's sessions' next
/// request, in every process.
pub async fn operator_revoke(store: &dyn Store, operator: &str, as_json: bool) -> Result<()> {
    let revoked = store
        .revoke_operator_token(operator)
        .await
        .map_err(|e| UsageError(e.to_string()))?;
    print_operator_revoked(&revoked, as_json)
}

/// Says an operator token was revoked.
pub(crate) fn print_operator_revoked(revoked: &OperatorToken, as_json: bool) -> Result<()> {
    if as_json {
        crate::output::json(&operator_json(revoked))?;
    } else {
        outln!("revoked operator token {:?} ({})", revoked.name, revoked.id);
    }
    Ok(())
}

/// Prints rows under a header, columns padded to their widest cell. Each
/// cell is screened first ([`plangate_core::screen()`]: a value's control
/// characters and line breaks shown as escapes), so the columns line up
/// with what is shown and a row with hidden characters is marked at its
/// end.
pub fn print_table<const N: usize>(header: &[&str; N], rows: &[[String; N]]) {
    let rows: Vec<Vec<plangate_core::Screened<'_>>> = rows
        .iter()
        .map(|row| row.iter().map(|c| plangate_core::screen(c)).collect())
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.text().chars().count());
        }
    }
    let line = |cells: Vec<&str>, hidden: bool| {
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == N {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  "));
            }
        }
        let out = out.trim_end();
        if hidden {
            outln!("{out}  [{}]", plangate_core::HIDDEN_MARK);
        } else {
            outln!("{out}");
        }
    };
    line(header.to_vec(), false);
    for row in &rows {
        line(
            row.iter().map(plangate_core::Screened::text).collect(),
            row.iter().any(plangate_core::Screened::hidden),
        );
    }
}

/// The operator's name for events: the OS user running the command.
pub fn operator_name() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "operator".to_owned())
}

/// The OAuth identity `name` names (`ISSUER#VALUE`, the issuer one of
/// `[auth.oauth]`'s, the value a possible identity claim), if it does.
fn identity_named(config: &Config, name: &str) -> Option<plangate_store::Identity> {
    let oauth = config.auth.oauth.as_ref()?;
    let (issuer, value) = name.split_once('#')?;
    let trusted = oauth.issuers.iter().any(|i| i == issuer);
    let valid = !value.is_empty() && value.len() <= 256 && !value.chars().any(char::is_control);
    (trusted && valid).then(|| plangate_store::Identity::new(issuer, value))
}

/// `plangate mode set --key NAME [MODE] [--lock|--unlock]`: the operator
/// sets the key's mode and lock ([`plangate_gateway::operator::set_mode`]).
pub async fn mode_set(
    config: &Config,
    (store, log_key): (
        std::sync::Arc<dyn Store>,
        std::sync::Arc<plangate_store::LogKey>,
    ),
    key: &str,
    mode: Option<&str>,
    (change, yes): (
        plangate_gateway::operator::LockChange,
        Option<&plangate_gateway::operator::factor::Confirmed>,
    ),
    as_json: bool,
) -> Result<()> {
    if let Some(mode) = mode
        && !config.modes.contains(mode)
    {
        return Err(UsageError(format!(
            "mode {mode:?} is not defined; use one of {}",
            config.modes.names().join(", ")
        ))
        .into());
    }
    let api_key = match store.find_key(key).await? {
        Some(found) => found,
        None => match identity_named(config, key) {
            // A person of a trusted issuer who has not signed in yet: the
            // operator may set their mode (lock them into plan mode, say)
            // before their first request, which then finds it in force.
            Some(identity) => {
                let row = store
                    .ensure_identity(&identity, plangate_core::Scope::Read)
                    .await?;
                if !row.is_active() {
                    return Err(UsageError(format!(
                        "identity {key:?} was revoked; its mode no longer matters"
                    ))
                    .into());
                }
                row
            }
            None => {
                return Err(UsageError(format!(
                    "no active key named {key:?}; `plangate keys list` shows the keys (an OAuth identity is named 'ISSUER#VALUE', ISSUER one of [auth.oauth] issuers)"
                ))
                .into());
            }
        },
    };
    let operator = yes
        .and_then(|y| y.operator())
        .map_or_else(operator_name, str::to_owned);
    let acting =
        plangate_gateway::operator::acting(&api_key, &operator, plangate_core::Channel::Cli);
    let log = plangate_gateway::key_log::KeyLog::new(store, log_key);
    let in_force =
        plangate_gateway::operator::set_mode(&log, config, &acting, mode, change, yes).await?;
    let answer = plangate_core::ModeAnswer {
        key: api_key.name.clone(),
        key_id: api_key.id.clone(),
        mode: in_force.spec.name.clone(),
        plan_mode: in_force.spec.plan_mode(),
        mode_locked: in_force.locked_by,
        set_by: operator,
    };
    print_mode(&answer, (change, mode.is_some()), as_json)
}

/// What `mode set` did, here or through `--server`: `change` is the lock
/// asked for, and whether a mode was named.
pub fn print_mode(
    answer: &plangate_core::ModeAnswer,
    (change, named): (plangate_gateway::operator::LockChange, bool),
    as_json: bool,
) -> Result<()> {
    use plangate_gateway::operator::LockChange;
    if as_json {
        crate::output::json(answer)?;
        return Ok(());
    }
    let (name, now) = (&answer.key, &answer.mode);
    let lead = match (change, named) {
        (LockChange::Unlock, false) => format!("key {name:?} is unlocked, in mode {now}"),
        (LockChange::Unlock, true) => format!("key {name:?} is now in mode {now}, unlocked"),
        _ => format!("key {name:?} is now in mode {now}"),
    };
    match answer.mode_locked {
        Some(by) => {
            let why = match (change, by) {
                (LockChange::Lock, _) => "locked",
                (_, plangate_core::LockedBy::Operator) => "still locked",
                // An unlock that leaves the config's lock cannot happen
                // (the unlock frees the key); a plain set of a config-held
                // key locks it explicitly.
                (_, plangate_core::LockedBy::Config) => "locked by [gateway] default_mode_locked",
            };
            let name = plangate_core::shell_word(name);
            outln!(
                "{lead}, {why}: its agent cannot change the mode, end its session or leave plan mode, and its plans run only after a person approves them (the web console, or `plangate plans show --key {name}` then `plangate plans approve --key {name} --digest D`). In force at its next call. `plangate mode set --key {name} --unlock` lets its agent change the mode again."
            );
        }
        None => outln!(
            "{lead}; in force at its next call, and its agent may change it (`--lock` holds it there)"
        ),
    }
    Ok(())
}
