//! The SQLite schema and how it is brought up to date: kept apart from
//! the store because the DDL (tables, the triggers that keep the log
//! append-only) is long and changes only by appending a version.

use sqlx::sqlite::SqlitePool;

use crate::StoreError;
use crate::schema::{Migration, VersionTable, apply_pending};

/// The events table's columns after `seq`, the same in both of its
/// versions (2 and 5), closing the `CREATE TABLE`.
macro_rules! events_after_seq {
    () => {
        "
        key_id   TEXT    NOT NULL,
        key_seq  INTEGER NOT NULL CHECK (key_seq >= 1),
        at_ms    INTEGER NOT NULL,
        type     TEXT    NOT NULL CHECK (type <> ''),
        body     TEXT    NOT NULL CHECK (json_valid(body)),
        UNIQUE (key_id, key_seq)
    );"
    };
}

/// The events table's triggers, created by both of its versions (2 and
/// 5): no row is ever updated or deleted, and each key's key_seq follows
/// its last one (docs/design.md §6).
macro_rules! events_guards {
    () => {
        "
    CREATE TRIGGER events_no_update BEFORE UPDATE ON events
    BEGIN SELECT RAISE(ABORT, 'events are append-only: rows cannot be updated'); END;
    CREATE TRIGGER events_no_delete BEFORE DELETE ON events
    BEGIN SELECT RAISE(ABORT, 'events are append-only: rows cannot be deleted'); END;
    CREATE TRIGGER events_key_seq_follows BEFORE INSERT ON events
    WHEN NEW.key_seq <> COALESCE((SELECT MAX(key_seq) FROM events WHERE key_id = NEW.key_id), 0) + 1
    BEGIN SELECT RAISE(ABORT, 'events key_seq must follow the key''s last one'); END;"
    };
}

/// The schema, as an ordered list of (version, SQL). A version is applied
/// once, in the same transaction that records it in `schema_migrations`;
/// entries are only ever appended, never edited.
pub(super) const MIGRATIONS: &[Migration] = &[
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
        concat!(
            "CREATE TABLE events (
        seq      INTEGER PRIMARY KEY AUTOINCREMENT,",
            events_after_seq!(),
            "
    CREATE INDEX events_at_ms ON events (at_ms);",
            events_guards!()
        ),
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
        concat!(
            "ALTER TABLE events RENAME TO events_v4;
    CREATE TABLE events (
        seq      INTEGER PRIMARY KEY,",
            events_after_seq!(),
            "
    INSERT INTO events (seq, key_id, key_seq, at_ms, type, body)
        SELECT seq, key_id, key_seq, at_ms, type, body FROM events_v4 ORDER BY seq;
    DROP TABLE events_v4;
    DELETE FROM sqlite_sequence WHERE name IN ('events', 'events_v4');",
            events_guards!()
        ),
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
    // Each event's link in its key's hash chain and the log key's
    // signature over it (docs/design.md §6); NULL in rows written before.
    (
        7,
        "ALTER TABLE events ADD COLUMN hash TEXT;
    ALTER TABLE events ADD COLUMN sig TEXT;",
    ),
    // What applied steps replaced, sealed, kept beside the log for an undo
    // (docs/design.md §5, "Undo"); rows are dropped past undo_ttl.
    (
        8,
        "CREATE TABLE undo_states (
        key_id      TEXT    NOT NULL,
        step_id     TEXT    NOT NULL,
        digest      TEXT    NOT NULL,
        sealed      TEXT    NOT NULL,
        kept_at_ms  INTEGER NOT NULL,
        PRIMARY KEY (key_id, step_id)
    );
    CREATE INDEX undo_states_kept_at ON undo_states (kept_at_ms);",
    ),
    // The notification outbox (docs/design.md §13): a row per message and
    // receiver, a row per attempt, and how far the notifier has read the
    // log; beside the log, dropped some time after they are done.
    (
        9,
        "CREATE TABLE notify_outbox (
        receiver       TEXT    NOT NULL,
        msg_id         TEXT    NOT NULL,
        event          TEXT    NOT NULL,
        notice         TEXT    NOT NULL,
        created_at_ms  INTEGER NOT NULL,
        next_at_ms     INTEGER NOT NULL,
        attempts       INTEGER NOT NULL,
        state          TEXT    NOT NULL CHECK (state IN ('pending', 'delivered', 'given_up')),
        last_status    TEXT,
        PRIMARY KEY (receiver, msg_id)
    );
    CREATE INDEX notify_outbox_due ON notify_outbox (state, next_at_ms);
    CREATE INDEX notify_outbox_created ON notify_outbox (created_at_ms);
    CREATE TABLE notify_attempts (
        receiver  TEXT    NOT NULL,
        msg_id    TEXT    NOT NULL,
        attempt   INTEGER NOT NULL,
        at_ms     INTEGER NOT NULL,
        status    TEXT    NOT NULL,
        PRIMARY KEY (receiver, msg_id, attempt)
    );
    CREATE TABLE notify_cursor (
        name  TEXT    NOT NULL PRIMARY KEY,
        seq   INTEGER NOT NULL
    );",
    ),
];

/// `schema_migrations` in SQLite's dialect.
const VERSION_TABLE: VersionTable = VersionTable {
    create: "CREATE TABLE IF NOT EXISTS schema_migrations (
            version        INTEGER PRIMARY KEY,
            applied_at_ms  INTEGER NOT NULL
        )",
    current: "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
};

/// Applies every migration newer than the recorded version. `BEGIN
/// IMMEDIATE` takes the write lock first, so of two processes starting at
/// once one migrates and the other then sees the result.
pub(super) async fn migrate(pool: &SqlitePool) -> Result<(), StoreError> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    apply_pending::<sqlx::Sqlite>(&mut tx, &VERSION_TABLE, MIGRATIONS).await?;
    tx.commit().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::EventLog;
    use crate::private_fs::create_new_private_file;
    use crate::sqlite::SqliteStore;

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
                    seal: None,
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
}
