//! What applied steps replaced, kept sealed beside the log for an undo
//! (docs/design.md §5, "Undo"): one row per applied step, the sealed
//! plaintext and its digest (the log's `undo_recorded` event names the
//! digest). Beside the log, not in it: a row can be dropped past
//! `undo_ttl` without breaking the log's hash chain. The SQL is written
//! once for every backend, in [`crate::credentials`]'s `SqlCredentials`
//! (the same pool and bounds as the keys').

use async_trait::async_trait;

use crate::StoreError;

/// A state kept for an undo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptUndo {
    /// `sha256:` of the plaintext.
    pub digest: String,
    /// The plaintext, sealed ([`crate::seal::seal`]).
    pub sealed: String,
    /// When it was kept (ms since the epoch).
    pub kept_at_ms: i64,
}

/// The store's undo states.
#[async_trait]
pub trait UndoStates: Send + Sync + 'static {
    /// Keeps `sealed`, the sealed state step `step_id` of key `key_id`
    /// replaced, whose plaintext's digest is `digest`; keeping it again
    /// replaces it (a step applied again replaced another state).
    async fn keep_undo(
        &self,
        key_id: &str,
        step_id: &str,
        digest: &str,
        sealed: &str,
    ) -> Result<(), StoreError>;

    /// The state kept for that step, if one is.
    async fn undo_state(&self, key_id: &str, step_id: &str)
    -> Result<Option<KeptUndo>, StoreError>;

    /// Drops every state kept before `before_ms`; answers which (key id,
    /// step id), so their logs can say so.
    async fn drop_undo_before(&self, before_ms: i64) -> Result<Vec<(String, String)>, StoreError>;
}
