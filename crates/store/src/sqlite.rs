//! The embedded SQLite backend.
//!
//! Several plangate processes may open the same file at once (every stdio
//! client window starts its own), so the database runs in WAL mode with a
//! busy timeout, migrations and event appends take the write lock (`BEGIN
//! IMMEDIATE`) before looking at what they depend on, and no query result
//! is cached in memory. With one writer at a time, `events.seq` is assigned
//! in commit order, which is what lets a follower page by seq.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use plangate_core::Scope;
use sqlx::Connection;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use crate::credentials::SqlCredentials;
use crate::events::{
    Waiting, answer_batch, body_text, committer_stopped, event_columns, event_from_row, fail_batch,
    is_taken_key_seq, next_batch,
};
use crate::private_fs::create_new_private_file;
use crate::schema::{Migration, pending};
use crate::wal_mark::WalMark;
use crate::{
    ApiKey, CreatedKey, CreatedOperatorToken, KeyEpoch, LogMark, NewEvent, OperatorToken, Store,
    StoreError, StoredEvent, now_ms,
};
use crate::{Credentials, EventLog, Identity};

/// How long a statement waits for another process's lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The schema, as an ordered list of (version, SQL). A version is applied
/// once, in the same transaction that records it in `schema_migrations`;
/// entries are only ever appended, never edited.
const MIGRATIONS: &[Migration] = &[
    (
        1,
        "CREATE TABLE api_keys (
        seq            INTEGER PRIMARY KEY,
        id             TEXT    NOT NULL UNIQUE,
        name           TEXT    NOT NULL,
        scope          TEXT    NOT NULL CHECK (scope IN ('read', 'plan', 'write')),
        token_sha256   TEXT    NOT NULL UNIQUE,
        prefix         TEXT    NOT NULL,
        created_at_ms  INTEGER NOT NULL,
        revoked_at_ms  INTEGER
    );
    CREATE UNIQUE INDEX api_keys_active_name ON api_keys (name) WHERE revoked_at_ms IS NULL;",
    ),
    // The event log. `seq` is AUTOINCREMENT so a seq is never reused, and
    // the triggers make the table append-only and gap-free per key even for
    // a writer that bypasses this code.
    (
        2,
        "CREATE TABLE events (
        seq      INTEGER PRIMARY KEY AUTOINCREMENT,
        key_id   TEXT    NOT NULL,
        key_seq  INTEGER NOT NULL CHECK (key_seq >= 1),
        at_ms    INTEGER NOT NULL,
        type     TEXT    NOT NULL CHECK (type <> ''),
        body     TEXT    NOT NULL CHECK (json_valid(body)),
        UNIQUE (key_id, key_seq)
    );
    CREATE INDEX events_at_ms ON events (at_ms);
    CREATE TRIGGER events_no_update BEFORE UPDATE ON events
    BEGIN SELECT RAISE(ABORT, 'events are append-only: rows cannot be updated'); END;
    CREATE TRIGGER events_no_delete BEFORE DELETE ON events
    BEGIN SELECT RAISE(ABORT, 'events are append-only: rows cannot be deleted'); END;
    CREATE TRIGGER events_key_seq_follows BEFORE INSERT ON events
    WHEN NEW.key_seq <> COALESCE((SELECT MAX(key_seq) FROM events WHERE key_id = NEW.key_id), 0) + 1
    BEGIN SELECT RAISE(ABORT, 'events key_seq must follow the key''s last one'); END;",
    ),
    // Operator tokens: the web console's credential, kept apart from API
    // keys so neither can ever stand in for the other.
    (
        3,
        "CREATE TABLE operator_tokens (
        seq            INTEGER PRIMARY KEY,
        id             TEXT    NOT NULL UNIQUE,
        name           TEXT    NOT NULL,
        token_sha256   TEXT    NOT NULL UNIQUE,
        prefix         TEXT    NOT NULL,
        created_at_ms  INTEGER NOT NULL,
        revoked_at_ms  INTEGER
    );
    CREATE UNIQUE INDEX operator_tokens_active_name ON operator_tokens (name) WHERE revoked_at_ms IS NULL;",
    ),
    // OAuth credentials plangate holds for upstreams behind OAuth
    // (`plangate upstream login`), sealed with the seal key: one row per
    // upstream, shared by every replica.
    (
        4,
        "CREATE TABLE upstream_credentials (
        name           TEXT    NOT NULL PRIMARY KEY,
        sealed         TEXT    NOT NULL,
        updated_at_ms  INTEGER NOT NULL
    );",
    ),
    // The event log rebuilt leaner: `seq` a plain INTEGER PRIMARY KEY (no
    // AUTOINCREMENT, so no `sqlite_sequence` row rewritten per append) and
    // no `at_ms` index — two pages fewer written and synced per append.
    // Rows are never deleted (the trigger), so `seq` still never repeats
    // and grows in commit order; `audit export --since` reads the log in
    // seq order and filters by time, which an export can afford. The
    // copy keeps every row and seq; dropping the old table (with its
    // triggers and indexes) fires no trigger — SQLite's implicit delete of
    // DROP TABLE does not.
    (
        5,
        "ALTER TABLE events RENAME TO events_v4;
    CREATE TABLE events (
        seq      INTEGER PRIMARY KEY,
        key_id   TEXT    NOT NULL,
        key_seq  INTEGER NOT NULL CHECK (key_seq >= 1),
        at_ms    INTEGER NOT NULL,
        type     TEXT    NOT NULL CHECK (type <> ''),
        body     TEXT    NOT NULL CHECK (json_valid(body)),
        UNIQUE (key_id, key_seq)
    );
    INSERT INTO events (seq, key_id, key_seq, at_ms, type, body)
        SELECT seq, key_id, key_seq, at_ms, type, body FROM events_v4 ORDER BY seq;
    DROP TABLE events_v4;
    DELETE FROM sqlite_sequence WHERE name IN ('events', 'events_v4');
    CREATE TRIGGER events_no_update BEFORE UPDATE ON events
    BEGIN SELECT RAISE(ABORT, 'events are append-only: rows cannot be updated'); END;
    CREATE TRIGGER events_no_delete BEFORE DELETE ON events
    BEGIN SELECT RAISE(ABORT, 'events are append-only: rows cannot be deleted'); END;
    CREATE TRIGGER events_key_seq_follows BEFORE INSERT ON events
    WHEN NEW.key_seq <> COALESCE((SELECT MAX(key_seq) FROM events WHERE key_id = NEW.key_id), 0) + 1
    BEGIN SELECT RAISE(ABORT, 'events key_seq must follow the key''s last one'); END;",
    ),
    // Web console sessions ended by a logout, by the SHA-256 of their
    // nonce, each kept until the session would have expired anyway.
    (
        6,
        "CREATE TABLE console_sessions_ended (
        session_sha256  TEXT    NOT NULL PRIMARY KEY,
        expires_at_ms   INTEGER NOT NULL
    );",
    ),
];

