//! The SQLite committer: appends from every task of this process, written
//! in batches (group commit) on one connection of its own, each batch one
//! transaction, with the log mark each append may answer. Apart from the
//! store because this is where the compare-and-set and the durable write
//! happen, and it is the one intricate part.

use std::sync::Arc;

use sqlx::Connection;
use sqlx::pool::PoolConnection;
use sqlx::sqlite::{SqliteConnection, SqlitePool};

use crate::events::group_commit::{
    Waiting, answer_batch, fail_batch, is_taken_key_seq, run_committer, torn_append,
};
use crate::wal_mark::WalMark;
use crate::{LogMark, StoreError};

/// One `append_events` call waiting for the committer.
#[derive(Debug)]
pub(super) struct Append {
    pub(super) key_id: String,
    pub(super) expected: i64,
    /// The events, in order.
    pub(super) rows: Vec<Row>,
    /// The log mark right after the commit, when it is known to follow
    /// from this batch's commit alone (see [`commit_batch`]).
    pub(super) mark: Option<LogMark>,
    pub(super) reply: tokio::sync::oneshot::Sender<Result<(i64, Option<LogMark>), StoreError>>,
}

/// One event of an append, as its columns.
#[derive(Debug)]
pub(super) struct Row {
    pub(super) at_ms: i64,
    pub(super) kind: String,
    pub(super) body: String,
    pub(super) hash: Option<String>,
    pub(super) sig: Option<String>,
}

/// Commits appends as they come: takes the first waiting one plus every
/// other already queued (up to [`crate::events::group_commit::GROUP_COMMIT_MAX`]), writes each inside
/// its own savepoint — so a conflict or a bad event undoes that append
/// alone, with the same per-key compare-and-set as ever — commits once,
/// and only then answers each caller. Ends when the store is dropped.
///
/// The committer writes on a connection of its own, taken out of the
/// pool at its first batch (the pool opens another when its readers need
/// one, so no connection is added while the process is idle) and kept
/// (taken again after one fails). SQLite empties a connection's page cache
/// whenever another connection committed since its last transaction, so
/// appends taking turns on the pool's connections each began cold: every
/// append re-read the events table's and indexes' pages it walks (seven
/// 4 KiB reads, `strace`). One writer keeps them: its own commits leave
/// its cache valid.
pub(super) async fn committer(
    pool: SqlitePool,
    mark: Option<Arc<WalMark>>,
    jobs: tokio::sync::mpsc::UnboundedReceiver<Append>,
) {
    let pool = &pool;
    let connect = move || async move { pool.acquire().await.map(PoolConnection::detach) };
    let mark = mark.as_deref();
    let commit = move |conn, batch| commit_batch(conn, mark, batch);
    run_committer(jobs, connect, commit).await;
}

/// Writes one batch and answers its callers, each with the log mark after
/// the commit when the WAL index's change counter moved by exactly one
/// between a read before the batch and one after its commit: one commit
/// happened in that window, and it was this batch's, so every key the
/// batch appended to is complete up to that mark. Anything else (another
/// process committed too, the log was restarted) is no mark, and the
/// key's next read asks the database. Gives the connection back unless
/// the transaction failed (then the next batch opens a fresh one).
async fn commit_batch(
    mut conn: SqliteConnection,
    wal: Option<&WalMark>,
    mut batch: Vec<Append>,
) -> Option<SqliteConnection> {
    let before = wal.and_then(WalMark::read);
    let committed = write_batch(&mut conn, &batch).await;
    let after = wal.and_then(WalMark::read);
    // Only a batch that wrote events made a commit of its own to count.
    let wrote = committed.as_ref().is_ok_and(|results| {
        results
            .iter()
            .zip(&batch)
            .any(|(result, job)| result.is_ok() && !job.rows.is_empty())
    });
    if let (true, Some(before), Some(after)) = (wrote, before, after)
        && after.follows(&before)
    {
        for job in &mut batch {
            job.mark = Some(after);
        }
    }
    match committed {
        Ok(results) => {
            answer_batch(batch, results);
            Some(conn)
        }
        Err(e) => {
            fail_batch(batch, &e);
            None
        }
    }
}

