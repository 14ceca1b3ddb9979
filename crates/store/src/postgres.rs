//! The PostgreSQL backend, for several replicas sharing one store.
//!
//! It keeps the SQLite backend's promises with PostgreSQL's tools:
//!
//! * **Migrations** run in one transaction that first takes a
//!   transaction-level advisory lock ([`MIGRATION_LOCK`]), so of several
//!   replicas starting at once one migrates and the others then see the
//!   result.
//! * **Appends are serialized.** `events_since` promises that a follower
//!   paging by `seq` never skips an event: no event may become visible
//!   after one with a larger `seq`. A PostgreSQL sequence does not give
//!   that (two transactions take 5 and 6, and 6 commits first), so `seq`
//!   comes instead from a single-row counter table, `event_seq`, bumped by
//!   the insert trigger: the row lock it takes is held until commit, so
//!   the next writer gets its numbers only after the previous one is
//!   committed and visible. A transaction of several appends takes that
//!   lock first (`SELECT … FOR UPDATE`), then inserts each only if the
//!   key's last key_seq is the expected one, so the compare-and-set needs
//!   no retry loop. A lone append is one guarded `INSERT` in autocommit —
//!   one round trip instead of three: its guard reads a snapshot taken
//!   before the lock, but the trigger, whose queries see what committed
//!   while it waited, refuses a key_seq that no longer follows the key's
//!   last one, and that refusal is answered as the conflict it is. Several
//!   appends each to a different key are likewise one guarded `INSERT` in
//!   autocommit; when the trigger refuses one of its rows (another replica
//!   appended to that key meanwhile) the statement rolls back whole and
//!   the batch goes the locked way. The trigger assigns `seq` for any
//!   writer, even one bypassing this code, so the order holds for it too.
//!   The cost: transactions appending to one store — across all keys and
//!   replicas — run one at a time, each holding the lock through its
//!   commit (one WAL flush). Within a process, appends waiting at the same
//!   moment share one such transaction (group commit: one committer task;
//!   each append guarded by `WHERE` the key's last key_seq is the expected
//!   one), so the bound is per transaction, not per append; reads never
//!   wait for it. A session idle
//!   inside a transaction for 30 s is ended by the server, so a frozen
//!   replica cannot hold the lock for ever.
//! * **Durable before returning**: every connection runs with
//!   `synchronous_commit = on`, whatever the server's default.
//! * **Append-only**: triggers refuse UPDATE, DELETE and TRUNCATE on
//!   `events`, and keep each key's `key_seq` gap-free; event bodies are
//!   stored as `json`, which keeps the text exactly as written.
//!
//! The URL may carry a password; it is never logged and never put in an
//! error message (see [`crate::StoreConfig`]'s `Display`). Connections are
//! unencrypted (`sslmode=prefer` falls back to plain; `require` fails):
//! plangate is built without TLS, so reach PostgreSQL over loopback, a
//! Unix socket or a private network. Opening makes its first connection
//! directly, so an unreachable server is reported at once with its reason
//! rather than retried until a pool timeout.

use std::str::FromStr;
use std::sync::Arc;

use async_trait::async_trait;
use plangate_core::Scope;
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};

use crate::credentials::SqlCredentials;
use crate::events::{
    Waiting, answer_batch, body_text, committer_stopped, event_from_row, fail_batch,
    is_taken_key_seq, next_batch,
};
use crate::keys::{is_well_formed_token, key_columns, key_from_row, token_hash};
use crate::schema::{Migration, pending};
use crate::{
    ApiKey, CreatedKey, CreatedOperatorToken, NewEvent, OperatorToken, Store, StoreError,
    StoredEvent, now_ms,
};
use crate::{Credentials, EventLog, Identity};

/// The advisory lock key migrations hold: "plangate" in ASCII. It is
/// database-wide, so two plangate schemas in one database migrate one after
/// the other, which costs nothing worth avoiding.
pub(crate) const MIGRATION_LOCK: i64 = 0x706c_616e_6761_7465;

