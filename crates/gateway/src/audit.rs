//! The audit trail's reads every face shares (docs/design.md §6): the
//! export's lines and the check of the store's logs under the log key.
//! `plangate audit export|verify` at the data dir and the operator API
//! (`GET /console/api/audit/…`, for `--server`) both call these, so the
//! two answer alike.

use plangate_core::chain::{Break, Chain, Sealed};
use plangate_store::{PublicLogKey, Store, StoreError, StoredEvent};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// What a verification found: the `--json` answer and the summary line.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Verified {
    /// Keys whose logs were followed.
    pub keys: usize,
    /// Events followed.
    pub events: usize,
    /// Events written before the log was signed, each covered by the first
    /// signed event after it.
    pub unsigned: u64,
    /// Keys whose first exported event is not their first (an export made
    /// with `--since` or of part of the log): checked from there on.
    #[serde(default)]
    pub partial: Vec<String>,
    /// The first event of each key that does not verify.
    pub broken: Vec<Break>,
    /// The public key the signatures were checked with.
    pub public_key: String,
}

/// The log `name` names: a key's (by id, or the newest key of that name —
/// a revoked key's log is still there to read), or one of plangate's own
/// logs (`tools`, the tool pins; `operators`, who may approve and every
/// factor used) when no key has that name. `None`: no such log.
pub async fn log_id(store: &dyn Store, name: &str) -> Result<Option<String>, StoreError> {
    if let Some(found) = store.find_key(name).await? {
        return Ok(Some(found.id));
    }
    if let Some(found) = store
        .list_keys()
        .await?
        .into_iter()
        .rev()
        .find(|k| k.name == name)
    {
        return Ok(Some(found.id));
    }
    Ok(
        (name == plangate_core::TOOLS_LOG || name == plangate_core::operators::OPERATORS_LOG)
            .then(|| name.to_owned()),
    )
}

/// Follows every log in `key_ids` (every log with events when `None`) link
/// by link under `public` — the check an apply makes before it runs
/// anything — and says what it found.
pub async fn verify_store(
    store: &dyn Store,
    public: PublicLogKey,
    key_ids: Option<Vec<String>>,
) -> Result<Verified, StoreError> {
    let key_ids = match key_ids {
        Some(ids) => ids,
        None => store.keys_with_events().await?,
    };
    let mut found = Verified {
        public_key: public.to_string(),
        ..Verified::default()
    };
    for key_id in key_ids {
        let mut chain = Chain::default();
        let events = store.load_events(&key_id, 0).await?;
        found.keys += 1;
        found.events += events.len();
        for e in &events {
            let sealed = Sealed {
                hash: e.hash.as_deref(),
                sig: e.sig.as_deref(),
            };
            chain.follow(
                &key_id,
                e.key_seq,
                e.at_ms,
                &e.kind,
                e.body.as_str(),
                sealed,
                |link, sig| public.verifies(link, sig),
            );
        }
        chain.settle(&key_id);
        found.unsigned += chain.unsigned;
        found.broken.extend(chain.broken);
    }
    Ok(found)
}

/// One exported line: the stored body with `seq` and `key_seq` beside its
/// own fields, and its link and signature in the hash chain (`hash`,
/// `sig`) when it has them, so `audit verify --public-key` can check the
/// export alone.
fn line(event: &StoredEvent) -> Value {
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

/// `events` as JSON Lines, one per line, each as stored plus its order
/// and its link: nothing re-derived or unsealed, so the export is what
/// the log says. Hidden characters are written as `\uXXXX` (the same
/// JSON, safe to print on a terminal).
pub fn export_text(events: &[StoredEvent]) -> String {
    let mut text = String::new();
    for e in events {
        text.push_str(&plangate_core::screen_json(&line(e).to_string()));
        text.push('\n');
    }
    text
}
