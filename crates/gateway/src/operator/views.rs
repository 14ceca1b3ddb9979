//! Which keys have plans, and which key a person names: the reading every
//! face of a person does first (the console's list, `plans list`, the
//! operator MCP endpoint's `list_plans` and `show_plan`), in one place so
//! they list and resolve alike.

use plangate_core::{Channel, KeyPlanView, Scope};
use plangate_store::{ApiKey, Store, StoreError, now_ms};

use crate::Engine;
use crate::key_log::LogError;

/// A key the log names but the key store does not (deleted by hand):
/// shown by its id, with the least scope.
pub fn unknown_key(key_id: &str) -> ApiKey {
    ApiKey {
        id: key_id.to_owned(),
        name: key_id.to_owned(),
        scope: Scope::Read,
        prefix: String::new(),
        created_at_ms: 0,
        revoked_at_ms: None,
    }
}

/// The key a person names, by name or id: the active key of that name or
/// id, else the most recent revoked one of that name (its log is still
/// there to read) — as `plangate plans` resolves `--key`.
pub async fn find_key(store: &dyn Store, key: &str) -> Result<Option<ApiKey>, StoreError> {
    if let Some(found) = store.find_key(key).await? {
        return Ok(Some(found));
    }
    Ok(store
        .list_keys()
        .await?
        .into_iter()
        .rev()
        .find(|k| k.name == key))
}

/// Every key with a plan (open steps, a session, or a last apply a person
/// can still revert), each brought up to date first as every reader does
/// ([`super::refresh`]), with the log's seq the answer is current to; no
/// keys when the log has not moved past `after`. What refreshing appends
/// names `reader` (who is looking, over which channel).
pub async fn plan_views(
    engine: &Engine,
    reader: (&str, Channel),
    after: Option<i64>,
) -> Result<(i64, Option<Vec<KeyPlanView>>), LogError> {
    let store = engine.store();
    let seq = store.last_seq().await?;
    if after == Some(seq) {
        return Ok((seq, None));
    }
    let keys = store.list_keys().await?;
    let config = engine.config();
    let (ttl, lease) = (engine.ttl_ms(), engine.lease_ms());
    let mut out = Vec::new();
    for key_id in store.keys_with_events().await? {
        let key = keys
            .iter()
            .find(|k| k.id == key_id)
            .cloned()
            .unwrap_or_else(|| unknown_key(&key_id));
        let acting = super::acting(&key, reader.0, reader.1);
        let state = super::refresh(engine.log(), &acting, ttl, lease).await?;
        let revertible = || state.last_applied().iter().any(|s| s.revertible());
        if state.open_steps().next().is_none() && state.session_id.is_none() && !revertible() {
            continue;
        }
        out.push(super::plan_view(&config, &key, &state, now_ms()));
    }
    // Refreshing may have appended (expiry, leases): report the seq after.
    let seq = store.last_seq().await?;
    Ok((seq, Some(out)))
}