/// Opens (creating if needed) the SQLite database at `path` and brings its
/// schema up to date. The parent directory must exist; a new file is
/// created owner-only (0600) before SQLite touches it, and its WAL and
/// shared-memory files inherit that mode.
pub async fn open_sqlite(path: &Path) -> Result<Arc<dyn Store>, StoreError> {
    Ok(Arc::new(SqliteStore::open(path).await?))
}

/// The SQLite implementation of [`Store`].
#[derive(Debug, Clone)]
pub(crate) struct SqliteStore {
    pool: SqlitePool,
    /// Keys and operator tokens, in SQL shared with PostgreSQL.
    credentials: SqlCredentials<sqlx::Sqlite>,
    /// `<database>-keys`: replaced with fresh random contents on every
    /// revocation, so every process on the file sees it with one read.
    epoch_file: PathBuf,
    /// Appends go to one committer task ([`committer`]), which writes
    /// every append waiting at that moment in one transaction — one fsync
    /// for many keys' events (group commit) — instead of each waiting in
    /// SQLite's busy handler, which polls with growing sleeps. (Other
    /// processes on the file still meet the busy handler.)
    appends: tokio::sync::mpsc::UnboundedSender<Append>,
    /// The WAL index's change mark ([`crate::wal_mark`]).
    mark: Option<Arc<WalMark>>,
}