/// The batch's appends in one commit: each one's outcome, or the failure
/// of the whole transaction.
async fn write_batch(
    conn: &mut SqliteConnection,
    batch: &[Append],
) -> Result<Vec<Result<i64, StoreError>>, sqlx::Error> {
    // A lone append of one statement is its own transaction: SQLite takes
    // the write lock when the statement starts (a write statement begins a
    // write transaction), checks and inserts, and commits durably — one
    // round trip to the connection's thread instead of three.
    if let [job] = batch
        && job.rows.len() <= APPEND_CHUNK
    {
        let result = try_append(conn, job)
            .await
            .map_err(StoreError::from)
            .and_then(|outcome| outcome.map_err(|found| job.conflict(found)));
        return Ok(vec![result]);
    }
    // BEGIN IMMEDIATE takes the write lock before the checks, so no other
    // process can append between a check and its inserts; the UNIQUE
    // constraint stays the final guard.
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
    let mut results = Vec::with_capacity(batch.len());
    for job in batch {
        results.push(append_in(&mut tx, job).await);
    }
    tx.commit().await?;
    Ok(results)
}

impl Waiting for Append {
    fn at(&self) -> (&str, i64) {
        (&self.key_id, self.expected)
    }
    fn events(&self) -> usize {
        self.rows.len()
    }
    fn answer(self, result: Result<i64, StoreError>) {
        let _ = self.reply.send(result.map(|last| (last, self.mark)));
    }
}

/// Appends to several keys in one transaction on a connection of the
/// pool, all or nothing ([`crate::EventLog::append_together`]): `BEGIN
/// IMMEDIATE` takes the write lock before the checks, each part is the
/// guarded insert every append is, and a part whose log moved rolls back
/// every part. Beside the committer, not through it: the committer's
/// batches answer each append on its own; SQLite orders the two writers.
pub(super) async fn append_together(
    pool: &SqlitePool,
    parts: &[(&str, i64, Vec<Row>)],
) -> Result<Vec<i64>, StoreError> {
    let mut conn = pool.acquire().await?;
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
    let mut lasts = Vec::with_capacity(parts.len());
    for (key_id, expected, rows) in parts {
        match try_append_rows(&mut tx, key_id, *expected, rows).await {
            Ok(Ok(last)) => lasts.push(last),
            Ok(Err(found)) => {
                tx.rollback().await?;
                return Err(StoreError::Conflict {
                    key_id: (*key_id).to_owned(),
                    expected: *expected,
                    found,
                });
            }
            Err(e) => {
                tx.rollback().await?;
                return Err(e.into());
            }
        }
    }
    tx.commit().await?;
    Ok(lasts)
}

/// Events written by one guarded statement: 5 bound values each, far
/// below SQLite's limit of 32,766 bound values per statement. An append
/// this long is rare (a plan holds at most 1,000 steps).
const APPEND_CHUNK: usize = 1000;

/// One append inside the batch's transaction. Each statement is atomic on
/// its own (a failing statement is backed out, the transaction goes on),
/// so an append of one statement needs nothing more; a longer one is
/// written in a savepoint so that it lands whole or not at all.
async fn append_in(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    job: &Append,
) -> Result<i64, StoreError> {
    let long = job.rows.len() > APPEND_CHUNK;
    if long {
        sqlx::query("SAVEPOINT append").execute(&mut **tx).await?;
    }
    let outcome = try_append(tx, job).await;
    if long {
        if !matches!(outcome, Ok(Ok(_))) {
            sqlx::query("ROLLBACK TO append").execute(&mut **tx).await?;
        }
        sqlx::query("RELEASE append").execute(&mut **tx).await?;
    }
    match outcome {
        Ok(Ok(last)) => Ok(last),
        Ok(Err(found)) => Err(job.conflict(found)),
        Err(e) => Err(e.into()),
    }
}

