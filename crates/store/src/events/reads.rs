//! Reading the event log, written once for both SQL backends: each gives
//! its statements in its own dialect ([`EventSql`]) and [`SqlEvents`] runs
//! them, so the filters, the paging and the reading of rows are the same
//! whichever database holds the log (docs/design.md §6). Apart from the
//! log's types because only the backends' stores use it.

use sqlx::{Database, Encode, Executor, FromRow, IntoArguments, Pool, Type};

use super::{StoredEvent, event_from_row};
use crate::StoreError;
use crate::rows::TableRow;

/// A backend's statements for reading the log, each with the values it
/// binds, in order. Those that return events return
/// [`event_columns!`](super::event_columns), the body as JSON text.
#[derive(Debug)]
pub(crate) struct EventSql {
    /// (key_id, after_key_seq): the key's events after that key_seq, in
    /// key_seq order.
    pub(crate) load: &'static str,
    /// (key_id): the key's last key_seq (0 for none), as a 64-bit integer.
    pub(crate) last_key_seq: &'static str,
    /// (): every event, in seq order.
    pub(crate) export_all: &'static str,
    /// (key_id): the key's events, in seq order.
    pub(crate) export_key: &'static str,
    /// (since_ms): the events with `at_ms >= since_ms`, in seq order.
    pub(crate) export_since: &'static str,
    /// (key_id, since_ms): the key's events with `at_ms >= since_ms`, in
    /// seq order.
    pub(crate) export_key_since: &'static str,
    /// (after_seq, limit): up to `limit` events after that seq, in seq
    /// order.
    pub(crate) since: &'static str,
    /// (): the newest seq (0 for none), as a 64-bit integer.
    pub(crate) last_seq: &'static str,
}

/// The log in a store's pool, read with the backend's [`EventSql`]: a
/// view a store makes when it is asked, holding nothing of its own.
pub(crate) struct SqlEvents<'p, DB: Database> {
    pool: &'p Pool<DB>,
    sql: &'static EventSql,
}

impl<'p, DB> SqlEvents<'p, DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    (i64,): for<'r> FromRow<'r, DB::Row>,
    (String,): for<'r> FromRow<'r, DB::Row>,
    DB::Row: TableRow,
{
    /// The log in `pool`'s database (its tables already migrated), read
    /// with `sql`.
    pub(crate) fn new(pool: &'p Pool<DB>, sql: &'static EventSql) -> Self {
        SqlEvents { pool, sql }
    }

    /// [`crate::EventLog::load_events`].
    pub(crate) async fn load_events(
        &self,
        key_id: &str,
        after_key_seq: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let rows = sqlx::query(self.sql.load)
            .bind(key_id)
            .bind(after_key_seq)
            .fetch_all(self.pool)
            .await?;
        rows.iter().map(event_from_row).collect()
    }

    /// [`crate::EventLog::last_key_seq`].
    pub(crate) async fn last_key_seq(&self, key_id: &str) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(self.sql.last_key_seq)
            .bind(key_id)
            .fetch_one(self.pool)
            .await?)
    }

    /// [`crate::EventLog::keys_with_events`].
    pub(crate) async fn keys_with_events(&self) -> Result<Vec<String>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT DISTINCT key_id FROM events ORDER BY key_id")
                .fetch_all(self.pool)
                .await?,
        )
    }

    /// [`crate::EventLog::export_events`]: one static statement per filter
    /// combination. With a key, the key's UNIQUE index finds its rows; a
    /// time bound alone scans the log in seq order (schema version 5
    /// dropped the `at_ms` index to make every append cheaper; an export
    /// reads most of the log anyway).
    pub(crate) async fn export_events(
        &self,
        key_id: Option<&str>,
        since_ms: Option<i64>,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let query = match (key_id, since_ms) {
            (None, None) => sqlx::query(self.sql.export_all),
            (Some(key_id), None) => sqlx::query(self.sql.export_key).bind(key_id),
            (None, Some(since_ms)) => sqlx::query(self.sql.export_since).bind(since_ms),
            (Some(key_id), Some(since_ms)) => sqlx::query(self.sql.export_key_since)
                .bind(key_id)
                .bind(since_ms),
        };
        let rows = query.fetch_all(self.pool).await?;
        rows.iter().map(event_from_row).collect()
    }

    /// [`crate::EventLog::events_since`].
    pub(crate) async fn events_since(
        &self,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        if limit <= 0 {
            // PostgreSQL refuses a negative LIMIT and SQLite reads one as
            // "no limit"; the contract says nothing.
            return Ok(Vec::new());
        }
        let rows = sqlx::query(self.sql.since)
            .bind(after_seq)
            .bind(limit)
            .fetch_all(self.pool)
            .await?;
        rows.iter().map(event_from_row).collect()
    }

    /// [`crate::EventLog::last_seq`].
    pub(crate) async fn last_seq(&self) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(self.sql.last_seq)
            .fetch_one(self.pool)
            .await?)
    }
}

/// What an SQL backend `$store` on database `$db` is beside its
/// credentials: its log's reads ([`SqlEvents`] over its pool and its
/// module's `EVENT_SQL`), its undo states (its `credentials`, the same
/// pool), and the [`crate::EventLog`] impl in which every read forwards to
/// those reads; the appends, which each backend commits its own way, and
/// anything else the backend answers (`log_mark`) are the macro's items.
macro_rules! forward_event_reads {
    ($store:ty, $db:ty { $($own:tt)* }) => {
        impl $store {
            /// The log's reads, in `EVENT_SQL`.
            fn events(&self) -> SqlEvents<'_, $db> {
                SqlEvents::new(&self.pool, &EVENT_SQL)
            }
        }

        $crate::credentials::forward_undo_states!($db);
        $crate::outbox::forward_outbox!($db);

        impl $crate::Store for $store {
            fn undo_states(&self) -> &dyn $crate::UndoStates {
                &self.credentials
            }

            fn outbox(&self) -> &dyn $crate::Outbox {
                &self.credentials
            }
        }

        #[async_trait::async_trait]
        impl $crate::EventLog for $store {
            $($own)*

            async fn load_events(
                &self,
                key_id: &str,
                after_key_seq: i64,
            ) -> Result<Vec<$crate::StoredEvent>, $crate::StoreError> {
                self.events().load_events(key_id, after_key_seq).await
            }

            async fn last_key_seq(&self, key_id: &str) -> Result<i64, $crate::StoreError> {
                self.events().last_key_seq(key_id).await
            }

            async fn keys_with_events(&self) -> Result<Vec<String>, $crate::StoreError> {
                self.events().keys_with_events().await
            }

            async fn export_events(
                &self,
                key_id: Option<&str>,
                since_ms: Option<i64>,
            ) -> Result<Vec<$crate::StoredEvent>, $crate::StoreError> {
                self.events().export_events(key_id, since_ms).await
            }

            async fn events_since(
                &self,
                after_seq: i64,
                limit: i64,
            ) -> Result<Vec<$crate::StoredEvent>, $crate::StoreError> {
                self.events().events_since(after_seq, limit).await
            }

            async fn last_seq(&self) -> Result<i64, $crate::StoreError> {
                self.events().last_seq().await
            }
        }
    };
}
pub(crate) use forward_event_reads;
