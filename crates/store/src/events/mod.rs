//! The append-only event log (docs/design.md §6).
//!
//! It is the store's source of truth: mode and plan are folds over a key's
//! events, and any projection kept for speed must equal the fold, including
//! across processes sharing one store. Appends go through the [`Store`]
//! trait and are durable before the answer is sent.
//!
//! The store does not interpret an event: its body is JSON that the
//! gateway serializes from `plangate-core`'s types. It only numbers and
//! indexes events, in two sequences:
//!
//! * `key_seq` — 1, 2, 3… per key, with no gaps. Appends are
//!   compare-and-set on it ([`Store::append_events`] takes the last key_seq
//!   the caller saw), which is how two processes serving the same key avoid
//!   folding over different histories: the loser gets
//!   [`StoreError::Conflict`], re-reads and retries.
//! * `seq` — one global order over all keys, in commit order, for exports
//!   and for processes that follow what others wrote
//!   ([`Store::events_since`]).
//!
//! Rows are never updated or deleted; both schemas refuse it, even to a
//! writer that bypasses this code.
//!
//! [`Store`]: crate::Store
//! [`Store::append_events`]: crate::EventLog::append_events
//! [`Store::events_since`]: crate::EventLog::events_since
//! [`StoreError::Conflict`]: crate::StoreError::Conflict

pub(crate) mod group_commit;
pub(crate) mod reads;

use plangate_core::JsonText;
use serde::{Deserialize, Serialize};

use crate::StoreError;
use crate::rows::TableRow;

/// The columns every event query returns, in the order
/// [`event_from_row`] reads them; a literal so queries stay static strings
/// (`concat!`) with bound values only.
macro_rules! event_columns {
    () => {
        "seq, key_id, key_seq, at_ms, type, body, hash, sig"
    };
}
pub(crate) use event_columns;

/// An event to append; the store assigns its key and sequence numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewEvent {
    /// When it happened, in ms since the epoch.
    pub at_ms: i64,
    /// The event type (`mode_set`, `step_planned`, …); not empty. Indexed
    /// so exports can be read without parsing bodies. Serialized as
    /// `type`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The event itself, opaque to the store.
    pub body: serde_json::Value,
    /// Its link in the key's hash chain and the log key's signature over
    /// it (`plangate_core::chain`), computed by the writer over the body
    /// as [`body_text`] writes it; `None` only for rows written by tools
    /// that do not sign (tests, old versions), which a reader of a signed
    /// log takes as a break.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seal: Option<Seal>,
}

/// An event's link in its key's hash chain and, on the last event of an
/// append, the signature over it (which covers every link before it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seal {
    /// The link, SHA-256 in lowercase hex.
    pub hash: String,
    /// The log key's Ed25519 signature over the link's 32 bytes, base64;
    /// only on an append's last event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sig: Option<String>,
}

/// An event as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredEvent {
    /// Position in the global log: increases with every append, in commit
    /// order, across all keys.
    pub seq: i64,
    /// The key whose log holds the event.
    pub key_id: String,
    /// Position in that key's log: 1, 2, 3… with no gaps.
    pub key_seq: i64,
    /// When it happened, in ms since the epoch (as given to the append).
    pub at_ms: i64,
    /// The event type. Serialized as `type`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The event itself, as appended, held as the JSON text stored: a
    /// reader that wants a type (the fold wants an event) parses it once,
    /// straight into that type; [`JsonText::value`] gives a value.
    pub body: JsonText,
    /// Its link in the key's hash chain (hex), as recorded; `None` for a
    /// row written before the log was signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    /// The log key's signature over the link (base64), as recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sig: Option<String>,
}

/// The body as every backend writes it: the text a writer hashes into the
/// event's link.
pub fn body_text(body: &serde_json::Value) -> Result<String, serde_json::Error> {
    serde_json::to_string(body)
}

/// Checks an event before any backend writes it, so every backend refuses
/// the same things, and returns the body as JSON text.
pub(crate) fn checked_body_text(event: &NewEvent) -> Result<String, StoreError> {
    if event.kind.is_empty() {
        return Err(StoreError::InvalidEvent(
            "its type is empty; every event needs a type".to_owned(),
        ));
    }
    if event.kind.contains('\0') {
        // PostgreSQL text cannot hold NUL; refuse it everywhere alike.
        return Err(StoreError::InvalidEvent(
            "its type contains a NUL character".to_owned(),
        ));
    }
    body_text(&event.body).map_err(|e| {
        StoreError::InvalidEvent(format!(
            "its body of type {:?} is not serializable: {e}",
            event.kind
        ))
    })
}

/// Reads a row of [`event_columns!`] from any backend; `body` is JSON text.
pub(crate) fn event_from_row(row: &impl TableRow) -> Result<StoredEvent, StoreError> {
    let body = row.text("body")?;
    Ok(StoredEvent {
        seq: row.int("seq")?,
        key_id: row.text("key_id")?,
        key_seq: row.int("key_seq")?,
        at_ms: row.int("at_ms")?,
        kind: row.text("type")?,
        body: JsonText::from_text(body).map_err(|e| StoreError::CorruptRow {
            table: "events",
            reason: format!("body is not JSON: {e}"),
        })?,
        hash: row.maybe_text("hash")?,
        sig: row.maybe_text("sig")?,
    })
}