/// Connections per store handle.
const MAX_CONNECTIONS: u32 = 10;

/// A pooled connection idle this long is pinged before it is handed out.
const PING_WHEN_IDLE_FOR: std::time::Duration = std::time::Duration::from_secs(1);

/// The schema, as an ordered list of (version, SQL), with the same version
/// numbers as SQLite's for the same tables. Entries are only ever appended.
const MIGRATIONS: &[Migration] = &[
    (
        1,
        "CREATE TABLE api_keys (
        seq            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id             TEXT   NOT NULL UNIQUE,
        name           TEXT   NOT NULL,
        scope          TEXT   NOT NULL CHECK (scope IN ('read', 'plan', 'write')),
        token_sha256   TEXT   NOT NULL UNIQUE CHECK (token_sha256 ~ '^[0-9a-f]{64}$'),
        prefix         TEXT   NOT NULL,
        created_at_ms  BIGINT NOT NULL,
        revoked_at_ms  BIGINT
    );
    CREATE UNIQUE INDEX api_keys_active_name ON api_keys (name) WHERE revoked_at_ms IS NULL;",
    ),
    // The event log. `event_seq` is the one-row counter that hands out
    // `seq` in commit order (see the module docs); the triggers make the
    // log append-only and gap-free per key, and pin their search_path so a
    // connection with another one cannot point them at other tables.
    // `key_id` sorts bytewise (COLLATE "C"), as in SQLite.
    (
        2,
        "CREATE TABLE event_seq (
        only_row  BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (only_row),
        last_seq  BIGINT  NOT NULL CHECK (last_seq >= 0)
    );
    INSERT INTO event_seq (last_seq) VALUES (0);
    CREATE TABLE events (
        seq      BIGINT PRIMARY KEY,
        key_id   TEXT COLLATE \"C\" NOT NULL,
        key_seq  BIGINT NOT NULL CHECK (key_seq >= 1),
        at_ms    BIGINT NOT NULL,
        type     TEXT   NOT NULL CHECK (type <> ''),
        body     JSON   NOT NULL,
        UNIQUE (key_id, key_seq)
    );
    CREATE INDEX events_at_ms ON events (at_ms);

    CREATE FUNCTION events_number() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
    BEGIN
        UPDATE event_seq SET last_seq = last_seq + 1 RETURNING last_seq INTO NEW.seq;
        IF NEW.key_seq <> COALESCE(
            (SELECT MAX(key_seq) FROM events WHERE key_id = NEW.key_id), 0) + 1 THEN
            RAISE EXCEPTION 'events key_seq must follow the key''s last one';
        END IF;
        RETURN NEW;
    END $$;
    CREATE TRIGGER events_number BEFORE INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION events_number();

    CREATE FUNCTION events_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'events are append-only: rows cannot be %', lower(TG_OP) || 'd';
    END $$;
    CREATE TRIGGER events_no_update_or_delete BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION events_refuse_change();
    CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_refuse_change();

    CREATE FUNCTION event_seq_only_forward() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP <> 'UPDATE' OR NEW.last_seq < OLD.last_seq THEN
            RAISE EXCEPTION 'event_seq only moves forward';
        END IF;
        RETURN NEW;
    END $$;
    CREATE TRIGGER event_seq_only_forward BEFORE UPDATE OR DELETE ON event_seq
    FOR EACH ROW EXECUTE FUNCTION event_seq_only_forward();
    CREATE TRIGGER event_seq_no_truncate BEFORE TRUNCATE ON event_seq
    FOR EACH STATEMENT EXECUTE FUNCTION event_seq_only_forward();",
    ),
    // Operator tokens: the web console's credential, kept apart from API
    // keys so neither can ever stand in for the other.
    (
        3,
        "CREATE TABLE operator_tokens (
        seq            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id             TEXT   NOT NULL UNIQUE,
        name           TEXT   NOT NULL,
        token_sha256   TEXT   NOT NULL UNIQUE CHECK (token_sha256 ~ '^[0-9a-f]{64}$'),
        prefix         TEXT   NOT NULL,
        created_at_ms  BIGINT NOT NULL,
        revoked_at_ms  BIGINT
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
        updated_at_ms  BIGINT NOT NULL
    );",
    ),
    // The event log without its `at_ms` index, as in SQLite's version 5:
    // one index fewer to write per append; `audit export --since` reads
    // the log in seq order and filters by time.
    (5, "DROP INDEX events_at_ms;"),
    // Web console sessions ended by a logout, as in SQLite's version 6.
    (
        6,
        "CREATE TABLE console_sessions_ended (
        session_sha256  TEXT   NOT NULL PRIMARY KEY CHECK (session_sha256 ~ '^[0-9a-f]{64}$'),
        expires_at_ms   BIGINT NOT NULL
    );",
    ),
];

