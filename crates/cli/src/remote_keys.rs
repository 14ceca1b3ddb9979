//! `plangate keys list|create|revoke --server URL`: the keys of a running
//! plangate through its operator API ([`crate::remote`]), printed as the
//! data-dir commands print them ([`crate::commands`]).

use anyhow::Result;
use plangate_core::Scope;
use plangate_store::ApiKey;
use serde_json::json;

/// `plangate keys list|create|revoke --server URL`: the same acts through
/// the operator API of a running plangate, printed alike.
pub(crate) async fn keys_remote(url: &str, cmd: crate::args::KeysCommand) -> Result<()> {
    use crate::args::KeysCommand;
    let remote = crate::remote::Remote::new(url)?;
    match cmd {
        KeysCommand::List { json, .. } => {
            let keys: Vec<ApiKey> = remote.get("/console/api/keys", &[]).await?;
            crate::commands::print_keys(&keys, json)
        }
        KeysCommand::Revoke { key, json, .. } => {
            let revoked: ApiKey = remote
                .post(
                    "/console/api/keys/revoke",
                    json!({"key": key}),
                    &crate::args::FactorArgs::default(),
                )
                .await?;
            crate::commands::print_revoked(&revoked, json)
        }
        KeysCommand::Create {
            name,
            scope,
            json,
            factor,
            ..
        } => {
            let scope: Scope = scope.into();
            let made: serde_json::Value = remote
                .post(
                    "/console/api/keys",
                    json!({"name": name, "scope": scope}),
                    &factor,
                )
                .await?;
            let text = |k: &str| made[k].as_str().unwrap_or_default().to_owned();
            let shown = json.then(|| {
                json!({"id": text("key_id"), "name": text("key"), "scope": scope, "kind": "api_key"})
            });
            crate::commands::print_created(
                (&text("key"), &text("key_id"), scope),
                &text("token"),
                shown,
            )
        }
    }
}
