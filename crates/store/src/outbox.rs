//! The notification outbox (docs/design.md §13): each message to each
//! `[[notify]]` receiver is a row, written before anything is sent, so a
//! restart or a receiver that is down loses nothing; each attempt to
//! deliver it is a row of its own, so every try is on the record. Beside
//! the log, not in it: rows are dropped some time after they are done
//! without breaking the log's hash chain.
//!
//! A message's id is the same in every process that notices its event
//! (`plangate_core::notify::message_id`), so replicas enqueueing the same
//! message write one row; a replica claims a due row for a while before
//! sending it, so two do not send it at once. Delivery is at least once:
//! a process that dies after sending and before recording sends again,
//! and the receiver de-duplicates by `webhook-id`.
//!
//! The SQL is written once for every backend, on the backend's
//! credentials pool, as [`crate::undo`]'s is.

use async_trait::async_trait;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Type};

use crate::StoreError;
use crate::credentials::SqlCredentials;

/// One message to one receiver, as enqueued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxMessage {
    /// The `[[notify]]` receiver's name.
    pub receiver: String,
    /// The message's id, its `webhook-id`.
    pub msg_id: String,
    /// Its event's `type` (`plan.review_needed`, …).
    pub event: String,
    /// The message as JSON (the standard body; a receiver's format is
    /// rendered from it when it is sent).
    pub notice: String,
    /// When it was made (ms since the epoch): it is tried for a day from
    /// then.
    pub created_at_ms: i64,
    /// How many attempts were made so far.
    pub attempts: u32,
}

/// Where a message stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutboxState {
    /// Not delivered yet; tried again at its next time.
    Pending,
    /// The receiver answered 2xx.
    Delivered,
    /// A day of attempts failed, or its receiver is no longer configured.
    GivenUp,
}

impl OutboxState {
    /// The stored and shown name.
    pub fn as_str(self) -> &'static str {
        match self {
            OutboxState::Pending => "pending",
            OutboxState::Delivered => "delivered",
            OutboxState::GivenUp => "given_up",
        }
    }

    fn parse(s: &str) -> OutboxState {
        match s {
            "delivered" => OutboxState::Delivered,
            "given_up" => OutboxState::GivenUp,
            _ => OutboxState::Pending,
        }
    }
}

/// A message as `plangate notify list` shows it: where it stands and how
/// its last attempt went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxRow {
    /// The message.
    pub message: OutboxMessage,
    /// Where it stands.
    pub state: OutboxState,
    /// When it is tried next (pending) or was done.
    pub next_at_ms: i64,
    /// What its last attempt got (`HTTP 204`, `connection refused`, …).
    pub last_status: Option<String>,
}

/// How an attempt ended, and what happens next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptEnd {
    /// Delivered: nothing more.
    Delivered,
    /// Failed: try again at this time.
    RetryAt(i64),
    /// Failed for the last time.
    GiveUp,
}