/// The event columns, as [`event_from_row`] reads them: the `json` body
/// read back as its exact text.
macro_rules! pg_event_columns {
    () => {
        "seq, key_id, key_seq, at_ms, type, body::text AS body"
    };
}

/// Opens the PostgreSQL database at `url` (`postgres://` or
/// `postgresql://`, with libpq-style query parameters such as
/// `options=-c search_path=NAME`) and brings its schema up to date. The
/// tables go in the first schema of the connection's search_path.
pub async fn open_postgres(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    Ok(Arc::new(PostgresStore::open(url).await?))
}

/// The PostgreSQL implementation of [`Store`].
#[derive(Debug, Clone)]
pub(crate) struct PostgresStore {
    pool: PgPool,
    /// Keys and operator tokens, in SQL shared with SQLite.
    credentials: SqlCredentials<sqlx::Postgres>,
    /// Appends go to one committer task per process ([`committer`]), which
    /// takes the counter row's lock once for every append waiting at that
    /// moment and commits them together (group commit): the lock that
    /// serialises all writers is held once per batch, not once per append.
    appends: tokio::sync::mpsc::UnboundedSender<Append>,
}

/// One non-empty `append_events` call waiting for the committer.
#[derive(Debug)]
struct Append {
    key_id: String,
    expected: i64,
    at_ms: Vec<i64>,
    kinds: Vec<String>,
    bodies: Vec<String>,
    reply: tokio::sync::oneshot::Sender<Result<i64, StoreError>>,
}

/// Commits appends as they come: the first waiting one plus every other
/// already queued (up to [`crate::events::GROUP_COMMIT_MAX`]) in one transaction, each as
/// one statement with its own compare-and-set, answering each caller only
/// after the commit. Ends when the store is dropped.
///
/// It keeps a connection of its own rather than taking one from the pool
/// per batch: the pool pings a connection before handing it out, one more
/// network round trip on every durable write. A connection that failed in
/// any way is dropped, and the next batch connects anew.
async fn committer(
    options: PgConnectOptions,
    mut jobs: tokio::sync::mpsc::UnboundedReceiver<Append>,
) {
    let mut conn: Option<PgConnection> = None;
    while let Some(batch) = next_batch(&mut jobs).await {
        let live = match conn.take() {
            Some(live) => live,
            None => match PgConnection::connect_with(&options).await {
                Ok(live) => live,
                Err(e) => {
                    fail_batch(batch, &e);
                    continue;
                }
            },
        };
        conn = commit_batch(live, batch).await;
    }
}

/// Commits one batch on `conn`; gives the connection back unless it
/// failed.
async fn commit_batch(conn: PgConnection, batch: Vec<Append>) -> Option<PgConnection> {
    if batch.len() == 1 {
        return commit_lone(conn, batch).await;
    }
    let mut keys = std::collections::HashSet::with_capacity(batch.len());
    if batch.iter().all(|job| keys.insert(job.key_id.as_str())) {
        return commit_spread(conn, batch).await;
    }
    commit_locked(conn, batch).await
}