/// One `append_events` call waiting for the committer.
#[derive(Debug)]
struct Append {
    key_id: String,
    expected: i64,
    /// `(at_ms, type, body)` per event, in order.
    rows: Vec<(i64, String, String)>,
    /// The log mark right after the commit, when it is known to follow
    /// from this batch's commit alone (see [`commit_batch`]).
    mark: Option<LogMark>,
    reply: tokio::sync::oneshot::Sender<Result<(i64, Option<LogMark>), StoreError>>,
}

/// Commits appends as they come: takes the first waiting one plus every
/// other already queued (up to [`crate::events::GROUP_COMMIT_MAX`]), writes each inside
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
async fn committer(
    pool: SqlitePool,
    mark: Option<Arc<WalMark>>,
    mut jobs: tokio::sync::mpsc::UnboundedReceiver<Append>,
) {
    let mut conn: Option<SqliteConnection> = None;
    while let Some(batch) = next_batch(&mut jobs).await {
        let live = match conn.take() {
            Some(live) => live,
            None => match pool.acquire().await {
                Ok(pooled) => pooled.detach(),
                Err(e) => {
                    fail_batch(batch, &e);
                    continue;
                }
            },
        };
        conn = commit_batch(live, mark.as_deref(), batch).await;
    }
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
            .and_then(|outcome| outcome.map_err(|found| conflict(job, found)));
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
    fn key_id(&self) -> &str {
        &self.key_id
    }
    fn events(&self) -> usize {
        self.rows.len()
    }
    fn answer(self, result: Result<i64, StoreError>) {
        let _ = self.reply.send(result.map(|last| (last, self.mark)));
    }
}

fn conflict(job: &Append, found: i64) -> StoreError {
    StoreError::Conflict {
        key_id: job.key_id.clone(),
        expected: job.expected,
        found,
    }
}