/// The compare-and-set and the inserts of one append: `Ok(Err(found))`
/// when the key's log is not at the expected seq. Each chunk of events is
/// one `INSERT … SELECT … WHERE` whose condition is the check itself — the
/// key's last `key_seq` is the one expected — so the check and the insert
/// cannot be separated, and a conflict inserts nothing. (SQLite evaluates
/// the SELECT in full before inserting, as it reads the table written.)
async fn try_append(
    conn: &mut sqlx::SqliteConnection,
    job: &Append,
) -> Result<Result<i64, i64>, sqlx::Error> {
    try_append_rows(conn, &job.key_id, job.expected, &job.rows).await
}

/// [`try_append`] of `rows` to `key_id` after `expected`.
async fn try_append_rows(
    conn: &mut sqlx::SqliteConnection,
    key_id: &str,
    expected: i64,
    rows: &[Row],
) -> Result<Result<i64, i64>, sqlx::Error> {
    if rows.is_empty() {
        // Nothing to write: the check alone.
        let found = last_key_seq_in(&mut *conn, key_id).await?;
        return Ok(if found == expected {
            Ok(found)
        } else {
            Err(found)
        });
    }
    let mut last = expected;
    for chunk in rows.chunks(APPEND_CHUNK) {
        let mut sql = String::from(
            "INSERT INTO events (key_id, key_seq, at_ms, type, body, hash, sig) \
             SELECT column1, column2, column3, column4, column5, column6, column7 FROM (VALUES ",
        );
        for i in 0..chunk.len() {
            if i > 0 {
                sql.push_str(", ");
            }
            let p = 3 + 5 * i;
            sql.push_str(&format!(
                "(?1, ?2 + {}, ?{p}, ?{}, ?{}, ?{}, ?{})",
                i + 1,
                p + 1,
                p + 2,
                p + 3,
                p + 4
            ));
        }
        sql.push_str(
            ") WHERE (SELECT COALESCE(MAX(key_seq), 0) FROM events WHERE key_id = ?1) = ?2",
        );
        // Built from fixed text and numbers only; every value is bound.
        // Each length is its own statement: the usual ones (one to a few
        // events) stay prepared, a long one is prepared for this use only
        // rather than filling every connection's statement cache.
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql))
            .persistent(chunk.len() <= 4)
            .bind(key_id)
            .bind(last);
        for row in chunk {
            query = query
                .bind(row.at_ms)
                .bind(&row.kind)
                .bind(&row.body)
                .bind(&row.hash)
                .bind(&row.sig);
        }
        match query.execute(&mut *conn).await {
            Ok(done) if done.rows_affected() == chunk.len() as u64 => last += chunk.len() as i64,
            Ok(done) if done.rows_affected() == 0 => {
                return Ok(Err(last_key_seq_in(&mut *conn, key_id).await?));
            }
            // One statement inserts all or nothing.
            Ok(done) => {
                return Err(torn_append(chunk.len(), done.rows_affected()));
            }
            Err(e) if is_taken_key_seq(&e) => {
                return Ok(Err(last_key_seq_in(&mut *conn, key_id).await?));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Ok(last))
}

/// The last key_seq of `key_id`, 0 if none, read through any executor (the
/// pool, or the connection of an open transaction).
async fn last_key_seq_in<'e, E>(executor: E, key_id: &str) -> Result<i64, sqlx::Error>
where
    E: sqlx::SqliteExecutor<'e>,
{
    sqlx::query_scalar(super::EVENT_SQL.last_key_seq)
        .bind(key_id)
        .fetch_one(executor)
        .await
}

#[cfg(test)]
mod tests {
    use plangate_core::Scope;

    use super::*;
    use crate::sqlite::SqliteStore;
    use crate::sqlite::tests::one_event;
    use crate::{Credentials, EventLog, NewEvent};