/// Commits a batch in one transaction that takes the counter's lock first,
/// one guarded statement per append: the path for batches with two appends
/// to one key (the second's guard must see the first's rows) and for a
/// batch whose single statement ([`commit_spread`]) met another replica's
/// commit to one of its keys.
async fn commit_locked(mut conn: PgConnection, batch: Vec<Append>) -> Option<PgConnection> {
    // READ COMMITTED whatever the server's default: each statement below
    // must see what the writer before us committed while we waited for the
    // counter's lock. The lock on the counter is the serialization point
    // (module docs), held until commit; it goes in the same simple query
    // as BEGIN — one round trip, not two.
    let mut tx = match conn
        .begin_with(
            "BEGIN ISOLATION LEVEL READ COMMITTED; SELECT last_seq FROM event_seq FOR UPDATE",
        )
        .await
    {
        Ok(tx) => tx,
        Err(e) => {
            fail_batch(batch, &e);
            return None;
        }
    };
    // One guarded statement per append: it inserts all of the append's
    // events or, on a conflict, none. A statement error (never expected:
    // the counter's lock orders every writer that goes through here)
    // aborts the transaction, and every append of the batch is answered
    // with it — none was committed, so callers may simply try again.
    let mut results = Vec::with_capacity(batch.len());
    for job in &batch {
        match guarded_append(&mut tx, job).await {
            Ok(result) => results.push(result),
            Err(e) => {
                drop(tx);
                fail_batch(batch, &e);
                return None;
            }
        }
    }
    match tx.commit().await {
        Ok(()) => {
            answer_batch(batch, results);
            Some(conn)
        }
        Err(e) => {
            fail_batch(batch, &e);
            None
        }
    }
}

/// Commits a batch of one append as a single guarded statement in
/// autocommit: the statement is its own transaction, and the trigger's
/// `UPDATE event_seq` holds the counter's lock until that commit, so the
/// order promise holds as in [`commit_batch`]. One network round trip per
/// durable write instead of three (`BEGIN` with the lock, the insert,
/// `COMMIT`) — the write most callers make (a planned step, an applied
/// step's claim) is a lone one.
///
/// The guard's snapshot is taken before the lock, so a writer on another
/// replica appending to the same key while this one waits passes it; the
/// trigger, which reads the key's last key_seq after the wait, refuses the
/// row instead (or the `UNIQUE (key_id, key_seq)` constraint does). Either
/// refusal rolls the statement back whole and is answered as a conflict
/// with the key_seq now found, just as the guard's own would be.
async fn commit_lone(mut conn: PgConnection, batch: Vec<Append>) -> Option<PgConnection> {
    let Some(job) = batch.first() else {
        return Some(conn);
    };
    let result = match guarded_append(&mut conn, job).await {
        Ok(result) => result,
        Err(e) if is_taken_key_seq(&e) => match last_key_seq_in(&mut conn, &job.key_id).await {
            Ok(found) if found != job.expected => Err(StoreError::Conflict {
                key_id: job.key_id.clone(),
                expected: job.expected,
                found,
            }),
            // Refused although nothing moved: not a race after all.
            Ok(_) => {
                fail_batch(batch, &e);
                return Some(conn);
            }
            Err(read) => {
                fail_batch(batch, &read);
                return None;
            }
        },
        Err(e) => {
            fail_batch(batch, &e);
            return None;
        }
    };
    answer_batch(batch, vec![result]);
    Some(conn)
}