/// The store's outbox.
#[async_trait]
pub trait Outbox: Send + Sync + 'static {
    /// Enqueues `messages`, due now; a message already there (the same
    /// receiver and id) is left as it is. Answers how many were new.
    async fn enqueue(&self, messages: &[OutboxMessage]) -> Result<usize, StoreError>;

    /// Claims up to `limit` pending messages due at `now_ms`, oldest due
    /// first, for `hold_ms`: no process claims them again before then, so
    /// only the claimant sends them; one it never reports on is due again
    /// when the hold ends.
    async fn claim_due(
        &self,
        now_ms: i64,
        hold_ms: i64,
        limit: i64,
    ) -> Result<Vec<OutboxMessage>, StoreError>;

    /// Records attempt `attempt` (1, 2, …) at `at_ms` on a message, what
    /// it got (`status`), and how it ended.
    async fn record_attempt(
        &self,
        message: &OutboxMessage,
        attempt: u32,
        at_ms: i64,
        status: &str,
        end: AttemptEnd,
    ) -> Result<(), StoreError>;

    /// The newest `limit` messages, newest first.
    async fn recent(&self, limit: i64) -> Result<Vec<OutboxRow>, StoreError>;

    /// Every attempt of a message: (attempt, at, status), in order.
    async fn attempts(
        &self,
        receiver: &str,
        msg_id: &str,
    ) -> Result<Vec<(u32, i64, String)>, StoreError>;

    /// The global log seq the notifier has handled every event up to
    /// (0 before it ran).
    async fn notify_cursor(&self) -> Result<i64, StoreError>;

    /// Moves that cursor to `seq`, never back.
    async fn advance_notify_cursor(&self, seq: i64) -> Result<(), StoreError>;

    /// Drops messages done (delivered or given up) before `before_ms`, and
    /// their attempts; answers how many.
    async fn drop_done_before(&self, before_ms: i64) -> Result<u64, StoreError>;
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
    for<'r> Option<String>: Decode<'r, DB>,
    &'static str: ColumnIndex<DB::Row>,
{
    pub(crate) async fn enqueue_sql(
        &self,
        messages: &[OutboxMessage],
    ) -> Result<usize, StoreError> {
        let mut new = 0;
        for m in messages {
            let done = sqlx::query(
                "INSERT INTO notify_outbox (receiver, msg_id, event, notice, created_at_ms, next_at_ms, attempts, state)
                 VALUES ($1, $2, $3, $4, $5, $5, 0, 'pending')
                 ON CONFLICT (receiver, msg_id) DO NOTHING RETURNING msg_id",
            )
            .bind(m.receiver.as_str())
            .bind(m.msg_id.as_str())
            .bind(m.event.as_str())
            .bind(m.notice.as_str())
            .bind(m.created_at_ms)
            .fetch_optional(self.pool())
            .await?;
            new += usize::from(done.is_some());
        }
        Ok(new)
    }

    pub(crate) async fn claim_due_sql(
        &self,
        now_ms: i64,
        hold_ms: i64,
        limit: i64,
    ) -> Result<Vec<OutboxMessage>, StoreError> {
        let due = sqlx::query(
            "SELECT receiver, msg_id, event, notice, created_at_ms, attempts, next_at_ms FROM notify_outbox
             WHERE state = 'pending' AND next_at_ms <= $1 ORDER BY next_at_ms LIMIT $2",
        )
        .bind(now_ms)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        let mut claimed = Vec::with_capacity(due.len());
        for row in &due {
            let message = message_of(row)?;
            let was: i64 = sqlx::Row::try_get(row, "next_at_ms")?;
            // Compare-and-set on the due time: of two processes reading the
            // same row, one moves it and the other changes nothing.
            let moved = sqlx::query(
                "UPDATE notify_outbox SET next_at_ms = $1
                 WHERE receiver = $2 AND msg_id = $3 AND state = 'pending' AND next_at_ms = $4
                 RETURNING msg_id",
            )
            .bind(now_ms + hold_ms)
            .bind(message.receiver.as_str())
            .bind(message.msg_id.as_str())
            .bind(was)
            .fetch_optional(self.pool())
            .await?;
            if moved.is_some() {
                claimed.push(message);
            }
        }
        Ok(claimed)
    }

    pub(crate) async fn record_attempt_sql(
        &self,
        m: &OutboxMessage,
        attempt: u32,
        at_ms: i64,
        status: &str,
        end: AttemptEnd,
    ) -> Result<(), StoreError> {
        let (state, next) = match end {
            AttemptEnd::Delivered => (OutboxState::Delivered, at_ms),
            AttemptEnd::RetryAt(t) => (OutboxState::Pending, t),
            AttemptEnd::GiveUp => (OutboxState::GivenUp, at_ms),
        };
        let mut tx = self.pool().begin().await?;
        sqlx::query(
            "INSERT INTO notify_attempts (receiver, msg_id, attempt, at_ms, status) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (receiver, msg_id, attempt) DO NOTHING",
        )
        .bind(m.receiver.as_str())
        .bind(m.msg_id.as_str())
        .bind(i64::from(attempt))
        .bind(at_ms)
        .bind(status)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE notify_outbox SET attempts = $1, state = $2, next_at_ms = $3, last_status = $4
             WHERE receiver = $5 AND msg_id = $6 AND state = 'pending'",
        )
        .bind(i64::from(attempt))
        .bind(state.as_str())
        .bind(next)
        .bind(status)
        .bind(m.receiver.as_str())
        .bind(m.msg_id.as_str())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(crate) async fn recent_sql(&self, limit: i64) -> Result<Vec<OutboxRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT receiver, msg_id, event, notice, created_at_ms, attempts, state, next_at_ms, last_status
             FROM notify_outbox ORDER BY created_at_ms DESC, msg_id LIMIT $1",
        )
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|row| {
                let state: String = sqlx::Row::try_get(row, "state")?;
                Ok(OutboxRow {
                    message: message_of(row)?,
                    state: OutboxState::parse(&state),
                    next_at_ms: sqlx::Row::try_get(row, "next_at_ms")?,
                    last_status: sqlx::Row::try_get(row, "last_status")?,
                })
            })
            .collect()
    }

    pub(crate) async fn attempts_sql(
        &self,
        receiver: &str,
        msg_id: &str,
    ) -> Result<Vec<(u32, i64, String)>, StoreError> {
        let rows = sqlx::query(
            "SELECT attempt, at_ms, status FROM notify_attempts
             WHERE receiver = $1 AND msg_id = $2 ORDER BY attempt",
        )
        .bind(receiver)
        .bind(msg_id)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|row| {
                let attempt: i64 = sqlx::Row::try_get(row, "attempt")?;
                Ok((
                    u32::try_from(attempt).unwrap_or(u32::MAX),
                    sqlx::Row::try_get(row, "at_ms")?,
                    sqlx::Row::try_get(row, "status")?,
                ))
            })
            .collect()
    }

    pub(crate) async fn notify_cursor_sql(&self) -> Result<i64, StoreError> {
        let row = sqlx::query("SELECT seq FROM notify_cursor WHERE name = 'notify'")
            .fetch_optional(self.pool())
            .await?;
        Ok(match row {
            Some(row) => sqlx::Row::try_get(&row, "seq")?,
            None => 0,
        })
    }

    pub(crate) async fn advance_notify_cursor_sql(&self, seq: i64) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO notify_cursor (name, seq) VALUES ('notify', $1)
             ON CONFLICT (name) DO UPDATE SET seq = excluded.seq WHERE notify_cursor.seq < excluded.seq",
        )
        .bind(seq)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    pub(crate) async fn drop_done_before_sql(&self, before_ms: i64) -> Result<u64, StoreError> {
        let mut tx = self.pool().begin().await?;
        sqlx::query(
            "DELETE FROM notify_attempts WHERE EXISTS (SELECT 1 FROM notify_outbox o
             WHERE o.receiver = notify_attempts.receiver AND o.msg_id = notify_attempts.msg_id
             AND o.state <> 'pending' AND o.next_at_ms < $1)",
        )
        .bind(before_ms)
        .execute(&mut *tx)
        .await?;
        let gone = sqlx::query(
            "DELETE FROM notify_outbox WHERE state <> 'pending' AND next_at_ms < $1 RETURNING msg_id",
        )
        .bind(before_ms)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(gone.len() as u64)
    }
}