    /// Pages one connection has had to read into its cache so far
    /// (SQLite's `SQLITE_DBSTATUS_CACHE_MISS`).
    #[expect(
        unsafe_code,
        reason = "sqlite3_db_status is a C call; a test's, reading a counter"
    )]
    async fn cache_misses(conn: &mut SqliteConnection) -> i32 {
        let mut handle = conn.lock_handle().await.expect("handle");
        let (mut now, mut highest) = (0, 0);
        // SAFETY: the handle is locked for the call, and both pointers are
        // to live integers.
        let rc = unsafe {
            libsqlite3_sys::sqlite3_db_status(
                handle.as_raw_handle().as_ptr(),
                libsqlite3_sys::SQLITE_DBSTATUS_CACHE_MISS,
                &mut now,
                &mut highest,
                0,
            )
        };
        assert_eq!(rc, libsqlite3_sys::SQLITE_OK);
        now
    }

    fn one_append(key_id: &str, expected: i64) -> Append {
        let (reply, _answer) = tokio::sync::oneshot::channel();
        Append {
            key_id: key_id.to_owned(),
            expected,
            rows: vec![Row {
                at_ms: expected,
                kind: "mode_set".to_owned(),
                body: r#"{"mode":"plan"}"#.to_owned(),
                hash: None,
                sig: None,
            }],
            mark: None,
            reply,
        }
    }

    #[tokio::test]
    async fn the_committer_keeps_its_connection_whose_appends_read_no_pages() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = SqliteStore::open(&tmp.path().join("plangate.db"))
            .await
            .expect("open");
        let key = store.create_key("k", Scope::Write).await.expect("key").key;
        // A log several pages deep, as a store in use has.
        let event = NewEvent {
            at_ms: 1,
            kind: "mode_set".to_owned(),
            body: serde_json::json!({"mode": "plan", "padding": "x".repeat(200)}),
            seal: None,
        };
        for seq in 0..300 {
            store
                .append_events(&key.id, seq, std::slice::from_ref(&event))
                .await
                .expect("append");
        }
        let conn = store.pool.acquire().await.expect("acquire").detach();
        let mut conn = commit_batch(conn, None, vec![one_append(&key.id, 300)])
            .await
            .expect("a batch that committed gives its connection back");
        let warm = cache_misses(&mut conn).await;
        let mut conn = commit_batch(conn, None, vec![one_append(&key.id, 301)])
            .await
            .expect("kept");
        assert_eq!(
            cache_misses(&mut conn).await,
            warm,
            "an append on the connection that made the last commit reads no page"
        );
        // What the pool's connections met when appends took turns on them:
        // a commit by another connection empties this one's cache.
        store
            .create_key("other", Scope::Read)
            .await
            .expect("a write through the pool");
        let mut conn = commit_batch(conn, None, vec![one_append(&key.id, 302)])
            .await
            .expect("kept");
        assert!(
            cache_misses(&mut conn).await > warm,
            "after another connection's commit the pages are read again"
        );
        let events = store.load_events(&key.id, 0).await.expect("load");
        assert_eq!(events.len(), 303);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_append_answers_the_mark_after_it_only_when_its_commit_was_the_only_one() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("plangate.db");
        let a = Arc::new(SqliteStore::open(&path).await.expect("open a"));
        let b = Arc::new(SqliteStore::open(&path).await.expect("open b"));

        // Alone: the mark after the append is the store's mark now.
        let (last, mark) = a
            .append_events_marked("key_a", 0, &one_event())
            .await
            .expect("append");
        assert_eq!(last, 1);
        assert_eq!(mark, a.log_mark(), "nobody else committed");
        assert!(mark.is_some());

        // Two "processes" appending at once: a mark names one commit, so no
        // two appends may ever answer the same one.
        let run = |store: Arc<SqliteStore>, key: &'static str, from: i64| {
            tokio::spawn(async move {
                let mut marks = Vec::new();
                for seq in from..from + 150 {
                    let (_, mark) = store
                        .append_events_marked(key, seq, &one_event())
                        .await
                        .expect("append");
                    marks.extend(mark);
                }
                marks
            })
        };
        let (x, y) = tokio::join!(run(a.clone(), "key_a", 1), run(b.clone(), "key_b", 0));
        let mut marks = x.expect("a's appends");
        marks.extend(y.expect("b's appends"));
        let given = marks.len();
        assert!(given > 0, "no append could tell its commit was alone");
        marks.sort();
        marks.dedup();
        assert_eq!(marks.len(), given, "two appends answered the same mark");
        // An empty append commits nothing and so answers no mark.
        let (_, mark) = b
            .append_events_marked("key_b", 150, &[])
            .await
            .expect("check");
        assert_eq!(mark, None);
    }
}