/// Events written by one guarded statement: 3 bound values each, far
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
        Ok(Err(found)) => Err(conflict(job, found)),
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
    if job.rows.is_empty() {
        // Nothing to write: the check alone.
        let found = last_key_seq_in(&mut *conn, &job.key_id).await?;
        return Ok(if found == job.expected {
            Ok(found)
        } else {
            Err(found)
        });
    }
    let mut last = job.expected;
    for chunk in job.rows.chunks(APPEND_CHUNK) {
        let mut sql = String::from(
            "INSERT INTO events (key_id, key_seq, at_ms, type, body) \
             SELECT column1, column2, column3, column4, column5 FROM (VALUES ",
        );
        for i in 0..chunk.len() {
            if i > 0 {
                sql.push_str(", ");
            }
            let p = 3 + 3 * i;
            sql.push_str(&format!(
                "(?1, ?2 + {}, ?{p}, ?{}, ?{})",
                i + 1,
                p + 1,
                p + 2
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
            .bind(&job.key_id)
            .bind(last);
        for (at_ms, kind, body) in chunk {
            query = query.bind(at_ms).bind(kind).bind(body);
        }
        match query.execute(&mut *conn).await {
            Ok(done) if done.rows_affected() == chunk.len() as u64 => last += chunk.len() as i64,
            Ok(done) if done.rows_affected() == 0 => {
                return Ok(Err(last_key_seq_in(&mut *conn, &job.key_id).await?));
            }
            // One statement inserts all or nothing.
            Ok(done) => {
                return Err(sqlx::Error::Protocol(format!(
                    "an append of {} events inserted {}",
                    chunk.len(),
                    done.rows_affected()
                )));
            }
            Err(e) if is_taken_key_seq(&e) => {
                return Ok(Err(last_key_seq_in(&mut *conn, &job.key_id).await?));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Ok(last))
}

impl SqliteStore {
    /// Marks that a key was revoked: the epoch file is replaced by one with
    /// fresh random contents, written aside under a fresh random name that
    /// must not exist yet (so a planted file or link there is never
    /// written through), owner-only, then renamed into place — a reader
    /// sees the old or the new contents, never a mix.
    fn bump_key_epoch(&self) {
        let written = crate::random::random_bytes::<16>().and_then(|bytes| {
            crate::private_fs::replace_private_file(&self.epoch_file, &bytes)
                .map_err(|e| StoreError::io(&self.epoch_file, e))
        });
        if let Err(e) = written {
            tracing::warn!(path = %self.epoch_file.display(), "cannot mark a key revocation: {e}");
        }
    }
}

impl SqliteStore {
    pub(crate) async fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        match create_new_private_file(path) {
            Ok(_) => tracing::info!(path = %path.display(), "created new database"),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(StoreError::io(path, e)),
        }

        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(false)
            .busy_timeout(BUSY_TIMEOUT)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            // 512 KiB of page cache per connection, not SQLite's 2 MB: with
            // eight connections the default grows to 16 MB as the store
            // does, a copy of pages the OS caches anyway. Reads of a key's
            // events touch a few index and table pages; a miss is a read
            // from the OS cache. Scale phase: memory per open plan 3.7 ->
            // 3.3 KB, `get_plan` at 10,000 keys no slower.
            .pragma("cache_size", "-512");
        // journal_mode is set once below, not per connection: switching
        // modes takes a lock the busy timeout does not wait for, and WAL is
        // a persistent property of the file anyway.
        // No ping before handing out a pooled connection (sqlx's default):
        // a SQLite connection cannot have been hung up on, and the ping is
        // a round trip to the connection's thread on every use.
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .test_before_acquire(false)
            .connect_with(options)
            .await?;

        enable_wal(&pool, path).await?;
        migrate(&pool).await?;
        let mark = Some(Arc::new(WalMark::new(path)));
        let mut epoch_file = path.as_os_str().to_owned();
        epoch_file.push("-keys");
        let (appends, jobs) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(committer(pool.clone(), mark.clone(), jobs));
        Ok(SqliteStore {
            credentials: SqlCredentials::new(pool.clone()),
            pool,
            epoch_file: PathBuf::from(epoch_file),
            appends,
            mark,
        })
    }
}

/// Switches the file to WAL, retrying while another process holds the lock
/// that the switch needs.
async fn enable_wal(pool: &SqlitePool, path: &Path) -> Result<(), StoreError> {
    let deadline = Instant::now() + BUSY_TIMEOUT;
    loop {
        match sqlx::query_scalar::<_, String>("PRAGMA journal_mode = WAL")
            .fetch_one(pool)
            .await
        {
            Ok(mode) if mode.eq_ignore_ascii_case("wal") => return Ok(()),
            Ok(mode) => {
                return Err(StoreError::WalUnavailable {
                    path: PathBuf::from(path),
                    mode,
                });
            }
            Err(e) if is_busy(&e) && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Whether SQLite answered SQLITE_BUSY or SQLITE_LOCKED (any extended code).
fn is_busy(e: &sqlx::Error) -> bool {
    let Some(db) = e.as_database_error() else {
        return false;
    };
    db.code()
        .and_then(|c| c.parse::<i32>().ok())
        .is_some_and(|code| matches!(code & 0xff, 5 | 6))
}

/// Applies every migration newer than the recorded version. `BEGIN
/// IMMEDIATE` takes the write lock first, so of two processes starting at
/// once one migrates and the other then sees the result.
async fn migrate(pool: &SqlitePool) -> Result<(), StoreError> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
            version        INTEGER PRIMARY KEY,
            applied_at_ms  INTEGER NOT NULL
        )",
    )
    .execute(&mut *tx)
    .await?;
    let current: i64 =
        sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) FROM schema_migrations")
            .fetch_one(&mut *tx)
            .await?;
    for (version, sql) in pending(current, MIGRATIONS)? {
        sqlx::raw_sql(*sql).execute(&mut *tx).await?;
        sqlx::query("INSERT INTO schema_migrations (version, applied_at_ms) VALUES (?, ?)")
            .bind(version)
            .bind(now_ms())
            .execute(&mut *tx)
            .await?;
        tracing::info!(version, "applied database migration");
    }
    tx.commit().await?;
    Ok(())
}

/// The last key_seq of `key_id`, 0 if none, read through any executor (the
/// pool, or the connection of an open transaction).
async fn last_key_seq_in<'e, E>(executor: E, key_id: &str) -> Result<i64, sqlx::Error>
where
    E: sqlx::SqliteExecutor<'e>,
{
    sqlx::query_scalar("SELECT COALESCE(MAX(key_seq), 0) FROM events WHERE key_id = ?")
        .bind(key_id)
        .fetch_one(executor)
        .await
}

// === impl Store for SqliteStore ===

#[async_trait]
impl Credentials for SqliteStore {
    async fn create_key(&self, name: &str, scope: Scope) -> Result<CreatedKey, StoreError> {
        self.credentials.create_key(name, scope).await
    }

    async fn ensure_identity(
        &self,
        identity: &Identity,
        scope: Scope,
    ) -> Result<ApiKey, StoreError> {
        self.credentials.ensure_identity(identity, scope).await
    }

    async fn list_keys(&self) -> Result<Vec<ApiKey>, StoreError> {
        self.credentials.list_keys().await
    }

    async fn upstream_credentials(&self, name: &str) -> Result<Option<String>, StoreError> {
        self.credentials.upstream_credentials(name).await
    }

    async fn save_upstream_credentials(&self, name: &str, sealed: &str) -> Result<(), StoreError> {
        self.credentials
            .save_upstream_credentials(name, sealed)
            .await
    }

    async fn clear_upstream_credentials(&self, name: &str) -> Result<(), StoreError> {
        self.credentials.clear_upstream_credentials(name).await
    }

    async fn revoke_key(&self, name_or_id: &str) -> Result<ApiKey, StoreError> {
        // The epoch moves before and after the change: a gateway that
        // re-filled its cache in between sees the second move.
        self.bump_key_epoch();
        let revoked = self.credentials.revoke_key(name_or_id).await;
        self.bump_key_epoch();
        revoked
    }

    fn key_epoch(&self) -> Option<KeyEpoch> {
        match std::fs::read(&self.epoch_file) {
            Ok(bytes) => <[u8; 16]>::try_from(bytes.as_slice()).ok().map(KeyEpoch),
            // No revocation yet: the file appears with the first one.
            Err(e) if e.kind() == io::ErrorKind::NotFound => Some(KeyEpoch([0; 16])),
            Err(_) => None,
        }
    }

    async fn authenticate(&self, token: &str) -> Result<Option<ApiKey>, StoreError> {
        self.credentials.authenticate(token).await
    }

    async fn find_key(&self, name_or_id: &str) -> Result<Option<ApiKey>, StoreError> {
        self.credentials.find_key(name_or_id).await
    }

    async fn create_operator_token(&self, name: &str) -> Result<CreatedOperatorToken, StoreError> {
        self.credentials.create_operator_token(name).await
    }

    async fn list_operator_tokens(&self) -> Result<Vec<OperatorToken>, StoreError> {
        self.credentials.list_operator_tokens().await
    }

    async fn revoke_operator_token(&self, name_or_id: &str) -> Result<OperatorToken, StoreError> {
        self.credentials.revoke_operator_token(name_or_id).await
    }

    async fn authenticate_operator(
        &self,
        token: &str,
    ) -> Result<Option<OperatorToken>, StoreError> {
        self.credentials.authenticate_operator(token).await
    }

    async fn operator_token(&self, id: &str) -> Result<Option<OperatorToken>, StoreError> {
        self.credentials.operator_token(id).await
    }

    async fn end_console_session(
        &self,
        session_sha256: &str,
        expires_at_ms: i64,
    ) -> Result<(), StoreError> {
        self.credentials
            .end_console_session(session_sha256, expires_at_ms)
            .await
    }

    async fn console_session_ended(&self, session_sha256: &str) -> Result<bool, StoreError> {
        self.credentials.console_session_ended(session_sha256).await
    }
}

#[async_trait]
impl EventLog for SqliteStore {
    async fn append_events(
        &self,
        key_id: &str,
        expected_key_seq: i64,
        events: &[NewEvent],
    ) -> Result<i64, StoreError> {
        Ok(self
            .append_events_marked(key_id, expected_key_seq, events)
            .await?
            .0)
    }

    async fn append_events_marked(
        &self,
        key_id: &str,
        expected_key_seq: i64,
        events: &[NewEvent],
    ) -> Result<(i64, Option<LogMark>), StoreError> {
        let rows = events
            .iter()
            .map(|e| body_text(e).map(|body| (e.at_ms, e.kind.clone(), body)))
            .collect::<Result<Vec<_>, _>>()?;
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.appends
            .send(Append {
                key_id: key_id.to_owned(),
                expected: expected_key_seq,
                rows,
                mark: None,
                reply,
            })
            .map_err(|_| committer_stopped())?;
        answer.await.map_err(|_| committer_stopped())?
    }

    async fn load_events(
        &self,
        key_id: &str,
        after_key_seq: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            event_columns!(),
            " FROM events WHERE key_id = ? AND key_seq > ? ORDER BY key_seq"
        ))
        .bind(key_id)
        .bind(after_key_seq)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(event_from_row).collect()
    }

    async fn last_key_seq(&self, key_id: &str) -> Result<i64, StoreError> {
        Ok(last_key_seq_in(&self.pool, key_id).await?)
    }

    async fn keys_with_events(&self) -> Result<Vec<String>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT DISTINCT key_id FROM events ORDER BY key_id")
                .fetch_all(&self.pool)
                .await?,
        )
    }

    async fn export_events(
        &self,
        key_id: Option<&str>,
        since_ms: Option<i64>,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        // One static statement per filter combination. With a key, the
        // key's UNIQUE index finds its rows; a time bound alone scans the
        // log in seq order (schema version 5 dropped the `at_ms` index to
        // make every append two pages cheaper; an export reads most of the
        // log anyway).
        let query = match (key_id, since_ms) {
            (None, None) => sqlx::query(concat!(
                "SELECT ",
                event_columns!(),
                " FROM events ORDER BY seq"
            )),
            (Some(key_id), None) => sqlx::query(concat!(
                "SELECT ",
                event_columns!(),
                " FROM events WHERE key_id = ? ORDER BY seq"
            ))
            .bind(key_id),
            (None, Some(since_ms)) => sqlx::query(concat!(
                "SELECT ",
                event_columns!(),
                " FROM events WHERE at_ms >= ? ORDER BY seq"
            ))
            .bind(since_ms),
            (Some(key_id), Some(since_ms)) => sqlx::query(concat!(
                "SELECT ",
                event_columns!(),
                " FROM events WHERE key_id = ? AND at_ms >= ? ORDER BY seq"
            ))
            .bind(key_id)
            .bind(since_ms),
        };
        let rows = query.fetch_all(&self.pool).await?;
        rows.iter().map(event_from_row).collect()
    }

    async fn events_since(
        &self,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        if limit <= 0 {
            // SQLite reads a negative LIMIT as "no limit"; the contract
            // says nothing.
            return Ok(Vec::new());
        }
        let rows = sqlx::query(concat!(
            "SELECT ",
            event_columns!(),
            " FROM events WHERE seq > ? ORDER BY seq LIMIT ?"
        ))
        .bind(after_seq)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(event_from_row).collect()
    }

    async fn last_seq(&self) -> Result<i64, StoreError> {
        let seq: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(seq), 0) FROM events")
            .fetch_one(&self.pool)
            .await?;
        Ok(seq)
    }

    fn log_mark(&self) -> Option<LogMark> {
        self.mark.as_ref()?.read()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            rows: vec![(
                expected,
                "mode_set".to_owned(),
                r#"{"mode":"plan"}"#.to_owned(),
            )],
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

    #[tokio::test]
    async fn every_connection_is_durable_waits_for_locks_and_checks_foreign_keys() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = SqliteStore::open(&tmp.path().join("plangate.db"))
            .await
            .expect("open");
        // Hold several connections at once so more than the first is checked.
        let mut conns = Vec::new();
        for _ in 0..3 {
            conns.push(store.pool.acquire().await.expect("acquire"));
        }
        for conn in &mut conns {
            let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
                .fetch_one(&mut **conn)
                .await
                .expect("synchronous");
            assert_eq!(synchronous, 2, "synchronous must be FULL");
            let busy: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
                .fetch_one(&mut **conn)
                .await
                .expect("busy_timeout");
            assert_eq!(busy, 5000);
            let fk: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
                .fetch_one(&mut **conn)
                .await
                .expect("foreign_keys");
            assert_eq!(fk, 1);
            let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
                .fetch_one(&mut **conn)
                .await
                .expect("journal_mode");
            assert_eq!(mode, "wal");
        }
    }

    #[tokio::test]
    async fn a_schema_from_a_newer_plangate_is_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("plangate.db");
        let store = SqliteStore::open(&path).await.expect("open");
        sqlx::query("INSERT INTO schema_migrations (version, applied_at_ms) VALUES (999, 0)")
            .execute(&store.pool)
            .await
            .expect("insert");
        let err = SqliteStore::open(&path).await.expect_err("too new");
        assert_eq!(err.code(), "schema_too_new");
        assert!(err.to_string().contains("999"), "{err}");
    }

    #[tokio::test]
    async fn reopening_applies_no_migration_twice() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("plangate.db");
        SqliteStore::open(&path).await.expect("open");
        let store = SqliteStore::open(&path).await.expect("reopen");
        let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM schema_migrations")
            .fetch_one(&store.pool)
            .await
            .expect("count");
        assert_eq!(count, i64::try_from(MIGRATIONS.len()).expect("len"));
    }

    /// A file at schema version 4 (events `AUTOINCREMENT`, with the `at_ms`
    /// index), as a plangate of that version left it.
    async fn version_4_file(path: &Path) -> sqlx::SqliteConnection {
        use sqlx::Connection;
        create_new_private_file(path).expect("file");
        let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
            .await
            .expect("connect");
        sqlx::raw_sql(
            "PRAGMA journal_mode = WAL;
             CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at_ms INTEGER NOT NULL);",
        )
        .execute(&mut conn)
        .await
        .expect("schema_migrations");
        for (version, sql) in &MIGRATIONS[..4] {
            sqlx::raw_sql(*sql)
                .execute(&mut conn)
                .await
                .expect("migrate");
            sqlx::query("INSERT INTO schema_migrations VALUES (?, 0)")
                .bind(version)
                .execute(&mut conn)
                .await
                .expect("record");
        }
        conn
    }

    #[tokio::test]
    async fn a_version_4_log_is_rebuilt_lean_with_every_event_seq_and_guard() {
        use sqlx::Connection;
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("plangate.db");
        let mut old = version_4_file(&path).await;
        // Two keys interleaved, as a log of several sessions is.
        for (key, key_seq, at_ms) in [("key_a", 1, 10), ("key_b", 1, 20), ("key_a", 2, 30)] {
            sqlx::query(
                "INSERT INTO events (key_id, key_seq, at_ms, type, body) VALUES (?, ?, ?, 'session_begun', ?)",
            )
            .bind(key)
            .bind(key_seq)
            .bind(at_ms)
            .bind(format!("{{\"n\":{at_ms}}}"))
            .execute(&mut old)
            .await
            .expect("old append");
        }
        old.close().await.expect("close");

        let store = SqliteStore::open(&path).await.expect("migrate");
        let all = store.export_events(None, None).await.expect("export");
        let seen: Vec<(i64, &str, i64, i64)> = all
            .iter()
            .map(|e| (e.seq, e.key_id.as_str(), e.key_seq, e.at_ms))
            .collect();
        assert_eq!(
            seen,
            [
                (1, "key_a", 1, 10),
                (2, "key_b", 1, 20),
                (3, "key_a", 2, 30)
            ]
        );
        let since = store.export_events(None, Some(20)).await.expect("since");
        assert_eq!(since.iter().map(|e| e.seq).collect::<Vec<_>>(), [2, 3]);

        // The lean shape: no AUTOINCREMENT, no at_ms index, the guards back.
        let table: String = sqlx::query_scalar(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'events'",
        )
        .fetch_one(&store.pool)
        .await
        .expect("table");
        assert!(!table.contains("AUTOINCREMENT"), "{table}");
        let names: Vec<String> = sqlx::query_scalar(
            "SELECT name FROM sqlite_master WHERE tbl_name = 'events' AND type IN ('index', 'trigger') ORDER BY name",
        )
        .fetch_all(&store.pool)
        .await
        .expect("names");
        assert_eq!(
            names,
            [
                "events_key_seq_follows",
                "events_no_delete",
                "events_no_update",
                "sqlite_autoindex_events_1"
            ]
        );
        for sql in [
            "UPDATE events SET body = '{}'",
            "DELETE FROM events",
            "INSERT INTO events (key_id, key_seq, at_ms, type, body) VALUES ('key_a', 9, 0, 't', '{}')",
        ] {
            let err = sqlx::query(sql).execute(&store.pool).await.expect_err(sql);
            assert!(err.as_database_error().is_some(), "{sql}: {err}");
        }

        // Appends go on where the log left off, seq after the last one.
        let next = store
            .append_events(
                "key_b",
                1,
                &[crate::NewEvent {
                    at_ms: 40,
                    kind: "session_begun".to_owned(),
                    body: serde_json::json!({}),
                }],
            )
            .await
            .expect("append");
        assert_eq!(next, 2);
        let tail = store.events_since(3, 10).await.expect("tail");
        assert_eq!(
            tail.iter().map(|e| (e.seq, e.key_seq)).collect::<Vec<_>>(),
            [(4, 2)]
        );
    }

    #[test]
    fn a_pool_timeout_is_not_a_busy_database() {
        // Only database errors count; a pool timeout is not "busy".
        assert!(!is_busy(&sqlx::Error::PoolTimedOut));
    }

    fn one_event() -> Vec<crate::NewEvent> {
        vec![crate::NewEvent {
            at_ms: 1,
            kind: "session_begun".to_owned(),
            body: serde_json::json!({}),
        }]
    }

    #[tokio::test]
    async fn the_log_mark_moves_with_every_commit_by_anyone_and_holds_still_otherwise() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("plangate.db");
        // Two stores on one file: two processes, as far as the file knows.
        let a = SqliteStore::open(&path).await.expect("open a");
        let b = SqliteStore::open(&path).await.expect("open b");
        let start = a.log_mark().expect("a WAL database has a mark");
        assert_eq!(b.log_mark(), Some(start), "one file, one mark");

        // Reads commit nothing.
        a.load_events("key_a", 0).await.expect("load");
        b.last_seq().await.expect("last seq");
        assert_eq!(a.log_mark(), Some(start));

        // Every commit moves it, whoever makes it, and never back.
        let mut seen = vec![start];
        for (i, store) in [&b, &a, &b].into_iter().enumerate() {
            store
                .append_events("key_a", i as i64, &one_event())
                .await
                .expect("append");
            let now = a.log_mark().expect("mark");
            assert!(!seen.contains(&now), "commit {i} left the mark at {now:?}");
            seen.push(now);
        }
        // A refused append (stale expectation) commits no event.
        let before = a.log_mark();
        let refused = a.append_events("key_a", 0, &one_event()).await;
        assert!(
            matches!(refused, Err(StoreError::Conflict { .. })),
            "{refused:?}"
        );
        let after_refusal = a.log_mark();
        assert!(
            after_refusal == before || !seen.contains(&after_refusal.expect("mark")),
            "a mark never comes back"
        );

        // A checkpoint that restarts the log, then a commit: still a new mark.
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(&a.pool)
            .await
            .expect("checkpoint");
        b.append_events("key_a", 3, &one_event())
            .await
            .expect("append after checkpoint");
        let now = a.log_mark().expect("mark after checkpoint");
        assert!(!seen.contains(&now));

        // The other "process" going away leaves this one's mark readable
        // and unchanged (and its connections' locks on the file in place:
        // the mark's descriptor is never closed).
        drop(b);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert_eq!(a.log_mark(), Some(now));
        a.append_events("key_a", 4, &one_event())
            .await
            .expect("append alone");
        assert_ne!(a.log_mark(), Some(now));
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