/// A message from its row.
fn message_of<R: sqlx::Row>(row: &R) -> Result<OutboxMessage, StoreError>
where
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    &'static str: ColumnIndex<R>,
{
    let attempts: i64 = row.try_get("attempts")?;
    Ok(OutboxMessage {
        receiver: row.try_get("receiver")?,
        msg_id: row.try_get("msg_id")?,
        event: row.try_get("event")?,
        notice: row.try_get("notice")?,
        created_at_ms: row.try_get("created_at_ms")?,
        attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
    })
}

/// The [`Outbox`] impl of a backend's `SqlCredentials` (the same pool as
/// its log): every method runs the SQL written once above.
macro_rules! forward_outbox {
    ($db:ty) => {
        #[async_trait::async_trait]
        impl $crate::Outbox for $crate::credentials::SqlCredentials<$db> {
            async fn enqueue(
                &self,
                messages: &[$crate::OutboxMessage],
            ) -> Result<usize, $crate::StoreError> {
                self.enqueue_sql(messages).await
            }

            async fn claim_due(
                &self,
                now_ms: i64,
                hold_ms: i64,
                limit: i64,
            ) -> Result<Vec<$crate::OutboxMessage>, $crate::StoreError> {
                self.claim_due_sql(now_ms, hold_ms, limit).await
            }

            async fn record_attempt(
                &self,
                message: &$crate::OutboxMessage,
                attempt: u32,
                at_ms: i64,
                status: &str,
                end: $crate::AttemptEnd,
            ) -> Result<(), $crate::StoreError> {
                self.record_attempt_sql(message, attempt, at_ms, status, end)
                    .await
            }

            async fn recent(
                &self,
                limit: i64,
            ) -> Result<Vec<$crate::OutboxRow>, $crate::StoreError> {
                self.recent_sql(limit).await
            }

            async fn attempts(
                &self,
                receiver: &str,
                msg_id: &str,
            ) -> Result<Vec<(u32, i64, String)>, $crate::StoreError> {
                self.attempts_sql(receiver, msg_id).await
            }

            async fn notify_cursor(&self) -> Result<i64, $crate::StoreError> {
                self.notify_cursor_sql().await
            }

            async fn advance_notify_cursor(&self, seq: i64) -> Result<(), $crate::StoreError> {
                self.advance_notify_cursor_sql(seq).await
            }

            async fn drop_done_before(&self, before_ms: i64) -> Result<u64, $crate::StoreError> {
                self.drop_done_before_sql(before_ms).await
            }
        }
    };
}
pub(crate) use forward_outbox;
