//! The PostgreSQL backend, for several replicas sharing one store.
//!
//! It keeps the SQLite backend's promises with PostgreSQL's tools:
//!
//! * **Migrations** run in one transaction that first takes a
//!   transaction-level advisory lock ([`migrations::MIGRATION_LOCK`]), so of several
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

mod committer;
mod migrations;

use std::str::FromStr;
use std::sync::Arc;

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};

use self::committer::{Append, committer, last_key_seq_in};
#[cfg(test)]
use self::migrations::MIGRATIONS;
use self::migrations::migrate;
use crate::credentials::{SqlCredentials, forward_credentials};
use crate::events::checked_body_text;
use crate::events::group_commit::committer_stopped;
use crate::events::reads::{EventSql, SqlEvents, forward_event_reads};
use crate::keys::{key_columns, key_from_row};
use crate::{ApiKey, LogMark, NewEvent, Store, StoreError};

/// Connections per store handle.
const MAX_CONNECTIONS: u32 = 10;

/// A pooled connection idle this long is pinged before it is handed out.
const PING_WHEN_IDLE_FOR: std::time::Duration = std::time::Duration::from_secs(1);

/// The event columns, as [`crate::events::event_from_row`] reads them:
/// the `json` body read back as its exact text.
macro_rules! pg_event_columns {
    () => {
        "seq, key_id, key_seq, at_ms, type, body::text AS body, hash, sig"
    };
}

/// The log's reads in PostgreSQL's dialect.
static EVENT_SQL: EventSql = EventSql {
    load: concat!(
        "SELECT ",
        pg_event_columns!(),
        " FROM events WHERE key_id = $1 AND key_seq > $2 ORDER BY key_seq"
    ),
    last_key_seq: "SELECT COALESCE(MAX(key_seq), 0)::BIGINT FROM events WHERE key_id = $1",
    export_all: concat!("SELECT ", pg_event_columns!(), " FROM events ORDER BY seq"),
    export_key: concat!(
        "SELECT ",
        pg_event_columns!(),
        " FROM events WHERE key_id = $1 ORDER BY seq"
    ),
    export_since: concat!(
        "SELECT ",
        pg_event_columns!(),
        " FROM events WHERE at_ms >= $1 ORDER BY seq"
    ),
    export_key_since: concat!(
        "SELECT ",
        pg_event_columns!(),
        " FROM events WHERE key_id = $1 AND at_ms >= $2 ORDER BY seq"
    ),
    since: concat!(
        "SELECT ",
        pg_event_columns!(),
        " FROM events WHERE seq > $1 ORDER BY seq LIMIT $2"
    ),
    last_seq: "SELECT COALESCE(MAX(seq), 0)::BIGINT FROM events",
};

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
    /// Appends go to one committer task per process ([`committer()`]), which
    /// takes the counter row's lock once for every append waiting at that
    /// moment and commits them together (group commit): the lock that
    /// serialises all writers is held once per batch, not once per append.
    appends: tokio::sync::mpsc::UnboundedSender<Append>,
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

// === impl Store for PostgresStore ===

forward_credentials!(PostgresStore {
    async fn revoke_key(&self, name_or_id: &str) -> Result<ApiKey, StoreError> {
        self.credentials.revoke_key(name_or_id).await
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
        let sql = concat!(
            "SELECT ",
            key_columns!(),
            ", (SELECT COALESCE(MAX(e.key_seq), 0) FROM events e WHERE e.key_id = api_keys.id)::BIGINT AS last_key_seq",
            " FROM api_keys WHERE token_sha256 = $1 AND revoked_at_ms IS NULL"
        );
        let seen = |row: &sqlx::postgres::PgRow| {
            let key = key_from_row(row)?;
            let seen: i64 = sqlx::Row::try_get(row, "last_key_seq")?;
            Ok((key, Some(seen)))
        };
        self.credentials.by_api_token(sql, token, seen).await
    }
});

forward_event_reads!(PostgresStore, sqlx::Postgres {
    /// PostgreSQL has no log mark: the answer's mark is always `None`.
    async fn append_events_marked(
        &self,
        key_id: &str,
        expected_key_seq: i64,
        events: &[NewEvent],
    ) -> Result<(i64, Option<LogMark>), StoreError> {
        let bodies = events
            .iter()
            .map(checked_body_text)
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
                Ok((found, None))
            } else {
                Err(conflict(found))
            };
        }

        let (reply, answer) = tokio::sync::oneshot::channel();
        self.appends
            .send(append_of(key_id, expected_key_seq, events, bodies, reply))
            .map_err(|_| committer_stopped())?;
        let last = answer.await.map_err(|_| committer_stopped())??;
        Ok((last, None))
    }

    async fn append_together(
        &self,
        parts: &[crate::AppendPart],
    ) -> Result<Vec<i64>, StoreError> {
        let mut jobs = Vec::with_capacity(parts.len());
        for p in parts {
            let bodies = p
                .events
                .iter()
                .map(checked_body_text)
                .collect::<Result<Vec<_>, _>>()?;
            // Nobody waits on this reply: the caller gets the outcome of
            // the whole transaction.
            let (reply, _) = tokio::sync::oneshot::channel();
            jobs.push(append_of(&p.key_id, p.expected_key_seq, &p.events, bodies, reply));
        }
        committer::append_together(&self.pool, &jobs).await
    }
});

/// One append to `key_id` after `expected` of `events` (their bodies'
/// checked text in `bodies`), answered on `reply`.
fn append_of(
    key_id: &str,
    expected: i64,
    events: &[NewEvent],
    bodies: Vec<String>,
    reply: tokio::sync::oneshot::Sender<Result<i64, StoreError>>,
) -> Append {
    Append {
        key_id: key_id.to_owned(),
        expected,
        at_ms: events.iter().map(|e| e.at_ms).collect(),
        kinds: events.iter().map(|e| e.kind.clone()).collect(),
        bodies,
        hashes: events
            .iter()
            .map(|e| e.seal.as_ref().map(|s| s.hash.clone()))
            .collect(),
        sigs: events
            .iter()
            .map(|e| e.seal.as_ref().and_then(|s| s.sig.clone()))
            .collect(),
        reply,
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