/// Commits a batch whose appends are each to a different key as one
/// guarded `INSERT` in autocommit, as [`commit_lone`] does for one append:
/// one network round trip and one WAL flush for the whole batch, where
/// [`commit_locked`] takes two plus one per append while it holds the
/// lock every writer waits for (with 32 keys planning at once, batches of
/// 20–30 appends: the round trips, not the flush, were the time).
///
/// Each append's guard compares its key's last key_seq, in the
/// statement's snapshot, with the expected one, so an append whose caller
/// decided on an old state inserts nothing and is answered as a conflict,
/// the others landing. The snapshot is taken before the counter's lock:
/// a replica that committed to one of the keys meanwhile passes the guard
/// but not the trigger, whose refusal rolls the whole statement back;
/// the batch then goes through [`commit_locked`], whose guards read
/// after the lock.
async fn commit_spread(mut conn: PgConnection, batch: Vec<Append>) -> Option<PgConnection> {
    match spread_append(&mut conn, &batch).await {
        Ok(inserted) => {
            let mut results = Vec::with_capacity(batch.len());
            for job in &batch {
                let count = job.kinds.len() as u64;
                let n = inserted.get(job.key_id.as_str()).copied().unwrap_or(0);
                results.push(if n == count {
                    Ok(job.expected + count as i64)
                } else if n == 0 {
                    // Committed already: what the key holds now is the
                    // conflict's answer.
                    match last_key_seq_in(&mut conn, &job.key_id).await {
                        Ok(found) => Err(StoreError::Conflict {
                            key_id: job.key_id.clone(),
                            expected: job.expected,
                            found,
                        }),
                        Err(e) => Err(StoreError::Database(e)),
                    }
                } else {
                    // One append's rows share one guard; anything else is
                    // not this statement's doing, and is said so.
                    Err(StoreError::Database(sqlx::Error::Protocol(format!(
                        "an append of {count} events inserted {n}"
                    ))))
                });
            }
            answer_batch(batch, results);
            Some(conn)
        }
        Err(e) if is_taken_key_seq(&e) => commit_locked(conn, batch).await,
        Err(e) => {
            fail_batch(batch, &e);
            None
        }
    }
}

/// The statement of [`commit_spread`]: every append's events, in batch
/// order, each row guarded by its append's expected key_seq. Answers how
/// many rows each key got.
async fn spread_append(
    conn: &mut PgConnection,
    batch: &[Append],
) -> Result<std::collections::HashMap<String, u64>, sqlx::Error> {
    let rows: usize = batch.iter().map(|job| job.kinds.len()).sum();
    let mut key_ids = Vec::with_capacity(rows);
    let mut key_seqs = Vec::with_capacity(rows);
    let mut expected = Vec::with_capacity(rows);
    let mut at_ms = Vec::with_capacity(rows);
    let mut kinds = Vec::with_capacity(rows);
    let mut bodies = Vec::with_capacity(rows);
    for job in batch {
        for (i, ((at, kind), body)) in job
            .at_ms
            .iter()
            .zip(&job.kinds)
            .zip(&job.bodies)
            .enumerate()
        {
            key_ids.push(job.key_id.as_str());
            key_seqs.push(job.expected + 1 + i as i64);
            expected.push(job.expected);
            at_ms.push(*at);
            kinds.push(kind.as_str());
            bodies.push(body.as_str());
        }
    }
    // The trigger numbers rows in order.
    let landed: Vec<String> = sqlx::query_scalar(
        "INSERT INTO events (key_id, key_seq, at_ms, type, body)
         SELECT e.key_id, e.key_seq, e.at_ms, e.type, e.body::json
         FROM UNNEST($1::text[], $2::int8[], $3::int8[], $4::int8[], $5::text[], $6::text[])
              WITH ORDINALITY AS e(key_id, key_seq, expected, at_ms, type, body, n)
         WHERE (SELECT COALESCE(MAX(key_seq), 0) FROM events WHERE key_id = e.key_id) = e.expected
         ORDER BY e.n
         RETURNING key_id",
    )
    .bind(&key_ids)
    .bind(&key_seqs)
    .bind(&expected)
    .bind(&at_ms)
    .bind(&kinds)
    .bind(&bodies)
    .fetch_all(&mut *conn)
    .await?;
    let mut inserted = std::collections::HashMap::with_capacity(batch.len());
    for key in landed {
        *inserted.entry(key).or_insert(0) += 1;
    }
    Ok(inserted)
}

