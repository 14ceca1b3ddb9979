//! Group commit, the part both backends' committers share: each store
//! sends its appends to one committer task, which takes every append
//! waiting at that moment and commits them in one transaction, then
//! answers each caller with its own outcome. Apart from the log's types
//! because only the committers use it.

use sqlx::error::ErrorKind;

use crate::StoreError;

/// At most this many appends share one transaction.
pub(crate) const GROUP_COMMIT_MAX: usize = 64;

/// The loop of a backend's committer task: takes each batch
/// ([`next_batch`]) and hands it to `commit` with a connection — the one
/// the last batch gave back, or a new one from `connect` — and `commit`
/// answers the batch's callers and gives the connection back unless it
/// failed (then the next batch connects anew). A batch that gets no
/// connection is failed with the reason. Ends when the store is dropped.
pub(crate) async fn run_committer<A, C, Connecting, Committing>(
    mut jobs: tokio::sync::mpsc::UnboundedReceiver<A>,
    mut connect: impl FnMut() -> Connecting,
    mut commit: impl FnMut(C, Vec<A>) -> Committing,
) where
    A: Waiting,
    Connecting: Future<Output = Result<C, sqlx::Error>>,
    Committing: Future<Output = Option<C>>,
{
    let mut conn: Option<C> = None;
    while let Some(batch) = next_batch(&mut jobs).await {
        let live = match conn.take() {
            Some(live) => live,
            None => match connect().await {
                Ok(live) => live,
                Err(e) => {
                    fail_batch(batch, &e);
                    continue;
                }
            },
        };
        conn = commit(live, batch).await;
    }
}

/// The next batch for a backend's committer task: waits for one append,
/// then takes every other already queued (up to [`GROUP_COMMIT_MAX`]).
/// `None` once the store is dropped.
async fn next_batch<T>(jobs: &mut tokio::sync::mpsc::UnboundedReceiver<T>) -> Option<Vec<T>> {
    let first = jobs.recv().await?;
    let mut batch = vec![first];
    while batch.len() < GROUP_COMMIT_MAX {
        match jobs.try_recv() {
            Ok(job) => batch.push(job),
            Err(_) => break,
        }
    }
    Some(batch)
}

/// One append waiting for its backend's committer.
pub(crate) trait Waiting {
    /// The key appended to, and its last key_seq the caller expects.
    fn at(&self) -> (&str, i64);
    /// How many events the append holds.
    fn events(&self) -> usize;
    /// Hands the caller its outcome.
    fn answer(self, result: Result<i64, StoreError>);

    /// The answer when the key's log ends at `found`, not where the caller
    /// expected: another writer appended first.
    fn conflict(&self, found: i64) -> StoreError {
        StoreError::Conflict {
            key_id: self.at().0.to_owned(),
            expected: self.at().1,
            found,
        }
    }
}

/// Answers each caller of a committed batch with its own outcome.
pub(crate) fn answer_batch<A: Waiting>(batch: Vec<A>, results: Vec<Result<i64, StoreError>>) {
    for (job, result) in batch.into_iter().zip(results) {
        if let Ok(last) = &result {
            tracing::debug!(
                key_id = job.at().0,
                last_key_seq = last,
                appended = job.events(),
                "appended events"
            );
        }
        job.answer(result);
    }
}

/// Answers every caller of a batch that was not committed with `e`.
pub(crate) fn fail_batch<A: Waiting>(batch: Vec<A>, e: &sqlx::Error) {
    for job in batch {
        job.answer(Err(batch_failed(e)));
    }
}

/// The same failure for every append of a batch (an `sqlx::Error` cannot
/// be cloned, so each gets its own copy of the message).
pub(crate) fn batch_failed(e: &sqlx::Error) -> StoreError {
    StoreError::Database(sqlx::Error::Protocol(format!(
        "the transaction holding this append failed: {e}"
    )))
}

/// What an append answers when the committer task is gone.
pub(crate) fn committer_stopped() -> StoreError {
    StoreError::Database(sqlx::Error::Protocol(
        "the store's committer has stopped (the store is shutting down)".to_owned(),
    ))
}

/// What a guarded statement that inserted some of an append's `count`
/// events but not all (`inserted`) is answered with: one statement inserts
/// all or nothing, so this is never the statement's doing.
pub(crate) fn torn_append(count: impl std::fmt::Display, inserted: u64) -> sqlx::Error {
    sqlx::Error::Protocol(format!("an append of {count} events inserted {inserted}"))
}

/// Whether an insert broke the UNIQUE (key_id, key_seq) constraint, or the
/// schema's rule that a key_seq follows the key's last one: another writer
/// took that key_seq. Both schemas raise the same message for the rule.
pub(crate) fn is_taken_key_seq(e: &sqlx::Error) -> bool {
    e.as_database_error().is_some_and(|db| {
        db.kind() == ErrorKind::UniqueViolation || db.message().contains("key_seq must follow")
    })
}
