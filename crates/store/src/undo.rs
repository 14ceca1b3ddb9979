//! What applied steps replaced, kept sealed beside the log for an undo
//! (docs/design.md §5, "Undo"): one row per applied step, the sealed
//! plaintext and its digest (the log's `undo_recorded` event names the
//! digest). Beside the log, not in it: a row can be dropped past
//! `undo_ttl` without breaking the log's hash chain. Written once for
//! every SQL backend, as [`crate::credentials`] is.

use async_trait::async_trait;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Type};

use crate::credentials::SqlCredentials;
use crate::{StoreError, now_ms};

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

impl<DB> SqlCredentials<DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'r> String: Decode<'r, DB>,
    for<'r> i64: Decode<'r, DB>,
    &'static str: ColumnIndex<DB::Row>,
{
    pub(crate) async fn keep_undo(
        &self,
        key_id: &str,
        step_id: &str,
        digest: &str,
        sealed: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO undo_states (key_id, step_id, digest, sealed, kept_at_ms) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (key_id, step_id) DO UPDATE SET digest = excluded.digest, sealed = excluded.sealed, kept_at_ms = excluded.kept_at_ms",
        )
        .bind(key_id)
        .bind(step_id)
        .bind(digest)
        .bind(sealed)
        .bind(now_ms())
        .execute(self.pool())
        .await?;
        Ok(())
    }

    pub(crate) async fn undo_state(
        &self,
        key_id: &str,
        step_id: &str,
    ) -> Result<Option<KeptUndo>, StoreError> {
        let row = sqlx::query(
            "SELECT digest, sealed, kept_at_ms FROM undo_states WHERE key_id = $1 AND step_id = $2",
        )
        .bind(key_id)
        .bind(step_id)
        .fetch_optional(self.pool())
        .await?;
        row.map(|row| {
            Ok(KeptUndo {
                digest: sqlx::Row::try_get(&row, "digest")?,
                sealed: sqlx::Row::try_get(&row, "sealed")?,
                kept_at_ms: sqlx::Row::try_get(&row, "kept_at_ms")?,
            })
        })
        .transpose()
    }

    pub(crate) async fn drop_undo_before(
        &self,
        before_ms: i64,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let rows =
            sqlx::query("DELETE FROM undo_states WHERE kept_at_ms < $1 RETURNING key_id, step_id")
                .bind(before_ms)
                .fetch_all(self.pool())
                .await?;
        rows.iter()
            .map(|row| {
                Ok((
                    sqlx::Row::try_get(row, "key_id")?,
                    sqlx::Row::try_get(row, "step_id")?,
                ))
            })
            .collect()
    }
}

/// The [`UndoStates`] impl of a store whose `credentials` field is a
/// [`SqlCredentials`] (the same pool): every method forwards to it.
macro_rules! forward_undo_states {
    ($store:ty) => {
        #[async_trait::async_trait]
        impl $crate::UndoStates for $store {
            async fn keep_undo(
                &self,
                key_id: &str,
                step_id: &str,
                digest: &str,
                sealed: &str,
            ) -> Result<(), $crate::StoreError> {
                self.credentials
                    .keep_undo(key_id, step_id, digest, sealed)
                    .await
            }

            async fn undo_state(
                &self,
                key_id: &str,
                step_id: &str,
            ) -> Result<Option<$crate::KeptUndo>, $crate::StoreError> {
                self.credentials.undo_state(key_id, step_id).await
            }

            async fn drop_undo_before(
                &self,
                before_ms: i64,
            ) -> Result<Vec<(String, String)>, $crate::StoreError> {
                self.credentials.drop_undo_before(before_ms).await
            }
        }
    };
}
pub(crate) use forward_undo_states;