impl Waiting for Append {
    fn key_id(&self) -> &str {
        &self.key_id
    }
    fn events(&self) -> usize {
        self.kinds.len()
    }
    fn answer(self, result: Result<i64, StoreError>) {
        let _ = self.reply.send(result);
    }
}

/// One append as one guarded `INSERT`, in the transaction `conn` is in
/// (or in autocommit): all of its events or, on a conflict, none.
async fn guarded_append(
    conn: &mut PgConnection,
    job: &Append,
) -> Result<Result<i64, StoreError>, sqlx::Error> {
    let count = job.kinds.len() as i64;
    let key_seqs: Vec<i64> = (job.expected + 1..=job.expected + count).collect();
    // The trigger numbers rows in order.
    let inserted = sqlx::query(
        "INSERT INTO events (key_id, key_seq, at_ms, type, body)
         SELECT $1, e.key_seq, e.at_ms, e.type, e.body::json
         FROM UNNEST($2::int8[], $3::int8[], $4::text[], $5::text[])
              WITH ORDINALITY AS e(key_seq, at_ms, type, body, n)
         WHERE (SELECT COALESCE(MAX(key_seq), 0) FROM events WHERE key_id = $1) = $6
         ORDER BY e.n",
    )
    .bind(&job.key_id)
    .bind(&key_seqs)
    .bind(&job.at_ms)
    .bind(&job.kinds)
    .bind(&job.bodies)
    .bind(job.expected)
    .execute(&mut *conn)
    .await?;
    match inserted.rows_affected() {
        n if n == count.unsigned_abs() => return Ok(Ok(job.expected + count)),
        0 => {}
        // One statement inserts all or nothing; anything else is a reason
        // to take the careful path.
        n => {
            return Err(sqlx::Error::Protocol(format!(
                "an append of {count} events inserted {n}"
            )));
        }
    }
    let found = last_key_seq_in(&mut *conn, &job.key_id).await?;
    Ok(Err(StoreError::Conflict {
        key_id: job.key_id.clone(),
        expected: job.expected,
        found,
    }))
}

impl PostgresStore {
    pub(crate) async fn open(url: &str) -> Result<PostgresStore, StoreError> {
        let mut options = PgConnectOptions::from_str(url)?
            // After any `options` from the URL, so it wins over them.
            .options([
                ("synchronous_commit", "on"),
                // A lone append runs in autocommit and relies on READ
                // COMMITTED's fresh snapshot per trigger query (see
                // `commit_lone`), whatever the server's default.
                ("default_transaction_isolation", "read committed"),
                // A replica frozen mid-append must not hold every other
                // replica's appends for ever: its transaction is ended.
                ("idle_in_transaction_session_timeout", "30s"),
            ]);
        if options.get_application_name().is_none() {
            options = options.application_name("plangate");
        }
        // The first connection is made directly, not through the pool: the
        // pool retries a refused connection until its timeout and then
        // reports only that it timed out, where an operator needs the
        // reason (refused, unknown database, bad password) at once.
        let mut first = PgConnection::connect_with(&options).await?;
        migrate(&mut first).await?;
        first.close().await?;
        // A pooled connection is pinged before use only when it has been
        // idle for a while (sqlx pings every time by default: one more
        // network round trip on every read, such as each request's key
        // check). One used within the last second is taken as alive; if
        // the server went away meanwhile, that one use fails and the
        // connection is dropped.
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for >= PING_WHEN_IDLE_FOR {
                        conn.ping().await?;
                    }
                    Ok(true)
                })
            })
            .connect_lazy_with(options.clone());
        let (appends, jobs) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(committer(options, jobs));
        Ok(PostgresStore {
            credentials: SqlCredentials::new(pool.clone()),
            pool,
            appends,
        })
    }
}

/// Applies every migration newer than the recorded version, in one
/// transaction that first takes [`MIGRATION_LOCK`]: replicas starting at
/// once queue on it, and each then sees what the first one did.
async fn migrate(conn: &mut PgConnection) -> Result<(), StoreError> {
    let mut tx = conn.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
            version        BIGINT PRIMARY KEY,
            applied_at_ms  BIGINT NOT NULL
        )",
    )
    .execute(&mut *tx)
    .await?;
    let current: i64 =
        sqlx::query_scalar("SELECT COALESCE(MAX(version), 0)::BIGINT FROM schema_migrations")
            .fetch_one(&mut *tx)
            .await?;
    for (version, sql) in pending(current, MIGRATIONS)? {
        sqlx::raw_sql(*sql).execute(&mut *tx).await?;
        sqlx::query("INSERT INTO schema_migrations (version, applied_at_ms) VALUES ($1, $2)")
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
    E: sqlx::PgExecutor<'e>,
{
    sqlx::query_scalar("SELECT COALESCE(MAX(key_seq), 0)::BIGINT FROM events WHERE key_id = $1")
        .bind(key_id)
        .fetch_one(executor)
        .await
}

// === impl Store for PostgresStore ===

#[async_trait]
impl Credentials for PostgresStore {
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
        self.credentials.revoke_key(name_or_id).await
    }

    async fn authenticate(&self, token: &str) -> Result<Option<ApiKey>, StoreError> {
        self.credentials.authenticate(token).await
    }

    fn authenticate_sees_log(&self) -> bool {
        true
    }

    /// One statement: the key and, beside it, its last key_seq (the
    /// `UNIQUE (key_id, key_seq)` index answers `MAX`), so a write that runs needs no
    /// second round trip to learn that the state it holds is current.
    async fn authenticate_seen(
        &self,
        token: &str,
    ) -> Result<Option<(ApiKey, Option<i64>)>, StoreError> {
        if !is_well_formed_token(token) {
            return Ok(None);
        }
        let sql = concat!(
            "SELECT ",
            key_columns!(),
            ", (SELECT COALESCE(MAX(e.key_seq), 0) FROM events e WHERE e.key_id = api_keys.id)::BIGINT AS last_key_seq",
            " FROM api_keys WHERE token_sha256 = $1 AND revoked_at_ms IS NULL"
        );
        let row = sqlx::query(sql)
            .bind(token_hash(token))
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref()
            .map(|row| {
                let key = key_from_row(row)?;
                let seen: i64 = sqlx::Row::try_get(row, "last_key_seq")?;
                Ok((key, Some(seen)))
            })
            .transpose()
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
impl EventLog for PostgresStore {
    async fn append_events(
        &self,
        key_id: &str,
        expected_key_seq: i64,
        events: &[NewEvent],
    ) -> Result<i64, StoreError> {
        let bodies = events
            .iter()
            .map(body_text)
            .collect::<Result<Vec<_>, _>>()?;
        i64::try_from(events.len())
            .map_err(|_| StoreError::InvalidEvent("the batch is too large".to_owned()))?;
        let conflict = |found| StoreError::Conflict {
            key_id: key_id.to_owned(),
            expected: expected_key_seq,
            found,
        };
        if events.is_empty() {
            // Nothing to order: a plain read is the whole check.
            let found = last_key_seq_in(&self.pool, key_id).await?;
            return if found == expected_key_seq {
                Ok(found)
            } else {
                Err(conflict(found))
            };
        }

        let (reply, answer) = tokio::sync::oneshot::channel();
        self.appends
            .send(Append {
                key_id: key_id.to_owned(),
                expected: expected_key_seq,
                at_ms: events.iter().map(|e| e.at_ms).collect(),
                kinds: events.iter().map(|e| e.kind.clone()).collect(),
                bodies,
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
            pg_event_columns!(),
            " FROM events WHERE key_id = $1 AND key_seq > $2 ORDER BY key_seq"
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
        let query = match (key_id, since_ms) {
            (None, None) => sqlx::query(concat!(
                "SELECT ",
                pg_event_columns!(),
                " FROM events ORDER BY seq"
            )),
            (Some(key_id), None) => sqlx::query(concat!(
                "SELECT ",
                pg_event_columns!(),
                " FROM events WHERE key_id = $1 ORDER BY seq"
            ))
            .bind(key_id),
            (None, Some(since_ms)) => sqlx::query(concat!(
                "SELECT ",
                pg_event_columns!(),
                " FROM events WHERE at_ms >= $1 ORDER BY seq"
            ))
            .bind(since_ms),
            (Some(key_id), Some(since_ms)) => sqlx::query(concat!(
                "SELECT ",
                pg_event_columns!(),
                " FROM events WHERE key_id = $1 AND at_ms >= $2 ORDER BY seq"
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
            // PostgreSQL refuses a negative LIMIT; the contract says nothing.
            return Ok(Vec::new());
        }
        let rows = sqlx::query(concat!(
            "SELECT ",
            pg_event_columns!(),
            " FROM events WHERE seq > $1 ORDER BY seq LIMIT $2"
        ))
        .bind(after_seq)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(event_from_row).collect()
    }

    async fn last_seq(&self) -> Result<i64, StoreError> {
        let seq: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(seq), 0)::BIGINT FROM events")
            .fetch_one(&self.pool)
            .await?;
        Ok(seq)
    }
}

#[cfg(test)]
mod tests {
    use sqlx::AssertSqlSafe;

    use super::*;

    /// Runs `test` on a store in a fresh schema of the test server
    /// (`PLANGATE_TEST_POSTGRES_URL`; unset, the test returns early, but in
    /// CI it fails), with `extra` appended to the URL's parameters.
    async fn with_store<F, Fut>(extra: &str, test: F)
    where
        F: FnOnce(PostgresStore) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let server = match std::env::var("PLANGATE_TEST_POSTGRES_URL") {
            Ok(url) if !url.is_empty() => url,
            _ if std::env::var_os("CI").is_some() => {
                panic!("PLANGATE_TEST_POSTGRES_URL must be set in CI")
            }
            _ => return,
        };
        let schema = crate::new_id("plangate_test_").expect("name");
        let mut admin = PgConnection::connect(&server).await.expect("connect");
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
            .execute(&mut admin)
            .await
            .expect("create schema");
        let sep = if server.contains('?') { '&' } else { '?' };
        let url = format!("{server}{sep}options=-c%20search_path%3D{schema}{extra}");
        let store = PostgresStore::open(&url).await.expect("open");
        test(store).await;
        sqlx::raw_sql(AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
            .execute(&mut admin)
            .await
            .expect("drop schema");
    }

    #[tokio::test]
    async fn every_connection_commits_synchronously_and_ends_idle_transactions() {
        // The URL asks for asynchronous commit; the store overrides it, as
        // an answer may go out only once its events are durable.
        with_store("%20-c%20synchronous_commit%3Doff", |store| async move {
            let mut conns = Vec::new();
            for _ in 0..3 {
                conns.push(store.pool.acquire().await.expect("acquire"));
            }
            for conn in &mut conns {
                let setting: String = sqlx::query_scalar("SHOW synchronous_commit")
                    .fetch_one(&mut **conn)
                    .await
                    .expect("show");
                assert_eq!(setting, "on");
                let name: String = sqlx::query_scalar("SHOW application_name")
                    .fetch_one(&mut **conn)
                    .await
                    .expect("show");
                assert_eq!(name, "plangate");
                let idle: String = sqlx::query_scalar("SHOW idle_in_transaction_session_timeout")
                    .fetch_one(&mut **conn)
                    .await
                    .expect("show");
                assert_eq!(idle, "30s");
            }
        })
        .await;
    }

    #[tokio::test]
    async fn reopening_applies_no_migration_twice() {
        with_store("", |store| async move {
            let mut conn = store.pool.acquire().await.expect("acquire");
            migrate(&mut conn).await.expect("migrate again");
            let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM schema_migrations")
                .fetch_one(&store.pool)
                .await
                .expect("count");
            assert_eq!(count, i64::try_from(MIGRATIONS.len()).expect("len"));
        })
        .await;
    }
}
